"""Volume health and usage (issue 14) end to end: a berthd --dev agent with
short intervals (--volume-health-interval 1s, --volume-stats-interval 1s)
driving a berth-hostpath of the test's own, through the real shell.  A
volume used by an alloc shows its used bytes grow once the alloc writes a
file (NodeGetVolumeStats, reported by the client, committed by the
leader); /metrics shows berth_volume_capacity_bytes, berth_volume_used_bytes
and berth_volume_abnormal for it; removing the volume's directory on the
plugin's side (moved away) makes it abnormal with the plugin's message (ListVolumes'
VOLUME_CONDITION) in volume status, in /metrics and once in the log; a new
claim is then refused with a clear error, the condition survives a SIGKILL
of berthd, the claim is taken with --allow-abnormal, and the existing claim
is kept throughout."""

import json
import os
import re
import shutil
import tempfile
import time
import unittest

from cluster import Plugin
from harness import SHELL_TIMEOUT, Agent, berth, undo_mounts

CAPS = [{"access_mode": "multi-node-multi-writer", "attachment_mode": "file-system"}]
SIZE = 1048576
BLOB = 300000


def spec(vid):
    return json.dumps({"id": vid, "plugin_id": "hostpath", "capabilities": CAPS,
                       "capacity_min": SIZE})


def series(text, name):
    """{(namespace, volume, node): value} of one metric family."""
    out = {}
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels, value = line.rsplit(" ", 1)
        d = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        out[(d.get("namespace"), d.get("volume"), d.get("node"))] = float(value)
    return out


class HealthTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-health-")
        self.plugin = Plugin(self.tmp, "hp", "csi-dev").start()
        self.trigger = os.path.join(self.tmp, "write-now")
        self.agent = Agent(os.path.join(self.tmp, "data"),
                           extra_args=["--plugin", "hostpath=monolith:" + self.plugin.socket,
                                       "--fingerprint-interval", "0.2",
                                       "--volume-health-interval", "1s",
                                       "--volume-stats-interval", "1s"]).start()
        self.addCleanup(self.cleanup)
        # Before the node's first fingerprint the node and the plugin may
        # not be registered yet.
        self.wait(lambda: self.ok_json("node", "status"), "the node registered")
        self.node = self.ok_json("node", "status")[0]["id"]
        self.wait(lambda: (self.ok_json("plugin", "status", "hostpath") or {})
                  .get("controllers_healthy") == 1, "the plugin's controller healthy")

    def cleanup(self):
        self.agent.kill()
        self.plugin.kill()
        undo_mounts(self.tmp)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def ok_json(self, *args):
        """The JSON answer of a command that succeeded, else None."""
        r = berth(self.agent, "--json", *args)
        return r.json() if r.code == 0 else None

    def b(self, *args, stdin=None, expect=0):
        r = berth(self.agent, "--timeout", SHELL_TIMEOUT, *args, stdin=stdin)
        self.assertEqual(r.code, expect, r)
        return r

    def wait(self, cond, what, timeout=60):
        deadline = time.time() + timeout * float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.1)
        self.fail("never: " + what)

    def volume(self, vid):
        return self.b("--json", "volume", "status", vid).json()

    def usage(self, vid):
        for u in self.volume(vid)["usage"]:
            if u["node_id"] == self.node:
                return u
        return None

    def metrics(self):
        return self.agent.scrape()[1]

    def calls(self, method):
        if not os.path.exists(self.plugin.call_log):
            return []
        with open(self.plugin.call_log) as f:
            return [c for c in (json.loads(l) for l in f if l.strip()) if c["method"] == method]

    def log_lines(self, text):
        with open(self.agent.log_path, errors="replace") as f:
            return [l for l in f if text in l]

    def test_usage_grows_abnormal_is_shown_logged_once_and_refuses_new_claims(self):
        self.b("volume", "create", "-", stdin=spec("db"))
        # The holder waits for the test's word, then writes BLOB bytes.
        self.b("alloc", "run", "--node", self.node, "--id", "holder", "--volume", "data=db",
               "--", "sh", "-c",
               "while [ ! -e %s ]; do sleep 0.1; done; "
               "head -c %d /dev/zero > \"$BERTH_VOLUME_DATA/blob\"; sleep 600"
               % (self.trigger, BLOB))
        self.wait(lambda: self.usage("db") is not None, "the node's usage of db reported")
        before = self.usage("db")
        self.assertEqual(before["capacity_bytes"], SIZE)
        self.assertLess(before["used_bytes"], BLOB)
        self.assertEqual(before["condition"], "ok")
        self.assertEqual(self.volume("db")["condition"], "ok")
        self.assertEqual(self.b("--json", "volume", "status", "--filter",
                                'condition == "abnormal"').json(), [])
        text = self.b("volume", "status", "db").out
        self.assertIn("Condition", text)
        self.assertIn("Usage", text)

        open(self.trigger, "w").close()
        self.wait(lambda: self.usage("db")["used_bytes"] >= BLOB,
                  "used bytes grown past the file the alloc wrote")
        u = self.usage("db")
        self.assertEqual(u["capacity_bytes"], SIZE)
        # node status --json has the node's report too.
        node = self.b("--json", "node", "status", self.node).json()
        node = node[0] if isinstance(node, list) else node
        self.assertEqual([(x["volume_id"], x["used_bytes"]) for x in node["volume_usage"]],
                         [("db", u["used_bytes"])])
        self.assertEqual(u["available_bytes"], SIZE - u["used_bytes"])

        # The three series, labelled namespace, volume, node.
        key = ("default", "db", self.node)
        self.wait(lambda: series(self.metrics(), "berth_volume_used_bytes").get(key, 0) >= BLOB,
                  "berth_volume_used_bytes of db")
        text = self.metrics()
        self.assertEqual(series(text, "berth_volume_capacity_bytes")[key], SIZE)
        self.assertEqual(series(text, "berth_volume_abnormal")[key], 0)
        self.assertEqual(series(text, "berth_volume_abnormal")[("default", "db", "")], 0)

        # Nothing changes: checks and reports go on, and commit nothing.
        index = self.agent.scrape()[0]["berth_log_last_index"]
        checks, stats = len(self.calls("ListVolumes")), len(self.calls("NodeGetVolumeStats"))
        self.wait(lambda: len(self.calls("ListVolumes")) >= checks + 3
                  and len(self.calls("NodeGetVolumeStats")) >= stats + 3,
                  "three more checks and reports")
        self.assertEqual(self.agent.scrape()[0]["berth_log_last_index"], index)

        # The volume's directory vanishes on the plugin's side (moved away: the
        # node's mounts keep the directory they hold, so that it can be put
        # back for the claim --allow-abnormal lets through below).
        external = self.volume("db")["external_id"]
        volume_dir = os.path.join(self.plugin.root, "volumes", external)
        os.rename(volume_dir, os.path.join(self.tmp, "moved-away"))
        self.wait(lambda: self.volume("db")["condition"] == "abnormal",
                  "the health check commits db abnormal")
        v = self.volume("db")
        self.assertIn("is missing", v["condition_message"])
        self.assertGreater(v["condition_since_ms"], 0)
        self.assertIn("abnormal: ", self.b("volume", "status", "db").out)
        self.assertEqual([v["id"] for v in self.b("--json", "volume", "status", "--filter",
                                                  'condition == "abnormal"').json()], ["db"])
        self.assertIn("is missing", self.b("volume", "status", "db").out)
        self.wait(lambda: series(self.metrics(), "berth_volume_abnormal")
                  .get(("default", "db", "")) == 1, "berth_volume_abnormal of db")
        # The node's plugin says so too (NodeGetVolumeStats' volume_condition).
        self.wait(lambda: self.usage("db")["condition"] == "abnormal",
                  "the node's report of db abnormal")
        self.wait(lambda: series(self.metrics(), "berth_volume_abnormal").get(key) == 1,
                  "berth_volume_abnormal of db on the node")

        # Logged once: three more checks later, still one line.
        checks = len(self.calls("ListVolumes"))
        self.wait(lambda: len(self.calls("ListVolumes")) >= checks + 3, "three more checks")
        lines = self.log_lines("volume turned abnormal")
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("is missing", lines[0])
        self.assertIn("db", lines[0])

        # New claims are refused, naming the volume, the message and the flag.
        refused = self.b("volume", "claim", "db", "--alloc", "late", "--node", self.node,
                         expect=4)
        self.assertIn("volume 'db' is abnormal", refused.err)
        self.assertIn("is missing", refused.err)
        self.assertIn("--allow-abnormal", refused.err)
        run = self.b("alloc", "run", "--node", self.node, "--id", "late-run", "--volume",
                     "data=db", "--", "sleep", "600", expect=4)
        self.assertIn("volume 'db' is abnormal", run.err)
        self.assertNotIn("late", [c["alloc_id"] for c in self.volume("db")["claims"]])
        # The existing claim is kept.
        self.assertEqual([c["alloc_id"] for c in self.volume("db")["claims"]], ["holder"])
        self.assertEqual(self.b("--json", "alloc", "status", "holder").json()["state"],
                         "running")
        # The condition is committed: it survives a SIGKILL of berthd.  The
        # agent comes back with the health check off, and the directory is
        # put back, so that the plugin can publish the volume for the claim
        # that --allow-abnormal lets through (the volume stays abnormal: no
        # check runs to clear it).
        self.agent.extra_args[self.agent.extra_args.index("--volume-health-interval") + 1] = \
            "never"
        self.agent.restart()
        self.wait(lambda: (self.ok_json("plugin", "status", "hostpath") or {})
                  .get("nodes_healthy") == 1, "the plugin healthy again")
        self.assertEqual(self.volume("db")["condition"], "abnormal")
        self.assertIn("is missing", self.volume("db")["condition_message"])
        os.rename(os.path.join(self.tmp, "moved-away"), volume_dir)
        self.b("volume", "claim", "db", "--alloc", "late", "--node", self.node, expect=4)
        taken = self.b("volume", "claim", "db", "--alloc", "late", "--node", self.node,
                       "--allow-abnormal")
        self.assertIn("late", taken.out + taken.err)
        self.assertEqual(sorted(c["alloc_id"] for c in self.volume("db")["claims"]),
                         ["holder", "late"])
        self.assertEqual(self.volume("db")["condition"], "abnormal")


if __name__ == "__main__":
    unittest.main()
