"""The fence against deposed leaders rises through heartbeats alone: a
3-server cluster and a client as real processes on 127.0.0.1.  After each
leader change (a leadership transfer, then the new leader SIGKILLed) the
client's recorded term (client.db) reaches the new leader's term while no
leader has sent it a single storage call, so a deposed leader's late call
would be refused before the new leader ever talks to that node."""

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
import unittest

from cluster import Cluster
from harness import berth

SCALE = float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))
# What a client asks a plugin on its own (fingerprints): no storage change.
PROBE_CALLS = {"GetPluginInfo", "Probe", "ControllerGetCapabilities", "NodeGetCapabilities",
               "NodeGetInfo", "GetPluginCapabilities", "GroupControllerGetCapabilities"}


class FenceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-fence-")
        self.cluster = Cluster(self.tmp)
        self.addCleanup(self.cleanup)
        self.cluster.start()
        self.plugin, self.client = self.cluster.add_client("c1")

    def cleanup(self):
        self.cluster.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def client_term(self):
        """The term the client fences with, as it recorded it."""
        db = sqlite3.connect(os.path.join(self.tmp, "c1", "client.db"), timeout=5)
        try:
            row = db.execute("SELECT value FROM meta WHERE key='leader_term'").fetchone()
            return row[0] if row else 0
        finally:
            db.close()

    def leader_term(self, exclude=None):
        """The term of the leader that the live servers agree on."""
        deadline = time.time() + 20 * SCALE
        while time.time() < deadline:
            via = next(s.address for s in self.cluster.servers if s.alive() and s is not exclude)
            r = berth(via, "--json", "--timeout", "5", "operator", "raft", "list-peers")
            if r.code == 0:
                leaders = [p for p in r.json() if p["role"] == "leader"]
                if len(leaders) == 1 and leaders[0]["id"] != (exclude.name if exclude else None):
                    return leaders[0]["id"], leaders[0]["term"]
            time.sleep(0.1)
        self.fail("no single leader within 20 s")

    def wait_client_term(self, term):
        deadline = time.time() + 20 * SCALE
        while time.time() < deadline:
            if self.client_term() == term:
                return
            time.sleep(0.05)
        self.fail("the client's fence stayed at term %d, not %d" % (self.client_term(), term))

    def storage_calls(self):
        """Every plugin call that is not a fingerprint's."""
        if not os.path.exists(self.plugin.call_log):
            return []
        with open(self.plugin.call_log) as f:
            calls = [json.loads(l)["method"] for l in f if l.strip()]
        return [c for c in calls if c not in PROBE_CALLS]

    def test_fence_rises_through_heartbeats_alone(self):
        name, first = self.leader_term()
        self.wait_client_term(first)

        # A leadership transfer: a new term with a leader.
        target = next(s for s in self.cluster.servers if s.name != name)
        r = berth(self.cluster.any_address(), "--timeout", "10", "operator", "raft",
                  "transfer-leadership", target.name)
        self.assertEqual(r.code, 0, r)
        deadline = time.time() + 20 * SCALE
        while True:
            name2, second = self.leader_term()
            if second > first:
                break
            self.assertLess(time.time(), deadline, "no new leader term after the transfer")
            time.sleep(0.1)
        self.wait_client_term(second)

        # The new leader dies: the survivors elect another in a newer term.
        dead = next(s for s in self.cluster.servers if s.name == name2)
        dead.kill()
        name3, third = self.leader_term(exclude=dead)
        self.assertGreater(third, second)
        self.wait_client_term(third)

        # No leader asked the client for anything: the heartbeats did it.
        self.assertEqual(self.storage_calls(), [])
        # And the fence is what the node enforces: the term never went down.
        self.assertEqual(self.client_term(), third)


if __name__ == "__main__":
    unittest.main(verbosity=2)
