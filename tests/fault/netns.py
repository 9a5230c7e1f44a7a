"""Network partitions for the fault suite (root only): each server and each
client runs in its own network namespace, joined to the host by a veth pair
on a bridge; the plugins (their unix sockets are files, shared across
namespaces) and the shell stay on the host and reach the servers through the
bridge. Partitioning a server or a client sets the host end of its veth down
(it is cut off from every other process, both ways), healing sets it up
again.

Without root, partition-client isolates each client instead: alone in a
network namespace of its own (unshare, in a user namespace; isolate.py), it
reaches the servers only through unix sockets where proxies outside
(UnixCutProxy) take it on; cutting them cuts the client off, both ways.
(BridgeCutProxy and plain TCP proxies serve --partition-client-mode tcp: the
client's own connections are cut, and with them every way to it, since
berthd opens no automatic connections (issue 59); before, a leader that
connected to the client itself still reached it.)"""

import os
import shutil
import socket
import subprocess
import sys
import threading

from cluster import Client, Cluster, Server, free_port
from cut_proxy import CutProxy


def usable():
    """None when network namespaces work here, else why not."""
    if os.geteuid() != 0:
        return "needs root"
    if not shutil.which("ip"):
        return "needs ip (iproute2)"
    if not shutil.which("nsenter"):
        return "needs nsenter (util-linux)"
    probe = "bfprobe%d" % (os.getpid() % 100000)
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return "ip netns does not work here: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


def ip(*args, check=True):
    return subprocess.run(["ip"] + list(args), capture_output=True, text=True, check=check)


class Network:
    def __init__(self):
        n = os.getpid() % 10000
        self.prefix = "bf%d" % n          # interface names stay under 15 characters
        self.subnet = "10.231.%d" % (n % 250 + 1)
        self.bridge = self.prefix + "br"
        self.namespaces = []

    def setup(self):
        # A run killed before its teardown leaves its bridge, namespaces and
        # veths behind under its pid's prefix; a later run that gets the same
        # pid (this one: its pid is alive, so nothing live has the prefix)
        # takes them down first instead of failing on `ip link add`.
        self.remove_stale()
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", self.subnet + ".1/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add(self, name, host_octet):
        ns = self.prefix + name
        ip("netns", "add", ns)
        self.namespaces.append(ns)
        host_end = ns + "h"
        ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", host_end, "master", self.bridge)
        ip("link", "set", host_end, "up")
        ip("-n", ns, "addr", "add", "%s.%d/24" % (self.subnet, host_octet), "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        return ns, "%s.%d" % (self.subnet, host_octet)

    def isolate(self, ns):
        ip("link", "set", ns + "h", "down")

    def rejoin(self, ns):
        ip("link", "set", ns + "h", "up")

    def remove_stale(self):
        roles = ["s%d" % i for i in range(1, 8)] + ["c%d" % i for i in range(1, 8)]
        namespaces = {self.prefix + r for r in roles}
        links = {ns + "h" for ns in namespaces} | {self.bridge}
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in listed.splitlines():
            if line.split() and line.split()[0] in namespaces:
                ip("netns", "delete", line.split()[0], check=False)
        listed = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
        for line in listed.splitlines():
            name = line.split()[0].split("@")[0] if line.split() else ""
            if name in links:
                ip("link", "delete", name, check=False)

    def teardown(self):
        for ns in self.namespaces:
            ip("netns", "delete", ns, check=False)
        ip("link", "delete", self.bridge, check=False)


class NetnsServer(Server):
    def __init__(self, tmp, name, port, raft_port, join, tick, ns, address, extra_args=()):
        super().__init__(tmp, name, port, raft_port, join, tick, extra_args=extra_args)
        self.ns = ns
        self.host = address
        self.argv = ["ip", "netns", "exec", ns] + self.argv + ["--bind", address]

    @property
    def address(self):
        return "%s:%d" % (self.host, self.port)


class NetnsCluster(Cluster):
    """Cluster (tests/integration/cluster.py) with each server in a namespace."""

    def __init__(self, tmp, network, tick="0.05", server_args=()):
        self.tmp = tmp
        self.network = network
        hosts = [network.add("s%d" % (i + 1), 11 + i) for i in range(3)]
        ports = [(4747, 4748)] * 3  # every server has its own address
        raft = ["%s:%d" % (addr, r) for (_, addr), (_, r) in zip(hosts, ports)]
        self.servers = [NetnsServer(tmp, "s%d" % (i + 1), p, r,
                                    [a for a in raft if a != raft[i]], tick, ns, addr,
                                    server_args)
                        for i, ((ns, addr), (p, r)) in enumerate(zip(hosts, ports))]
        self.processes = list(self.servers)


class NetnsClient(Client):
    """A berthd --client in its own network namespace (Network.add). Not
    through `ip netns exec`, which also gives the process a mount namespace
    of its own: the plugin's bind mounts (made on the host, whose / is
    private here) would not reach the client's allocs. nsenter --net
    changes only the network namespace."""

    def __init__(self, tmp, name, servers, plugin_socket, ns, address, extra_args=()):
        super().__init__(tmp, name, servers, plugin_socket, extra_args)
        self.ns = ns
        self.host = address
        self.argv = ["nsenter", "--net=/run/netns/" + ns, "--"] + self.argv


class BridgeCutProxy(CutProxy):
    """A CutProxy (tests/integration/cut_proxy.py) that listens on `host`
    (the bridge's host address, which a client in a namespace reaches)
    instead of 127.0.0.1."""

    def __init__(self, target, host):
        h, port = target.rsplit(":", 1)
        self.target = (h, int(port))
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, free_port()))
        self.listener.listen(64)
        self.address = "%s:%d" % (host, self.listener.getsockname()[1])
        self.lock = threading.Lock()
        self.conns = []
        self.is_cut = False
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()


