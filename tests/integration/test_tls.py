"""Mutual TLS between berth processes (issue 13, TLS part), real processes on
127.0.0.1: `berth tls` writes a CA and certificates; a TLS dev agent serves
the whole claim cycle (CSI calls included) to a TLS shell; a shell without a
certificate, or with one from another CA, cannot connect and says why; a TLS
shell at a plain-text berthd says so; a partial set of --tls-* options is
refused naming what is missing.

A 3-server TLS cluster: claims and list-peers through every server
(TlsClusterTest); the whole claim cycle on 3 servers and 2 clients across a
SIGKILLed leader (TlsLeaderChangeTest); a recording proxy between shell,
client and servers never sees a volume's secret over TLS, and sees it over a
plain cluster (ProxyRecordingTest); a berthd --server started with a client
certificate does not join (TlsRoleTest).  The cluster cases failed about 5
runs in 6 with Debian's libcaf_openssl (third_party/caf_openssl/PATCHES.md)."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import unittest

import socket
import threading

from cluster import Client, Cluster, Plugin, Server, free_port, reserve
from harness import BERTH, BERTHD, Agent, undo_mounts

VOLUME = {"plugin_id": "hostpath", "capabilities": [
    {"access_mode": "single-node-writer", "attachment_mode": "file-system"}]}
TLS_ENV = ("BERTH_CACERT", "BERTH_CLIENT_CERT", "BERTH_CLIENT_KEY")


def run(argv, env=None, cwd=None, timeout=90, stdin=None):
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                          input=stdin)


def env_without_tls():
    return {k: v for k, v in os.environ.items() if k not in TLS_ENV}


def make_certificates(tmp):
    """The cluster's CA and certificates in TMP/certs, another CA's cli
    certificate in TMP/other, all made with `berth tls`."""
    certs = os.path.join(tmp, "certs")
    other = os.path.join(tmp, "other")
    os.makedirs(certs)
    os.makedirs(other)
    steps = [
        ([BERTH, "tls", "ca", "create"], certs),
        ([BERTH, "tls", "cert", "create", "--server"], certs),
        ([BERTH, "tls", "cert", "create", "--client"], certs),
        ([BERTH, "tls", "cert", "create", "--cli"], certs),
        # Another cluster's CA and a shell certificate it signed.
        ([BERTH, "tls", "ca", "create", "--dir", other], tmp),
        ([BERTH, "tls", "cert", "create", "--cli", "--dir", other,
          "--ca-cert", other + "/berth-agent-ca.pem",
          "--ca-key", other + "/berth-agent-ca-key.pem"], tmp),
    ]
    for argv, cwd in steps:
        r = run(argv, env=env_without_tls(), cwd=cwd)
        if r.returncode != 0:
            raise RuntimeError("%s: exit %d %s %s" % (argv, r.returncode, r.stdout, r.stderr))
    return certs, other


def tls_args(certs, role):
    return ["--tls-ca", certs + "/berth-agent-ca.pem",
            "--tls-cert", "%s/global-%s-berth.pem" % (certs, role),
            "--tls-key", "%s/global-%s-berth-key.pem" % (certs, role)]


def cli_env(certs):
    env = env_without_tls()
    env["BERTH_CACERT"] = certs + "/berth-agent-ca.pem"
    env["BERTH_CLIENT_CERT"] = certs + "/global-cli-berth.pem"
    env["BERTH_CLIENT_KEY"] = certs + "/global-cli-berth-key.pem"
    return env


class TlsDevAgentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="berth-tls-")
        cls.agent = None
        try:
            cls.certs, cls.other = make_certificates(cls.tmp)
            cls.agent = Agent(os.path.join(cls.tmp, "dev"),
                              extra_args=tls_args(cls.certs, "server")).start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.agent:
            cls.agent.kill()
        undo_mounts(cls.tmp)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def b(self, *args, stdin=None, expect=0, env=None):
        """The shell with the cli certificate (from the environment, as an
        operator sets it), or with `env`."""
        r = run([BERTH, "--address", self.agent.address, "--timeout", "30"] + list(args),
                env=env or cli_env(self.certs), stdin=stdin)
        self.assertEqual(r.returncode, expect, "%s\n%s" % (r.stdout, r.stderr))
        return r

    def test_berth_tls_writes_keys_0600_and_never_overwrites(self):
        for key in ("berth-agent-ca-key.pem", "global-server-berth-key.pem",
                    "global-client-berth-key.pem", "global-cli-berth-key.pem"):
            mode = stat.S_IMODE(os.stat(os.path.join(self.certs, key)).st_mode)
            self.assertEqual(mode, 0o600, key)
        with open(os.path.join(self.certs, "berth-agent-ca-key.pem"), "rb") as f:
            before = f.read()
        r = run([BERTH, "tls", "ca", "create"], env=env_without_tls(), cwd=self.certs)
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn("exists already", r.stderr)
        with open(os.path.join(self.certs, "berth-agent-ca-key.pem"), "rb") as f:
            self.assertEqual(f.read(), before)
        # No key material on the terminal.
        r = run([BERTH, "tls", "cert", "create", "--cli", "--name", "eu",
                 "--dir", self.tmp, "--ca-cert", self.certs + "/berth-agent-ca.pem",
                 "--ca-key", self.certs + "/berth-agent-ca-key.pem"], env=env_without_tls())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("cli.eu.berth", r.stdout)
        self.assertNotIn("PRIVATE KEY", r.stdout + r.stderr)

    def test_claim_cycle_through_tls(self):
        self.assertIn("(TLS)", self.agent.banner)
        node = json.loads(self.b("--json", "status").stdout)["node_name"]
        deadline = time.time() + 30
        while time.time() < deadline:
            r = run([BERTH, "--address", self.agent.address, "--json", "plugin", "status",
                     "hostpath"], env=cli_env(self.certs))
            if r.returncode == 0 and json.loads(r.stdout)["controllers_healthy"] == 1:
                break
            time.sleep(0.1)
        self.b("volume", "create", "-", stdin=json.dumps(dict(VOLUME, id="tv1")))
        claim = json.loads(self.b("--json", "volume", "claim", "tv1", "--alloc", "a1",
                                  "--node", node).stdout)
        self.assertTrue(os.path.isdir(claim["published_path"]), claim)
        self.b("volume", "release", "tv1", "--alloc", "a1")
        self.assertFalse(os.path.isdir(claim["published_path"]))
        self.b("volume", "delete", "tv1")
        self.b("volume", "status", "tv1", expect=3)

    def test_shell_without_a_certificate_is_told_tls_is_required(self):
        r = self.b("--timeout", "5", "status", env=env_without_tls(), expect=5)
        self.assertIn("the server requires TLS", r.stderr)
        self.assertIn("--tls-ca", r.stderr)

    def test_shell_with_a_certificate_of_another_ca_cannot_connect(self):
        env = cli_env(self.other)
        r = self.b("--timeout", "5", "status", env=env, expect=5)
        self.assertIn("does not verify against --tls-ca", r.stderr)
        # Trusting the cluster's CA, but with the other CA's certificate:
        # the server refuses it.
        env["BERTH_CACERT"] = self.certs + "/berth-agent-ca.pem"
        r = self.b("--timeout", "5", "status", env=env, expect=5)
        self.assertIn("the server refused this certificate", r.stderr)

    def test_partial_tls_options_are_refused_naming_the_missing_one(self):
        r = run([BERTH, "--address", self.agent.address, "--tls-ca",
                 self.certs + "/berth-agent-ca.pem", "status"], env=env_without_tls())
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("--tls-cert (or BERTH_CLIENT_CERT) and --tls-key (or BERTH_CLIENT_KEY) "
                      "are missing", r.stderr)
        r = run([BERTHD, "--dev", "--tls-ca", self.certs + "/berth-agent-ca.pem",
                 "--tls-key", self.certs + "/global-server-berth-key.pem"])
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("--tls-cert is missing", r.stderr)

    def test_plain_text_server_is_named_to_a_tls_shell(self):
        agent = Agent(os.path.join(self.tmp, "plain")).start()
        try:
            r = run([BERTH, "--address", agent.address, "--timeout", "5", "status"],
                    env=cli_env(self.certs))
            self.assertEqual(r.returncode, 5, r)
            self.assertIn("does not answer in TLS", r.stderr)
        finally:
            agent.kill()


class TlsCluster:
    """A 3-server cluster with TLS everywhere (servers: the server
    certificate; clients: the client certificate; every shell of the test,
    the cluster helpers' too, the cli certificate through the environment, as
    an operator sets it).  Clients are added with add_client."""

    def __init__(self, prefix, server_args=()):
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.saved_env = {k: os.environ.get(k) for k in TLS_ENV + ("BERTH_TOKEN",)}
        self.cluster = None
        try:
            self.certs, self.other = make_certificates(self.tmp)
            d = self.certs
            os.environ["BERTH_CACERT"] = d + "/berth-agent-ca.pem"
            os.environ["BERTH_CLIENT_CERT"] = d + "/global-cli-berth.pem"
            os.environ["BERTH_CLIENT_KEY"] = d + "/global-cli-berth-key.pem"
            self.cluster = Cluster(self.tmp, server_args=tls_args(d, "server") + list(server_args))
            self.cluster.start()
        except BaseException:
            self.stop()
            raise

    def add_client(self, name, shared_root):
        return self.cluster.add_client(name, shared_root=shared_root,
                                       client_args=tls_args(self.certs, "client"))

    def stop(self):
        if self.cluster:
            self.cluster.stop()
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        undo_mounts(self.tmp)
        # Alloc commands still running (a test failed): kill them.
        subprocess.run(["pkill", "-f", "berth-alloc.*" + os.path.basename(self.tmp)], check=False)
        if os.environ.get("BERTH_TEST_KEEP"):
            print("kept the cluster's directory (logs): " + self.tmp, file=sys.stderr)
            return
        shutil.rmtree(self.tmp, ignore_errors=True)


class TlsShell:
    """The TLS shell (cli certificate from the environment) for the cluster
    tests, with the retries a script would do."""

    def b(self, via, *args, stdin=None, expect=0):
        """The shell through `via`; exit 5 (unavailable: e.g. an election
        after the leader was killed) is retried, as a script would, within
        a deadline."""
        deadline = time.time() + 30
        while True:
            r = run([BERTH, "--address", via, "--json", "--timeout", "20"] + list(args),
                    stdin=stdin)
            if r.returncode != 5 or expect == 5 or time.time() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(r.returncode, expect, "%s via %s\n%s\n%s" % (args, via, r.stdout, r.stderr))
        return json.loads(r.stdout) if expect == 0 and r.stdout.strip() else r

    def poll(self, cond, what, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.1)
        self.fail("never: " + what)

    def alloc_state(self, via, aid):
        r = run([BERTH, "--address", via, "--json", "--timeout", "10", "alloc", "status", aid])
        return json.loads(r.stdout)["state"] if r.returncode == 0 else None

    def create_shared(self, via, vid, secret):
        """A multi-node-single-writer volume with a secret, through `via`."""
        spec = dict(VOLUME, id=vid, secrets={"token": secret})
        spec["capabilities"] = [{"access_mode": "multi-node-single-writer",
                                 "attachment_mode": "file-system"}]
        self.b(via, "volume", "create", "-", stdin=json.dumps(spec))

    def write_on(self, via, node, vid):
        """An alloc on `node` writes its id into the volume; returns the id
        once it completed and its claim was released."""
        w = self.b(via, "alloc", "run", "--node", node, "--volume", "data=" + vid, "--",
                   "sh", "-c", 'echo "written by $BERTH_ALLOC_ID" > "$BERTH_VOLUME_DATA/f"')
        self.poll(lambda: self.alloc_state(via, w["id"]) == "complete", "the writer complete")
        self.poll(lambda: self.b(via, "volume", "status", vid)["claims"] == [],
                  "the writer's claim released")
        return w["id"]

    def read_on(self, via, node, vid, tmp):
        """An alloc on `node` reads the volume (read-only); returns what it
        read once it completed and its claim was released."""
        r = self.b(via, "alloc", "run", "--node", node, "--volume", "data=%s:ro" % vid,
                   "--", "sh", "-c", 'cat "$BERTH_VOLUME_DATA/f"')
        self.poll(lambda: self.alloc_state(via, r["id"]) == "complete", "the reader complete")
        with open(os.path.join(tmp, node, "allocs", r["id"], "stdout")) as f:
            out = f.read().strip()
        self.poll(lambda: self.b(via, "volume", "status", vid)["claims"] == [],
                  "the reader's claim released")
        return out

    def nodes_healthy(self, via):
        r = run([BERTH, "--address", via, "--json", "--timeout", "5", "plugin", "status",
                 "hostpath"])
        if r.returncode != 0:
            return -1
        s = json.loads(r.stdout)
        return s["nodes_healthy"] if s["controllers_healthy"] >= 1 else -1


class TlsClusterTest(TlsShell, unittest.TestCase):
    """3 servers and a client c1, TLS everywhere: claims and list-peers
    through every server (forwarded to the leader over the raft links)."""

    @classmethod
    def setUpClass(cls):
        cls.tls = TlsCluster("berth-tls-")
        cls.cluster = cls.tls.cluster
        try:
            cls.plugin, cls.client = cls.tls.add_client("c1", None)
        except BaseException:
            cls.tls.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.tls.stop()

    def test_claim_cycle_through_every_server(self):
        """Forwarded to the leader over the raft link (the leader's shell
        handle is asked of its replicated log), whichever follower has the
        larger raft address; the leader reaches the client's node through
        the server the client connected to."""
        leader = self.cluster.wait_leader()
        self.poll(lambda: self.nodes_healthy(leader.address) == 1, "c1's plugin healthy")
        self.b(leader.address, "volume", "create", "-", stdin=json.dumps(dict(VOLUME, id="tv1")))
        for i, s in enumerate(self.cluster.servers):
            alloc = "a%d" % i
            claim = self.b(s.address, "volume", "claim", "tv1", "--alloc", alloc, "--node", "c1")
            self.assertTrue(os.path.isdir(claim["published_path"]), claim)
            self.b(s.address, "volume", "release", "tv1", "--alloc", alloc)
            self.assertFalse(os.path.isdir(claim["published_path"]))

    def test_list_peers_through_every_server(self):
        """Each server asks the others over the raft links, not over a
        second connection."""
        for s in self.cluster.servers:
            deadline = time.time() + 30
            while True:
                peers = self.b(s.address, "operator", "raft", "list-peers")
                roles = sorted(p["role"] for p in peers)
                if roles == ["follower", "follower", "leader"] or time.time() > deadline:
                    break
                time.sleep(0.2)  # an election in progress
            self.assertEqual(roles, ["follower", "follower", "leader"], (s.name, peers))


class TlsLeaderChangeTest(TlsShell, unittest.TestCase):
    """The whole claim cycle through TLS on 3 servers and 2 clients whose
    plugins share one storage: create through a follower (forwarded), an
    alloc on c1 writes the volume, the leader is SIGKILLed, an alloc on c2
    (its claim sent to a follower of the new leader) reads what c1 wrote,
    then the volume is deleted."""

    def setUp(self):
        self.tls = TlsCluster("berth-tls-lc-")
        self.addCleanup(self.tls.stop)
        self.cluster = self.tls.cluster
        shared = os.path.join(self.tls.tmp, "storage")
        self.tls.add_client("c1", shared)
        self.tls.add_client("c2", shared)

    def follower(self, leader):
        return next(s for s in self.cluster.servers if s.alive() and s is not leader)

    def test_claim_cycle_across_a_leader_change(self):
        leader = self.cluster.wait_leader()
        via = self.follower(leader)
        self.poll(lambda: self.nodes_healthy(leader.address) == 2, "both clients' plugins healthy")
        self.create_shared(via.address, "lc1", "lc-secret-1")
        writer = self.write_on(via.address, "c1", "lc1")

        leader.kill()  # SIGKILL
        new_leader = self.cluster.wait_leader(timeout=30, exclude=leader)
        via = self.follower(new_leader)
        self.assertEqual(self.read_on(via.address, "c2", "lc1", self.tls.tmp),
                         "written by " + writer)
        self.b(via.address, "volume", "delete", "lc1")
        self.b(new_leader.address, "volume", "status", "lc1", expect=3)


READER = """
namespace "default" {
  policy = "read"
}
node { policy = "read" }
plugin { policy = "read" }
"""


class TlsAclClusterTest(TlsShell, unittest.TestCase):
    """Issue 13's TLS + ACL cluster: 3 servers with --acl and 2 clients, TLS
    everywhere.  Anonymous requests are refused (exit 6) over TLS; the
    management token of the bootstrap does the claim cycle through a
    follower (an alloc on c1 writes the volume, one on c2 reads it); a token
    with csi-read-volume reads the volume but cannot claim it."""

    def setUp(self):
        self.tls = TlsCluster("berth-tls-acl-", server_args=("--acl",))
        self.addCleanup(self.tls.stop)
        self.cluster = self.tls.cluster
        leader = self.cluster.wait_leader()
        r = run([BERTH, "--address", leader.address, "--json", "acl", "bootstrap"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.mgmt = json.loads(r.stdout)["secret_id"]
        os.environ["BERTH_TOKEN"] = self.mgmt  # every shell of the test and its helpers
        shared = os.path.join(self.tls.tmp, "storage")
        self.tls.add_client("c1", shared)
        self.tls.add_client("c2", shared)

    def test_tokens_decide_over_tls_and_the_claim_cycle_works(self):
        leader = self.cluster.wait_leader()
        via = next(s for s in self.cluster.servers if s is not leader)
        self.poll(lambda: self.nodes_healthy(leader.address) == 2, "both clients' plugins healthy")
        # Anonymous: refused over TLS, and the refusal says how to get a token.
        anon = {k: v for k, v in os.environ.items() if k != "BERTH_TOKEN"}
        r = run([BERTH, "--address", via.address, "volume", "status"], env=anon)
        self.assertEqual(r.returncode, 6, r)
        self.assertIn("token", r.stderr)
        # The management token: the claim cycle through a follower.
        self.create_shared(via.address, "acl1", "acl-secret-1")
        writer = self.write_on(via.address, "c1", "acl1")
        # A reader's token: reads the volume, may not claim it.
        self.b(via.address, "acl", "policy", "apply", "reader", "-", stdin=READER)
        reader = self.b(via.address, "acl", "token", "create", "--name", "r",
                        "--policy", "reader")["secret_id"]
        as_reader = dict(anon, BERTH_TOKEN=reader)
        r = run([BERTH, "--address", via.address, "--json", "volume", "status", "acl1"],
                env=as_reader)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("acl-secret-1", r.stdout)
        r = run([BERTH, "--address", via.address, "volume", "claim", "acl1", "--alloc", "x",
                 "--node", "c2"], env=as_reader)
        self.assertEqual(r.returncode, 6, r)
        self.assertIn("csi-mount-volume", r.stderr)
        # The management token again: c2 reads what c1 wrote; then the delete.
        self.assertEqual(self.read_on(via.address, "c2", "acl1", self.tls.tmp),
                         "written by " + writer)
        self.b(via.address, "volume", "delete", "acl1")
        self.b(leader.address, "volume", "status", "acl1", expect=3)


class RecordingProxy:
    """A TCP proxy on 127.0.0.1 in front of 127.0.0.1:PORT: each connection
    it accepts is forwarded there, and every byte is recorded, both ways."""

    def __init__(self, port):
        self.target = port
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.address = "127.0.0.1:%d" % self.port
        self.lock = threading.Lock()
        self.streams = []  # per connection: (bytes to the server, bytes to the client)
        self.sockets = []
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                s = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            up, down = bytearray(), bytearray()
            with self.lock:
                self.streams.append((up, down))
                self.sockets += [c, s]
            threading.Thread(target=self.pipe, args=(c, s, up), daemon=True).start()
            threading.Thread(target=self.pipe, args=(s, c, down), daemon=True).start()

    def pipe(self, src, dst, record):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self.lock:
                    record.extend(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def recorded(self):
        """[(bytes to the server, bytes to the client)] per connection."""
        with self.lock:
            return [(bytes(up), bytes(down)) for up, down in self.streams]

    def close(self):
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                s.close()


class ProxyRecordingTest(TlsShell, unittest.TestCase):
    """Issue 13: nothing on the wire between berth processes shows a
    volume's secret.  Recording proxies sit between the shell and a server,
    and between a client (c1, given only the proxies' addresses as
    --servers) and each server; a volume with a secret is created, claimed
    on c1 (ControllerPublish, NodeStage and NodePublish carry the secret to
    the client), released and deleted.  Over a plain cluster the same
    recording holds the secret both in the shell's and in the client's
    traffic: the proxies see what crosses them."""

    SECRET = "proxy-recorded-secret-6c1f0d"

    def claim_through_proxies(self, use_tls):
        """Runs the claim cycle; returns the shell's and the client's
        recordings."""
        tmp = tempfile.mkdtemp(prefix="berth-tls-proxy-")
        saved_env = {k: os.environ.get(k) for k in TLS_ENV}
        cluster, proxies = None, []

        def cleanup():
            for p in proxies:
                p.close()
            if cluster:
                cluster.stop()
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            undo_mounts(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
        self.addCleanup(cleanup)

        server_args, client_args = (), ()
        for k in TLS_ENV:
            os.environ.pop(k, None)
        if use_tls:
            certs, _ = make_certificates(tmp)
            server_args, client_args = tls_args(certs, "server"), tls_args(certs, "client")
            os.environ["BERTH_CACERT"] = certs + "/berth-agent-ca.pem"
            os.environ["BERTH_CLIENT_CERT"] = certs + "/global-cli-berth.pem"
            os.environ["BERTH_CLIENT_KEY"] = certs + "/global-cli-berth-key.pem"
        cluster = Cluster(tmp, server_args=server_args).start()
        leader = cluster.wait_leader()
        follower = next(s for s in cluster.servers if s is not leader)
        # The leader's first: a client talks to the first of its --servers
        # that answers, and the leader sends the CSI requests over that
        # connection (before issue 59 a plain cluster opened a direct one,
        # CAF's automatic connection, past the proxies).
        to_servers = [RecordingProxy(s.port) for s in
                      [leader] + [s for s in cluster.servers if s is not leader]]
        shell_proxy = RecordingProxy(follower.port)
        proxies += to_servers + [shell_proxy]
        plugin = Plugin(tmp, "plugin-c1", "csi-c1")
        client = Client(tmp, "c1", [p.address for p in to_servers], plugin.socket, client_args)
        cluster.processes += [client, plugin]
        plugin.start()
        client.start()

        via = shell_proxy.address
        self.poll(lambda: self.nodes_healthy(via) == 1, "c1's plugin healthy")
        spec = dict(VOLUME, id="pv1", secrets={"token": self.SECRET})
        self.b(via, "volume", "create", "-", stdin=json.dumps(spec))
        claim = self.b(via, "volume", "claim", "pv1", "--alloc", "a1", "--node", "c1")
        self.assertTrue(os.path.isdir(claim["published_path"]), claim)
        self.b(via, "volume", "release", "pv1", "--alloc", "a1")
        self.b(via, "volume", "delete", "pv1")
        shell = shell_proxy.recorded()
        clients = [c for p in to_servers for c in p.recorded()]
        self.assertTrue(shell and clients, "a proxy saw no connection")
        return shell, clients

    def assert_secret(self, recording, present):
        found = [self.SECRET.encode() in up or self.SECRET.encode() in down
                 for up, down in recording]
        self.assertEqual(any(found), present, "%d connection(s), %d bytes" % (
            len(recording), sum(len(u) + len(d) for u, d in recording)))

    def test_a_plain_cluster_shows_the_secret_to_the_proxies(self):
        shell, clients = self.claim_through_proxies(use_tls=False)
        self.assert_secret(shell, True)
        self.assert_secret(clients, True)

    def test_a_tls_cluster_shows_the_secret_to_no_proxy(self):
        shell, clients = self.claim_through_proxies(use_tls=True)
        self.assert_secret(shell, False)
        self.assert_secret(clients, False)
        # What crossed the proxies is TLS: each connection opens with a
        # handshake record (content type 22) and carried the claim's traffic.
        for up, down in shell + clients:
            if up:
                self.assertEqual(up[0], 22, up[:16])
        self.assertGreater(sum(len(u) + len(d) for u, d in clients), 10000)


class TlsRoleTest(unittest.TestCase):
    """A berthd --server started with a client certificate (of the cluster's
    CA) does not join: it cannot prove to the servers' replicated logs that
    it holds a server certificate (tls/proof.hpp), so its hello and Raft
    messages are ignored; the servers and it log why."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-tls-role-")
        self.saved_env = {k: os.environ.get(k) for k in TLS_ENV}
        self.addCleanup(self.cleanup)
        self.certs, _ = make_certificates(self.tmp)
        d = self.certs
        os.environ["BERTH_CACERT"] = d + "/berth-agent-ca.pem"
        os.environ["BERTH_CLIENT_CERT"] = d + "/global-cli-berth.pem"
        os.environ["BERTH_CLIENT_KEY"] = d + "/global-cli-berth-key.pem"
        self.cluster = Cluster(self.tmp, server_args=tls_args(d, "server"))
        self.cluster.start()

    def cleanup(self):
        self.cluster.stop()
        for k, v in self.saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.tmp, ignore_errors=True)

    def rogue_raft_port(self):
        """A free port whose address sorts before every server's: with TLS
        only the smaller raft address connects, so the rogue is the one that
        dials the servers (and, unchecked, would announce itself to them)."""
        servers = ["127.0.0.1:%d" % s.raft_port for s in self.cluster.servers]
        for port in range(10000, 19999, 37):
            if all("127.0.0.1:%d" % port < a for a in servers):
                try:
                    with socket.socket() as sk:
                        sk.bind(("127.0.0.1", port))
                    if reserve(port):
                        return port
                except OSError:
                    continue
        self.skipTest("no free port below the servers' raft ports")

    def test_a_client_certificate_cannot_join_as_a_server(self):
        port = self.rogue_raft_port()
        rogue = Server(self.tmp, "rogue", free_port(), port,
                       ["127.0.0.1:%d" % s.raft_port for s in self.cluster.servers],
                       extra_args=tls_args(self.certs, "client"))
        self.cluster.processes.append(rogue)
        rogue.start()
        why = "is not a server certificate of this cluster's CA"

        def logged(path):
            with open(path) as f:
                return why in f.read()

        deadline = time.time() + 30
        while time.time() < deadline:
            if logged(rogue.log_path) and any(logged(s.log_path) for s in self.cluster.servers):
                break
            time.sleep(0.2)
        self.assertTrue(logged(rogue.log_path), "the rogue's log does not say why")
        refusing = [s for s in self.cluster.servers if logged(s.log_path)]
        self.assertTrue(refusing, "no server logged the refusal")
        with open(refusing[0].log_path) as f:
            line = next(l for l in f if why in l)
        self.assertIn("rogue", line)
        self.assertIn("client.global.berth", line)
        # Had its hello counted, the leader would have added it by now (a
        # membership change within a tick); it is never listed.
        leader = self.cluster.wait_leader()
        answers = 0
        deadline = time.time() + 30
        while answers < 10 and time.time() < deadline:
            r = run([BERTH, "--address", leader.address, "--json", "--timeout", "10",
                     "operator", "raft", "list-peers"])
            if r.returncode == 5:  # unavailable (an election): retry, as a script would
                time.sleep(0.2)
                continue
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("rogue", [p["id"] for p in json.loads(r.stdout)])
            answers += 1
            time.sleep(0.2)
        self.assertEqual(answers, 10, "list-peers did not answer")


if __name__ == "__main__":
    unittest.main(verbosity=2)
