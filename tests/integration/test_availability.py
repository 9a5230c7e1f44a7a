"""Volume availability (issue 14): `berth volume availability VOLUME
active|pause|drain` on a 3-server cluster with a real client and
berth-hostpath on 127.0.0.1, through the shell as an operator types it.
pause refuses new claims and keeps the existing ones; drain also stops the
allocs that use the volume and releases its claims (NodeUnpublishVolume
read from the plugin's own call log); active takes claims again; the same
command twice succeeds and says it was so already."""

import json
import unittest

from cluster import ClusterTestCase
from harness import berth


def volume_spec(vid):
    return json.dumps({"id": vid, "plugin_id": "hostpath",
                       "capabilities": [{"access_mode": "multi-node-multi-writer",
                                         "attachment_mode": "file-system"}]})


class AvailabilityTest(ClusterTestCase):
    PREFIX = "berth-availability-"

    def setUp(self):
        super().setUp()
        self.plugin, _ = self.cluster.add_client("c1")
        self.wait(lambda: self.healthy_nodes() == 1, "the node plugin healthy")
        for vid in ("v1", "v2"):
            self.b("volume", "create", "-", stdin=volume_spec(vid))
        # v1: used by an alloc with a command and by a claim from the shell;
        # v2: by another alloc, which nothing here touches.
        self.b("alloc", "run", "--node", "c1", "--id", "web", "--volume", "data=v1", "--",
               "sleep", "600")
        self.b("volume", "claim", "v1", "--alloc", "manual", "--node", "c1")
        self.b("alloc", "run", "--node", "c1", "--id", "other", "--volume", "data=v2", "--",
               "sleep", "600")

    def healthy_nodes(self):
        r = berth(self.via, "--json", "plugin", "status", "hostpath")
        return r.json()["nodes_healthy"] if r.code == 0 else 0

    def volume(self, vid):
        return self.b("--json", "volume", "status", vid).json()

    def claims(self, vid):
        return sorted(c["alloc_id"] for c in self.volume(vid)["claims"])

    def alloc(self, alloc):
        r = berth(self.via, "--json", "alloc", "status", alloc)
        return r.json() if r.code == 0 else None

    def calls(self, method, volume_id):
        with open(self.plugin.call_log) as f:
            return [c for c in (json.loads(l) for l in f if l.strip())
                    if c["method"] == method and c.get("volume_id") == volume_id
                    and c["code"] == 0]

    def listed(self, expr):
        return sorted(v["id"] for v in
                      self.b("--json", "volume", "status", "--filter", expr).json())

    def test_pause_refuses_new_claims_keeps_existing_ones_and_active_takes_them_again(self):
        self.assertEqual(self.volume("v1")["availability"], "active")
        r = self.b("volume", "availability", "v1", "pause")
        self.assertIn("volume 'v1' availability set to pause (was active)", r.out)
        # Safe to repeat: the same command succeeds and says so.
        r = self.b("volume", "availability", "v1", "pause")
        self.assertIn("volume 'v1' is already pause", r.out)
        self.assertEqual(self.volume("v1")["availability"], "pause")
        self.assertIn("pause (new claims refused)", self.b("volume", "status", "v1").out)
        self.assertEqual(self.listed('availability == "pause"'), ["v1"])
        self.assertEqual(self.listed('availability == "active"'), ["v2"])

        # New claims are refused, naming the volume and the fix.
        refused = self.b("volume", "claim", "v1", "--alloc", "late", "--node", "c1", expect=4)
        self.assertIn("volume 'v1' is paused", refused.err)
        self.assertIn("berth volume availability v1 active", refused.err)
        run = self.b("alloc", "run", "--node", "c1", "--id", "late-run", "--volume",
                     "data=v1", "--", "sleep", "600", expect=4)
        self.assertIn("volume 'v1' is paused", run.err)
        # The existing claims stay, their alloc runs, and a repeat of one of
        # them (its answer was lost) is answered as before.
        self.assertEqual(self.claims("v1"), ["manual", "web"])
        self.assertEqual(self.alloc("web")["state"], "running")
        self.b("volume", "claim", "v1", "--alloc", "manual", "--node", "c1")
        self.assertEqual(self.calls("NodeUnpublishVolume", self.volume("v1")["external_id"]), [])
        # Other volumes are not affected.
        self.b("volume", "claim", "v2", "--alloc", "side", "--node", "c1")

        r = self.b("volume", "availability", "v1", "active")
        self.assertIn("availability set to active (was pause)", r.out)
        self.b("volume", "availability", "v1", "active")
        self.b("volume", "claim", "v1", "--alloc", "late", "--node", "c1")
        self.assertEqual(self.claims("v1"), ["late", "manual", "web"])
        # An unknown availability is refused by the shell.
        bad = self.b("volume", "availability", "v1", "paused", expect=2)
        self.assertIn("active, pause, drain", bad.err)
        self.b("volume", "availability", "nope", "pause", expect=3)

    def test_drain_stops_the_allocs_using_the_volume_and_frees_its_claims(self):
        external = self.volume("v1")["external_id"]
        r = self.b("volume", "availability", "v1", "drain")
        self.assertIn("availability set to drain (was active)", r.out)
        self.wait(lambda: self.claims("v1") == [], "every claim on v1 freed")
        web = self.alloc("web")
        self.assertEqual(web["state"], "complete", web)
        self.assertIn("drain of volume 'v1'", web["message"])
        # The claim made from the shell was released like volume release
        # does: its alloc had no other volume, so it is gone.
        self.wait(lambda: self.alloc("manual") is None, "the command-less alloc deleted")
        # Both publications were undone on the node.
        self.assertEqual(len(self.calls("NodeUnpublishVolume", external)), 2)
        # The other volume and its alloc are untouched.
        self.assertEqual(self.alloc("other")["state"], "running")
        self.assertEqual(self.claims("v2"), ["other"])

        self.assertEqual(self.volume("v1")["availability"], "drain")
        refused = self.b("volume", "claim", "v1", "--alloc", "late", "--node", "c1", expect=4)
        self.assertIn("volume 'v1' is draining", refused.err)
        self.assertIn("berth volume availability v1 active", refused.err)
        self.assertIn("is already drain", self.b("volume", "availability", "v1", "drain").out)

        # active undoes it: claims are taken again, and nothing is stopped.
        self.b("volume", "availability", "v1", "active")
        self.b("volume", "claim", "v1", "--alloc", "late", "--node", "c1")
        self.b("alloc", "run", "--node", "c1", "--id", "again", "--volume", "data=v1", "--",
               "sleep", "600")
        self.assertEqual(self.claims("v1"), ["again", "late"])
        self.assertEqual(self.alloc("again")["state"], "running")

    def test_drain_of_a_paused_volume_and_a_new_leader_keep_the_availability(self):
        self.b("volume", "availability", "v2", "pause")
        leader = self.cluster.leader()
        leader.kill()
        self.cluster.wait_leader(exclude=leader)
        self.via = self.cluster.any_address()
        # The availability was committed: the new leader has it.
        self.wait(lambda: berth(self.via, "--json", "volume", "status", "v2").code == 0,
                  "the new leader answers")
        self.assertEqual(self.volume("v2")["availability"], "pause")
        self.b("volume", "claim", "v2", "--alloc", "late", "--node", "c1", expect=4)
        # Drain from pause: the new leader drives it.
        self.b("volume", "availability", "v2", "drain")
        self.wait(lambda: self.claims("v2") == [], "every claim on v2 freed")
        self.assertEqual(self.alloc("other")["state"], "complete")
        self.assertEqual(self.alloc("web")["state"], "running")


if __name__ == "__main__":
    unittest.main(verbosity=2)
