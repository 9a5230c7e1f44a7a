"""Snapshots, clones and volume modify (issue 14, berth side) end to end: a
berthd --dev agent driving a berth-hostpath of the test's own (with a call
log), through the real shell.  An alloc writes a file into a volume; a
snapshot of it, a volume created from that snapshot and a clone of the
volume all hold the file; a second delete of the snapshot says it was
deleted already; volume modify reaches the plugin and is committed (it
survives a SIGKILL of berthd); plugins that lack a capability are refused
before any CSI call; a secret given with --secret never appears in the
shell's output, berthd's log at --log-level trace, or /metrics."""

import json
import os
import shutil
import tempfile
import unittest

from cluster import Plugin
from harness import Agent, berth, undo_mounts

SECRET = "hunter2-snapshots"
CAPS = [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}]


def spec(vid, **more):
    d = {"id": vid, "plugin_id": "hostpath", "capabilities": CAPS, "capacity_min": 1048576}
    d.update(more)
    return json.dumps(d)


class SnapshotsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-snapshots-")
        self.plugin = Plugin(self.tmp, "hp", "csi-dev").start()
        self.agent = Agent(os.path.join(self.tmp, "data"),
                           extra_args=["--plugin", "hostpath=monolith:" + self.plugin.socket,
                                       "--log-level", "trace"]).start()
        self.outputs = []
        self.addCleanup(self.cleanup)
        self.node = self.b("--json", "node", "status").json()[0]["id"]
        self.wait(self.controller_healthy, "the plugin's controller healthy")

    def controller_healthy(self):
        # Not registered yet (not_found) until the node's first fingerprint.
        r = berth(self.agent, "--json", "plugin", "status", "hostpath")
        return r.code == 0 and r.json()["controllers_healthy"] == 1

    def cleanup(self):
        self.agent.kill()
        self.plugin.kill()
        undo_mounts(self.tmp)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def b(self, *args, stdin=None, expect=0):
        r = berth(self.agent, "--timeout", "30", *args, stdin=stdin)
        self.outputs += [r.out, r.err]
        self.assertEqual(r.code, expect, r)
        return r

    def wait(self, cond, what, timeout=60):
        import time
        deadline = time.time() + timeout * float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.1)
        self.fail("never: " + what)

    def calls(self, method):
        if not os.path.exists(self.plugin.call_log):
            return []
        with open(self.plugin.call_log) as f:
            return [json.loads(l) for l in f if l.strip() and json.loads(l).get("method") == method]

    def plugin_state(self):
        text = ""
        for name in ("state.json", "state.journal"):
            path = os.path.join(self.plugin.root, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    text += f.read()
        return text

    def volume(self, vid):
        return self.b("--json", "volume", "status", vid).json()

    def file_in(self, vid, name="file.txt"):
        path = os.path.join(self.plugin.root, "volumes", self.volume(vid)["external_id"], name)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return f.read()

    def alloc_state(self, alloc):
        r = berth(self.agent, "--json", "alloc", "status", alloc)
        return r.json()["state"] if r.code == 0 else None

    def test_snapshot_restore_clone_delete_modify(self):
        self.b("volume", "create", "-", stdin=spec("db"))
        # An alloc writes the file through the volume's published path.
        self.b("alloc", "run", "--node", self.node, "--id", "writer", "--volume", "data=db", "--",
               "sh", "-c", "echo hello-from-alloc > \"$BERTH_VOLUME_DATA/file.txt\"")
        self.wait(lambda: self.alloc_state("writer") == "complete"
                  and self.volume("db")["claims"] == [], "the writer completes, its claim freed")
        self.assertEqual(self.file_in("db"), "hello-from-alloc\n")

        # create: the answer names the snapshot, its source, size, time, readiness.
        created = self.b("--json", "volume", "snapshot", "create", "db", "nightly",
                         "--parameter", "label=x", "--secret", "token=" + SECRET).json()
        snap = created["id"]
        self.assertTrue(snap)
        self.assertEqual(created["source_volume_id"], "db")
        self.assertEqual(created["source_external_id"], self.volume("db")["external_id"])
        self.assertEqual(created["size_bytes"], 1048576)
        self.assertGreater(created["created_at_ms"], 0)
        self.assertTrue(created["ready_to_use"])
        call = self.calls("CreateSnapshot")[-1]
        self.assertEqual((call["code_name"], call["snapshot_name"], call["source_volume_id"]),
                         ("OK", "nightly", self.volume("db")["external_id"]))
        # The same command again (a retry) finds the same snapshot.
        again = self.b("--json", "volume", "snapshot", "create", "db", "nightly",
                       "--parameter", "label=x").json()
        self.assertEqual(again["id"], snap)
        text = self.b("volume", "snapshot", "create", "db").out  # a generated name
        self.assertIn("created (CreateSnapshot)", text)
        self.assertIn("READY", text)

        listed = self.b("--json", "volume", "snapshot", "list").json()
        self.assertIn(snap, [s["id"] for s in listed])
        self.assertEqual(len(listed), 2)
        mine = next(s for s in listed if s["id"] == snap)
        self.assertEqual((mine["source_volume_id"], mine["plugin_id"]), ("db", "hostpath"))
        page = self.b("--json", "volume", "snapshot", "list", "--plugin", "hostpath",
                      "--per-page", "1").json()
        self.assertEqual(len(page["snapshots"]), 1)
        self.assertTrue(page["next_page_token"])
        rest = self.b("--json", "volume", "snapshot", "list", "--plugin", "hostpath",
                      "--per-page", "1", "--page-token", page["next_page_token"]).json()
        self.assertEqual(len(rest["snapshots"]), 1)
        self.assertNotEqual(rest["snapshots"][0]["id"], page["snapshots"][0]["id"])
        self.assertIn(snap, self.b("volume", "snapshot", "list").out)

        # A volume from the snapshot holds the file; its status names the snapshot.
        self.b("volume", "create", "-", stdin=spec("restored", snapshot_id=snap))
        self.assertEqual(self.file_in("restored"), "hello-from-alloc\n")
        self.assertEqual(self.volume("restored")["snapshot_id"], snap)
        self.assertIn("Snapshot ID", self.b("volume", "status", "restored").out)

        # A clone of the volume holds it too.
        self.b("volume", "create", "-", stdin=spec("copy", clone_id="db"))
        self.assertEqual(self.file_in("copy"), "hello-from-alloc\n")
        self.assertEqual(self.volume("copy")["clone_id"], "db")
        # (The file is the proof of volume_content_source: berth-hostpath
        # copies the source only when CreateVolume names one.)

        # Both sources at once: refused, naming both fields, before any CSI call.
        creates = len(self.calls("CreateVolume"))
        r = self.b("volume", "create", "-", stdin=spec("both", snapshot_id=snap, clone_id="db"),
                   expect=2)
        self.assertIn("snapshot_id, clone_id", r.err)
        self.b("volume", "create", "-", stdin=spec("ghost", clone_id="nosuch"), expect=3)
        self.b("volume", "create", "-", stdin=spec("ghost", snapshot_id="snap-nosuch"), expect=4)
        self.assertEqual(len(self.calls("CreateVolume")), creates + 1)  # only the last reached it

        # delete, twice: the second says it was deleted already.
        r = self.b("volume", "snapshot", "delete", "hostpath", snap, "--secret",
                   "token=" + SECRET)
        self.assertIn("deleted (DeleteSnapshot)", r.out)
        r = self.b("volume", "snapshot", "delete", "hostpath", snap)
        self.assertIn("already deleted", r.out)
        self.assertNotIn(snap, [s["id"] for s in
                                self.b("--json", "volume", "snapshot", "list").json()])

        # modify: reaches the plugin, then is committed (kept across a SIGKILL).
        r = self.b("--json", "volume", "modify", "copy", "--parameter", "iops=100",
                   "--secret", "token=" + SECRET)
        self.assertEqual(r.json()["mutable_parameters"], {"iops": "100"})
        call = self.calls("ControllerModifyVolume")[-1]
        self.assertEqual((call["code_name"], call["volume_id"]),
                         ("OK", self.volume("copy")["external_id"]))
        self.assertIn("iops", self.plugin_state())  # the plugin keeps it
        self.b("volume", "modify", "copy", "--parameter", "tier=gold")
        self.assertEqual(self.volume("copy")["mutable_parameters"],
                         {"iops": "100", "tier": "gold"})
        self.assertIn("Mutable Parameters", self.b("volume", "status", "copy").out)
        # A parameter the plugin refuses is not committed.
        self.b("volume", "modify", "copy", "--parameter", "bad key!=1", expect=2)
        self.assertEqual(self.volume("copy")["mutable_parameters"],
                         {"iops": "100", "tier": "gold"})
        self.agent.restart()
        self.wait(lambda: berth(self.agent, "--json", "volume", "status", "copy").code == 0,
                  "the agent serves again")
        self.assertEqual(self.volume("copy")["mutable_parameters"],
                         {"iops": "100", "tier": "gold"})
        self.assertEqual(self.volume("restored")["snapshot_id"], snap)

        # The secret is in no output, no log line, no metric.
        _, metrics = self.agent.scrape()
        self.outputs.append(metrics)
        with open(self.agent.log_path) as f:
            log = f.read()
        self.assertIn("CreateSnapshot", log)  # trace: every CSI call is logged
        self.outputs.append(log)
        for text in self.outputs:
            self.assertNotIn(SECRET, text)

    def test_group_snapshot_of_three_volumes_restored(self):
        # berth-hostpath offers the GroupController: the fingerprint says so.
        plugin = self.b("--json", "plugin", "status", "hostpath").json()
        self.assertTrue(plugin["controllers"][0]["group_snapshot"])
        # Three volumes of one plugin, each with its own data, written by one alloc.
        for vid in ("ga", "gb", "gc"):
            self.b("volume", "create", "-", stdin=spec(vid))
        self.b("alloc", "run", "--node", self.node, "--id", "gwriter",
               "--volume", "a=ga", "--volume", "b=gb", "--volume", "c=gc", "--",
               "sh", "-c", "for v in A B C; do eval d=\\$BERTH_VOLUME_$v; "
               "echo data-of-$v > \"$d/file.txt\"; done")
        self.wait(lambda: self.alloc_state("gwriter") == "complete"
                  and all(self.volume(v)["claims"] == [] for v in ("ga", "gb", "gc")),
                  "the writer completes, its claims freed")
        self.assertEqual(self.file_in("gb"), "data-of-B\n")

        # One group snapshot of the three: one member per volume, one group id.
        members = self.b("--json", "volume", "snapshot", "create", "--group", "nightly",
                         "ga", "gb", "gc", "--secret", "token=" + SECRET).json()
        self.assertEqual(sorted(m["source_volume_id"] for m in members), ["ga", "gb", "gc"])
        group = members[0]["group_snapshot_id"]
        self.assertTrue(group)
        self.assertEqual({m["group_snapshot_id"] for m in members}, {group})
        self.assertTrue(all(m["ready_to_use"] and m["id"] for m in members))
        call = self.calls("CreateVolumeGroupSnapshot")[-1]
        self.assertEqual(call["code_name"], "OK")
        # The same command again (a retry) finds the same group and members.
        again = self.b("--json", "volume", "snapshot", "create", "--group", "nightly",
                       "ga", "gb", "gc").json()
        self.assertEqual(sorted(m["id"] for m in again), sorted(m["id"] for m in members))
        text = self.b("volume", "snapshot", "create", "--group", "nightly", "ga", "gb", "gc").out
        self.assertIn("(CreateVolumeGroupSnapshot): 3 member snapshot(s)", text)
        self.assertIn("GROUP", text)

        # snapshot list shows the group, in its table and its JSON.
        listed = self.b("--json", "volume", "snapshot", "list").json()
        self.assertEqual(sorted(s["id"] for s in listed if s["group_snapshot_id"] == group),
                         sorted(m["id"] for m in members))
        table = self.b("volume", "snapshot", "list").out
        self.assertIn("GROUP", table.splitlines()[0])
        self.assertIn(group, table)

        # A member restored into a new volume holds its source's data.
        gb_member = next(m["id"] for m in members if m["source_volume_id"] == "gb")
        self.b("volume", "create", "-", stdin=spec("gb-restored", snapshot_id=gb_member))
        self.assertEqual(self.file_in("gb-restored"), "data-of-B\n")

        # Bad requests change nothing and reach no plugin.
        groups = len(self.calls("CreateVolumeGroupSnapshot"))
        r = self.b("volume", "snapshot", "create", "--group", "g2", "ga", "nosuch", expect=3)
        self.assertIn("'nosuch' is not a volume", r.err)
        r = self.b("volume", "snapshot", "create", "--group", "g2", "ga", "ga", expect=2)
        self.assertIn("named twice", r.err)
        r = self.b("volume", "snapshot", "create", "ga", "n1", "extra", expect=2)
        self.assertIn("--group NAME VOLUME", r.err)
        self.assertEqual(len(self.calls("CreateVolumeGroupSnapshot")), groups)

        # A member alone cannot be deleted; the group deletes with its members
        # (found by listing), and a second delete says it is gone already.
        self.b("volume", "snapshot", "delete", "hostpath", gb_member, expect=4)
        r = self.b("volume", "snapshot", "delete", "--group", group, "hostpath",
                   "--secret", "token=" + SECRET)
        self.assertIn("deleted with its members (DeleteVolumeGroupSnapshot)", r.out)
        call = self.calls("DeleteVolumeGroupSnapshot")[-1]
        self.assertEqual(call["code_name"], "OK")
        left = self.b("--json", "volume", "snapshot", "list").json()
        self.assertEqual([s for s in left if s["group_snapshot_id"] == group], [])
        r = self.b("volume", "snapshot", "delete", "--group", group, "hostpath")
        self.assertIn("already deleted", r.out)
        self.b("volume", "snapshot", "delete", "--group", group, "hostpath", "s1", expect=2)
        # The restored volume does not depend on the snapshot it came from.
        self.assertEqual(self.file_in("gb-restored"), "data-of-B\n")
        for text in self.outputs:
            self.assertNotIn(SECRET, text)

    def test_plugins_without_the_capability_are_refused_before_any_call(self):
        # A controller by hand on a node with no berth client: it advertises
        # none of the capabilities (plugin fingerprint sets none of them).
        self.b("plugin", "fingerprint", "bare", "--node", "n9", "--type", "controller")
        self.b("volume", "register", "-", stdin=json.dumps(
            {"id": "bv", "plugin_id": "bare", "external_id": "e1", "capabilities": CAPS}))
        r = self.b("volume", "snapshot", "create", "bv", expect=4)
        self.assertIn("CREATE_DELETE_SNAPSHOT", r.err)
        self.assertIn("plugin 'bare' does not support it", r.err)
        r = self.b("volume", "modify", "bv", "--parameter", "a=b", expect=4)
        self.assertIn("MODIFY_VOLUME", r.err)
        r = self.b("volume", "snapshot", "list", "--plugin", "bare", expect=4)
        self.assertIn("LIST_SNAPSHOTS", r.err)
        r = self.b("volume", "snapshot", "delete", "bare", "s1", expect=4)
        self.assertIn("CREATE_DELETE_SNAPSHOT", r.err)
        r = self.b("volume", "snapshot", "create", "--group", "g", "bv", expect=4)
        self.assertIn("CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT", r.err)
        r = self.b("volume", "snapshot", "delete", "--group", "g1", "bare", expect=4)
        self.assertIn("CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT", r.err)
        r = self.b("volume", "create", "-", stdin=json.dumps(
            {"id": "bc", "plugin_id": "bare", "clone_id": "bv", "capabilities": CAPS}), expect=4)
        self.assertIn("CLONE_VOLUME", r.err)
        r = self.b("volume", "create", "-", stdin=json.dumps(
            {"id": "bs", "plugin_id": "bare", "snapshot_id": "s1", "capabilities": CAPS}),
            expect=4)
        self.assertIn("CREATE_DELETE_SNAPSHOT", r.err)
        # Without --plugin, only the plugins that can list are asked.
        self.assertEqual(self.b("--json", "volume", "snapshot", "list").json(), [])
        # Paging needs --plugin; register never takes a content source.
        self.b("volume", "snapshot", "list", "--per-page", "2", expect=2)
        r = self.b("volume", "register", "-", stdin=json.dumps(
            {"id": "bw", "plugin_id": "bare", "external_id": "e2", "snapshot_id": "s1",
             "capabilities": CAPS}), expect=2)
        self.assertIn("only volume create", r.err)
        # Nothing reached the plugin the agent drives either.
        for m in ("CreateSnapshot", "DeleteSnapshot", "ControllerModifyVolume", "CreateVolume",
                  "CreateVolumeGroupSnapshot", "DeleteVolumeGroupSnapshot"):
            self.assertEqual(self.calls(m), [], m)


if __name__ == "__main__":
    unittest.main()
