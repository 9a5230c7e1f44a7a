"""Volume expansion (issue 14): `berth volume expand VOLUME SIZE` and a
volume create again with a larger capacity_min, on a 3-server cluster with
a real client and berth-hostpath on 127.0.0.1, through the shell as an
operator types it.

A volume used by a running alloc (writing a file into it) is expanded:
berth-hostpath's own call log shows ControllerExpandVolume and then
NodeExpandVolume with the volume's id, the size asked and the staging and
target paths the client published it at; volume status shows the capacity
the plugin reported.  The servers run with the crash point
expand.controller_committed armed: the leader is killed right after the
controller step is committed, before NodeExpandVolume, and the new leader
resumes the expansion from the committed state.  Shrinking is refused and
changes nothing; the same size again succeeds and changes nothing."""

import json
import os
import time
import unittest

from cluster import ClusterTestCase
from harness import SHELL_TIMEOUT, berth

MiB = 1 << 20
CRASHPOINT = "expand.controller_committed"


def volume_spec(vid, capacity):
    return json.dumps({"id": vid, "plugin_id": "hostpath", "capacity_min": capacity,
                       "capabilities": [{"access_mode": "single-node-writer",
                                         "attachment_mode": "file-system"}]})


class ExpandTest(ClusterTestCase):
    PREFIX = "berth-expand-"

    def setUp(self):
        # Every server is armed: whichever leads when the controller step
        # commits stops there (the crash point is passed by the leader only).
        os.environ["BERTH_CRASHPOINT"] = CRASHPOINT
        try:
            super().setUp()
        finally:
            del os.environ["BERTH_CRASHPOINT"]
        self.plugin, _ = self.cluster.add_client("c1")
        self.wait(lambda: self.healthy_nodes() == 1, "the node plugin healthy")

    def healthy_nodes(self):
        r = berth(self.via, "--json", "plugin", "status", "hostpath")
        return r.json()["nodes_healthy"] if r.code == 0 else 0

    def use_live_server(self):
        self.via = self.cluster.any_address()

    def volume(self, vid):
        r = berth(self.via, "--json", "--timeout", "10", "volume", "status", vid)
        if r.code != 0:
            return None
        return r.json()

    def calls(self, method, volume_id=None):
        if not os.path.exists(self.plugin.call_log):
            return []
        with open(self.plugin.call_log) as f:
            return [c for c in (json.loads(l) for l in f if l.strip())
                    if c["method"] == method and c["code"] == 0
                    and (volume_id is None or c.get("volume_id") == volume_id)]

    def alloc_running(self, alloc):
        r = berth(self.via, "--json", "alloc", "status", alloc)
        return r.code == 0 and r.json()["state"] == "running"

    def test_expand_resumes_after_a_leader_crash_refuses_shrinking_and_repeats(self):
        created = self.b("--json", "volume", "create", "-", stdin=volume_spec("data", "1MiB"))
        ext = created.json()["volume"]["external_id"] if "volume" in created.json() else \
            self.volume("data")["external_id"]
        self.assertEqual(self.volume("data")["capacity_bytes"], MiB)
        self.b("alloc", "run", "--node", "c1", "--id", "writer", "--volume", "data=data", "--",
               "sh", "-c", 'echo before > "$BERTH_VOLUME_DATA/file"; '
                           'while true; do date >> "$BERTH_VOLUME_DATA/log"; sleep 0.2; done')
        self.wait(lambda: self.alloc_running("writer"), "the alloc running")
        stage = self.calls("NodeStageVolume", ext)
        publish = self.calls("NodePublishVolume", ext)
        self.assertEqual(len(stage), 1, stage)
        self.assertEqual(len(publish), 1, publish)
        staging_path = stage[0]["staging_target_path"]
        target_path = publish[0]["target_path"]

        leader = self.cluster.leader()
        self.assertIsNotNone(leader)
        self.via = leader.address
        # The leader dies after committing the controller step: the shell
        # may see it die (or retry the request on the new leader).
        berth(self.via, "--timeout", SHELL_TIMEOUT, "volume", "expand", "data", "2MiB", timeout=90)
        self.wait(lambda: not leader.alive(), "the leader stopped at the crash point")
        self.assertEqual(leader.proc.returncode, 137)
        with open(leader.log_path, errors="replace") as f:
            self.assertIn("crash point %s reached" % CRASHPOINT, f.read())
        grown = self.calls("ControllerExpandVolume", ext)
        self.assertEqual(len(grown), 1, grown)
        self.assertEqual(grown[0]["required_bytes"], str(2 * MiB))

        # The new leader resumes: NodeExpandVolume where the alloc has it.
        self.cluster.wait_leader(exclude=leader)
        self.use_live_server()

        def expanded():
            v = self.volume("data")
            return v is not None and v["expansion"] is None and v["capacity_bytes"] == 2 * MiB
        self.wait(expanded, "the expansion finished on the new leader")
        node = self.calls("NodeExpandVolume", ext)
        self.assertEqual(len(node), 1, node)
        self.assertEqual(node[0]["volume_path"], target_path)
        self.assertEqual(node[0]["staging_target_path"], staging_path)
        self.assertEqual(node[0]["required_bytes"], str(2 * MiB))
        with open(self.plugin.call_log) as f:
            order = [c["method"] for c in (json.loads(l) for l in f if l.strip())
                     if c["method"] in ("ControllerExpandVolume", "NodeExpandVolume")
                     and c["code"] == 0]
        self.assertEqual(order, ["ControllerExpandVolume", "NodeExpandVolume"])
        v = self.volume("data")
        self.assertEqual(v["capacity_min"], 2 * MiB)
        status = self.b("volume", "status", "data").out
        self.assertIn("reported 2 MiB", status)
        # The alloc kept running and writing through it all.
        self.assert_writer_running()
        self.assertEqual(len(v["claims"]), 1)

        # Shrinking is refused and changes nothing.
        before = self.volume("data")
        r = self.b("volume", "expand", "data", "1MiB", expect=4)
        self.assertIn("cannot be shrunk", r.err + r.out)
        self.assertEqual(self.volume("data"), before)
        # A size that is not one is refused by the shell.
        r = self.b("volume", "expand", "data", "lots", expect=2)
        self.assertIn("not a size", r.err + r.out)

        # The same size again: a success that changes nothing.
        r = self.b("volume", "expand", "data", "2MiB")
        self.assertIn("already", r.out)
        self.assertEqual(self.volume("data"), before)
        self.assertEqual(len(self.calls("ControllerExpandVolume", ext)), 1)

        # A volume create again with a larger capacity_min is an expansion
        # too.  The first leader comes back (unarmed) so that the cluster
        # keeps a majority when the second leader, armed as well, stops at
        # the crash point in its turn; the third resumes it.
        leader.start()
        leader2 = self.cluster.leader()
        self.via = leader2.address
        berth(self.via, "--timeout", SHELL_TIMEOUT, "volume", "create", "-",
              stdin=volume_spec("data", "4MiB"), timeout=90)
        self.wait(lambda: not leader2.alive(), "the second leader stopped at the crash point")
        self.cluster.wait_leader(exclude=leader2)
        self.use_live_server()

        def expanded4():
            v = self.volume("data")
            return v is not None and v["expansion"] is None and v["capacity_bytes"] == 4 * MiB
        self.wait(expanded4, "the expansion to 4 MiB finished on the third leader")
        self.assertEqual([c["required_bytes"] for c in self.calls("ControllerExpandVolume", ext)],
                         [str(2 * MiB), str(4 * MiB)])
        self.assertEqual([c["required_bytes"] for c in self.calls("NodeExpandVolume", ext)],
                         [str(2 * MiB), str(4 * MiB)])
        self.assert_writer_running()

    def assert_writer_running(self):
        """The writer alloc runs; when not, says how it ended and what its
        client logged (warnings and up), for the next reader of a failure."""
        r = berth(self.via, "--json", "--timeout", "10", "alloc", "status", "writer")
        if r.code == 0 and r.json()["state"] == "running":
            return
        client_log = os.path.join(self.tmp, "c1.log")
        lines = []
        if os.path.exists(client_log):
            with open(client_log, errors="replace") as f:
                lines = [l for l in f if " warn " in l or " error " in l][-20:]
        self.fail("the writer alloc is not running: %r\nc1's warnings:\n%s" % (r, "".join(lines)))


if __name__ == "__main__":
    unittest.main()
