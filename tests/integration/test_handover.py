"""A volume handed from one alloc to the next as a script does it (issue 59,
item 7): wait until `alloc status` says the holder is complete, then run the
next alloc of the volume at once.  An alloc's end is committed before the
watcher frees its claims (through the node, about 0.1 s later); the next
claim waits for those releases instead of being refused with "already
claimed".  3 servers and a client as real processes on 127.0.0.1, driven
through the shell."""

import json
import unittest

from cluster import ClusterTestCase
from harness import berth


def volume_spec(vid, mode):
    return json.dumps({"id": vid, "plugin_id": "hostpath",
                       "capabilities": [{"access_mode": mode,
                                         "attachment_mode": "file-system"}]})


class HandoverTest(ClusterTestCase):
    PREFIX = "berth-handover-"

    def setUp(self):
        super().setUp()
        self.plugin, self.client = self.cluster.add_client("c1")
        self.wait(self.plugin_healthy, "the plugin instance healthy")

    def plugin_healthy(self):
        r = berth(self.via, "--json", "plugin", "status", "hostpath")
        return r.code == 0 and r.json()["nodes_healthy"] == 1

    def state(self, alloc):
        return self.b("--json", "alloc", "status", alloc).json()["state"]

    def test_the_next_alloc_runs_as_soon_as_its_holder_is_complete(self):
        self.b("volume", "create", "-", stdin=volume_spec("v", "single-node-writer"))
        for i in range(8):
            alloc = "w%d" % i
            # Pinned to c1, or placed (every other one): exit 0 asserted,
            # never "already claimed by alloc 'w<i-1>'" nor "no node fits".
            where = ("--node", "c1") if i % 2 == 0 else ()
            self.b("alloc", "run", *where, "--id", alloc, "--volume", "data=v", "--",
                   "sh", "-c", 'echo %s >> "$BERTH_VOLUME_DATA/log"' % alloc)
            self.wait(lambda: self.state(alloc) == "complete", alloc + " complete")
        claims = self.b("--json", "volume", "status", "v").json()["claims"]
        self.assertLessEqual(len(claims), 1, claims)
        # The same from the shell's own claims: a claim of a volume whose
        # holder ended waits for that release too.
        self.b("volume", "claim", "v", "--alloc", "shell1", "--node", "c1")

    def test_a_claim_held_by_a_running_alloc_is_still_refused_at_once(self):
        self.b("volume", "create", "-", stdin=volume_spec("r", "single-node-writer"))
        self.b("alloc", "run", "--node", "c1", "--id", "holder", "--volume", "data=r", "--",
               "sleep", "600")
        r = self.b("alloc", "run", "--node", "c1", "--id", "next", "--volume", "data=r", "--",
                   "true", expect=4)
        self.assertIn("already claimed", r.err)
        self.assertIn("holder", r.err)


if __name__ == "__main__":
    unittest.main()
