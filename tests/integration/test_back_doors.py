"""Paths around the fence (issue 59), between real processes: 3 servers and
clients on 127.0.0.1, driven through the shell.

- Item 2: an alloc removed while its run's answer is on the way.  A
  command-less alloc is deleted when an operator releases its last claim; the
  leader, awaiting the node's answer to the alloc's run, must find it gone
  and answer, not throw (the leader is linked to its server: a throw took the
  server down).  The client holds its answer back (the test's hold point
  BERTH_HOLD=node.run-answer=MS, persistence/crashpoint.hpp) while the test
  releases the claim.
- An operator's `volume release` of a claim whose alloc still runs its
  command is refused at the leader, and so is `volume deregister --force` of
  its volume: the node refused the NodeUnpublish from under the command, the
  claim stayed in release, and --force then dropped it while the writer ran.
- A client whose --kill-timeout the servers' lease margin does not cover is
  refused its lease and exits, naming the inequality and the fix."""

import json
import os
import subprocess
import unittest

from cluster import ClusterTestCase
from harness import BERTH, SHELL_TIMEOUT, TIME_SCALE, berth

HOLD_MS = int(3000 * max(TIME_SCALE, 1))


def volume_spec(vid):
    return json.dumps({"id": vid, "plugin_id": "hostpath",
                       "capabilities": [{"access_mode": "single-node-writer",
                                         "attachment_mode": "file-system"}]})


class BackDoorsTest(ClusterTestCase):
    PREFIX = "berth-back-doors-"

    def start_client(self, name, env=None, client_args=()):
        """A client and its plugin; env: more variables for the client."""
        saved = dict(os.environ)
        os.environ.update(env or {})
        try:
            plugin, client = self.cluster.add_client(name, client_args=client_args)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return plugin, client

    def plugin_healthy(self, count):
        r = berth(self.via, "--json", "plugin", "status", "hostpath")
        return r.code == 0 and r.json()["nodes_healthy"] == count

    def alloc_state(self, alloc):
        r = berth(self.via, "--json", "alloc", "status", alloc)
        return r.json()["state"] if r.code == 0 else None

    def claims(self, vid):
        return self.b("--json", "volume", "status", vid).json().get("claims", [])

    def test_an_alloc_removed_while_its_runs_answer_is_on_the_way(self):
        self.start_client("c1", env={"BERTH_HOLD": "node.run-answer=%d" % HOLD_MS})
        self.wait(lambda: self.plugin_healthy(1), "the plugin instance healthy")
        self.b("volume", "create", "-", stdin=volume_spec("v"))
        run = subprocess.Popen([BERTH, "--address", self.via, "--timeout", SHELL_TIMEOUT,
                                "alloc", "run", "--node", "c1", "--id", "w", "--volume",
                                "data=v"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        try:
            # Committed running; its node's answer is held back.
            self.wait(lambda: self.alloc_state("w") == "running", "w committed running")
            self.assertIsNone(run.poll(), "the run answered before its node did")
            # Its last claim released: the command-less alloc is deleted.
            self.b("volume", "release", "v", "--alloc", "w")
            self.wait(lambda: berth(self.via, "alloc", "status", "w").code == 3, "w removed")
            out, err = run.communicate(timeout=60 * max(TIME_SCALE, 1))
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
        self.assertEqual(run.returncode, 0, (out, err))
        self.assertIn("alloc 'w' running on node 'c1'", out)
        self.assertIn("it was removed since", out)
        # No server went down with the leader's lookup, and the cluster serves.
        for s in self.cluster.servers:
            self.assertTrue(s.alive(), "%s ended" % s.name)
        self.assertEqual(self.claims("v"), [])
        self.b("volume", "claim", "v", "--alloc", "after", "--node", "c1")

    def test_a_claim_whose_alloc_still_runs_is_neither_released_nor_deregistered(self):
        self.start_client("c1")
        self.wait(lambda: self.plugin_healthy(1), "the plugin instance healthy")
        self.b("volume", "create", "-", stdin=volume_spec("d"))
        self.b("alloc", "run", "--node", "c1", "--id", "writer", "--volume", "data=d", "--",
               "sleep", "600")
        r = self.b("volume", "release", "d", "--alloc", "writer", expect=4)
        self.assertIn("alloc 'writer' still runs its command on node 'c1'", r.err)
        self.assertIn("berth alloc stop writer", r.err)
        r = self.b("volume", "deregister", "d", "--force", expect=4)
        self.assertIn("volume 'd' is not deregistered", r.err)
        self.assertIn("berth alloc stop writer", r.err)
        # Nothing changed: the claim is taken, the volume registered.
        claims = self.claims("d")
        self.assertEqual([(c["alloc_id"], c["state"]) for c in claims], [("writer", "taken")])
        self.assertEqual(self.alloc_state("writer"), "running")
        # Stopped, its claim is released through the node; then --force has
        # nothing left to refuse.
        self.b("alloc", "stop", "writer")
        self.wait(lambda: self.claims("d") == [], "the writer's claim released")
        self.b("volume", "deregister", "d", "--force")
        self.b("volume", "status", "d", expect=3)

    def test_a_client_whose_kill_timeout_the_margin_does_not_cover_exits(self):
        # The servers' defaults: --node-down-timeout 45 s, --node-lease 15 s,
        # --fence-unmount-time 5 s: a client may take at most 24.705 s.
        _, client = self.start_client("long", client_args=("--kill-timeout", "30"))
        code = client.proc.wait(timeout=60 * max(TIME_SCALE, 1))
        self.assertEqual(code, 70)
        with open(client.log_path) as f:
            log = f.read()
        self.assertIn("node 'long': its client's --kill-timeout 30 s is longer than the servers' "
                      "lease margin covers (at most 24.705 s", log)
        self.assertIn("Start it with --kill-timeout 24.705 s or less", log)
        # One within the margin, though longer than the servers' own 5 s, is
        # served.
        _, ok = self.start_client("ok", client_args=("--kill-timeout", "20"))

        def ready():
            r = berth(self.via, "--json", "node", "status", "ok")
            return r.code == 0 and r.json()["status"] == "ready"
        self.wait(ready, "node 'ok' ready")
        self.assertTrue(ok.alive())


if __name__ == "__main__":
    unittest.main()
