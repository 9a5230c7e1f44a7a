#!/usr/bin/python3
"""The fault suite's checker, fed synthetic histories, states and call logs:
a clean run passes, and each known violation (a lost ack, two writers,
out-of-order CSI calls, a wedged release, diverging replicas, an alloc that
writes outside its publication or after another node published its volume, a
cut-off client that was not stopped before its volume moved) is reported."""

import copy
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))

import checker  # noqa: E402
import workload  # noqa: E402

VOLUMES = {"sw": {"access_mode": "single-node-writer", "external_id": "hp-sw"},
           "ro": {"access_mode": "multi-node-reader-only", "external_id": "hp-ro"}}


class Builder:
    """A history built op by op, with times."""

    def __init__(self):
        self.events = []
        self.t = 0.0
        self.op = 0

    def op_(self, f, value, outcome, exit_code=None, process=0):
        self.op += 1
        self.t += 1
        self.events.append({"op": self.op, "type": "invoke", "process": process, "f": f,
                            "value": value, "time": self.t})
        self.t += 1
        if outcome is not None:
            self.events.append({"op": self.op, "type": outcome, "process": process, "f": f,
                                "value": value, "time": self.t,
                                "exit": exit_code if exit_code is not None else
                                {"ok": 0, "fail": 4, "info": 5}[outcome], "error": ""})
        return self

    def claim(self, alloc, vol, node, outcome, ro=False, **kw):
        return self.op_("claim", {"alloc": alloc, "node": node,
                                  "volumes": [{"volume": vol, "read_only": ro}]}, outcome, **kw)

    def release(self, alloc, vol, outcome, **kw):
        return self.op_("release", {"alloc": alloc, "volume": vol}, outcome, **kw)

    def run(self, alloc, vol, node, outcome, ro=False, **kw):
        return self.op_("alloc-run", {"alloc": alloc, "node": node,
                                      "volumes": [{"volume": vol, "read_only": ro}]}, outcome,
                        **kw)

    def stop(self, alloc, outcome, **kw):
        return self.op_("alloc-stop", {"alloc": alloc}, outcome, **kw)

    def note(self, f, wall, **value):
        self.events.append({"type": "nemesis", "f": f, "value": value, "time": self.t,
                            "wall": wall})
        return self


def vol(vid, *claims):
    return {"id": vid, "claims": [
        {"alloc_id": a, "node_id": n, "mode": m, "state": s} for a, n, m, s in claims]}


def call(method, at, vid="hp-sw", code=0, **fields):
    e = {"method": method, "at_ns": at, "code": code, "volume_id": vid}
    e.update(fields)
    return e


def lifecycle(node, alloc, t0, vid="hp-sw", ro=False):
    """The calls of one claim and its release on a node, in the spec's order."""
    s = "/%s/staging/%s" % (node, vid)
    t = "/%s/per-alloc/%s/%s" % (node, alloc, vid)
    extra = {"readonly": True} if ro else {}
    return [call("ControllerPublishVolume", t0 + 1, vid, node_id=node, **extra),
            call("NodeStageVolume", t0 + 2, vid, staging_target_path=s),
            call("NodePublishVolume", t0 + 3, vid, staging_target_path=s, target_path=t,
                 **extra),
            call("NodeUnpublishVolume", t0 + 4, vid, target_path=t),
            call("NodeUnstageVolume", t0 + 5, vid, staging_target_path=s),
            call("ControllerUnpublishVolume", t0 + 6, vid, node_id=node)]


def clean():
    """A run without violations: a1 claims sw on n1 and releases it, a2 then
    claims it on n2 and keeps it, a3 reads ro."""
    h = (Builder().claim("a1", "sw", "n1", "ok").release("a1", "sw", "ok")
         .claim("a2", "sw", "n2", "ok").claim("x", "sw", "n1", "fail")
         .claim("a3", "ro", "n1", "ok", ro=True))
    settled = [vol("sw", ("a2", "n2", "write", "taken")), vol("ro", ("a3", "n1", "read", "taken"))]
    n2 = lifecycle("n2", "a2", 100)[:3]
    logs = {"n1": lifecycle("n1", "a1", 0) + lifecycle("n1", "a3", 200, "hp-ro", ro=True)[:3],
            "n2": n2}
    tables = [("s1", {"applied": (7,), "volumes": [("sw",)]}),
              ("s2", {"applied": (7,), "volumes": [("sw",)]})]
    # What the allocs wrote: a1 while published on n1 (3-4), a2 since 103.
    writes = {"sw": [["n1", "a1", 3.5], ["n2", "a2", 105], ["n2", "a2", 150]], "ro": []}
    return {"volumes": VOLUMES, "events": h.events, "heal_time": h.t, "release_bound": 30,
            "samples": [{"time": 1, "volumes": settled}], "settled": settled,
            "final": settled, "call_logs": logs, "tables": tables, "writes": writes,
            "unwritten": []}


