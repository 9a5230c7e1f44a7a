"""Garbage collection (issue 12, part 6) on a 3-server cluster with real
clients on 127.0.0.1, through the shell: `berth system gc` collects terminal
allocs that hold no claim and down nodes with nothing left on them, never a
running alloc, a lost alloc of a node still down, or that node; berthd
collects on its own after --alloc-gc-threshold; bad thresholds are refused."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

from cluster import ClusterTestCase
from harness import BERTHD, SHORT_FENCE, TIME_SCALE, berth


def volume_spec(vid):
    return json.dumps({"id": vid, "plugin_id": "hostpath",
                       "capabilities": [{"access_mode": "single-node-writer",
                                         "attachment_mode": "file-system"}]})


class GcBase(ClusterTestCase):
    PREFIX = "berth-gc-"

    def alloc_state(self, alloc):
        r = berth(self.via, "--json", "alloc", "status", alloc)
        return r.json()["state"] if r.code == 0 else ("gone" if r.code == 3 else None)

    def node_status(self, node):
        r = berth(self.via, "--json", "node", "status", node)
        return r.json()["status"] if r.code == 0 else ("gone" if r.code == 3 else None)

    def claims(self, vid):
        return self.b("--json", "volume", "status", vid).json()["claims"]

    def healthy_nodes(self):
        r = berth(self.via, "--json", "plugin", "status", "hostpath")
        return r.json()["nodes_healthy"] if r.code == 0 else 0


class SystemGcTest(GcBase):
    # (6 s, a 2 s lease, and scaled: a 0.7 s lease lapsed on c1, a live client,
    # beside two busy loops, and its fence ended alloc busy under the test)
    SERVER_ARGS = ("--node-down-timeout", "%g" % (6 * max(TIME_SCALE, 1)),
                   "--alloc-gc-threshold", "never",
                   "--node-gc-threshold", "never") + SHORT_FENCE
    CLIENT_ARGS = SHORT_FENCE

    def test_system_gc_collects_only_what_nothing_needs(self):
        shared = os.path.join(self.tmp, "shared-root")
        clients = {}
        for name in ("c1", "c2", "c3"):
            peers = [a for n in ("c1", "c2", "c3") if n != name for a in ("--peer-node", "csi-" + n)]
            _, clients[name] = self.cluster.add_client(name, tuple(peers), shared)
        c2, c3 = clients["c2"], clients["c3"]
        self.wait(lambda: self.healthy_nodes() == 3, "three node plugins healthy")
        for vid in ("v1", "v2", "v3"):
            self.b("volume", "create", "-", stdin=volume_spec(vid))

        self.b("alloc", "run", "--node", "c1", "--id", "done", "--volume", "data=v1", "--",
               "true")
        self.b("alloc", "run", "--node", "c1", "--id", "busy", "--volume", "data=v2", "--",
               "sleep", "600")
        self.b("alloc", "run", "--node", "c3", "--id", "far", "--volume", "data=v3", "--",
               "sleep", "600")
        self.wait(lambda: self.alloc_state("done") == "complete" and self.claims("v1") == [],
                  "alloc done completes and its claim is freed")

        # c2 (no allocs) and c3 (alloc far) go down.
        c2.kill()
        c3.kill()
        self.wait(lambda: self.node_status("c2") == "down" and self.node_status("c3") == "down",
                  "c2 and c3 marked down")
        self.wait(lambda: self.alloc_state("far") == "lost", "alloc far lost")

        r = self.b("system", "gc")
        self.assertIn("collected 1 alloc and 1 node", r.out)
        self.assertEqual(self.alloc_state("done"), "gone")
        self.assertEqual(self.node_status("c2"), "gone")
        # A running alloc, and a lost alloc with its node still down, stay.
        self.assertEqual(self.alloc_state("busy"), "running")
        self.assertEqual(self.alloc_state("far"), "lost")
        self.assertEqual(self.node_status("c3"), "down")
        self.assertEqual(self.node_status("c1"), "ready")
        self.assertEqual(len(self.claims("v2")), 1)
        self.b("volume", "status", "v1")  # volumes are never collected
        # Safe to repeat: the second finds nothing.
        self.assertIn("nothing to collect", self.b("system", "gc").out)

        # The deletions are committed changes like any other: on the stream.
        last = max(p.get("commit_index", 0)
                   for p in self.b("--json", "operator", "raft", "list-peers").json())
        events = [json.loads(l) for l in
                  self.b("event", "stream", "--index", "1", "--until-index",
                         str(last)).out.splitlines() if l]
        deleted = {(e["type"], e["key"]) for e in events}
        self.assertIn(("AllocDeleted", "done"), deleted)
        self.assertIn(("NodeDeregistered", "c2"), deleted)

        # c3 comes back: it is told to stop far, and then far may go.
        c3.start()
        self.wait(lambda: self.node_status("c3") == "ready", "c3 ready again")
        self.wait(lambda: "collected 1 alloc" in self.b("system", "gc").out,
                  "far collected once its node is back")
        self.assertEqual(self.alloc_state("far"), "gone")
        self.assertEqual(self.claims("v3"), [])
        # A collected node that comes back registers again.
        c2.start()
        self.wait(lambda: self.node_status("c2") == "ready", "c2 registered again")


class TimedGcTest(GcBase):
    SERVER_ARGS = ("--alloc-gc-threshold", "1s")

    def test_terminal_allocs_go_after_the_threshold_running_ones_stay(self):
        self.cluster.add_client("c1")
        self.wait(lambda: self.healthy_nodes() == 1, "the node plugin healthy")
        for vid in ("v1", "v2"):
            self.b("volume", "create", "-", stdin=volume_spec(vid))
        self.b("alloc", "run", "--node", "c1", "--id", "short", "--volume", "data=v1", "--",
               "true")
        self.b("alloc", "run", "--node", "c1", "--id", "long", "--volume", "data=v2", "--",
               "sleep", "600")
        self.wait(lambda: self.alloc_state("short") == "gone", "short collected on its own",
                  timeout=30)
        self.assertEqual(self.alloc_state("long"), "running")
        self.assertEqual(self.claims("v1"), [])
        with open(self.cluster.leader().log_path) as f:
            self.assertIn("garbage collected", f.read())


class BadThresholdTest(unittest.TestCase):
    def test_a_threshold_that_is_not_a_duration_is_refused_naming_the_flag(self):
        tmp = tempfile.mkdtemp(prefix="berth-gc-bad-")
        self.addCleanup(shutil.rmtree, tmp, True)
        for flag, value in (("--alloc-gc-threshold", "soon"), ("--node-gc-threshold", "5")):
            r = subprocess.run([BERTHD, "--dev", "--data-dir", os.path.join(tmp, "d"), "--port",
                                "0", "--metrics-port", "0", flag, value],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r)
            self.assertIn(flag, r.stderr)
            self.assertIn("24h", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "d")))


if __name__ == "__main__":
    unittest.main()