# --- partition-client without root: a client alone in its own namespace ----

ISOLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "isolate.py")


def unshare_prefix():
    """The command that gives a process a network namespace of its own:
    plain as root, in a user namespace of its own otherwise."""
    if os.geteuid() == 0:
        return ["unshare", "--net", "--"]
    return ["unshare", "--user", "--map-root-user", "--net", "--"]


def isolation_usable():
    """None when a process can get a network namespace of its own here
    (unshare; as non-root, unprivileged user namespaces), else why not."""
    if not shutil.which("unshare"):
        return "needs unshare (util-linux)"
    r = subprocess.run(unshare_prefix() + [sys.executable, ISOLATE, "--", "true"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "unshare --net does not work here: " + (r.stderr.strip() or "exit %d"
                                                       % r.returncode)
    return None


class UnixCutProxy(CutProxy):
    """A CutProxy that listens on the unix socket `path` (an isolated
    client's forwarder connects to it) and takes each connection to the TCP
    address `target`."""

    def __init__(self, target, path):
        h, port = target.rsplit(":", 1)
        self.target = (h, int(port))
        if os.path.exists(path):
            os.unlink(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)
        self.address = path
        self.lock = threading.Lock()
        self.conns = []
        self.is_cut = False
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()


class IsolatedClient(Client):
    """A berthd --client alone in a network namespace of its own (isolate.py):
    it reaches server i at 127.0.0.1:4701+i inside, through proxies[i] (a
    UnixCutProxy) outside, and nothing reaches it but through them."""

    def __init__(self, tmp, name, proxies, plugin_socket, extra_args=()):
        inside = ["127.0.0.1:%d" % (4701 + i) for i in range(len(proxies))]
        super().__init__(tmp, name, inside, plugin_socket, extra_args)
        forwards = []
        for address, p in zip(inside, proxies):
            forwards += ["--forward", "%s=%s" % (address, p.address)]
        self.argv = unshare_prefix() + [sys.executable, ISOLATE] + forwards + ["--"] + self.argv
