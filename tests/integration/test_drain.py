"""Node drain and eligibility (issue 15) on a 3-server cluster with two
clients, as real processes on 127.0.0.1, through the shell as an operator
types it.  What the plugins were asked is read from their own call logs; the
order of commits from the event stream."""

import json
import os
import signal
import time
import unittest

from cluster import ClusterTestCase
from harness import TIME_SCALE, berth


def volume_spec(vid):
    return json.dumps({"id": vid, "plugin_id": "hostpath",
                       "capabilities": [{"access_mode": "single-node-writer",
                                         "attachment_mode": "file-system"}]})


class DrainTest(ClusterTestCase):
    PREFIX = "berth-drain-"
    # c1's agent is paused while four shell commands run: the lease (a
    # third of the node-down timeout) must outlast that pause by far, also
    # under a sanitizer (make test-tsan: the pause took 14 s, past the 15 s
    # lease of the default 45 s, and the alloc's supervisor fenced it).
    SERVER_ARGS = ("--node-down-timeout", "%d" % int(45 * max(TIME_SCALE, 1)))

    def setUp(self):
        super().setUp()
        # Shared storage: either node's controller publishes to either node.
        shared = os.path.join(self.tmp, "shared-root")
        self.plugin1, self.client1 = self.cluster.add_client("c1", ("--peer-node", "csi-c2"),
                                                             shared)
        self.plugin2, self.client2 = self.cluster.add_client("c2", ("--peer-node", "csi-c1"),
                                                             shared)
        self.wait(lambda: self.plugin_counts() == (2, 2), "both plugin instances healthy")

    def plugin_counts(self):
        r = berth(self.via, "--json", "plugin", "status", "hostpath")
        if r.code != 0:
            return None
        return r.json()["nodes_healthy"], r.json()["nodes_expected"]

    def node(self, name):
        return self.b("--json", "node", "status", name).json()

    def calls(self, plugin):
        if not os.path.exists(plugin.call_log):
            return []
        with open(plugin.call_log) as f:
            return [json.loads(l) for l in f if l.strip()]

    def external_id(self, vid):
        return self.b("--json", "volume", "status", vid).json()["external_id"]

    def events(self):
        return [json.loads(l) for l in
                self.b("event", "stream", "--index", "1", "--until-index",
                       str(self.last_index())).out.splitlines() if l]

    def last_index(self):
        r = self.b("--json", "operator", "raft", "list-peers").json()
        return max(p.get("commit_index", 0) for p in r)

    def start_work(self):
        """Two volumes on c1: v1 by an alloc with a command, v2 by a claim from
        the shell; v3 on c2 stays untouched."""
        for vid in ("v1", "v2", "v3"):
            self.b("volume", "create", "-", stdin=volume_spec(vid))
        self.b("alloc", "run", "--node", "c1", "--id", "web", "--volume", "data=v1", "--",
               "sleep", "600")
        self.b("volume", "claim", "v2", "--alloc", "db", "--node", "c1")
        self.b("alloc", "run", "--node", "c2", "--id", "other", "--volume", "data=v3", "--",
               "sleep", "600")

    def test_drain_releases_in_the_specs_order_and_withdraws_the_plugin_last(self):
        self.start_work()
        ext = {vid: self.external_id(vid) for vid in ("v1", "v2")}

        # c1's agent is paused while the refusals are checked: the drain
        # cannot stop anything there meanwhile, so it is still draining
        # (not drained, which words the refusal otherwise). The pause is far
        # shorter than the lease (15 s, times the time scale) and the
        # node-down timeout.
        os.kill(self.client1.proc.pid, signal.SIGSTOP)
        try:
            r = self.b("node", "drain", "c1", "--deadline", "10m")
            self.assertIn("is draining", r.out)
            self.assertIn("2 alloc(s) to stop, 2 claim(s) to release", r.out)
            # Ineligible at once: no new alloc or claim there, with the fix named.
            refused = self.b("alloc", "run", "--node", "c1", "--id", "late", "--", "true",
                             expect=4)
            self.assertIn("draining", refused.err)
            self.assertIn("berth node drain c1 --disable", refused.err)
            late = self.b("volume", "claim", "v1", "--alloc", "late2", "--node", "c1", expect=4)
            self.assertIn("draining", late.err)
            self.b("node", "eligibility", "c1", "--enable", expect=4)
        finally:
            os.kill(self.client1.proc.pid, signal.SIGCONT)

        self.wait(lambda: self.node("c1")["drain"] is None, "the drain of c1 ends")
        node = self.node("c1")
        self.assertFalse(node["eligible"])
        self.assertTrue(node["plugins_withdrawn"])
        self.assertGreater(node["drained_at_ms"], 0)
        text = self.b("node", "status", "c1").out
        self.assertIn("Eligibility = drained", text)
        self.assertIn("(withdrawn by the drain)", text)
        for alloc in ("web", "db"):
            a = self.b("--json", "alloc", "status", alloc).json()
            self.assertEqual(a["state"], "complete", a)
            self.assertIn("drain of node 'c1'", a["message"])
        self.assertEqual(self.b("--json", "alloc", "status", "other").json()["state"], "running")
        for vid in ("v1", "v2"):
            self.assertEqual(self.b("--json", "volume", "status", vid).json()["claims"], [])

        # The spec's order for each volume: NodeUnpublish, NodeUnstage (on
        # c1's own plugin), then ControllerUnpublish (on any controller).
        calls = sorted(self.calls(self.plugin1) + self.calls(self.plugin2),
                       key=lambda c: c["at_ns"])
        for vid, external in ext.items():
            seq = [c["method"] for c in calls if c.get("volume_id") == external and
                   c["method"] in ("NodeUnpublishVolume", "NodeUnstageVolume",
                                   "ControllerUnpublishVolume") and c["code"] == 0]
            self.assertEqual(seq[:3], ["NodeUnpublishVolume", "NodeUnstageVolume",
                                       "ControllerUnpublishVolume"], (vid, seq))
            node_calls = [c for c in self.calls(self.plugin1) if c.get("volume_id") == external
                          and c["method"].startswith("NodeUn")]
            self.assertEqual(len(node_calls), 2, node_calls)

        # Plugins last: c1's instance leaves the plugin in a commit after
        # every claim on c1 was freed.
        self.wait(lambda: self.plugin_counts() == (1, 1), "c1's instance withdrawn")
        events = self.events()
        freed = [e["index"] for e in events if e["type"] == "ClaimFreed" and
                 e["key"] in ("v1/web", "v2/db")]
        self.assertEqual(len(freed), 2, freed)
        withdrawn = [e["index"] for e in events if e["topic"] == "plugin" and
                     e["type"] == "PluginUpdated" and
                     "c1" not in [n["node_id"] for n in e["object"].get("nodes", [])]]
        self.assertTrue(withdrawn, [e for e in events if e["topic"] == "plugin"])
        self.assertGreater(min(i for i in withdrawn if i > min(freed)), max(freed))
        drain_started = min(e["index"] for e in events if e["topic"] == "node" and
                            e["key"] == "c1" and (e["object"].get("drain") or {}))
        self.assertLess(drain_started, min(freed))

        # Drained stays ineligible (a client's fingerprint does not bring the
        # instance back) until enabled; then it takes work again.
        time.sleep(1)  # several fingerprint intervals (0.2 s) of c1's client
        self.assertEqual(self.plugin_counts(), (1, 1))
        self.b("alloc", "run", "--node", "c1", "--id", "late", "--", "true", expect=4)
        r = self.b("node", "eligibility", "c1", "--enable")
        self.assertIn("reported again", r.out)
        self.wait(lambda: self.plugin_counts() == (2, 2), "c1's instance reported again")
        self.assertTrue(self.node("c1")["eligible"])
        self.b("volume", "claim", "v1", "--alloc", "again", "--node", "c1")
        # Sent again, the same: retry-safe.
        self.assertIn("eligible already", self.b("node", "eligibility", "c1", "--enable").out)

    def test_forced_drain_stops_through_the_client_and_cancel_restores_eligibility(self):
        self.start_work()
        r = self.b("node", "drain", "c1", "--force", "--keep-plugins")
        self.assertIn("deadline now", r.out)
        self.wait(lambda: self.node("c1")["drain"] is None, "the forced drain of c1 ends")
        for alloc in ("web", "db"):
            a = self.b("--json", "alloc", "status", alloc).json()
            self.assertEqual(a["state"], "complete", a)
            self.assertIn("at its deadline", a["message"])
        for vid in ("v1", "v2"):
            ext = self.external_id(vid)
            self.assertEqual(self.b("--json", "volume", "status", vid).json()["claims"], [])
            # Released through the node once its client stopped the alloc
            # (issue 59): c1's own plugin unpublished it.
            self.assertTrue([c for c in self.calls(self.plugin1) if c.get("volume_id") == ext
                             and c["method"] == "NodeUnpublishVolume" and c["code"] == 0])
            self.assertTrue([c for c in self.calls(self.plugin1) + self.calls(self.plugin2)
                             if c.get("volume_id") == ext and
                             c["method"] == "ControllerUnpublishVolume"])
        # --keep-plugins: c1's instance stays.
        self.assertEqual(self.plugin_counts(), (2, 2))
        self.assertFalse(self.node("c1")["plugins_withdrawn"])

        # A drain cancelled midway: eligible again unless --keep-ineligible.
        self.assertIn("ineligible", self.b("volume", "claim", "v1", "--alloc", "x", "--node", "c1",
                                           expect=4).err)
        # c2's agent is paused meanwhile, so the drain cannot finish (its
        # alloc stopped, v3 released) before it is cancelled: under ASan it
        # did, and the check found no drain.
        os.kill(self.client2.proc.pid, signal.SIGSTOP)
        try:
            self.b("node", "drain", "c2", "--no-deadline")
            self.assertIsNotNone(self.node("c2")["drain"])
            r = self.b("node", "drain", "c2", "--disable", "--keep-ineligible")
            self.assertIn("stays ineligible", r.out)
        finally:
            os.kill(self.client2.proc.pid, signal.SIGCONT)
        c2 = self.node("c2")
        self.assertIsNone(c2["drain"])
        self.assertFalse(c2["eligible"])
        self.assertIn("not draining", self.b("node", "drain", "c2", "--disable").out)
        self.b("node", "eligibility", "c2", "--enable")
        self.assertTrue(self.node("c2")["eligible"])
        # Bad input changes nothing and names the fix.
        bad = self.b("node", "drain", "c2", "--deadline", "soon", expect=2)
        self.assertIn("--deadline soon", bad.err)
        self.b("node", "drain", "nope", expect=3)
        self.assertTrue(self.node("c2")["eligible"])
        # The stale lists filter on the server asked.
        stale = self.b("--json", "node", "status", "--stale", "--filter", "eligible == false").json()
        self.assertEqual([n["id"] for n in stale], ["c1"])


    def test_a_forced_drain_frees_a_writers_claim_only_after_the_writer_stopped(self):
        """Issue 59, item 1: an alloc that ignores SIGTERM writes a
        single-writer volume; `node drain --force` must not free its claim
        while the writer still runs (until the client's kill timeout ends
        it), so the volume cannot be published elsewhere meanwhile."""
        self.b("volume", "create", "-", stdin=volume_spec("w"))
        pidfile = os.path.join(self.tmp, "writer.pid")
        script = ('trap "" TERM; echo $$ > %s.tmp; mv %s.tmp %s; '
                  'while true; do echo x >> "$BERTH_VOLUME_DATA/log"; sleep 0.05; done'
                  % (pidfile, pidfile, pidfile))
        self.b("alloc", "run", "--node", "c1", "--id", "writer", "--volume", "data=w", "--",
               "sh", "-c", script)
        self.wait(lambda: os.path.exists(pidfile), "the writer runs")
        with open(pidfile) as f:
            pid = int(f.read())
        self.assertTrue(running(pid))
        self.b("node", "drain", "c1", "--force", "--keep-plugins")
        seen_with_claim = 0
        deadline = time.monotonic() + 60 * max(TIME_SCALE, 1)
        while True:
            self.assertLess(time.monotonic(), deadline, "the writer's claim is never freed")
            claims = self.b("--json", "volume", "status", "w").json()["claims"]
            alive = running(pid)  # after the read: alive now means alive then
            if not claims:
                self.assertFalse(alive, "the claim of 'w' was freed while its writer ran")
                break
            if alive:
                seen_with_claim += 1
            time.sleep(0.1)  # a poll's pace, not a condition
        # The writer ignored SIGTERM: it ran on, claimed, until the kill
        # (exit 137: SIGKILL).  How many polls saw it depends on how fast
        # the shell answers (under a sanitizer and a loaded machine, two in
        # the 5 s kill timeout), so one is the condition.
        self.assertGreaterEqual(seen_with_claim, 1)
        a = self.b("--json", "alloc", "status", "writer").json()
        self.assertEqual(a["state"], "complete", a)
        self.assertEqual(a["exit_code"], 137, a)
        self.assertIn("at its deadline", a["message"])
        ext = self.external_id("w")
        self.assertTrue([c for c in self.calls(self.plugin1) if c.get("volume_id") == ext
                         and c["method"] == "NodeUnpublishVolume" and c["code"] == 0])


def running(pid):
    """Whether a process runs (a zombie, killed but not yet reaped, does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


if __name__ == "__main__":
    unittest.main()
