#!/usr/bin/env python3
"""Looks everywhere a process in a sandbox can look for a secret, given reversed on the command line (so
that neither this file nor the command line holds it). Prints: env files environ memory keyfiles.

Files: every file but those under /proc, /sys, /dev and /usr (the host's /usr, mounted read-only: nothing
in the sandbox or the gateway can put anything there, and reading all of it takes minutes)."""
import os
import sys

secret = sys.argv[1][::-1].encode()
# Built here so that this file does not match itself.
key_marker = b"PRIVATE" + b" KEY-----"
me, parent = os.getpid(), os.getppid()

env = sum(secret in (k + "=" + v).encode() for k, v in os.environ.items())

files = keyfiles = 0
for root, dirs, names in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/dev", "/usr")]
    for n in names:
        p = os.path.join(root, n)
        try:
            if not os.path.isfile(p) or os.path.islink(p):
                continue
            with open(p, "rb") as f:
                data = f.read(64 << 20)
        except OSError:
            continue
        files += secret in data
        if key_marker in data:
            keyfiles += 1

environ = memory = 0
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) in (me, parent):
        continue
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            environ += secret in f.read()
        maps = open("/proc/%s/maps" % pid).read().splitlines()
        with open("/proc/%s/mem" % pid, "rb", 0) as mem:
            for line in maps:
                addr, perms = line.split()[:2]
                if "r" not in perms:
                    continue
                a, b = (int(x, 16) for x in addr.split("-"))
                try:
                    mem.seek(a)
                    memory += mem.read(b - a).count(secret)
                except (OSError, OverflowError, ValueError):
                    pass  # [vsyscall] and other ranges that cannot be read
    except OSError:
        continue

# Positive control: the scan can see memory at all (this process holds the secret; it must be found).
control = 0
with open("/proc/self/maps") as mf, open("/proc/self/mem", "rb", 0) as mem:
    for line in mf.read().splitlines():
        addr, perms = line.split()[:2]
        if "r" in perms:
            a, b = (int(x, 16) for x in addr.split("-"))
            try:
                mem.seek(a)
                control += mem.read(b - a).count(secret)
            except (OSError, OverflowError, ValueError):
                pass
print(env, files, environ, memory, keyfiles, "control=%d" % control)
