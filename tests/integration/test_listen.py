"""berthd listens only where it is told (issue 59, item 6): with --bind and
--metrics-bind 127.0.0.1 and no TLS, every listening TCP socket of every
berthd process is bound to 127.0.0.1, none to 0.0.0.0 or ::.  CAF's
automatic connections used to open a port of their own on every interface
(`*:PORT` in `ss -ltnp`); berthd now runs without them, as under TLS, and a
leader reaches a client's node actor through the server the client talks to.

The sockets are read from /proc/PID/net/tcp and tcp6 (the process's own
network namespace) and matched to the process through the inodes of its
file descriptors (/proc/PID/fd), so nothing but /proc is needed.

- a dev agent: its shell and metrics ports, after a claim through its own
  berth-hostpath;
- 3 servers and 2 clients: the shell, raft and metrics ports of each
  server and the metrics port of each client, after claims on both
  clients, one of which registered through a follower (the leader reaches
  its node actor only through that follower) and with the shell talking to
  a follower (forwarded to the leader over the raft link)."""

import ipaddress
import json
import os
import re
import shutil
import tempfile
import time
import unittest

from cluster import Client, ClusterTestCase, Plugin
from harness import SHELL_TIMEOUT, TIME_SCALE, Agent, berth, listening, undo_mounts

LOOPBACK = ipaddress.ip_address("127.0.0.1")
BIND = ("--bind", "127.0.0.1", "--metrics-bind", "127.0.0.1")
VOLUME = {"id": "v", "plugin_id": "hostpath",
          "capabilities": [{"access_mode": "single-node-writer",
                            "attachment_mode": "file-system"}]}
def on_loopback(address):
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address == LOOPBACK


class ListenCheck:
    def assert_listen_only_on_loopback(self, processes):
        """Every listening socket of each (name, pid, expected_ports) on
        127.0.0.1, and those of expected_ports among them (so that the check
        is not vacuous); every process is checked before the test fails."""
        problems = []
        for name, pid, expected_ports in processes:
            sockets = listening(pid)
            wrong = ["%s port %d" % (a, p) for a, p in sockets if not on_loopback(a)]
            if wrong:
                problems.append("%s (pid %d) listens beyond 127.0.0.1: %s"
                                % (name, pid, ", ".join(wrong)))
            missing = set(expected_ports) - {p for _, p in sockets}
            if missing:
                problems.append("%s (pid %d) does not listen on %s: %s"
                                % (name, pid, sorted(missing), sockets))
        if problems:
            self.fail("\n".join(problems))


class DevAgentListenTest(unittest.TestCase, ListenCheck):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-listen-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.addCleanup(undo_mounts, self.tmp)
        self.agent = Agent(os.path.join(self.tmp, "data"), extra_args=list(BIND) + [
            "--node-name", "n1", "--csi-root", os.path.join(self.tmp, "csi")]).start()
        self.addCleanup(self.agent.kill)

    def b(self, *args, stdin=None):
        r = berth(self.agent, "--timeout", SHELL_TIMEOUT, *args, stdin=stdin)
        self.assertEqual(r.code, 0, r)
        return r

    def test_dev_agent_listens_only_on_its_bind_address(self):
        deadline = time.time() + 30 * TIME_SCALE
        while True:
            r = berth(self.agent, "--json", "plugin", "status", "hostpath")
            if r.code == 0 and r.json()["nodes_healthy"] == 1:
                break
            self.assertLess(time.time(), deadline, "the dev agent's plugin never healthy: %r" % r)
            time.sleep(0.1)
        self.b("volume", "create", "-", stdin=json.dumps(VOLUME))
        claim = self.b("--json", "volume", "claim", "v", "--alloc", "a1", "--node", "n1").json()
        self.assertTrue(os.path.isdir(claim["published_path"]), claim)
        self.b("volume", "release", "v", "--alloc", "a1")
        self.assert_listen_only_on_loopback(
            [("the dev agent", self.agent.proc.pid, [self.agent.port, self.agent.metrics_port])])


class ClusterListenTest(ClusterTestCase, ListenCheck):
    PREFIX = "berth-listen-"
    SERVER_ARGS = BIND

    def add_client(self, name, servers, shared_root):
        """A client whose first server (the one it registers through, while
        it answers) is servers[0]."""
        plugin = Plugin(self.tmp, "plugin-" + name, "csi-" + name, shared_root=shared_root)
        client = Client(self.tmp, name, [s.address for s in servers], plugin.socket, BIND)
        self.cluster.processes += [client, plugin]
        plugin.start()
        client.start()
        return client

    def test_cluster_listens_only_on_its_bind_address(self):
        leader = self.cluster.wait_leader()
        leader = self.cluster.leader() or leader
        followers = [s for s in self.cluster.servers if s is not leader]
        shared = os.path.join(self.tmp, "shared-root")
        # c1 talks to a follower: the leader has no connection of its own
        # to c1 and reaches its node actor through that follower.
        c1 = self.add_client("c1", followers + [leader], shared)
        c2 = self.add_client("c2", [leader] + followers, shared)
        self.via = followers[1].address
        self.wait(lambda: (lambda r: r.code == 0 and r.json()["nodes_healthy"] == 2)(
            berth(self.via, "--json", "plugin", "status", "hostpath")),
            "both clients' plugins healthy")
        self.b("volume", "create", "-", stdin=json.dumps(VOLUME))
        for alloc, node in (("a1", "c1"), ("a2", "c2")):
            claim = self.b("--json", "volume", "claim", "v", "--alloc", alloc,
                           "--node", node).json()
            self.assertTrue(os.path.isdir(claim["published_path"]), claim)
            self.b("volume", "release", "v", "--alloc", alloc)
        self.wait(lambda: not self.b("--json", "volume", "status", "v").json()["claims"],
                  "the claims released")

        def metrics(p):
            return int(re.search(r"metrics on 127\.0\.0\.1:(\d+)", p.banner).group(1))
        self.assert_listen_only_on_loopback(
            [("server " + s.name, s.proc.pid, [s.port, s.raft_port, metrics(s)])
             for s in self.cluster.servers] +
            [("client " + c.name, c.proc.pid, [metrics(c)]) for c in (c1, c2)])


if __name__ == "__main__":
    unittest.main()
