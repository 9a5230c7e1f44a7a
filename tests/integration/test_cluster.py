"""A 3-server cluster with a client, as real processes on 127.0.0.1: Raft
elects a leader, any server serves the shell (followers forward), the leader
is killed with SIGKILL during a stream of claims and releases, a new leader
serves within seconds, nothing acknowledged is lost, and all servers end
with identical state tables at the same applied index."""

import json
import os
import re
import random
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

from cluster import Cluster
from harness import berth

VOLUME = {"plugin_id": "hostpath", "capabilities": [
    {"access_mode": "multi-node-multi-writer", "attachment_mode": "file-system"}]}


class ClusterTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-cluster-")
        # Snapshots go to a catching-up server in pieces of 4 KiB (1 MiB by
        # default), so that even this small state takes several.
        self.cluster = Cluster(self.tmp, server_args=("--snapshot-piece-size", "4096"))
        # Cleanups run even when setUp fails (tearDown would not).
        self.addCleanup(self.cluster.stop)
        self.cluster.start()
        self.plugin, self.client = self.cluster.add_client("c1")

    def tearDown(self):
        self.cluster.stop()
        with open("/proc/self/mounts") as f:
            for m in reversed([l.split()[1] for l in f if self.tmp in l.split()[1]]):
                subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def shell(self, *args, stdin=None, expect=0, via=None):
        # Exit 5 (unavailable: e.g. the leader has not yet heard the client's
        # registration, so the plugin has no controller on a connected node)
        # is retryable by definition: a script retries it, so do we, briefly.
        deadline = time.time() + 10 * float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))
        while True:
            r = berth(via or self.cluster.any_address(), "--timeout", "20", *args, stdin=stdin)
            if r.code != 5 or expect == 5 or time.time() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(r.code, expect, r)
        return r

    def wait_plugin(self):
        # Sanitizer builds run several times slower (scripts/sanitize-test.sh
        # sets BERTH_TEST_TIME_SCALE).
        deadline = time.time() + 20 * float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))
        while time.time() < deadline:
            r = berth(self.cluster.any_address(), "--json", "plugin", "status", "hostpath")
            if r.code == 0 and r.json()["nodes_healthy"] == 1 and \
                    r.json()["controllers_healthy"] == 1:
                return
            time.sleep(0.1)
        self.fail("the client's plugin never became healthy")

    def test_elects_a_leader_and_every_server_serves_the_shell(self):
        # One leader that every server follows in one term: a state the
        # cluster settles in (on a busy machine a server may still be one
        # election behind right after the start).
        deadline = time.time() + 20 * float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))
        while True:
            peers = self.cluster.peers()
            settled = sum(p["role"] == "leader" for p in peers) == 1 and \
                len({p["term"] for p in peers}) == 1
            if settled or time.time() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(sorted(p["id"] for p in peers), ["s1", "s2", "s3"])
        self.assertEqual(sum(p["role"] == "leader" for p in peers), 1, peers)
        self.assertEqual(len({p["term"] for p in peers}), 1, peers)
        table = self.shell("operator", "raft", "list-peers").out
        self.assertRegex(table, r"NAME\s+ID\s+ADDRESS\s+ROLE\s+TERM\s+LAST INDEX\s+APPLIED INDEX")
        self.wait_plugin()
        leader = self.cluster.leader()
        follower = next(s for s in self.cluster.servers if s is not leader)
        # A write through a follower is forwarded to the leader.
        created = self.shell("--json", "volume", "create", "-", via=follower.address,
                             stdin=json.dumps(dict(VOLUME, id="v1"))).json()
        self.assertTrue(created["external_id"].startswith("hp-"))
        claim = self.shell("--json", "volume", "claim", "v1", "--alloc", "a1", "--node", "c1",
                           via=follower.address).json()
        self.assertTrue(os.path.isdir(claim["published_path"]))
        for s in self.cluster.servers:
            status = self.shell("--json", "status", via=s.address).json()
            self.assertEqual(status["leader"], s is leader)
            stale = self.shell("--json", "volume", "status", "--stale", via=s.address).json()
            if stale:  # a follower may lag a few milliseconds
                self.assertEqual(stale[0]["id"], "v1")
        self.shell("volume", "release", "v1", "--alloc", "a1", via=follower.address)

    def test_leader_killed_during_claims_loses_nothing_acknowledged(self):
        self.wait_plugin()
        for v in ("v1", "v2"):
            self.shell("volume", "create", "-", stdin=json.dumps(dict(VOLUME, id=v)))
        acked = {}          # alloc -> (volume, "claimed" | "released")
        lock = threading.Lock()
        stop = threading.Event()
        killed_at = [None]
        first_after_kill = [None]

        def worker(w):
            rnd = random.Random(w)
            i = 0
            while not stop.is_set():
                alloc, vol = "w%d-%d" % (w, i), "v%d" % (1 + i % 2)
                i += 1
                live = [s.address for s in self.cluster.servers if s.alive()]
                r = berth(rnd.choice(live), "--timeout", "5", "volume", "claim", vol,
                          "--alloc", alloc, "--node", "c1", timeout=30)
                if r.code != 0:
                    continue
                with lock:
                    acked[alloc] = (vol, "claimed")
                    if killed_at[0] and first_after_kill[0] is None:
                        first_after_kill[0] = time.time() - killed_at[0]
                if rnd.random() < 0.5:
                    r = berth(rnd.choice(live), "--timeout", "5", "volume", "release", vol,
                              "--alloc", alloc, timeout=30)
                    with lock:
                        # An unacknowledged release may still have happened
                        # (e.g. its answer was lost with the leader).
                        acked[alloc] = (vol, "released" if r.code == 0 else "unknown")

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(3)]
        for t in threads:
            t.start()
        try:
            deadline = time.time() + 60
            while len(acked) < 15 and time.time() < deadline:
                time.sleep(0.05)
            leader = self.cluster.leader()
            leader.kill()
            killed_at[0] = time.time()
            self.cluster.wait_leader(exclude=leader)
            deadline = time.time() + 30
            while first_after_kill[0] is None and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(1)
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertIsNotNone(first_after_kill[0], "no claim was acknowledged after the kill")
        self.assertLess(first_after_kill[0], 10)
        print("\nfailover: first acknowledged claim %.2f s after SIGKILL of the leader; "
              "%d operations acknowledged" % (first_after_kill[0], len(acked)))

        present = set()
        for v in self.shell("--json", "volume", "status").json():
            for c in v["claims"]:
                present.add((v["id"], c["alloc_id"]))
        for alloc, (vol, what) in acked.items():
            if what == "claimed":
                self.assertIn((vol, alloc), present, "acknowledged claim lost")
            elif what == "released":
                self.assertNotIn((vol, alloc), present, "acknowledged release lost")

        # The killed server comes back and catches up; then every server has
        # the same state tables at the same applied index.
        leader.start()
        deadline = time.time() + 30
        while time.time() < deadline:
            peers = self.cluster.peers()
            applied = {p["applied_index"] for p in peers if p["role"] != "unreachable"}
            if len(peers) == 3 and len(applied) == 1 and all(p["role"] != "unreachable" for p in peers):
                break
            time.sleep(0.2)
        self.assertEqual(len(applied), 1, peers)
        self.client.kill()  # no more fingerprints: the log stands still
        time.sleep(0.5)
        for s in self.cluster.servers:
            s.kill(15)
        tables = [s.state_tables() for s in self.cluster.servers]
        self.assertEqual(tables[0]["applied"], tables[1]["applied"])
        self.assertEqual(tables[0], tables[1])
        self.assertEqual(tables[0], tables[2])

    def test_removed_then_added_server_catches_up(self):
        self.wait_plugin()
        self.shell("volume", "create", "-", stdin=json.dumps(dict(VOLUME, id="v1")))
        leader = self.cluster.leader()
        victim = next(s for s in self.cluster.servers if s is not leader)
        out = self.shell("operator", "raft", "remove-peer", victim.name).out
        self.assertIn("removal of server '%s' proposed" % victim.name, out)
        deadline = time.time() + 10
        while victim.name in [p["id"] for p in self.cluster.peers(via=leader.address)]:
            self.assertLess(time.time(), deadline)
            time.sleep(0.1)
        victim.kill()
        shutil.rmtree(victim.data_dir)
        # c1 may have registered through the victim: until it registers
        # again through another server, the leader cannot reach its node
        # actor (no automatic connections, issue 59 item 6: the messages go
        # through the server it registered with) and a claim there fails
        # with exit 5, its claim left in release. As the answer says, claim
        # again with a new alloc.
        deadline = time.time() + 30 * float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))
        for attempt in range(1000):
            r = berth(leader.address, "--timeout", "20", "volume", "claim", "v1", "--alloc",
                      "a%d" % (attempt + 1), "--node", "c1")
            if r.code == 0 or time.time() > deadline:
                break
            self.assertIn(r.code, (4, 5), r)
            time.sleep(0.2)
        self.assertEqual(r.code, 0, r)
        taken = "a%d" % (attempt + 1)
        # Enough changes that the leader compacts its log past what the
        # returning server has (nothing): it must catch up by snapshot.
        for i in range(40):
            self.shell("volume", "create", "-", via=leader.address, stdin=json.dumps(dict(
                VOLUME, id="r%d" % i)))
        self.assertGreater(self.cluster.peers(via=leader.address)[0]["applied_index"], 40)
        # It joins again with an empty disk; the leader adds it back.
        victim.start()
        deadline = time.time() + 20
        while True:
            peers = {p["id"]: p for p in self.cluster.peers(via=leader.address)}
            if victim.name in peers and peers[victim.name]["applied_index"] == \
                    peers[leader.name]["applied_index"]:
                break
            self.assertLess(time.time(), deadline, peers)
            time.sleep(0.2)
        stale = self.shell("--json", "volume", "status", "v1", "--stale", via=victim.address).json()
        self.assertIn({"alloc_id": taken, "state": "taken"},
                      [{"alloc_id": c["alloc_id"], "state": c["state"]} for c in stale["claims"]])
        self.assertEqual(len(self.shell("--json", "volume", "status", "--stale",
                                        via=victim.address).json()), 41)
        # And it forwards to the leader: it heard from the leader before it
        # knew the leader's address (the snapshot names the servers), and
        # its server is told the address once it is known (before, it
        # answered "no leader is elected right now" until the next election).
        self.shell("volume", "create", "-", via=victim.address,
                   stdin=json.dumps(dict(VOLUME, id="via-the-returned")))
        fresh = self.shell("--json", "volume", "status", "via-the-returned", via=victim.address)
        self.assertEqual(fresh.json()["id"], "via-the-returned")
        # It got there by installing the leader's snapshot, not by replaying
        # the log from its first entry (which the leader no longer has).
        self.assertTrue(os.path.exists(os.path.join(victim.data_dir, "raft-snapshot.bin")))
        victim.kill()
        self.assertGreater(victim.first_log_index(), 1)
        # The leader sent its snapshot file in pieces: more bytes than one.
        with open(leader.log_path) as f:
            sent = [l for l in f if "snapshot sent" in l]
        self.assertTrue(sent, "the leader logged no snapshot sent")
        size = max(int(re.search(r"bytes=(\d+)", l).group(1)) for l in sent)
        self.assertGreater(size, 4096, sent)

    def test_snapshot_save_and_restore(self):
        self.wait_plugin()
        self.shell("volume", "create", "-", stdin=json.dumps(dict(VOLUME, id="kept")))
        path = os.path.join(self.tmp, "backup.snap")
        saved = self.shell("--json", "operator", "snapshot", "save", path).json()
        self.assertGreater(saved["index"], 0)
        self.assertGreater(os.path.getsize(path), 0)
        self.shell("volume", "create", "-", stdin=json.dumps(dict(VOLUME, id="later")))
        self.shell("volume", "deregister", "kept")
        out = self.shell("operator", "snapshot", "restore", path).out
        self.assertIn("state restored", out)
        ids = sorted(v["id"] for v in self.shell("--json", "volume", "status").json())
        self.assertEqual(ids, ["kept"])
        # Every server applied the same restore.
        deadline = time.time() + 10
        for s in self.cluster.servers:
            while True:
                stale = self.shell("--json", "volume", "status", "--stale", via=s.address).json()
                if sorted(v["id"] for v in stale) == ["kept"]:
                    break
                self.assertLess(time.time(), deadline, (s.name, stale))
                time.sleep(0.1)
        bad = os.path.join(self.tmp, "bad.snap")
        with open(bad, "w") as f:
            f.write("not a snapshot")
        r = self.shell("operator", "snapshot", "restore", bad, expect=2)
        self.assertIn("not a berth snapshot", r.err)
        # The restored state is live: the volume can be claimed again.
        self.shell("volume", "claim", "kept", "--alloc", "a1", "--node", "c1")

    def test_transfer_leadership(self):
        leader = self.cluster.leader()
        target = next(s for s in self.cluster.servers if s is not leader)
        self.shell("operator", "raft", "transfer-leadership", target.name)
        deadline = time.time() + 10
        while self.cluster.leader() is not target:
            self.assertLess(time.time(), deadline)
            time.sleep(0.1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
