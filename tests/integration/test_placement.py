"""Placement (issue 29): `berth alloc run` without --node picks a node where
every volume can be claimed now, on a 3-server cluster with 3 clients whose
berth-hostpath plugins share one root and differ in topology and max volumes
(c1: zone a, at most 1 volume; c2: zone b; c3: zone a).  Through the shell as
an operator types it: placement by topology, the spread over nodes, the
refusal that lists every node with its reason, --explain (the same table,
nothing run), an ineligible node left out, and a retried run answered with
the alloc the first one placed; a group of 3 with per-alloc volumes spread
over 3 nodes; a volume group placed only where all its volumes are reachable; a lost member replaced on another node after its node went down."""

import json
import os
import re
import unittest
import urllib.request

from cluster import ClusterTestCase
from harness import SHORT_FENCE, TIME_SCALE, berth


class PlacementTest(ClusterTestCase):
    PREFIX = "berth-placement-"

    def setUp(self):
        super().setUp()
        shared = os.path.join(self.tmp, "shared-root")
        self.cluster.add_client("c1", plugin_args=["--topology", "zone=a", "--max-volumes", "1"],
                                shared_root=shared)
        self.cluster.add_client("c2", plugin_args=["--topology", "zone=b"], shared_root=shared)
        self.cluster.add_client("c3", plugin_args=["--topology", "zone=a"], shared_root=shared)
        self.wait(lambda: self.healthy_nodes() == 3, "the three node plugins healthy")

    def healthy_nodes(self):
        r = berth(self.via, "--json", "plugin", "status", "hostpath")
        return r.json()["nodes_healthy"] if r.code == 0 else 0

    def create(self, vid, zone, group=None):
        spec = {"id": vid, "plugin_id": "hostpath",
                "capabilities": [{"access_mode": "single-node-writer",
                                  "attachment_mode": "file-system"}]}
        if zone:
            spec["topology_request"] = {"required": [{"segments": {"zone": zone}}]}
        if group:
            spec["group"] = group
        self.b("volume", "create", "-", stdin=json.dumps(spec))

    def run_placed(self, *volumes, aid=None, expect=0):
        args = ["--json", "alloc", "run"]
        for v in volumes:
            args += ["--volume", v]
        if aid:
            args += ["--id", aid]
        r = self.b(*args, expect=expect)
        return r.json() if expect == 0 else json.loads(r.err)["error"]["message"]

    def explain(self, *volumes):
        args = ["--json", "alloc", "run", "--explain"]
        for v in volumes:
            args += ["--volume", v]
        return self.b(*args).json()

    def placements(self):
        """berth_placements_total by result, summed over the servers' /metrics (each
        placement is counted once, by the server that led then)."""
        out = {}
        for server in self.cluster.servers:
            port = int(re.search(r"metrics on 127\.0\.0\.1:(\d+)", server.banner).group(1))
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
                text = r.read().decode()
            for m in re.finditer(r'^berth_placements_total\{result="(\w+)"\} (\S+)$', text,
                                 re.M):
                out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
        return out

    def allocs(self):
        return sorted(a["id"] for a in self.b("--json", "alloc", "status").json())

    def test_placed_by_topology_spread_and_max_volumes(self):
        self.create("zb", "b")
        self.create("za1", "a")
        self.create("za2", "a")
        # Only c2 is in zone b.
        a = self.run_placed("data=zb")
        self.assertEqual(a["node_id"], "c2")
        self.assertEqual(a["state"], "running")
        self.assertTrue(a["volumes"][0]["published_path"])
        # Zone a: c1 and c3 both hold no alloc: by name, c1.
        b = self.run_placed("data=za1")
        self.assertEqual(b["node_id"], "c1")
        # c1 holds its one volume (max_volumes_per_node 1): c3, although
        # c3 now has as many allocs as c1 would.
        c = self.run_placed("data=za2")
        self.assertEqual(c["node_id"], "c3")
        claims = self.b("--json", "volume", "status", "za2").json()["claims"]
        self.assertEqual([(x["alloc_id"], x["node_id"]) for x in claims], [(c["id"], "c3")])

    def test_nothing_fits_lists_every_node_and_explain_runs_nothing(self):
        self.create("zb", "b")
        first = self.run_placed("data=zb", aid="first")
        self.assertEqual(first["node_id"], "c2")
        before = self.allocs()
        # The single-writer volume is taken: no node fits, each says why.
        why = self.run_placed("data=zb", aid="second", expect=4)
        self.assertIn("no node can run alloc 'second' now (3 nodes considered)", why)
        for node in ("c1", "c3"):
            self.assertIn("\n  %s: volume 'zb' is not accessible from node '%s'" % (node, node),
                          why)
        self.assertIn("\n  c2: volume 'zb' is single-node-writer and is already claimed", why)
        # Without --json: the same lines on stderr.
        r = self.b("alloc", "run", "--volume", "data=zb", "--id", "second", expect=4)
        self.assertIn("\n  c1: volume 'zb' is not accessible from node 'c1'", r.err)
        # The refused run left nothing behind.
        self.assertEqual(self.allocs(), before)
        # --explain: the same table, nothing run.
        table = self.explain("data=zb")
        self.assertIsNone(table["chosen"])
        self.assertEqual([n["node_id"] for n in table["nodes"]], ["c1", "c2", "c3"])
        self.assertTrue(all(not n["fits"] for n in table["nodes"]))
        self.b("alloc", "stop", "first")
        self.wait(lambda: self.b("--json", "volume", "status", "zb").json()["claims"] == [],
                  "zb released")
        table = self.explain("data=zb")
        self.assertEqual(table["chosen"], "c2")
        self.assertEqual([n["fits"] for n in table["nodes"]], [False, True, False])
        text = self.b("alloc", "run", "--explain", "--volume", "data=zb").out
        self.assertIn("c2", text)
        self.assertIn("outside the volume's accessible topology", text)
        self.assertIn("Would run on node 'c2'", text)
        self.assertEqual(self.allocs(), before)
        # An ineligible node is left out, with the command that enables it.
        self.b("node", "eligibility", "c2", "--disable")
        why = self.run_placed("data=zb", aid="third", expect=4)
        self.assertIn("\n  c2: node 'c2' is ineligible", why)
        self.assertIn("berth node eligibility c2 --enable", why)
        self.b("node", "eligibility", "c2", "--enable")
        self.assertEqual(self.run_placed("data=zb", aid="fourth")["node_id"], "c2")
        # The leader counted them: first and fourth placed; second (twice) and third
        # refused; three --explain.
        self.assertEqual(self.placements(), {"placed": 2, "none": 3, "explained": 3})

    def test_a_volume_group_places_where_all_its_volumes_are_reachable(self):
        # ga is reachable from c1 and c3 (zone a), but its group's gb only from c2.
        self.create("ga", "a", group="pair")
        self.create("gb", "b", group="pair")
        self.create("za1", "a")
        listed = self.b("--json", "volume", "status", "--group", "pair").json()
        self.assertEqual(sorted(v["id"] for v in listed), ["ga", "gb"])
        self.assertTrue(all(v["group"] == "pair" for v in listed))
        self.assertNotIn("za1", self.b("volume", "status", "--group", "pair").out)
        self.assertIn("pair", self.b("volume", "status", "ga").out)
        why = self.run_placed("data=ga", aid="g1", expect=4)
        for node in ("c1", "c3"):
            self.assertIn("\n  %s: volume 'ga' is in volume group 'pair', and volume 'gb' is not "
                          "accessible from node '%s' (outside the volume's accessible topology)"
                          % (node, node), why)
        self.assertIn("\n  c2: volume 'ga' is not accessible from node 'c2'", why)
        # The volume of no group is placed as before.
        self.assertEqual(self.run_placed("data=za1")["node_id"], "c1")
        # gb registered again without the group: ga is placed by its own topology.
        gb = self.b("--json", "volume", "status", "gb").json()
        spec = {"id": "gb", "plugin_id": "hostpath", "external_id": gb["external_id"],
                "capabilities": [{"access_mode": "single-node-writer",
                                  "attachment_mode": "file-system"}]}
        self.b("volume", "register", "-", stdin=json.dumps(spec))
        self.assertEqual([v["id"] for v in
                          self.b("--json", "volume", "status", "--group", "pair").json()], ["ga"])
        self.assertEqual(self.run_placed("data=ga", aid="g2")["node_id"], "c3")
        # A bad group name is refused at registration, naming the field.
        r = self.b("volume", "create", "-", expect=2, stdin=json.dumps(
            {"id": "bad", "plugin_id": "hostpath", "group": "no spaces",
             "capabilities": [{"access_mode": "single-node-writer",
                               "attachment_mode": "file-system"}]}))
        self.assertIn("group", r.err)
        self.assertIn("not a valid volume group name", r.err)

    def test_a_retried_run_answers_the_alloc_it_placed(self):
        self.create("za1", "a")
        a = self.run_placed("data=za1", aid="web")
        self.assertEqual(a["node_id"], "c1")
        again = self.run_placed("data=za1", aid="web")
        self.assertEqual(again["id"], "web")
        self.assertEqual(again["node_id"], "c1")
        r = self.b("alloc", "run", "--volume", "data=za1", "--id", "web")
        self.assertIn("exists already", r.out)
        # Pinned elsewhere with the same id: another run, refused.
        r = self.b("alloc", "run", "--node", "c3", "--volume", "data=za1", "--id", "web",
                   expect=4)
        self.assertIn("exists already with another node", r.err)


