"""deploy/: local-cluster.sh brings up a 3-server, 2-client cluster from the
example config files and takes it down without leaving a process or a mount;
every key of the example configs is a berthd option and berthd starts from
them; the systemd units and the Prometheus configuration and rules pass
their tools' checks."""

import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BERTH, BERTHD  # noqa: E402
from cluster import ephemeral_range, reserve  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEPLOY = os.path.join(REPO, "deploy")
LOCAL_CLUSTER = os.path.join(DEPLOY, "local-cluster.sh")
HOSTPATH = os.environ.get("BERTH_HOSTPATH_BIN", "berth-hostpath")
VOLUME = {"id": "shared", "plugin_id": "hostpath", "capabilities": [
    {"access_mode": "multi-node-multi-writer", "attachment_mode": "file-system"}]}


def free_range(n):
    """A base port such that base..base+n-1 are all free on 127.0.0.1 and
    reserved for this test process, below the kernel's ephemeral range (see
    cluster.free_port)."""
    low, _ = ephemeral_range()
    first = 10000 if low > 12000 else 1024
    for _ in range(400):
        base = random.randrange(first, low - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        if all(reserve(p) for p in range(base, base + n)):
            return base
    raise RuntimeError("no free range of %d ports" % n)


def env():
    """The scripts' environment: the binaries under test (a bare name is left to PATH)."""
    e = dict(os.environ)
    for var, path in (("BERTHD", BERTHD), ("BERTH", BERTH), ("BERTH_HOSTPATH", HOSTPATH)):
        if os.sep in path:
            e[var] = path
    return e


def processes_under(path):
    """pids of processes whose command line mentions path."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if path.encode() in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def running(pid):
    """pid exists and is not a zombie (an orphan nobody reaped yet)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def mounts_under(path):
    with open("/proc/self/mounts") as f:
        return [l.split()[1] for l in f if l.split()[1].startswith(path + "/")]


class LocalClusterTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-deploy-")
        self.dir = os.path.join(self.tmp, "cluster")
        self.base = free_range(11)

    def tearDown(self):
        # down is idempotent; make sure nothing survives a failed test.
        subprocess.run([LOCAL_CLUSTER, "down", "--dir", self.dir], env=env(),
                       capture_output=True, timeout=60)
        for pid in processes_under(self.dir):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        for m in reversed(mounts_under(self.dir)):
            subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def script(self, *args, expect=0, timeout=120):
        r = subprocess.run([LOCAL_CLUSTER] + list(args) + ["--dir", self.dir], env=env(),
                           capture_output=True, text=True, timeout=timeout)
        self.assertEqual(r.returncode, expect, "%s\nstdout: %s\nstderr: %s" % (
            args, r.stdout, r.stderr))
        return r

    def shell(self, *args, stdin=None, expect=0):
        r = subprocess.run([BERTH, "--address", "127.0.0.1:%d" % self.base, "--timeout", "20"]
                           + list(args), input=stdin, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, expect, "%s\nstdout: %s\nstderr: %s" % (
            args, r.stdout, r.stderr))
        return r

    def test_up_status_claims_on_both_clients_down(self):
        started = time.time()
        r = self.script("up", "--base-port", str(self.base))
        self.assertIn("BERTH_ADDRESS=127.0.0.1:%d" % self.base, r.stdout)
        print("local-cluster up took %.1fs" % (time.time() - started), file=sys.stderr)

        # status: every process running, and the peers table with a leader.
        status = self.script("status").stdout
        for name in ("s1", "s2", "s3", "c1", "c2", "hostpath-c1", "hostpath-c2"):
            self.assertRegex(status, r"(?m)^%s\s+\d+\s+running" % re.escape(name))
        self.assertRegex(status, r"NAME\s+ID\s+ADDRESS\s+ROLE")
        self.assertEqual(len(re.findall(r"\bleader\b", status)), 1, status)
        peers = json.loads(self.shell("--json", "operator", "raft", "list-peers").stdout)
        self.assertEqual(sorted(p["id"] for p in peers), ["s1", "s2", "s3"])
        self.assertEqual(sum(p["role"] == "leader" for p in peers), 1)

        # Both clients' plugins are healthy, and one volume is claimed on each.
        plugin = json.loads(self.shell("--json", "plugin", "status", "hostpath").stdout)
        self.assertEqual(plugin["nodes_healthy"], 2, plugin)
        self.shell("volume", "create", "-", stdin=json.dumps(VOLUME))
        c1 = json.loads(self.shell("--json", "volume", "claim", "shared", "--alloc", "a1",
                                   "--node", "c1").stdout)
        c2 = json.loads(self.shell("--json", "volume", "claim", "shared", "--alloc", "a2",
                                   "--node", "c2").stdout)
        p1, p2 = c1["published_path"], c2["published_path"]
        self.assertTrue(p1.startswith(self.dir + "/c1/"), p1)
        self.assertTrue(p2.startswith(self.dir + "/c2/"), p2)
        # The shared root: what c1 writes, c2 reads.
        with open(os.path.join(p1, "hello"), "w") as f:
            f.write("from c1")
        with open(os.path.join(p2, "hello")) as f:
            self.assertEqual(f.read(), "from c1")
        if os.geteuid() == 0:  # berth-hostpath bind-mounts as root
            mounted = mounts_under(self.dir)
            self.assertIn(p1, mounted)
            self.assertIn(p2, mounted)
        vol = json.loads(self.shell("--json", "volume", "status", "shared").stdout)
        self.assertEqual(sorted(c["alloc_id"] for c in vol["claims"]), ["a1", "a2"], vol)

        # down with the claims still held: nothing may remain.
        pids = [int(open(os.path.join(self.dir, n + ".pid")).read())
                for n in ("s1", "s2", "s3", "c1", "c2", "hostpath-c1", "hostpath-c2")]
        r = self.script("down")
        self.assertIn("stopped 7 processes", r.stdout)
        for pid in pids:
            self.assertFalse(running(pid), "pid %d still runs" % pid)
        self.assertEqual(processes_under(self.dir), [])
        self.assertEqual(mounts_under(self.dir), [])
        # Idempotent, and status says it is down.
        self.assertIn("stopped 0 processes", self.script("down").stdout)
        self.assertRegex(self.script("status", expect=1).stdout, r"(?m)^s1\s+-\s+stopped")

    def test_up_with_tls(self):
        """--tls: berth tls makes the certificates, every process runs with
        them; a shell without a certificate is refused, one with DIR/env's
        sees the three servers and both clients' plugins.  (Claims through
        a TLS cluster of several servers: integration.tls.)"""
        started = time.time()
        r = self.script("up", "--base-port", str(self.base), "--tls")
        print("local-cluster up --tls took %.1fs" % (time.time() - started), file=sys.stderr)
        self.assertIn("mutual TLS", r.stdout)
        tls_dir = os.path.join(self.dir, "tls")
        for f in ("berth-agent-ca.pem", "global-server-berth.pem", "global-client-berth.pem",
                  "global-cli-berth.pem"):
            self.assertTrue(os.path.exists(os.path.join(tls_dir, f)), f)
        plain = {k: v for k, v in env().items()
                 if k not in ("BERTH_CACERT", "BERTH_CLIENT_CERT", "BERTH_CLIENT_KEY")}
        refused = subprocess.run([BERTH, "--address", "127.0.0.1:%d" % self.base, "--timeout",
                                  "10", "status"], env=plain, capture_output=True, text=True,
                                 timeout=60)
        self.assertEqual(refused.returncode, 5, refused)
        self.assertIn("requires TLS", refused.stderr)
        tls_env = dict(plain)
        with open(os.path.join(self.dir, "env")) as f:
            for m in re.finditer(r"export (BERTH_\w+)=(\S+)", f.read()):
                tls_env[m.group(1)] = m.group(2)
        self.assertIn("BERTH_CLIENT_CERT", tls_env)

        def b(port, *args, stdin=None):
            """Exit 5 (unavailable: retry, e.g. during the first
            election) is retried within a minute, as a script would."""
            until = time.time() + 60
            while True:
                r = subprocess.run([BERTH, "--address", "127.0.0.1:%d" % port, "--json",
                                    "--timeout", "30"] + list(args), input=stdin, env=tls_env,
                                   capture_output=True, text=True, timeout=90)
                if r.returncode != 5 or time.time() > until:
                    break
                time.sleep(0.2)
            self.assertEqual(r.returncode, 0, "%s\n%s\n%s" % (args, r.stdout, r.stderr))
            return json.loads(r.stdout) if r.stdout.strip() else None

        # Through the leader (forwarding over TLS: integration.tls).
        shells = [self.base + 3 * i for i in range(3)]
        deadline = time.time() + 60
        while True:
            roles = {}
            for port in shells:
                r = subprocess.run([BERTH, "--address", "127.0.0.1:%d" % port, "--json",
                                    "--timeout", "5", "status"], env=tls_env,
                                   capture_output=True, text=True, timeout=60)
                if r.returncode == 0:
                    roles[port] = json.loads(r.stdout)["leader"]
            if sum(roles.values()) == 1 or time.time() > deadline:
                break
            time.sleep(0.2)
        leader = next(p for p, leads in roles.items() if leads)
        while True:
            peers = b(leader, "operator", "raft", "list-peers")
            if sorted(p["role"] for p in peers) == ["follower", "follower", "leader"] or \
                    time.time() > deadline:
                break
            time.sleep(0.2)  # an election in progress
        self.assertEqual(sorted(p["id"] for p in peers), ["s1", "s2", "s3"])
        self.assertEqual(sorted(p["role"] for p in peers), ["follower", "follower", "leader"])
        # Both clients registered their plugin with the leader over TLS.
        while True:
            plugin = b(leader, "plugin", "status", "hostpath")
            if plugin["nodes_healthy"] == 2 or time.time() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(plugin["nodes_healthy"], 2, plugin)
        self.assertRegex(self.script("status").stdout, r"\bleader\b")
        self.assertIn("stopped 7 processes", self.script("down").stdout)
        self.assertEqual(processes_under(self.dir), [])

    def test_usage(self):
        r = subprocess.run([LOCAL_CLUSTER], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage:", r.stderr)
        r = subprocess.run([LOCAL_CLUSTER, "sideways"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown command 'sideways'", r.stderr)


class ConfigFilesTest(unittest.TestCase):
    CONFIGS = ["server1.toml", "server2.toml", "server3.toml", "client1.toml", "client2.toml"]

    def test_every_key_is_a_berthd_option(self):
        help_text = subprocess.run([BERTHD, "--help"], capture_output=True, text=True).stdout
        for name in self.CONFIGS:
            with open(os.path.join(DEPLOY, "config", name), "rb") as f:
                config = tomllib.load(f)
            for key in config:
                self.assertRegex(help_text, r"--%s\b" % re.escape(key),
                                 "%s: %s is not a berthd option" % (name, key))

    def start(self, tmp, argv):
        log = open(os.path.join(tmp, "berthd.log"), "w")
        proc = subprocess.Popen([BERTHD] + argv, stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        self.addCleanup(lambda: (proc.poll() is None and proc.kill(), proc.wait(),
                                 proc.stdout.close()))
        banner = proc.stdout.readline()
        with open(os.path.join(tmp, "berthd.log")) as f:
            self.assertTrue(banner.startswith("berthd:"), "%r %s" % (banner, f.read()))
        return proc, banner

    def test_berthd_starts_from_the_example_configs(self):
        tmp = tempfile.mkdtemp(prefix="berth-config-")
        self.addCleanup(shutil.rmtree, tmp, True)
        # server1.toml with only addresses, ports and the data dir overridden; a
        # single-member cluster so that it elects itself.
        port, raft = free_range(2), None
        raft = port + 1
        proc, banner = self.start(tmp, [
            "--config", os.path.join(DEPLOY, "config", "server1.toml"),
            "--data-dir", os.path.join(tmp, "s1"), "--bind", "127.0.0.1", "--port", str(port),
            "--raft-port", str(raft), "--metrics-bind", "127.0.0.1", "--metrics-port", "0",
            "--bootstrap-expect", "1", "--join", "127.0.0.1:%d" % raft])
        self.assertRegex(banner, r"^berthd: server s1 serving the shell on 127\.0\.0\.1:%d, "
                                 r"raft on 127\.0\.0\.1:%d" % (port, raft))
        deadline = time.time() + 20
        status = None
        while time.time() < deadline:
            r = subprocess.run([BERTH, "--address", "127.0.0.1:%d" % port, "--json", "--timeout",
                                "2", "status"], capture_output=True, text=True)
            if r.returncode == 0:
                status = json.loads(r.stdout)
                if status.get("leader"):
                    break
            time.sleep(0.1)
        self.assertIsNotNone(status, "the server from server1.toml never answered")
        self.assertEqual(status["node_name"], "s1")
        # client2.toml: its name and plugin come from the file.
        proc, banner = self.start(tmp, [
            "--config", os.path.join(DEPLOY, "config", "client2.toml"),
            "--data-dir", os.path.join(tmp, "c2"), "--csi-root", os.path.join(tmp, "c2", "csi"),
            "--servers", "127.0.0.1:%d" % port, "--metrics-bind", "127.0.0.1",
            "--metrics-port", "0"])
        self.assertRegex(banner, r"^berthd: client c2\b.*node c2 with plugins: hostpath")


class ToolChecksTest(unittest.TestCase):
    def test_systemd_units_verify(self):
        if not shutil.which("systemd-analyze"):
            self.skipTest("systemd-analyze is not installed")
        tmp = tempfile.mkdtemp(prefix="berth-units-")
        self.addCleanup(shutil.rmtree, tmp, True)
        # verify checks that ExecStart's binary exists: point it at the build.
        bins = {"berthd": BERTHD, "berth-hostpath": HOSTPATH}
        env_file = os.path.join(tmp, "hostpath.env")
        shutil.copy(os.path.join(DEPLOY, "systemd", "hostpath.env"), env_file)
        units = []
        for unit in ("berth-server.service", "berth-client.service", "berth-hostpath.service"):
            with open(os.path.join(DEPLOY, "systemd", unit)) as f:
                text = f.read()
            for name, path in bins.items():
                text = text.replace("/usr/local/bin/%s " % name, shutil.which(path) + " ")
            text = text.replace("/etc/berth/hostpath.env", env_file)
            self.assertIn("Restart=on-failure", text)
            self.assertIn("NoNewPrivileges=yes", text)
            self.assertIn("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6", text)
            # A client's restart leaves its allocs' supervisors and commands
            # running (issue 59, item 5: test_agent_restart.py); the others
            # stop whole.
            kill_modes = [l for l in text.splitlines() if l.startswith("KillMode=")]
            self.assertEqual(kill_modes,
                             ["KillMode=process"] if unit == "berth-client.service" else [], unit)
            with open(os.path.join(tmp, unit), "w") as f:
                f.write(text)
            units.append(os.path.join(tmp, unit))
        r = subprocess.run(["systemd-analyze", "verify"] + units, capture_output=True, text=True,
                           cwd=tmp)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("berth", r.stderr, r.stderr)  # no warning about our units

    def test_prometheus_config_and_rules(self):
        if not shutil.which("promtool"):
            self.skipTest("promtool is not installed (Debian package prometheus)")
        for args in (["check", "config", "prometheus.yml"], ["check", "rules", "rules.yml"],
                     ["test", "rules", "rules_test.yml"]):
            r = subprocess.run(["promtool"] + args, cwd=os.path.join(DEPLOY, "prometheus"),
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, "%s\n%s%s" % (args, r.stdout, r.stderr))


if __name__ == "__main__":
    unittest.main(verbosity=2)