S = 10 ** 9  # ns per second (the nemesis notes' wall times are seconds)


def partition(fence=True, stopped=True, moved=True):
    """A partition-client fault: w on c1 (CSI node n1) writes sw from 0.5 s;
    c1 is cut off at 1 s; its fence stops w (last line 1.5 s) and unpublishes
    and unstages sw at 1.6 s; the servers detach it from n1 at 6.5 s; b on c2
    (n2) publishes sw at 7.2 s and writes from 7.3 s; c1 rejoins at 9 s.
    fence=False: n1 never unpublishes; stopped=False: w writes on until 8 s;
    moved=False: b never gets the volume."""
    h = Builder()
    h.run("w", "sw", "c1", "ok")
    h.note("partition-client", 1.0, process="c1", alloc="w", volume="sw", mode="network")
    if moved:
        h.run("b", "sw", "c2", "ok", process=1)
    h.note("rejoin-client", 9.0, process="c1", alloc="w", volume="sw", mode="network")
    s1, t1 = "/n1/staging/hp-sw", "/n1/per-alloc/w/hp-sw"
    s2, t2 = "/n2/staging/hp-sw", "/n2/per-alloc/b/hp-sw"
    n1 = [call("ControllerPublishVolume", int(0.3 * S), node_id="n1"),
          call("NodeStageVolume", int(0.4 * S), staging_target_path=s1),
          call("NodePublishVolume", int(0.5 * S), staging_target_path=s1, target_path=t1)]
    if fence:
        n1 += [call("NodeUnpublishVolume", int(1.6 * S), target_path=t1),
               call("NodeUnstageVolume", int(1.61 * S), staging_target_path=s1)]
    n2 = [call("ControllerUnpublishVolume", int(6.5 * S), node_id="n1")]
    if moved:
        n2 += [call("ControllerPublishVolume", int(7.0 * S), node_id="n2"),
               call("NodeStageVolume", int(7.1 * S), staging_target_path=s2),
               call("NodePublishVolume", int(7.2 * S), staging_target_path=s2, target_path=t2)]
    lines = [["c1", "w", int(x * S)] for x in (0.6, 1.0, 1.5)]
    if not stopped:
        lines.append(["c1", "w", int(8.0 * S)])
    if moved:
        lines += [["c2", "b", int(x * S)] for x in (7.3, 8.5)]
    settled = [vol("sw", ("b", "c2", "write", "taken")) if moved else vol("sw")]
    return {"volumes": VOLUMES, "events": h.events, "heal_time": h.t, "release_bound": 30,
            "samples": [], "settled": settled, "final": settled,
            "call_logs": {"n1": n1, "n2": n2}, "csi_nodes": {"c1": "n1", "c2": "n2"},
            "writes": {"sw": lines, "ro": []}, "unwritten": [],
            # w was lost when c1 was marked down: its claim went without a stop.
            "ended_allocs": {"w": {"state": "lost", "message": "node 'c1' is down"}}}


