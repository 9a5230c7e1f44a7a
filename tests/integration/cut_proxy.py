"""A TCP proxy that a test can cut: a partition between one process and
another without root or network namespaces (the client connects to the
proxy's port instead of the server's). Cutting closes every connection
through it and refuses new ones at once; healing lets them through again.
Used by integration.partition and the fault suite's partition-client."""

import socket
import threading

from cluster import free_port


def pump(a, b):
    """Copies from socket a to socket b until either ends, then shuts both."""
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class CutProxy:
    """A TCP proxy from a local port to `target` that can be cut: cut()
    closes every connection and refuses new ones at once; heal() lets them
    through again."""

    def __init__(self, target):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", free_port()))
        self.listener.listen(64)
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = []
        self.is_cut = False
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if self.is_cut:
                    c.close()
                    continue
                try:
                    u = socket.create_connection(self.target, timeout=5)
                except OSError:
                    c.close()
                    continue
                u.settimeout(None)
                self.conns += [c, u]
            threading.Thread(target=pump, args=(c, u), daemon=True).start()
            threading.Thread(target=pump, args=(u, c), daemon=True).start()

    def cut(self):
        with self.lock:
            self.is_cut = True
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def heal(self):
        with self.lock:
            self.is_cut = False

    def close(self):
        self.closed = True
        self.cut()
        self.listener.close()