class GroupTest(ClusterTestCase):
    """A group of 3 allocs with a volume each (Nomad's count = 3 and
    per_alloc = true) on 3 clients alike: the volumes made from one spec
    with volume create --count, the allocs spread one per node."""
    PREFIX = "berth-group-"

    def setUp(self):
        super().setUp()
        shared = os.path.join(self.tmp, "shared-root")
        for name in ("c1", "c2", "c3"):
            self.cluster.add_client(name, shared_root=shared)
        self.wait(lambda: self.healthy_nodes() == 3, "the three node plugins healthy")

    def healthy_nodes(self):
        r = berth(self.via, "--json", "plugin", "status", "hostpath")
        return r.json()["nodes_healthy"] if r.code == 0 else 0

    def test_a_group_with_per_alloc_volumes_spreads_over_the_nodes(self):
        spec = json.dumps({"id": "db", "plugin_id": "hostpath",
                           "capabilities": [{"access_mode": "single-node-writer",
                                             "attachment_mode": "file-system"}]})
        made = self.b("--json", "volume", "create", "-", "--count", "3", stdin=spec).json()
        self.assertEqual([v["id"] for v in made], ["db[0]", "db[1]", "db[2]"])
        for i in range(3):
            self.assertEqual(self.b("--json", "volume", "status", "db[%d]" % i).json()["id"],
                             "db[%d]" % i)
        # A fourth member has no volume: named, and nothing is run.
        r = self.b("--json", "alloc", "run", "--group", "web", "--count", "4", "--per-alloc",
                   "--volume", "data=db", expect=3)
        why = json.loads(r.err)["error"]["message"]
        self.assertIn("'db[3]'", why)
        self.assertIn("nothing was run", why)
        self.assertEqual(self.b("--json", "alloc", "status").json(), [])

        allocs = self.b("--json", "alloc", "run", "--group", "web", "--count", "3",
                        "--per-alloc", "--volume", "data=db", "--", "sleep", "600").json()
        self.assertEqual([a["id"] for a in allocs], ["web[0]", "web[1]", "web[2]"])
        self.assertEqual(sorted(a["node_id"] for a in allocs), ["c1", "c2", "c3"])
        for i, a in enumerate(allocs):
            self.assertEqual(a["group"], "web")
            self.assertEqual(a["state"], "running")
            self.assertEqual(a["volumes"][0]["volume_id"], "db[%d]" % i)
            claims = self.b("--json", "volume", "status", "db[%d]" % i).json()["claims"]
            self.assertEqual([(c["alloc_id"], c["node_id"]) for c in claims],
                             [(a["id"], a["node_id"])])
        # Sent again: the same allocs, nothing run twice.
        again = self.b("--json", "alloc", "run", "--group", "web", "--count", "3",
                       "--per-alloc", "--volume", "data=db", "--", "sleep", "600").json()
        self.assertEqual([(a["id"], a["node_id"]) for a in again],
                         [(a["id"], a["node_id"]) for a in allocs])
        text = self.b("alloc", "status").out
        self.assertIn("GROUP", text)
        self.assertIn("web[1]", text)
        # Stopping the group stops every member and releases its volume
        # (with --json: one array of the members stopped).
        stopped = self.b("--json", "alloc", "stop", "--group", "web").json()
        self.assertEqual([(a["id"], a["state"]) for a in stopped],
                         [("web[0]", "complete"), ("web[1]", "complete"), ("web[2]", "complete")])
        for i in range(3):
            self.assertEqual(self.b("--json", "alloc", "status", "web[%d]" % i).json()["state"],
                             "complete")
            self.assertEqual(self.b("--json", "volume", "status", "db[%d]" % i).json()["claims"],
                             [])
        self.assertIn("has no alloc to stop", self.b("alloc", "stop", "--group", "web").out)
        # Sent again now, nothing runs, and the answer says the members ended.
        out = self.b("alloc", "run", "--group", "web", "--count", "3", "--per-alloc",
                     "--volume", "data=db", "--", "sleep", "600").out
        self.assertIn("0 of 3 allocs running, 3 complete", out)
        self.assertEqual(self.b("--json", "volume", "status", "db[0]").json()["claims"], [])
        # volume create --count sent again makes only what is missing.
        self.b("volume", "delete", "db[2]")
        out = self.b("volume", "create", "-", "--count", "3", stdin=spec).out
        self.assertIn("Volume 'db[0]' exists already; not created again", out)
        self.b("volume", "delete", "db[1]")
        again = self.b("--json", "volume", "create", "-", "--count", "3", stdin=spec).json()
        self.assertEqual([v["id"] for v in again], ["db[0]", "db[1]", "db[2]"])
        self.assertEqual(self.b("--json", "volume", "status", "db[2]").json()["id"], "db[2]")


