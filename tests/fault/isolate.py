#!/usr/bin/python3
"""Runs a command in a network namespace of its own whose only ways out are
the forwards given: the fault suite's partition-client without root.

    unshare [--user --map-root-user] --net -- \
        isolate.py --forward 127.0.0.1:PORT=SOCKET [--forward ...] -- COMMAND ARGS...

Brings the namespace's loopback up, starts a forwarder process (a connection
to 127.0.0.1:PORT inside the namespace goes on to the unix socket SOCKET, a
file the suite's UnixCutProxy listens on outside, which takes it to a
server), then execs COMMAND (berthd --client) once the forwards listen. The
forwarder exits when COMMAND does. Nothing else reaches the command, nor does
the command reach anything else: a server cannot open a connection to it (nor
does it try: berthd runs without CAF's automatic connections), so cutting the
proxies cuts every connection between the client and the servers, both ways.
The unix sockets of its plugin are files and still work."""

import fcntl
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from cut_proxy import pump  # noqa: E402

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def loopback_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sH14s", b"lo", 0, b"\0" * 14)
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b"\0" * 14))
    finally:
        s.close()


def serve(listener, path):
    while True:
        c, _ = listener.accept()
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            u.connect(path)
        except OSError:  # the proxy is cut: refused
            c.close()
            u.close()
            continue
        threading.Thread(target=pump, args=(c, u), daemon=True).start()
        threading.Thread(target=pump, args=(u, c), daemon=True).start()


def main(argv):
    sep = argv.index("--")
    forwards, command = [], argv[sep + 1:]
    args = argv[:sep]
    while args:
        flag, value = args[0], args[1]
        args = args[2:]
        if flag != "--forward":
            raise SystemExit("usage: isolate.py --forward HOST:PORT=SOCKET... -- COMMAND...")
        address, path = value.split("=", 1)
        host, port = address.rsplit(":", 1)
        forwards.append(((host, int(port)), path))
    loopback_up()
    ready_r, ready_w = os.pipe()
    parent = os.getpid()
    if os.fork() == 0:
        os.close(ready_r)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        listeners = []
        for address, path in forwards:
            ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(address)
            ls.listen(64)
            listeners.append(ls)
            threading.Thread(target=serve, args=(ls, path), daemon=True).start()
        os.write(ready_w, b"x")
        os.close(ready_w)
        while os.getppid() == parent:  # until COMMAND (the parent, exec'd) ends
            time.sleep(0.5)
        os._exit(0)
    os.close(ready_w)
    os.read(ready_r, 1)
    os.close(ready_r)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
