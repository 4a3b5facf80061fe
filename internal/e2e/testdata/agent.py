# A stand-in for an agent with live state: a 256 MiB object in memory, a counter, an open file, a
# background child, a TCP listener, a working directory and an environment. Started detached; answers
# "state" on 127.0.0.1:9000 with a JSON line.
import hashlib, json, os, socket, subprocess, sys, threading, time

size = int(sys.argv[1]) if len(sys.argv) > 1 else 256 << 20
blob = bytearray()
while len(blob) < size:
    blob += os.urandom(min(16 << 20, size - len(blob)))
digest = hashlib.sha256(blob).hexdigest()
# The marker lives in memory (built at run time, so this file does not hold it) and in a file.
marker = "airlock-marker-" + os.environ.get("MARK", "none")
with open("/home/user/marker.txt", "w") as f:
    f.write(marker + "\n")
os.makedirs("/home/user/work", exist_ok=True)
os.chdir("/home/user/work")
log = open("/home/user/work/counter.log", "a", buffering=1)
child = subprocess.Popen(["sleep", "1000000"])
counter = 0
lock = threading.Lock()

def serve():
    ln = socket.socket()
    ln.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ln.bind(("127.0.0.1", 9000))
    ln.listen(8)
    while True:
        c, _ = ln.accept()
        with lock:
            n = counter
        state = {
            "pid": os.getpid(), "counter": n, "sha256": hashlib.sha256(blob).hexdigest(), "at_start": digest,
            "cwd": os.getcwd(), "env": os.environ.get("MARK"), "marker": marker,
            "fd": os.readlink("/proc/self/fd/%d" % log.fileno()), "child": child.pid,
            "child_alive": child.poll() is None,
        }
        c.sendall((json.dumps(state) + "\n").encode())
        c.close()

threading.Thread(target=serve, daemon=True).start()
while True:
    with lock:
        counter += 1
        n = counter
    log.write("%d\n" % n)
    time.sleep(0.05)