class CheckerTest(unittest.TestCase):
    def violations(self, obs, check=None):
        vs = checker.check(obs)
        return [v for v in vs if check is None or v.check == check]

    def test_clean_run_has_no_violations(self):
        self.assertEqual(self.violations(clean()), [])

    def test_lost_acknowledged_claim(self):
        obs = clean()
        obs["settled"] = [vol("sw"), obs["settled"][1]]
        vs = self.violations(obs, 1)
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("acknowledged claim lost: alloc a2 on volume sw", str(vs[0]))

    def test_lost_acknowledged_release(self):
        obs = clean()
        obs["settled"][0]["claims"].append(
            {"alloc_id": "a1", "node_id": "n1", "mode": "write", "state": "taken"})
        vs = [str(v) for v in self.violations(obs, 1)]
        self.assertTrue(any("acknowledged release lost: alloc a1" in v for v in vs), vs)

    def test_release_after_unknown_claim_is_not_a_lost_release(self):
        # The claim's outcome is unknown: it may take effect after the
        # release, so finding it is no lost release (check 3 frees it).
        h = Builder().claim("a1", "sw", "n1", "info").release("a1", "sw", "ok")
        obs = clean()
        obs.update(events=h.events, settled=[vol("sw", ("a1", "n1", "write", "taken"))])
        self.assertEqual(self.violations(obs, 1), [])

    def test_failed_claim_that_took_effect(self):
        obs = clean()
        obs["settled"][0]["claims"].append(
            {"alloc_id": "x", "node_id": "n1", "mode": "write", "state": "taken"})
        vs = [str(v) for v in self.violations(obs, 1)]
        self.assertTrue(any("failed claim took effect: alloc x" in v for v in vs), vs)

    def test_two_writers_in_a_sample(self):
        obs = clean()
        obs["samples"].append({"time": 5, "volumes": [vol(
            "sw", ("a1", "n1", "write", "unpublishing"), ("a2", "n2", "write", "taken"))]})
        vs = self.violations(obs, 2)
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("two writers of single-writer volume sw in the committed state (sample t=5",
                      str(vs[0]))

    def test_readers_of_a_reader_volume_are_fine(self):
        obs = clean()
        obs["samples"].append({"time": 5, "volumes": [vol(
            "ro", ("a3", "n1", "read", "taken"), ("a4", "n2", "read", "taken"))]})
        self.assertEqual(self.violations(obs, 2), [])

    def test_two_live_write_publications_at_the_plugins(self):
        obs = clean()
        # a1's publication on n1 is never unpublished before a2 publishes on n2.
        n1 = lifecycle("n1", "a1", 0)
        obs["call_logs"]["n1"] = n1[:3] + [dict(c, at_ns=c["at_ns"] + 1000) for c in n1[3:]]
        vs = self.violations(obs, 2)
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("two live write publications of single-writer volume sw", str(vs[0]))
        self.assertIn("/n1/per-alloc/a1/hp-sw", str(vs[0]))
        self.assertIn("/n2/per-alloc/a2/hp-sw", str(vs[0]))

    def test_read_only_publications_do_not_count_as_writers(self):
        obs = clean()
        obs["call_logs"]["n2"] += lifecycle("n2", "a9", 300, ro=True)[:3]
        self.assertEqual(self.violations(obs, 2), [])

    def test_publish_before_stage(self):
        obs = clean()
        c = lifecycle("n1", "a1", 0)
        c[1], c[2] = dict(c[2], at_ns=2), dict(c[1], at_ns=3)  # publish, then stage
        obs["call_logs"]["n1"] = c
        vs = [str(v) for v in self.violations(obs, 4)]
        self.assertTrue(any("NodePublishVolume of hp-sw on node n1 at a staging path where it "
                            "is not staged" in v for v in vs), vs)

    def test_unstage_before_unpublish(self):
        obs = clean()
        c = lifecycle("n1", "a1", 0)
        c[3], c[4] = dict(c[4], at_ns=4), dict(c[3], at_ns=5)
        obs["call_logs"]["n1"] = c
        vs = [str(v) for v in self.violations(obs, 4)]
        self.assertTrue(any("NodeUnstageVolume of hp-sw on node n1 before NodeUnpublishVolume"
                            in v for v in vs), vs)

    def test_stage_before_controller_publish(self):
        obs = clean()
        obs["call_logs"]["n1"] = lifecycle("n1", "a1", 0)[1:]
        vs = [str(v) for v in self.violations(obs, 4)]
        self.assertTrue(any("NodeStageVolume of hp-sw on node n1 before ControllerPublishVolume"
                            in v for v in vs), vs)

    def test_controller_unpublish_while_published_across_logs(self):
        # The controller call is served by the other node's plugin: the logs
        # are merged by the time each call took the shared root's lock.
        obs = clean()
        c = lifecycle("n1", "a1", 0)
        obs["call_logs"]["n1"] = c[:3]
        obs["call_logs"]["n2"] = [dict(c[5], at_ns=50)] + obs["call_logs"]["n2"]
        vs = [str(v) for v in self.violations(obs, 4)]
        self.assertTrue(any("ControllerUnpublishVolume of hp-sw from node n1 while it is still "
                            "staged there" in v for v in vs), vs)

    def test_publication_left_behind_after_drain(self):
        obs = clean()
        obs["drained"] = [vol("sw"), vol("ro")]
        vs = [str(v) for v in self.violations(obs, 4)]
        self.assertTrue(any("publication of volume sw left behind on node n2" in v for v in vs), vs)

    def release_answered_at(self, wall_ns):
        """clean() with wall times: a1's release answered at wall_ns (its
        NodeUnpublishVolume is at 4 ns, see lifecycle())."""
        obs = clean()
        for e in obs["events"]:
            e["wall"] = e["time"] * 1e-9
        rel = next(e for e in obs["events"] if e["f"] == "release" and e["type"] == "ok")
        rel["wall"] = wall_ns * 1e-9
        return obs

    def test_release_answered_after_its_unpublish(self):
        self.assertEqual(self.violations(self.release_answered_at(10)), [])

    def test_release_answered_while_its_publication_is_live(self):
        # What a release that skips NodeUnpublishVolume looks like.
        vs = [str(v) for v in self.violations(self.release_answered_at(3.5), 4)]
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("acknowledged release of alloc a1 on volume sw answered while its "
                      "publication was still live", vs[0])
        self.assertIn("/n1/per-alloc/a1/hp-sw", vs[0])

    def test_wedged_release(self):
        obs = clean()
        h = Builder()
        h.events = copy.deepcopy(obs["events"])
        h.t = obs["heal_time"]
        h.op = 100
        h.release("a2", "sw", "info")
        h.release("a2", "sw", "info", process="heal")
        obs["events"] = h.events
        obs["final"] = [vol("sw", ("a2", "n2", "write", "unpublishing"))]
        vs = self.violations(obs, 3)
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("release wedged: alloc a2 still holds volume sw (state unpublishing)",
                      str(vs[0]))

    def test_tables_differ(self):
        obs = clean()
        obs["tables"][1] = ("s2", {"applied": (7,), "volumes": [("other",)]})
        vs = self.violations(obs, 5)
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("table volumes differs between s1 and s2 at applied index (7,)", str(vs[0]))

    def test_servers_that_never_converged(self):
        obs = clean()
        obs["converge_error"] = "servers did not converge: applied 7, 7, 5"
        vs = self.violations(obs, 5)
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("did not reach the same applied index", str(vs[0]))

    # --- check 6: what the allocs wrote ---------------------------------------

    def test_write_after_its_unpublish(self):
        # a1 was unpublished on n1 at 4 but wrote at 6: not stopped first.
        obs = clean()
        obs["writes"]["sw"].append(["n1", "a1", 6])
        vs = [str(v) for v in self.violations(obs, 6)]
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("alloc a1 on node n1 wrote volume sw after its publication there was "
                      "undone", vs[0])

    def test_write_without_a_publication(self):
        obs = clean()
        obs["writes"]["sw"].append(["n2", "zz", 120])
        vs = [str(v) for v in self.violations(obs, 6)]
        self.assertTrue(any("alloc zz on node n2 wrote volume sw without a write publication"
                            in v for v in vs), vs)

    def test_write_while_another_node_has_it_published(self):
        # a1's publication on n1 stays until 1000; a2 publishes on n2 at 103
        # and writes at 105 and 150: two writers, seen in the volume's log.
        obs = clean()
        n1 = lifecycle("n1", "a1", 0)
        obs["call_logs"]["n1"] = n1[:3] + [dict(c, at_ns=c["at_ns"] + 1000) for c in n1[3:]]
        obs["writes"]["sw"].append(["n1", "a1", 120])
        vs = [str(v) for v in self.violations(obs, 6)]
        self.assertTrue(any("alloc a2 on node n2 wrote single-writer volume sw while node n1 "
                            "had it published for writing: two writers" in v for v in vs), vs)
        self.assertTrue(any("alloc a1 on node n1 wrote single-writer volume sw while node n2 "
                            "had it published for writing" in v for v in vs), vs)

    def test_a_failed_append_means_the_alloc_outlived_its_mount(self):
        obs = clean()
        obs["unwritten"] = [["sw", "n1", "a1", 7], ["sw", "n1", "a1", 8]]
        vs = [str(v) for v in self.violations(obs, 6)]
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("alloc a1 on node n1 still ran after its volume sw was unmounted", vs[0])
        self.assertIn("2 failed append(s)", vs[0])
        # A reader that looks at its volume after NodeUnpublishVolume, too.
        obs["unwritten"], obs["unread"] = [], [["ro", "n1", "a3", 300]]
        vs = [str(v) for v in self.violations(obs, 6)]
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("alloc a3 on node n1 still ran after its volume ro was unmounted", vs[0])

    def test_an_alloc_still_running_at_the_end(self):
        obs = clean()
        obs["survivors"] = [["n1", "a3"]]
        vs = [str(v) for v in self.violations(obs, 6)]
        self.assertEqual(vs, ["violation [check 6] alloc a3 on node n1 still ran after every "
                              "alloc was stopped or had ended: its node never stopped it"])

    def test_writers_without_lines_are_a_vacuous_check(self):
        # Acknowledged alloc runs that write sw, and not one line in its log
        # (the logs were not read, or the allocs did not write).
        obs = clean()
        h = Builder()
        h.events = copy.deepcopy(obs["events"])
        h.op = 100
        h.run("r1", "sw", "n1", "ok").stop("r1", "ok")
        obs["events"] = h.events
        obs["writes"] = {"sw": [], "ro": []}
        vs = [str(v) for v in self.violations(obs, 6)]
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("no line in volume sw's log though 1 acknowledged allocs write it", vs[0])
        # Without the observation at all (an older run), check 6 is skipped.
        del obs["writes"]
        self.assertEqual(self.violations(obs, 6), [])

    # --- partitions of a client ------------------------------------------------

    def test_partition_with_the_fence_first_is_clean(self):
        obs = partition()
        self.assertEqual(self.violations(obs), [])
        self.assertIn("1 cut off a writing alloc; 1 moved its volume to the other node "
                      "(6.2-6.2 s after the cut); the cut-off writes ended 0.5-0.5 s after the cut",
                      checker.partition_summary(obs))

    def test_partition_where_the_cut_off_alloc_wrote_on(self):
        vs = [str(v) for v in self.violations(partition(stopped=False), 6)]
        self.assertTrue(any("partition-client of c1 (cut at_ns=1000000000): the cut-off client "
                            "wrote volume sw after node n2 published it: its alloc was not "
                            "stopped first" in v for v in vs), vs)
        self.assertTrue(any("alloc w on node c1 wrote volume sw after its publication there was "
                            "undone" in v for v in vs), vs)

    def test_partition_without_the_fence(self):
        obs = partition(fence=False)
        vs = [str(v) for v in self.violations(obs)]
        self.assertTrue(any("node n2 published volume sw before the cut-off node unpublished it"
                            in v for v in vs), vs)
        self.assertTrue(any("two live write publications of single-writer volume sw at the "
                            "plugins" in v for v in vs), vs)
        # A cut-off node's write publication of a single-writer volume is not
        # stale: detaching it from there is out of order.
        self.assertTrue(any("ControllerUnpublishVolume of hp-sw from node n1 while it is still "
                            "published there" in v for v in vs), vs)
        # Its last lines came before b's publication, yet w's own publication
        # overlapped b's: w wrote alone only by luck.
        self.assertFalse(any("after node n2 published it" in v for v in vs), vs)

    def test_partition_that_never_moved_the_volume_is_vacuous(self):
        vs = [str(v) for v in self.violations(partition(moved=False), 6)]
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("no partition-client fault moved a volume that the cut-off client had "
                      "published for writing", vs[0])

    def test_readers_of_a_cut_off_node_may_be_released_without_it(self):
        # n1 reads ro since 0.5 s, is cut off at 1 s; the servers detach ro
        # from n1 at 6.6 s and answer the stop of its alloc while n1 still
        # has it published (stale): allowed. The same without the cut is not.
        obs = partition()
        t = "/n1/per-alloc/r/hp-ro"
        s = "/n1/staging/hp-ro"
        obs["call_logs"]["n1"][:0] = [
            call("ControllerPublishVolume", int(0.31 * S), "hp-ro", node_id="n1", readonly=True),
            call("NodeStageVolume", int(0.41 * S), "hp-ro", staging_target_path=s),
            call("NodePublishVolume", int(0.51 * S), "hp-ro", staging_target_path=s,
                 target_path=t, readonly=True)]
        obs["call_logs"]["n2"].insert(1, call("ControllerUnpublishVolume", int(6.6 * S), "hp-ro",
                                              node_id="n1"))
        h = Builder()
        h.events = obs["events"]
        h.op = 100
        h.run("r", "ro", "c1", "ok", ro=True).stop("r", "ok")
        for e in h.events[-2:]:
            e["wall"] = 6.7 if e["type"] == "ok" else 0.2
        obs["settled"] = obs["final"] = obs["settled"] + [vol("ro")]
        self.assertEqual(self.violations(obs), [])
        obs["events"] = [e for e in obs["events"] if e.get("type") != "nemesis" or
                         e["f"] not in ("partition-client", "rejoin-client")]
        vs = [str(v) for v in self.violations(obs, 4)]
        self.assertTrue(any("ControllerUnpublishVolume of hp-ro from node n1 while it is still "
                            "staged there" in v for v in vs), vs)
        self.assertTrue(any("acknowledged release of alloc r on volume ro answered while its "
                            "publication was still live" in v for v in vs), vs)

    def test_an_alloc_lost_with_its_node_may_lose_its_claim(self):
        obs = partition()
        self.assertEqual(self.violations(obs, 1), [])
        del obs["ended_allocs"]
        vs = [str(v) for v in self.violations(obs, 1)]
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("acknowledged claim lost: alloc w on volume sw", vs[0])

    def test_an_alloc_stopped_by_a_drain_of_its_node_may_lose_its_claim(self):
        # drain-client (issue 59): the drain stops the alloc through its
        # client, and its claim is then released without a stop of ours.
        obs = partition()
        obs["ended_allocs"] = {"w": {"state": "complete",
                                     "message": "stopped by the drain of node 'c1' at its "
                                                "deadline"}}
        self.assertEqual(self.violations(obs, 1), [])
        # Completed otherwise (its command exited): not the node's doing.
        obs["ended_allocs"] = {"w": {"state": "complete", "message": "exited with 0"}}
        vs = [str(v) for v in self.violations(obs, 1)]
        self.assertEqual(len(vs), 1, vs)
        self.assertIn("acknowledged claim lost: alloc w on volume sw", vs[0])

    def test_a_stop_before_a_late_run_is_no_wedged_release(self):
        # The run's outcome is unknown, the stop finds no such alloc, then
        # the run takes effect: the claim is in the final state, not wedged.
        obs = clean()
        h = Builder()
        h.events = copy.deepcopy(obs["events"])
        h.op = 100
        h.run("late", "ro", "n1", "info", ro=True).stop("late", "fail", exit_code=3)
        obs["events"] = h.events
        obs["final"] = obs["final"] + [vol("ro", ("late", "n1", "read", "taken"))]
        self.assertEqual(self.violations(obs, 3), [])

    def test_summarize_folds_repeats(self):
        vs = [checker.Violation(4, "x"), checker.Violation(4, "x"), checker.Violation(2, "y")]
        out = [str(v) for v in checker.summarize(vs)]
        self.assertEqual(out, ["violation [check 4] x (2 times; the first shown)",
                               "violation [check 2] y"])


