"""deploy/netns/netns-cluster.sh: the cluster of deploy/config/ (unchanged
addresses and ports) with every host in its own network namespace, joined by
a bridge; a volume is claimed on both clients across the bridge, and `down`
leaves no process, mount or namespace. Root only; skipped otherwise."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import BERTH, BERTHD  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(REPO, "deploy", "netns", "netns-cluster.sh")
HOSTPATH = os.environ.get("BERTH_HOSTPATH_BIN", "berth-hostpath")


def netns_usable():
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not shutil.which("ip") or not shutil.which("nsenter"):
        return "needs ip (iproute2) and nsenter (util-linux)"
    probe = "berthprobe%d" % os.getpid()
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return "ip netns does not work here: " + r.stderr.strip()
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


WHY_NOT = netns_usable()


def namespaces():
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [l.split()[0] for l in r.stdout.splitlines() if l.strip()]


@unittest.skipIf(WHY_NOT is not None, WHY_NOT or "")
class NetnsClusterTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-netns-")
        self.dir = os.path.join(self.tmp, "cluster")
        self.prefix = "bt%d-" % (os.getpid() % 100000)
        self.env = dict(os.environ)
        for var, path in (("BERTHD", BERTHD), ("BERTH", BERTH), ("BERTH_HOSTPATH", HOSTPATH)):
            if os.sep in path:
                self.env[var] = path

    def tearDown(self):
        subprocess.run([SCRIPT, "down", "--dir", self.dir], env=self.env, capture_output=True,
                       timeout=60)
        for ns in namespaces():  # even if down failed
            if ns.startswith(self.prefix):
                subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        with open("/proc/self/mounts") as f:
            for m in reversed([l.split()[1] for l in f if l.split()[1].startswith(self.tmp)]):
                subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def script(self, *args, expect=0):
        r = subprocess.run([SCRIPT] + list(args) + ["--dir", self.dir], env=self.env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, expect, "%s\nstdout: %s\nstderr: %s" % (
            args, r.stdout, r.stderr))
        return r

    def shell(self, ns, *args, stdin=None):
        """berth run inside namespace ns (the cluster's addresses exist only there)."""
        r = subprocess.run(["ip", "netns", "exec", self.prefix + ns, BERTH, "--address",
                            "10.77.0.12:4747", "--timeout", "20"] + list(args), input=stdin,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, "%s\nstdout: %s\nstderr: %s" % (
            args, r.stdout, r.stderr))
        return r

    def test_cluster_across_namespaces(self):
        started = time.time()
        self.script("up", "--prefix", self.prefix)
        ours = sorted(ns for ns in namespaces() if ns.startswith(self.prefix))
        self.assertEqual(ours, sorted(self.prefix + h for h in ("s1", "s2", "s3", "c1", "c2",
                                                                   "br")))
        # No 10.77.0.0/24 address in the root namespace.
        root = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
        self.assertNotIn("10.77.0.", root)

        peers = json.loads(self.shell("c2", "--json", "operator", "raft", "list-peers").stdout)
        self.assertEqual(sorted(p["id"] for p in peers), ["s1", "s2", "s3"])
        self.assertEqual(sum(p["role"] == "leader" for p in peers), 1)
        self.assertEqual(sorted(p["address"].split(":")[0] for p in peers),
                         ["10.77.0.11", "10.77.0.12", "10.77.0.13"], peers)
        spec = {"id": "v1", "plugin_id": "hostpath", "capabilities": [
            {"access_mode": "multi-node-multi-writer", "attachment_mode": "file-system"}]}
        self.shell("c1", "volume", "create", "-", stdin=json.dumps(spec))
        for i, node in enumerate(("c1", "c2")):
            claim = json.loads(self.shell(node, "--json", "volume", "claim", "v1", "--alloc",
                                          "a%d" % i, "--node", node).stdout)
            self.assertTrue(os.path.isdir(claim["published_path"]), claim)
        # A client's metrics answer on its namespace address.
        r = subprocess.run(["ip", "netns", "exec", self.prefix + "s1", sys.executable, "-c",
                            "import urllib.request;print(urllib.request.urlopen("
                            "'http://10.77.0.21:4746/metrics', timeout=5).read().decode())"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("berth_log_last_index", r.stdout)
        self.assertIn("running", self.script("status").stdout)

        self.script("down")
        self.assertEqual([ns for ns in namespaces() if ns.startswith(self.prefix)], [])
        with open("/proc/self/mounts") as f:
            self.assertEqual([l for l in f if self.tmp in l], [])
        for name in ("s1", "s2", "s3", "c1", "c2", "hostpath-c1", "hostpath-c2"):
            self.assertFalse(os.path.exists(os.path.join(self.dir, name + ".pid")))
        self.script("down")  # idempotent
        print("netns test took %.1fs" % (time.time() - started), file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
