"""Durability of renames (issue 11, deliverable 5): berthd stops as if killed
(exit 137, no flush, no cleanup) at each step of taking a Raft snapshot and
of installing one, through the crash points of persistence/crashpoint.hpp
(BERTH_CRASHPOINT=NAME[@N]).  Restarted without the variable, it must have
every change acknowledged before the crash, and nothing else but the one
change in flight.

- Taking a snapshot: one berthd --dev with --snapshot-threshold 8, so that
  a stream of changes makes it snapshot and compact.  Each point is armed for
  its second pass (NAME@2): a snapshot and a compacted log already exist, so
  the rename replaces a file and the compaction cuts a compacted log again.
- Installing one: a 3-server cluster.  A follower is stopped while the
  leader takes snapshots and compacts its log past the follower's last
  entry, then restarted with the crash point set: the leader must send it
  its snapshot.  After the crash the follower starts again without the
  variable, catches up, and its own state tables (read with --stale) must
  hold every acknowledged change.

A crash point that is never reached fails the test: berthd must exit with
137 within the deadline.

A process that exits keeps what it wrote in the page cache, so this test
checks the order of the steps and what restart makes of every intermediate
state; that each step is fsynced (file and directory) before the next one is
what docs/architecture.md#what-is-durable-where states and the code review
checks, not something a test without power cuts can see."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

from cluster import Cluster
from harness import TIME_SCALE, Agent, berth

CRASH_EXIT = 137
THRESHOLD = 8  # --snapshot-threshold (berthd's minimum is 4)

SNAPSHOT_POINTS = [
    "snapshot.before_write",      # the state copied, nothing written
    "snapshot.after_temp_fsync",  # raft-snapshot.bin.tmp written and fsynced
    "snapshot.after_rename",      # renamed over raft-snapshot.bin, directory not fsynced
    "snapshot.after_dir_fsync",   # durable; the log not compacted yet
    "snapshot.after_compact",     # log.db compacted
]
INSTALL_POINTS = [
    "install.before_write",       # the leader's snapshot received, nothing written
    "install.after_temp_fsync",
    "install.after_rename",
    "install.after_dir_fsync",    # durable; the log not truncated yet
    "install.after_log_write",    # log.db truncated; state.db not replaced yet
    "state_db.after_temp_fsync",  # state.db.incoming written and fsynced, old state.db open
    "state_db.after_rename",      # renamed over state.db, directory not fsynced
    "state_db.after_dir_fsync",   # durable, not yet opened
]


def volume_json(vid):
    return json.dumps({"id": vid, "plugin_id": "manual", "external_id": "ext-" + vid,
                       "capabilities": [{"access_mode": "multi-node-multi-writer",
                                         "attachment_mode": "file-system"}]})


class Workload:
    """Changes of every kind (register, claim, release, deregister), and the
    state they must leave: volume id -> set of claiming allocs."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.i = 0
        self.model = {}
        self.pending = []  # the steps of the current round, as (argv, stdin, effect)

    def next(self):
        if not self.pending:
            v = "%s-v%d" % (self.prefix, self.i)
            a = "%s-a%d" % (self.prefix, self.i)
            # Every third round takes its claim back and deregisters: an
            # acknowledged release or deregistration that came back after
            # the crash would show as well as a lost claim.
            self.pending = [
                (["volume", "register", "-"], volume_json(v), lambda m: m.__setitem__(v, set())),
                (["volume", "claim", v, "--alloc", a, "--node", "n1"], None,
                 lambda m: m[v].add(a))]
            if self.i % 3 == 2:
                self.pending += [
                    (["volume", "release", v, "--alloc", a], None, lambda m: m[v].discard(a)),
                    (["volume", "deregister", v], None, lambda m: m.pop(v))]
            self.i += 1
        return self.pending.pop(0)

    def after(self, effect):
        model = {k: set(v) for k, v in self.model.items()}
        effect(model)
        return model


def state_of(volumes, prefix):
    return {v["id"]: {c["alloc_id"] for c in v["claims"]}
            for v in volumes if v["id"].startswith(prefix + "-")}


def tail(path, n=3000):
    with open(path) as f:
        return f.read()[-n:]


def shell(address, *args, stdin=None):
    return berth(address, "--timeout", "10", *args, stdin=stdin)


