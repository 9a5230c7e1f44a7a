"""Many CSI calls in flight per plugin, never two for one volume (issue 16).

A berthd --dev drives a real berth-hostpath that makes its controller and
node calls slow (--delay), as a cloud plugin is.  The plugin's call log
records when each call started and ended; from it, on the plugin's side:
calls for one volume never overlap, calls in flight never exceed the
limits of --plugin ...,max_controller_calls=N,max_node_calls=M, and under
load the limits are reached."""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from harness import BERTH, BERTHD, TIME_SCALE, Agent, berth
from test_csi import Plugin, agent_with_plugin, unmount_under

CONTROLLER = {"CreateVolume", "DeleteVolume", "ControllerPublishVolume",
              "ControllerUnpublishVolume", "ValidateVolumeCapabilities"}
NODE = {"NodeStageVolume", "NodeUnstageVolume", "NodePublishVolume", "NodeUnpublishVolume"}
DELAYS = ["--delay", "ControllerPublishVolume=400", "--delay", "ControllerUnpublishVolume=200",
          "--delay", "NodeStageVolume=300", "--delay", "NodeUnpublishVolume=200"]


def most_in_flight(calls):
    """The most calls whose [at_ns, end_ns] intervals overlap at one instant."""
    edges = sorted([(c["at_ns"], 1) for c in calls] + [(c["end_ns"], -1) for c in calls],
                   key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


class ConcurrencyTest(unittest.TestCase):
    def start(self, plugin_options):
        self.tmp = tempfile.mkdtemp(prefix="berth-conc-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.plugin = Plugin(self.tmp, extra_args=DELAYS).start()
        self.addCleanup(self.plugin.kill)
        self.agent = agent_with_plugin(self.tmp, self.plugin, plugin_options)
        self.addCleanup(self.agent.kill)
        self.addCleanup(unmount_under, self.tmp)

    def ok(self, *args, stdin=None):
        r = berth(self.agent, *args, stdin=stdin, timeout=120)
        self.assertEqual(r.code, 0, r)
        return r

    def create(self, n, mode="single-node-writer"):
        for i in range(n):
            spec = {"id": "v%d" % i, "plugin_id": "hostpath", "capacity_min": "1MiB",
                    "capabilities": [{"access_mode": mode,
                                      "attachment_mode": "file-system"}]}
            self.ok("volume", "create", "-", stdin=json.dumps(spec))

    def in_parallel(self, commands):
        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            for r in pool.map(lambda args: berth(self.agent, *args, timeout=120), commands):
                self.assertEqual(r.code, 0, r)

    def check_calls(self, max_controller, max_node, reached=True):
        calls = [c for c in self.plugin.records() if c["method"] in CONTROLLER | NODE]
        for c in calls:
            self.assertLessEqual(c["at_ns"], c["end_ns"], c)
        # Never two calls for one volume at once (the CSI spec's rule).
        by_volume = {}
        for c in calls:
            by_volume.setdefault(c.get("volume_id", c.get("name")), []).append(c)
        for vol, cs in by_volume.items():
            self.assertEqual(most_in_flight(cs), 1, "calls for volume %s overlap: %r" % (vol, cs))
        ctrl = most_in_flight([c for c in calls if c["method"] in CONTROLLER])
        node = most_in_flight([c for c in calls if c["method"] in NODE])
        self.assertLessEqual(ctrl, max_controller)
        self.assertLessEqual(node, max_node)
        if reached:
            self.assertEqual(ctrl, max_controller, "the controller limit was never reached")
            self.assertEqual(node, max_node, "the node limit was never reached")
        print("in flight at most: controller %d, node %d" % (ctrl, node))
        return ctrl, node

    def test_calls_stay_within_the_limits_reach_them_and_never_overlap_per_volume(self):
        self.start(",max_controller_calls=3,max_node_calls=2")
        self.create(8)
        self.in_parallel([("volume", "claim", "v%d" % i, "--alloc", "a%d" % i, "--node", "n1")
                          for i in range(8)])
        self.check_calls(3, 2)
        status = self.ok("--json", "volume", "status").json()
        self.assertEqual(sum(len(v["claims"]) for v in status), 8)
        self.in_parallel([("volume", "release", "v%d" % i, "--alloc", "a%d" % i)
                          for i in range(8)])
        self.check_calls(3, 2)
        ends = [c["method"] for c in self.plugin.records()]
        self.assertEqual(ends.count("ControllerUnpublishVolume"), 8)
        # The limits in effect are on the client's metrics.
        series, _ = self.agent.scrape()
        self.assertEqual(series['berth_csi_call_limit{kind="controller",plugin="hostpath"}'], 3)
        self.assertEqual(series['berth_csi_call_limit{kind="node",plugin="hostpath"}'], 2)
        self.assertEqual(series['berth_csi_calls_in_flight{kind="controller",plugin="hostpath"}'], 0)

    def test_a_limit_of_one_runs_one_call_at_a_time_as_nomad_does(self):
        self.start(",max_controller_calls=1,max_node_calls=1")
        self.create(4)
        self.in_parallel([("volume", "claim", "v%d" % i, "--alloc", "a%d" % i, "--node", "n1")
                          for i in range(4)])
        self.check_calls(1, 1)

    def test_a_plugins_window_queues_its_claims_at_the_leader_never_another_plugins(self):
        """berthd --plugin-window 1: one claim of a plugin at a time reaches
        its volume actor; the next waits at the leader (queued on /metrics),
        and a claim on another plugin goes on meanwhile (issue 28: a storm
        on one plugin delayed every other plugin's claims)."""
        self.tmp = tempfile.mkdtemp(prefix="berth-window-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        # "slow" holds each ControllerPublishVolume for 60 s (below the
        # client's --csi-timeout, 70 s here): a claim behind the first waits
        # for as long.  Nothing waits for that: the test ends before.
        slow = Plugin(os.path.join(self.tmp, "slow"), node_id="csi-n1",
                      extra_args=["--delay", "ControllerPublishVolume=60000"]).start()
        self.addCleanup(slow.kill)
        fast = Plugin(os.path.join(self.tmp, "fast"), node_id="csi-n1").start()
        self.addCleanup(fast.kill)
        self.agent = Agent(os.path.join(self.tmp, "data"), extra_args=[
            "--node-name", "n1", "--plugin-window", "1",
            "--plugin", "slow=monolith:" + slow.socket + ",max_controller_calls=4",
            "--plugin", "fast=monolith:" + fast.socket,
            "--fingerprint-interval", "0.2", "--csi-timeout", "70",
            "--csi-root", os.path.join(self.tmp, "csi")]).start()
        self.addCleanup(self.agent.kill)
        self.addCleanup(unmount_under, self.tmp)
        self.wait_for(lambda: all(self.healthy(p) for p in ("slow", "fast")),
                      "both plugins healthy")
        for plugin, vol in (("slow", "s0"), ("slow", "s1"), ("fast", "f0")):
            spec = {"id": vol, "plugin_id": plugin, "capacity_min": "1MiB",
                    "capabilities": [{"access_mode": "single-node-writer",
                                      "attachment_mode": "file-system"}]}
            self.ok("volume", "create", "-", stdin=json.dumps(spec))
        # Two claims on "slow": the first reaches the plugin, the second waits
        # at the leader (the shell waits for them; stopped at the end).
        shells = []
        for vol in ("s0", "s1"):
            shells.append(subprocess.Popen(
                [BERTH, "--address", self.agent.address, "--timeout", "600", "volume", "claim",
                 vol, "--alloc", "a-" + vol, "--node", "n1"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.addCleanup(shells[-1].wait)
            self.addCleanup(shells[-1].kill)
        queued = 'berth_plugin_operations{kind="claim",plugin="slow",state="queued"}'
        running = 'berth_plugin_operations{kind="claim",plugin="slow",state="running"}'
        self.wait_for(lambda: self.agent.scrape()[0].get(queued) == 1 and
                      self.agent.scrape()[0].get(running) == 1, "one claim of slow queued")
        # Meanwhile a claim on "fast" is answered, published.
        r = self.ok("volume", "claim", "f0", "--alloc", "a-f0", "--node", "n1")
        self.assertIn("claimed", r.out)
        series, _ = self.agent.scrape()
        # ... while slow's second claim still waits its turn, and slow's
        # plugin saw one ControllerPublishVolume, not two at once.
        self.assertEqual(series[queued], 1, "slow's second claim left the queue before f0's "
                         "claim was answered: the first ControllerPublishVolume ended early?")
        self.assertEqual(series[running], 1)
        self.assertEqual(series['berth_plugin_operations{kind="claim",plugin="fast",'
                                'state="queued"}'], 0)
        self.assertEqual([c for c in slow.records() if c["method"] == "ControllerPublishVolume"],
                         [], "slow answered a ControllerPublishVolume before its 60 s delay")

    def test_a_release_asked_again_while_it_runs_gets_its_outcome(self):
        """A retried `volume release` (or the volume watcher) while the
        release runs joins it and answers as it does; it used to wait behind
        it in the volume's actor and then fail "has no claim" (issue 28)."""
        self.tmp = tempfile.mkdtemp(prefix="berth-join-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        # NodeUnpublishVolume takes 12 s (over two of the step's 5 s pings): the
        # second release arrives during it.
        self.plugin = Plugin(self.tmp, extra_args=["--delay", "NodeUnpublishVolume=12000"]).start()
        self.addCleanup(self.plugin.kill)
        self.agent = agent_with_plugin(self.tmp, self.plugin)
        self.addCleanup(self.agent.kill)
        self.addCleanup(unmount_under, self.tmp)
        self.create(1)
        self.ok("volume", "claim", "v0", "--alloc", "a0", "--node", "n1")
        first = subprocess.Popen(
            [BERTH, "--address", self.agent.address, "--timeout", "300", "volume", "release",
             "v0", "--alloc", "a0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(first.wait)
        self.addCleanup(first.kill)

        def unpublishing():
            v = self.ok("--json", "volume", "status", "v0").json()
            return [c["state"] for c in v.get("claims", [])] == ["unpublishing"]
        self.wait_for(unpublishing, "the first release committed its intent")
        second = self.ok("volume", "release", "v0", "--alloc", "a0")
        out, err = first.communicate(timeout=120 * max(TIME_SCALE, 1))
        self.assertEqual(first.returncode, 0, err)
        self.assertIn("released", out)
        self.assertIn("claim of alloc 'a0' on volume 'v0' released", second.out)
        self.assertEqual(self.ok("--json", "volume", "status", "v0").json().get("claims", []), [])
        # One NodeUnpublishVolume: the second release ran nothing of its own.
        self.assertEqual([m for m, _ in self.plugin.calls()].count("NodeUnpublishVolume"), 1)

    def test_two_volumes_claimed_at_once_by_one_alloc_both_stay_in_its_record(self):
        """A claim's entry merges the claimed volume into its alloc's record
        as the record is when the entry applies (alloc_volume_claimed, issue
        28): it used to write the record as it was when the claim was
        routed, so a claim that waited in its volume's actor undid another
        volume's claim by the same alloc made meanwhile."""
        self.tmp = tempfile.mkdtemp(prefix="berth-record-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        # v0's release holds its volume actor 8 s in NodeUnpublishVolume.
        self.plugin = Plugin(self.tmp, extra_args=["--delay", "NodeUnpublishVolume=8000"]).start()
        self.addCleanup(self.plugin.kill)
        self.agent = agent_with_plugin(self.tmp, self.plugin)
        self.addCleanup(self.agent.kill)
        self.addCleanup(unmount_under, self.tmp)
        # Multi-writer: a's claim of v0 fits beside b's claim in release, so
        # it is routed to v0's actor at once and waits there (a claim that
        # only a claim in release refuses waits at the leader instead, issue
        # 59, and is routed after it: no race with the claim of v1).
        self.create(2, "multi-node-multi-writer")
        self.ok("volume", "claim", "v0", "--alloc", "b", "--node", "n1")

        def shell(*args):
            p = subprocess.Popen([BERTH, "--address", self.agent.address, "--timeout", "300",
                                  *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            self.addCleanup(p.wait)
            self.addCleanup(p.kill)
            return p
        release = shell("volume", "release", "v0", "--alloc", "b")

        def unpublishing():
            v = self.ok("--json", "volume", "status", "v0").json()
            return [c["state"] for c in v.get("claims", [])] == ["unpublishing"]
        self.wait_for(unpublishing, "b's release of v0 committed its intent")
        # a's claim of v0 is routed (alloc a unknown: its record is {v0})
        # and waits in v0's actor behind the release ...
        first = shell("volume", "claim", "v0", "--alloc", "a", "--node", "n1")
        running = 'berth_plugin_operations{kind="claim",plugin="hostpath",state="running"}'
        self.wait_for(lambda: self.agent.scrape()[0].get(running) == 1,
                      "a's claim of v0 waiting in v0's actor")
        # ... while a's claim of v1 commits with the record {v1}.
        self.ok("volume", "claim", "v1", "--alloc", "a", "--node", "n1")
        alloc = self.ok("--json", "alloc", "status", "a").json()
        self.assertEqual([v["volume_id"] for v in alloc["volumes"]], ["v1"])
        for p, what in ((release, "released"), (first, "claimed")):
            out, err = p.communicate(timeout=120 * max(TIME_SCALE, 1))
            self.assertEqual(p.returncode, 0, err)
            self.assertIn(what, out)
        # v0's claim committed last, and added v0 to the record it found.
        alloc = self.ok("--json", "alloc", "status", "a").json()
        self.assertEqual(sorted(v["volume_id"] for v in alloc["volumes"]), ["v0", "v1"])
        self.assertEqual(alloc["state"], "running")
        # Released one by one, the record keeps the other until the last.
        self.ok("volume", "release", "v1", "--alloc", "a")
        alloc = self.ok("--json", "alloc", "status", "a").json()
        self.assertEqual([v["volume_id"] for v in alloc["volumes"]], ["v0"])
        self.ok("volume", "release", "v0", "--alloc", "a")
        self.assertNotEqual(berth(self.agent, "alloc", "status", "a").code, 0)

    def healthy(self, plugin):
        r = berth(self.agent, "--json", "plugin", "status", plugin)
        return r.code == 0 and r.json()["nodes_healthy"] == 1 and \
            r.json()["controllers_healthy"] == 1

    def wait_for(self, cond, what, timeout=60):
        deadline = time.time() + timeout * max(TIME_SCALE, 1)
        while not cond():
            if time.time() > deadline:
                self.fail("timed out waiting for: " + what)
            time.sleep(0.1)

    def test_a_bad_plugin_option_is_refused_naming_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            for option, words in ((",max_controller_calls=0", "1 to 1024"),
                                  (",max_controller_calls=lots", "1 to 1024"),
                                  (",max_calls=4", "unknown option 'max_calls'")):
                p = subprocess.run([BERTHD, "--dev", "--data-dir", os.path.join(tmp, "d"),
                                    "--port", "0", "--metrics-port", "0", "--node-name", "n1",
                                    "--plugin", "hp=monolith:/run/x.sock" + option],
                                   capture_output=True, text=True, timeout=30)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn(words, p.stderr + p.stdout)
                self.assertIn("--plugin", p.stderr + p.stdout)


if __name__ == "__main__":
    unittest.main()
