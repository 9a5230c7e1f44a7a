"""Commands that are safe to retry (issue 15): a command whose answer was
lost, sent again, ends in one effect; sent while the leader is killed, the
shell itself sends it again and it ends in one effect."""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from cluster import Cluster, ClusterTestCase
from harness import BERTH, TIME_SCALE, berth
from test_csi import Plugin, agent_with_plugin, unmount_under

SPEC = {"plugin_id": "hostpath", "capacity_min": "1MiB",
        "capabilities": [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}]}


class SentTwiceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-retry-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.plugin = Plugin(self.tmp).start()
        self.addCleanup(self.plugin.kill)
        self.agent = agent_with_plugin(self.tmp, self.plugin)
        self.addCleanup(self.agent.kill)
        self.addCleanup(unmount_under, self.tmp)
        for vol in ("v0", "v1"):
            self.run_berth("volume", "create", "-", stdin=json.dumps(dict(SPEC, id=vol)))

    def run_berth(self, *args, stdin=None, expect=0):
        r = berth(self.agent, *args, stdin=stdin)
        self.assertEqual(r.code, expect, r)
        return r

    def twice(self, *args):
        """Sends a command twice; both succeed; returns the second answer."""
        first = self.run_berth(*args)
        return first, self.run_berth(*args)

    def allocs(self):
        return self.run_berth("--json", "alloc", "status").json()

    def claims(self, vol):
        return self.run_berth("--json", "volume", "status", vol).json()["claims"]

    def test_alloc_run_with_the_same_id_answers_the_alloc_that_exists(self):
        run = ("--json", "alloc", "run", "--id", "web", "--node", "n1", "--volume", "data=v0")
        first, second = self.twice(*run)
        self.assertEqual(first.json()["id"], "web")
        self.assertEqual(second.json()["id"], "web")
        self.assertEqual(second.json()["state"], "running")
        self.assertIn("exists already", self.run_berth(*run[1:]).out)
        self.assertEqual([a["id"] for a in self.allocs()], ["web"])
        self.assertEqual(len(self.claims("v0")), 1)
        # The same id with other volumes is another request: refused.
        other = self.run_berth("alloc", "run", "--id", "web", "--node", "n1", "--volume",
                               "data=v1", expect=4)
        self.assertIn("another node, volumes or command", other.err)
        self.assertEqual(self.claims("v1"), [])
        # Stopped twice: the second says it is done already.
        _, again = self.twice("alloc", "stop", "web")
        self.assertIn("already", again.out)
        self.assertEqual(self.claims("v0"), [])

    def test_the_shell_makes_the_alloc_id(self):
        r = self.run_berth("--json", "alloc", "run", "--node", "n1", "--volume", "data=v1")
        self.assertRegex(r.json()["id"], r"^[0-9a-f]{12}$")
        self.run_berth("alloc", "stop", r.json()["id"])

    def test_release_detach_deregister_and_delete_of_what_is_done_succeed_and_say_so(self):
        self.twice("volume", "claim", "v1", "--alloc", "a1", "--node", "n1")
        self.assertEqual(len(self.claims("v1")), 1)
        _, again = self.twice("volume", "release", "v1", "--alloc", "a1")
        self.assertIn("nothing to do", again.out)
        self.assertEqual(self.claims("v1"), [])
        _, again = self.twice("volume", "detach", "v1", "n1")
        self.assertIn("nothing to detach", again.out)
        _, again = self.twice("volume", "deregister", "v1")
        self.assertIn("not registered", again.out)
        first, again = self.twice("--json", "volume", "delete", "v0")
        self.assertTrue(first.json()["deleted"])
        self.assertIn("not registered", again.json()["message"])
        self.assertEqual(self.run_berth("--json", "volume", "status").json(), [])
        # Reading what is not there stays an error.
        self.run_berth("volume", "status", "v0", expect=3)


class LeaderKilledTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-retry-kill-")
        self.cluster = Cluster(self.tmp)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.addCleanup(self.cluster.stop)
        self.cluster.start()
        # A slow controller: the alloc run is still in flight when the leader dies.
        self.plugin, self.client = self.cluster.add_client(
            "c1", plugin_args=["--delay", "ControllerPublishVolume=3000"])

    def ok(self, address, *args, stdin=None):
        deadline = time.time() + 30 * TIME_SCALE
        while True:
            r = berth(address, *args, stdin=stdin)
            if r.code == 0 or time.time() > deadline:
                self.assertEqual(r.code, 0, r)
                return r
            time.sleep(0.2)  # no leader yet, or the client not connected yet

    def test_alloc_run_sent_while_the_leader_dies_ends_in_one_alloc(self):
        self.cluster.wait_leader()
        leader = self.cluster.leader()
        self.assertIsNotNone(leader, self.cluster.peers())
        follower = next(s for s in self.cluster.servers if s is not leader)
        deadline = time.time() + 30 * TIME_SCALE
        while True:
            r = berth(leader.address, "--json", "plugin", "status", "hostpath")
            if r.code == 0 and r.json()["controllers_healthy"] == 1:
                break
            self.assertLess(time.time(), deadline, r)
            time.sleep(0.1)
        self.ok(leader.address, "volume", "create", "-", stdin=json.dumps(dict(SPEC, id="db")))
        shell = subprocess.Popen(
            [BERTH, "--address", follower.address, "--json", "--timeout", str(int(60 * TIME_SCALE)),
             "alloc", "run",
             "--id", "job1", "--node", "c1", "--volume", "data=db"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # The alloc is being started (its claim is in ControllerPublishVolume).
        deadline = time.time() + 20 * TIME_SCALE
        while True:
            r = berth(follower.address, "--json", "alloc", "status", "job1")
            if r.code == 0 and r.json().get("state") == "pending":
                break
            self.assertLess(time.time(), deadline, "the alloc never became pending: %r" % r)
            time.sleep(0.05)
        leader.kill()
        out, err = shell.communicate(timeout=90 * TIME_SCALE)
        # The shell sent it again to the new leader.  It was pending when its
        # leader died: the new leader failed it, and the repeated request
        # answers that failure (exit 4, never success for an alloc that
        # failed) instead of starting another alloc.
        self.assertEqual(shell.returncode, 4, (out, err))
        error = json.loads(err)["error"]
        self.assertEqual(error["code"], "refused", error)
        self.assertIn("alloc 'job1' failed", error["message"])
        self.assertIn("applied before", error["message"])
        self.assertEqual(self.ok(follower.address, "--json", "alloc", "status", "job1")
                         .json()["state"], "failed")
        allocs = self.ok(follower.address, "--json", "alloc", "status").json()
        self.assertEqual([a["id"] for a in allocs], ["job1"])
        # Whatever the first attempt left (the new leader fails an alloc it
        # finds pending), the volume ends with at most this alloc's claim.
        claims = self.ok(follower.address, "--json", "volume", "status", "db").json()["claims"]
        self.assertLessEqual(len(claims), 1)
        for c in claims:
            self.assertEqual(c["alloc_id"], "job1")


class UnknownOutcomeTest(ClusterTestCase):
    """Issue 27: a change whose answer is lost after it committed is
    reported as "may have been applied" (exit 7, with the command that
    checks), never as a plain failure (exit 5): the leader stops at the
    crash point `volume.committed` (the created volume's registration
    committed on a majority, not yet answered) while the shell waits at a
    follower."""
    PREFIX = "berth-outcome-"

    def setUp(self):
        # Every server is armed: whichever leads passes the point.
        os.environ["BERTH_CRASHPOINT"] = "volume.committed"
        try:
            super().setUp()
        finally:
            del os.environ["BERTH_CRASHPOINT"]

    def test_a_creation_whose_leader_died_after_the_commit_exits_7_and_was_made(self):
        self.cluster.add_client("c1")

        def controller_healthy():
            r = berth(self.via, "--json", "--timeout", "5", "plugin", "status", "hostpath")
            return r.code == 0 and r.json()["controllers_healthy"] == 1
        self.wait(controller_healthy, "the plugin's controller healthy")
        leader = self.cluster.leader()
        self.assertIsNotNone(leader, self.cluster.peers())
        follower = next(s for s in self.cluster.servers if s is not leader)
        r = berth(follower.address, "--timeout", "30", "volume", "create", "-",
                  stdin=json.dumps(dict(SPEC, id="db")), timeout=90)
        self.wait(lambda: not leader.alive(),
                  "the leader stopped at the crash point (the shell: %r)" % r)
        self.assertEqual(leader.proc.returncode, 137)
        with open(leader.log_path, errors="replace") as f:
            self.assertIn("crash point volume.committed reached", f.read())
        self.assertEqual(r.code, 7, r)
        self.assertIn("may have been applied", r.err)
        self.assertIn("berth volume status db", r.err)
        # It was made: a majority held it, and the next leader serves it.
        self.cluster.wait_leader(exclude=leader)
        self.via = follower.address

        def registered():
            s = berth(self.via, "--json", "--timeout", "5", "volume", "status", "db")
            return s.code == 0 and s.json()["id"] == "db"
        self.wait(registered, "the volume served by the next leader")


class ReleaseCrashTest(unittest.TestCase):
    """Issue 28: a release commits unpublishing, then the free with the CSI
    steps between.  berthd --dev killed at `release.uncommitted` (its
    NodeUnpublishVolume done, node-detached not committed) comes back with
    the claim at unpublishing; the release resumes by itself, repeats
    NodeUnpublishVolume (the plugin answers OK for what is gone) and frees
    the claim."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-release-crash-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.plugin = Plugin(self.tmp).start()
        self.addCleanup(self.plugin.kill)
        os.environ["BERTH_CRASHPOINT"] = "release.uncommitted"
        try:
            self.agent = agent_with_plugin(self.tmp, self.plugin)
        finally:
            del os.environ["BERTH_CRASHPOINT"]
        self.addCleanup(self.agent.kill)
        self.addCleanup(unmount_under, self.tmp)

    def calls(self, name):
        with open(self.plugin.call_log) as f:
            return [l for l in f if name in l]

    def test_a_release_killed_between_its_steps_resumes_and_frees(self):
        r = berth(self.agent, "volume", "create", "-", stdin=json.dumps(dict(SPEC, id="v0")))
        self.assertEqual(r.code, 0, r)
        r = berth(self.agent, "--json", "volume", "claim", "v0", "--alloc", "a1", "--node", "n1")
        self.assertEqual(r.code, 0, r)
        path = r.json()["published_path"]
        self.assertTrue(os.path.exists(path), path)
        r = berth(self.agent, "--timeout", "20", "volume", "release", "v0", "--alloc", "a1")
        deadline = time.time() + 30 * TIME_SCALE
        while self.agent.proc.poll() is None:
            self.assertLess(time.time(), deadline, "berthd never reached the crash point (%r)" % r)
            time.sleep(0.05)
        self.assertEqual(self.agent.proc.returncode, 137, r)
        with open(self.agent.log_path, errors="replace") as f:
            self.assertIn("crash point release.uncommitted reached", f.read())
        self.assertNotEqual(r.code, 0, r)  # the answer was lost with berthd
        self.assertEqual(len(self.calls("NodeUnpublishVolume")), 1)
        self.agent.restart()
        # Nobody asks again: the claim, at unpublishing, is the volume
        # watcher's to finish.
        deadline = time.time() + 60 * TIME_SCALE
        while True:
            s = berth(self.agent, "--json", "volume", "status", "v0")
            if s.code == 0 and s.json()["claims"] == []:
                break
            self.assertLess(time.time(), deadline, "the claim was never freed: %r" % s)
            time.sleep(0.1)
        self.assertEqual(len(self.calls("NodeUnpublishVolume")), 2)
        self.assertFalse(os.path.exists(path) and os.path.ismount(path), path)
        # The volume is free: another alloc claims it.
        r = berth(self.agent, "volume", "claim", "v0", "--alloc", "a2", "--node", "n1")
        self.assertEqual(r.code, 0, r)


if __name__ == "__main__":
    unittest.main()