class SnapshotCrashTest(unittest.TestCase):
    """Taking a snapshot (berthd --dev)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-crash-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def crash_while_snapshotting(self, point):
        data = os.path.join(self.tmp, point)
        env = dict(os.environ, BERTH_CRASHPOINT=point + "@2")
        agent = Agent(data, ["--snapshot-threshold", str(THRESHOLD)], env=env)
        self.addCleanup(agent.kill)
        agent.start()
        r = shell(agent.address, "plugin", "fingerprint", "manual", "--node", "n1")
        self.assertEqual(r.code, 0, r)
        work = Workload("w")
        in_flight = None
        history = []  # (argv, exit code), for the failure messages
        deadline = time.time() + 30 * max(TIME_SCALE, 1)
        while agent.proc.poll() is None:
            self.assertLess(time.time(), deadline, "%s was never reached" % point)
            step = work.next()
            r = shell(agent.address, *step[0], stdin=step[1])
            history.append((step[0], r.code))
            if r.code == 0:
                step[2](work.model)
                continue
            # Only the crash may fail a change: berthd must be gone.
            try:
                agent.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.fail("a change failed but berthd still runs: %r" % r)
            in_flight = step
        log = tail(agent.log_path, 10**6)
        self.assertEqual(agent.proc.returncode, CRASH_EXIT,
                         "berthd exited with %s, not at the crash point; log: %s" %
                         (agent.proc.returncode, log[-3000:]))
        self.assertIn("crash point %s reached" % point, log)
        agent.kill()
        # The crash left the snapshot and the log in this step's state; the
        # second snapshot was due, so there was a first one.
        self.assertTrue(os.path.exists(os.path.join(data, "raft-snapshot.bin")))

        restarted = Agent(data)
        self.addCleanup(restarted.kill)
        restarted.start()
        # A release the crash interrupted half way (its steps are committed
        # one by one) is finished by the volume watcher: wait for it, then
        # every claim left is taken.
        deadline = time.time() + 30 * max(TIME_SCALE, 1)
        while True:
            r = shell(restarted.address, "--json", "volume", "status")
            self.assertEqual(r.code, 0, r)
            states = [c["state"] for v in r.json() for c in v["claims"]]
            if all(st == "taken" for st in states):
                break
            self.assertLess(time.time(), deadline, "releases never finished: %s" % r.out)
            time.sleep(0.05)
        got = state_of(r.json(), "w")
        allowed = [work.model] + ([work.after(in_flight[2])] if in_flight else [])
        self.assertIn(got, allowed, "after a crash at %s: acknowledged %s\nhistory: %s" %
                      (point, work.model, history))
        if in_flight and got == work.model:
            work.pending.insert(0, in_flight)  # it did not happen: again
        work.model = got
        # Still serving writes, and a later snapshot goes through.
        for _ in range(THRESHOLD + 1):
            argv, stdin, effect = work.next()
            r = shell(restarted.address, *argv, stdin=stdin)
            history.append((argv, r.code))
            self.assertEqual(r.code, 0, "%r\nhistory: %s\nlog: %s" %
                             (r, history, tail(restarted.log_path)))
            effect(work.model)
        r = shell(restarted.address, "--json", "volume", "status")
        self.assertEqual(state_of(r.json(), "w"), work.model)
        print("%s: crashed after %d changes, restarted with all of them" %
              (point, len(work.model)), file=sys.stderr)


for _point in SNAPSHOT_POINTS:
    setattr(SnapshotCrashTest, "test_" + _point.replace(".", "_"),
            lambda self, p=_point: self.crash_while_snapshotting(p))


class InstallCrashTest(unittest.TestCase):
    """Installing the leader's snapshot on a follower far behind (3 servers).
    One cluster for every point: each test leaves it whole and caught up."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="berth-crash-install-")
        cls.cluster = Cluster(cls.tmp, snapshot_threshold=THRESHOLD)
        try:
            cls.cluster.start()
            r = shell(cls.cluster.any_address(), "plugin", "fingerprint", "manual",
                      "--node", "n1")
            assert r.code == 0, r
        except Exception:
            cls.cluster.stop()
            raise
        cls.work = Workload("i")

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def change(self):
        argv, stdin, effect = self.work.next()
        deadline = time.time() + 20
        while True:
            r = shell(self.cluster.any_address(), *argv, stdin=stdin)
            # Exit 5 is "unavailable, retry" (e.g. an election); the
            # change did not happen.
            if r.code != 5 or time.time() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(r.code, 0, r)
        effect(self.work.model)

    def peers(self, leader):
        return {p["id"]: p for p in self.cluster.peers(via=leader.address)}

    def wait_caught_up(self, server, timeout=30):
        """Until `server` applied everything the leader had applied when the
        wait began (every change acknowledged before it).  Not equality at
        one instant: under load the cluster's own writes move the leader on
        between two reads (make test-tsan at 933ba28: both at 88 just after
        the deadline)."""
        deadline = time.time() + timeout * max(TIME_SCALE, 1)
        target = None
        while True:
            leader = self.cluster.leader()
            if leader is not None:
                peers = self.peers(leader)
                if target is None and leader.name in peers:
                    target = peers[leader.name]["applied_index"]
                if target is not None and server.name in peers and \
                        peers[server.name]["applied_index"] >= target:
                    return
            self.assertLess(time.time(), deadline, "%s never caught up to index %s: %s" %
                            (server.name, target, self.cluster.peers()))
            time.sleep(0.05)

    def last_log_index(self, server):
        db = sqlite3.connect(os.path.join(server.data_dir, "log.db"))
        try:
            return db.execute("SELECT MAX(idx) FROM entries").fetchone()[0] or 0
        finally:
            db.close()

    def crash_while_installing(self, point):
        # A failed test may have left a server down: start it again.
        for s in self.cluster.servers:
            if not s.alive():
                s.start()
                self.wait_caught_up(s)
        leader = self.cluster.wait_leader()
        leader = self.cluster.leader() or leader
        follower = next(s for s in self.cluster.servers if s is not leader)
        follower.kill()
        behind = self.last_log_index(follower)
        # Changes until no running server's log has the entry after the
        # follower's last one (whichever leads then): it can only catch up
        # by snapshot.
        others = [s for s in self.cluster.servers if s is not follower]
        deadline = time.time() + 30 * max(TIME_SCALE, 1)
        while min(s.first_log_index() or 0 for s in others) <= behind + 1:
            self.assertLess(time.time(), deadline, "the logs were never compacted")
            self.change()

        env = dict(os.environ, BERTH_CRASHPOINT=point)
        with open(follower.log_path, "a") as log:
            proc = subprocess.Popen(follower.argv, stdout=subprocess.PIPE, stderr=log, text=True,
                                    env=env)
        try:
            banner = proc.stdout.readline()
            # The crash must come from the leader's snapshot, not from
            # start-up (which installs a snapshot only after a crash).
            self.assertTrue(banner.startswith("berthd:"), "did not start: %r; log: %s" %
                            (banner, tail(follower.log_path)))
            try:
                proc.wait(timeout=30 * max(TIME_SCALE, 1))
            except subprocess.TimeoutExpired:
                self.fail("%s was never reached; log: %s" % (point, tail(follower.log_path)))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        self.assertEqual(proc.returncode, CRASH_EXIT, "%s exited with %s, not at %s; log: %s" %
                         (follower.name, proc.returncode, point, tail(follower.log_path)))
        self.assertIn("crash point %s reached" % point, tail(follower.log_path, 10**6))

        follower.start()
        self.wait_caught_up(follower)
        r = shell(follower.address, "--json", "volume", "status", "--stale")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(state_of(r.json(), "i"), self.work.model,
                         "%s's own state after a crash at %s" % (follower.name, point))
        # And it keeps up with new changes from there.
        for _ in range(3):
            self.change()
        self.wait_caught_up(follower)
        r = shell(follower.address, "--json", "volume", "status", "--stale")
        self.assertEqual(state_of(r.json(), "i"), self.work.model)
        print("%s: %s crashed installing a snapshot (its log ended at %d), restarted with "
              "all %d volumes" % (point, follower.name, behind, len(self.work.model)),
              file=sys.stderr)


for _point in INSTALL_POINTS:
    setattr(InstallCrashTest, "test_" + _point.replace(".", "_"),
            lambda self, p=_point: self.crash_while_installing(p))


if __name__ == "__main__":
    unittest.main(verbosity=2)
