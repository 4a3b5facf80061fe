#!/usr/bin/env python3
"""Network probes run inside a sandbox by the e2e network tests.

Each prints one line: "OK <what came back>" when the probe reached something, or "ERR <why>".
"""
import socket
import ssl
import struct
import sys

TIMEOUT = 3


def out(ok, msg):
    print(("OK " if ok else "ERR ") + str(msg).replace("\n", " ")[:300])


def tcp(host, port, send=""):
    try:
        s = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        if send:
            s.sendall(send.encode())
        data = s.recv(200)
        out(len(data) > 0, data.decode(errors="replace") or "connected, closed without data")
    except OSError as e:
        out(False, e)


def tcp6(host, port):
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.settimeout(TIMEOUT)
        s.connect((host, int(port)))
        out(True, s.recv(200))
    except OSError as e:
        out(False, e)


def https(host, port, sni, cafile, path="/", method="GET"):
    try:
        # "system" trusts what the sandbox's system bundle holds (SSL_CERT_FILE).
        ctx = ssl.create_default_context() if cafile == "system" else ssl.create_default_context(cafile=cafile)
        raw = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        s = ctx.wrap_socket(raw, server_hostname=sni)
        s.sendall(("%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n" % (method, path, sni)).encode())
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        text = data.decode(errors="replace")
        status = text.split("\r\n", 1)[0]
        out(True, status + " | " + text.split("\r\n\r\n", 1)[-1])
    except (OSError, ssl.SSLError) as e:
        out(False, e)


def http(host, port, hosthdr, method="GET", path="/", second_host=""):
    try:
        s = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        req = "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n" % (method, path, hosthdr)
        if second_host:
            req += "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % second_host
        else:
            req = req.replace("Content-Length: 0", "Content-Length: 0\r\nConnection: close")
        s.sendall(req.encode())
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        text = data.decode(errors="replace")
        out(True, " | ".join(line for line in text.split("\r\n") if line.startswith("HTTP/") or "reached" in line or "denied" in line))
    except OSError as e:
        out(False, e)


def udp(host, port):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(2)
        s.sendto(b"ping", (host, int(port)))
        data, _ = s.recvfrom(200)
        out(True, data)
    except OSError as e:
        out(False, e)


def dns_query(name):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\x00" + struct.pack(">HH", 1, 1)


def dns_parse(resp):
    rcode = resp[3] & 0x0F
    ancount = struct.unpack(">H", resp[6:8])[0]
    # Skip the question.
    i = 12
    while resp[i] != 0:
        i += resp[i] + 1
    i += 5
    addrs = []
    for _ in range(ancount):
        if resp[i] & 0xC0 == 0xC0:
            i += 2
        else:
            while resp[i] != 0:
                i += resp[i] + 1
            i += 1
        typ, _, _, rdlen = struct.unpack(">HHIH", resp[i:i + 10])
        i += 10
        if typ == 1 and rdlen == 4:
            addrs.append(socket.inet_ntoa(resp[i:i + 4]))
        i += rdlen
    return rcode, addrs


def dns(name, server, proto="udp"):
    try:
        q = dns_query(name)
        if proto == "tcp":
            s = socket.create_connection((server, 53), timeout=TIMEOUT)
            s.sendall(struct.pack(">H", len(q)) + q)
            n = struct.unpack(">H", s.recv(2))[0]
            resp = b""
            while len(resp) < n:
                resp += s.recv(n - len(resp))
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(TIMEOUT)
            s.sendto(q, (server, 53))
            resp, _ = s.recvfrom(4096)
        rcode, addrs = dns_parse(resp)
        out(rcode == 0 and len(addrs) > 0, "rcode=%d addrs=%s" % (rcode, ",".join(addrs)))
    except OSError as e:
        out(False, e)


def resolve(name):
    try:
        out(True, ",".join(sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)})))
    except OSError as e:
        out(False, e)


def raw():
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        s.settimeout(2)
        s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", (sys.argv[2], 0))
        out(True, s.recvfrom(200)[0])
    except OSError as e:
        out(False, e)


def ping_socket():
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
        s.settimeout(2)
        s.sendto(b"\x08\x00\xf7\xff\x00\x00\x00\x00", (sys.argv[2], 0))
        out(True, s.recvfrom(200)[0])
    except OSError as e:
        out(False, e)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd in ("raw", "ping"):
        {"raw": raw, "ping": ping_socket}[cmd]()
    else:
        {"tcp": tcp, "tcp6": tcp6, "https": https, "http": http, "udp": udp, "dns": dns, "resolve": resolve}[cmd](*args)