class WorkloadOutcomeTest(unittest.TestCase):
    """How the alloc operations read the shell's answers: only a definite
    answer is ok or fail, anything else is info (unknown)."""

    def test_alloc_run(self):
        run = workload.AllocRunOp([], [])
        self.assertEqual(run.classify(0, ""), "ok")
        self.assertEqual(run.classify(4, "Error: alloc 'w0-1' failed: claim of volume 'sw': "
                                         "...; every claim it took was released"), "fail")
        self.assertEqual(run.classify(3, "Error: node 'c9' has no berth client"), "fail")
        self.assertEqual(run.classify(4, "Error: alloc 'w0-1' failed: ...; the claims it took "
                                         "are still being released"), "info")
        self.assertEqual(run.classify(4, "Error: alloc 'w0-1' exists already; run with another "
                                         "id"), "info")
        self.assertEqual(run.classify(5, "did not answer within 8s"), "info")

    def test_alloc_stop(self):
        stop = workload.AllocStopOp()
        self.assertEqual(stop.classify(0, "", "alloc 'a' stopped by the operator; its claims "
                                              "are released\n"), "ok")
        self.assertEqual(stop.classify(0, "", "alloc 'a' is already complete; its claims are "
                                              "released\n"), "ok")
        # The client was not connected: the release is still to come.
        self.assertEqual(stop.classify(0, "", "alloc 'a' stopped; the client of node 'c1' is not "
                                              "connected, so its claims are released once it "
                                              "reconnects, ..."), "info")
        self.assertEqual(stop.classify(0, "", "...; releases still in progress for: sw"), "info")
        self.assertEqual(stop.classify(3, "does not exist", ""), "fail")
        self.assertEqual(stop.classify(5, "unreachable", ""), "info")


if __name__ == "__main__":
    unittest.main(verbosity=2)