class ReplaceTest(ClusterTestCase):
    """A lost member of a group is replaced (Nomad's reschedule): its node's
    client is killed, the node is marked down, the claim is released without
    it, and a new alloc web[0].1 claims the member's volume on another node;
    a member pinned with --node is run again on its node once that is back."""
    PREFIX = "berth-replace-"
    # (a short node-down timeout, scaled, as test_gc's)
    SERVER_ARGS = ("--node-down-timeout", "%g" % (6 * max(TIME_SCALE, 1))) + SHORT_FENCE
    CLIENT_ARGS = SHORT_FENCE

    def setUp(self):
        super().setUp()
        shared = os.path.join(self.tmp, "shared-root")
        self.clients = {}
        for name in ("c1", "c2", "c3"):
            _, self.clients[name] = self.cluster.add_client(name, shared_root=shared)
        self.wait(lambda: self.healthy_nodes() == 3, "the three node plugins healthy")

    def healthy_nodes(self):
        r = berth(self.via, "--json", "plugin", "status", "hostpath")
        return r.json()["nodes_healthy"] if r.code == 0 else 0

    def alloc(self, aid):
        r = berth(self.via, "--json", "alloc", "status", aid)
        return r.json() if r.code == 0 else None

    def node_status(self, nid):
        return self.b("--json", "node", "status", nid).json()["status"]

    def test_a_lost_member_is_replaced_on_another_node_after_its_release(self):
        spec = json.dumps({"id": "db", "plugin_id": "hostpath",
                           "capabilities": [{"access_mode": "single-node-writer",
                                             "attachment_mode": "file-system"}]})
        self.b("volume", "create", "-", "--count", "2", stdin=spec)
        allocs = self.b("--json", "alloc", "run", "--group", "web", "--count", "2",
                        "--per-alloc", "--volume", "data=db", "--", "sleep", "600").json()
        self.assertEqual([(a["id"], a["node_id"]) for a in allocs],
                         [("web[0]", "c1"), ("web[1]", "c2")])
        self.assertTrue(allocs[0]["placed"])
        # A pinned member of another group, on c1 too.
        pinned = self.b("--json", "alloc", "run", "--group", "pin", "--node", "c1", "--",
                        "sleep", "600").json()
        self.assertEqual(pinned[0]["id"], "pin[0]")

        self.clients["c1"].kill()
        self.wait(lambda: self.node_status("c1") == "down", "c1 marked down")
        self.wait(lambda: (self.alloc("web[0]") or {}).get("state") == "lost", "web[0] lost")
        # The replacement: same group, volume and command, on another node,
        # once the lost claim was released.
        self.wait(lambda: (self.alloc("web[0].1") or {}).get("state") == "running",
                  "web[0] replaced by web[0].1, running", timeout=120)
        new = self.alloc("web[0].1")
        self.assertEqual(new["replaces"], "web[0]")
        self.assertEqual(new["group"], "web")
        self.assertIn(new["node_id"], ("c2", "c3"))
        self.assertEqual(new["command"], ["sleep", "600"])
        self.assertEqual(new["volumes"][0]["volume_id"], "db[0]")
        claims = self.b("--json", "volume", "status", "db[0]").json()["claims"]
        self.assertEqual([(c["alloc_id"], c["node_id"]) for c in claims],
                         [("web[0].1", new["node_id"])])
        # web[1] was not touched; the lost alloc stays, naming what happened.
        self.assertEqual(self.alloc("web[1]")["state"], "running")
        self.assertEqual(self.alloc("web[0]")["state"], "lost")
        self.assertIn("Replaces", self.b("alloc", "status", "web[0].1").out)
        out = self.b("alloc", "stop", "web[0]").out
        self.assertIn("it was replaced by 'web[0].1'", out)
        # The pinned member waits for its node (no node takes it meanwhile).
        self.assertEqual(self.alloc("pin[0]")["state"], "lost")
        self.assertIsNone(self.alloc("pin[0].1"))
        self.clients["c1"].start()
        self.wait(lambda: self.node_status("c1") == "ready", "c1 ready again")
        self.wait(lambda: (self.alloc("pin[0].1") or {}).get("state") == "running",
                  "pin[0] replaced on c1 once it is back", timeout=120)
        self.assertEqual(self.alloc("pin[0].1")["node_id"], "c1")
        # Stopping the group stops the replacement and releases its volume;
        # nothing is replaced again.
        self.b("alloc", "stop", "--group", "web")
        self.assertEqual(self.alloc("web[0].1")["state"], "complete")
        self.assertEqual(self.b("--json", "volume", "status", "db[0]").json()["claims"], [])
        self.b("alloc", "stop", "--group", "pin")
        self.assertEqual(self.alloc("pin[0].1")["state"], "complete")


if __name__ == "__main__":
    unittest.main(verbosity=2)
