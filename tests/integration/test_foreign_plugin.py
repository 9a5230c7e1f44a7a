"""berth against a CSI plugin the project did not write (issue 14, Tests).

tests/foreign_plugin/plugin.py is a small CSI plugin in Python, written from
the CSI specification's service and message names (its stubs generated at
start from csi/csi.proto), independent of berth's C++ code, with a call log
of its own: one JSON line per call, in the order the calls ran, with the
request (secrets as SHA-256 digests) and the result code.

A berthd --dev agent drives it as plugin "foreign"; the test drives berth
through the real shell as a user would (volume init, volume create, alloc
run, volume snapshot create, volume create from the snapshot and as a
clone, alloc stop, volume delete, snapshot delete) and asserts the spec's
call order and arguments from the plugin's own log.  Secrets given in the
spec and with --secret reach the plugin's requests, and never appear in
berth's output, berthd's log at trace level, or /metrics.

Expansion (ControllerExpandVolume, then NodeExpandVolume where published)
and volume health (an abnormal condition shown in status) are checked too.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import Agent, BERTH, BERTHD, berth

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN = os.path.join(HERE, "..", "foreign_plugin", "plugin.py")
# The plugin needs grpcio, protobuf and grpc_tools: Debian's python3-grpcio,
# python3-protobuf and python3-grpc-tools (scripts/install-deps.sh).
PYTHON = os.environ.get("BERTH_PLUGIN_PYTHON", "/usr/bin/python3")
SPEC_SECRET = "spec-secret-foreign-31415"
SNAP_SECRET = "snap-secret-foreign-27182"
GiB = 1 << 30
NODE_ID = "foreign-n1"
# The calls that create, attach, mount and delete; the others (stats,
# condition, listing) may come at any time.
LIFECYCLE = {"CreateVolume", "DeleteVolume", "ControllerPublishVolume",
             "ControllerUnpublishVolume", "NodeStageVolume", "NodeUnstageVolume",
             "NodePublishVolume", "NodeUnpublishVolume", "ControllerExpandVolume",
             "NodeExpandVolume"}
TIME_SCALE = float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))


def digest(secret):
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


# The leader's volume health check and the clients' volume stats every
# second (the defaults take minutes).
HEALTH_INTERVAL_ARGS = ["--volume-health-interval", "1s", "--volume-stats-interval", "1s"]


class ForeignPlugin:
    """plugin.py on a unix socket, with its call log."""

    def __init__(self, tmp):
        self.dir = os.path.join(tmp, "foreign")
        os.makedirs(self.dir, exist_ok=True)
        self.socket = os.path.join(self.dir, "csi.sock")
        self.root = os.path.join(self.dir, "root")
        self.call_log = os.path.join(self.dir, "calls.log")
        self.log_path = os.path.join(tmp, "foreign.log")
        self.proc = None

    def start(self):
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [PYTHON, PLUGIN, "--endpoint", "unix://" + self.socket, "--root", self.root,
             "--node-id", NODE_ID, "--call-log", self.call_log],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30 * TIME_SCALE
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.time() > deadline:
                self.kill()
                with open(self.log_path) as f:
                    raise RuntimeError("the foreign plugin did not start: " + f.read())
            time.sleep(0.05)
        return self

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc:
            self.log.close()
            self.proc = None

    def calls(self, method=None, volume=None):
        """The logged calls, in the order they ran (optionally: of one method,
        or about one volume)."""
        if not os.path.exists(self.call_log):
            return []
        with open(self.call_log) as f:
            out = [json.loads(l) for l in f if l.strip()]
        if method:
            out = [c for c in out if c["method"] == method]
        if volume:
            out = [c for c in out if c["request"].get("volume_id") == volume
                   or c["request"].get("source_volume_id") == volume
                   or c.get("response", {}).get("volume", {}).get("volume_id") == volume]
        return out

    def text(self):
        if not os.path.exists(self.call_log):
            return ""
        with open(self.call_log) as f:
            return f.read()


class PluginItselfTest(unittest.TestCase):
    """The instrument: the plugin refuses calls out of the spec's order and
    logs what it was asked, secrets as digests (so the test above can fail)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-foreign-plugin-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.plugin = ForeignPlugin(self.tmp).start()
        self.addCleanup(self.plugin.kill)

    def test_refuses_calls_out_of_order_and_logs_them(self):
        import sys
        sys.dont_write_bytecode = True  # no __pycache__ next to plugin.py
        sys.path.insert(0, os.path.dirname(PLUGIN))
        import grpc
        from plugin import csi  # stubs generated from csi/csi.proto
        ch = grpc.insecure_channel("unix://" + self.plugin.socket)
        self.addCleanup(ch.close)

        def call(service, method, request):
            rpc = ch.unary_unary("/csi.v1.%s/%s" % (service, method),
                                 request_serializer=request.SerializeToString,
                                 response_deserializer=getattr(
                                     csi, method + "Response").FromString)
            try:
                return "OK", rpc(request, timeout=10)
            except grpc.RpcError as e:
                return e.code().name, None

        cap = csi.VolumeCapability(access_mode=csi.VolumeCapability.AccessMode(mode=1))
        cap.mount.fs_type = "ext4"
        code, created = call("Controller", "CreateVolume", csi.CreateVolumeRequest(
            name="v", volume_capabilities=[cap], secrets={"token": SPEC_SECRET}))
        self.assertEqual(code, "OK")
        vid = created.volume.volume_id
        code, again = call("Controller", "CreateVolume", csi.CreateVolumeRequest(
            name="v", volume_capabilities=[cap]))
        self.assertEqual((code, again.volume.volume_id), ("OK", vid))  # idempotent
        self.assertEqual(call("Controller", "CreateVolume", csi.CreateVolumeRequest(
            name="v", volume_capabilities=[cap], parameters={"x": "y"}))[0], "ALREADY_EXISTS")
        stage = csi.NodeStageVolumeRequest(volume_id=vid, volume_capability=cap,
                                           staging_target_path=os.path.join(self.tmp, "s"))
        self.assertEqual(call("Node", "NodeStageVolume", stage)[0], "FAILED_PRECONDITION")
        publish = csi.NodePublishVolumeRequest(
            volume_id=vid, volume_capability=cap, staging_target_path=stage.staging_target_path,
            target_path=os.path.join(self.tmp, "t"))
        self.assertEqual(call("Node", "NodePublishVolume", publish)[0], "FAILED_PRECONDITION")
        self.assertEqual(call("Controller", "ControllerPublishVolume",
                              csi.ControllerPublishVolumeRequest(
                                  volume_id=vid, node_id=NODE_ID, volume_capability=cap))[0], "OK")
        self.assertEqual(call("Node", "NodeStageVolume", stage)[0], "OK")
        self.assertEqual(call("Controller", "DeleteVolume",
                              csi.DeleteVolumeRequest(volume_id=vid))[0], "FAILED_PRECONDITION")
        self.assertEqual(call("Controller", "DeleteVolume",
                              csi.DeleteVolumeRequest(volume_id="nosuch"))[0], "OK")
        self.assertEqual(call("Controller", "GetCapacity", csi.GetCapacityRequest())[0],
                         "UNIMPLEMENTED")
        log = self.plugin.calls()
        self.assertEqual([(c["method"], c["code"]) for c in log], [
            ("CreateVolume", "OK"), ("CreateVolume", "OK"), ("CreateVolume", "ALREADY_EXISTS"),
            ("NodeStageVolume", "FAILED_PRECONDITION"), ("NodePublishVolume", "FAILED_PRECONDITION"),
            ("ControllerPublishVolume", "OK"), ("NodeStageVolume", "OK"),
            ("DeleteVolume", "FAILED_PRECONDITION"), ("DeleteVolume", "OK"),
            ("GetCapacity", "UNIMPLEMENTED")])
        self.assertEqual(log[0]["request"]["secrets"], {"token": digest(SPEC_SECRET)})
        self.assertNotIn(SPEC_SECRET, self.plugin.text())


class ForeignPluginTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-foreign-")
        self.plugin = ForeignPlugin(self.tmp).start()
        self.addCleanup(self.cleanup)
        extra = HEALTH_INTERVAL_ARGS
        self.agent = Agent(os.path.join(self.tmp, "data"), extra_args=[
            "--node-name", "n1", "--plugin", "foreign=monolith:" + self.plugin.socket,
            "--fingerprint-interval", "0.2", "--csi-root", os.path.join(self.tmp, "csi"),
            "--log-level", "trace"] + extra).start()
        self.outputs = []
        self.wait(lambda: self.healthy(), "the foreign plugin's controller and node healthy")

    def cleanup(self):
        if getattr(self, "agent", None):
            self.agent.kill()
        self.plugin.kill()
        with open("/proc/self/mounts") as f:
            for m in reversed([l.split()[1] for l in f if self.tmp in l.split()[1]]):
                subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def healthy(self):
        r = berth(self.agent, "--json", "plugin", "status", "foreign")
        return r.code == 0 and r.json()["controllers_healthy"] == 1 \
            and r.json()["nodes_healthy"] == 1

    def b(self, *args, stdin=None, expect=0):
        r = berth(self.agent, "--timeout", "60", *args, stdin=stdin)
        self.outputs += [r.out, r.err]
        self.assertEqual(r.code, expect, r)
        return r

    def wait(self, cond, what, timeout=60):
        deadline = time.time() + timeout * TIME_SCALE
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.1)
        self.fail("never: " + what)

    def volume(self, vid):
        return self.b("--json", "volume", "status", vid).json()

    def alloc_state(self, alloc):
        r = berth(self.agent, "--json", "alloc", "status", alloc)
        return r.json()["state"] if r.code == 0 else None

    def spec_from_init(self, vid, plugin="foreign", **more):
        """`berth volume init`'s example, with its placeholders filled: the
        id, the plugin, the secret; `more` replaces `key: value` lines."""
        path = os.path.join(self.tmp, vid + ".yaml")
        self.b("volume", "init", "--output", path)
        with open(path) as f:
            text = f.read()
        text = text.replace("\nid: db\n", "\nid: %s\n" % vid)
        text = text.replace("\nplugin_id: hostpath\n", "\nplugin_id: %s\n" % plugin)
        text = text.replace("example_secret: xyzzy", "token: " + SPEC_SECRET)
        for key, value in more.items():
            text, n = re.subn(r"(?m)^%s:.*$" % key, "%s: %s" % (key, value), text)
            self.assertEqual(n, 1, key)
        with open(path, "w") as f:
            f.write(text)
        return path

    def create(self, vid, **more):
        self.b("volume", "create", self.spec_from_init(vid, **more))
        return self.volume(vid)["external_id"]

    def run_alloc(self, alloc, vid, text):
        """An alloc that writes `text` into the volume, then runs until stopped."""
        self.b("alloc", "run", "--node", "n1", "--id", alloc, "--volume", "data=" + vid, "--",
               "sh", "-c", "echo %s > \"$BERTH_VOLUME_DATA/file.txt\" && exec sleep 600" % text)
        self.wait(lambda: self.alloc_state(alloc) == "running", "alloc %s running" % alloc)

    def stop_alloc(self, alloc, vid):
        self.b("alloc", "stop", alloc)
        self.wait(lambda: self.volume(vid)["claims"] == [], "the claims of %s freed" % vid)

    def file_in(self, ext):
        path = os.path.join(self.plugin.root, "volumes", ext, "file.txt")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return f.read()

    def lifecycle(self, calls):
        """The methods of the calls that change a volume's state, in order."""
        return [c["method"] for c in calls if c["method"] in LIFECYCLE]

    def assert_in_order(self, calls, methods):
        """`methods` appear in `calls` (each the first after the one before)."""
        names = [c["method"] for c in calls]
        at = -1
        for m in methods:
            self.assertIn(m, names[at + 1:], "%s after %s in %s" % (m, methods, names))
            at = names.index(m, at + 1)

    def assert_no_secret_leaked(self):
        # Every event committed so far, as `berth event stream` shows them.
        peers = self.b("--json", "operator", "raft", "list-peers").json()
        last = max(p["commit_index"] for p in peers)
        events = berth(self.agent, "--timeout", "20", "event", "stream", "--index", "1",
                       "--until-index", str(last), timeout=120)
        self.assertEqual(events.code, 0, events)
        self.assertIn("VolumeRegistered", events.out)
        self.outputs += [events.out, events.err]
        _, metrics = self.agent.scrape()
        with open(self.agent.log_path) as f:
            log = f.read()
        self.assertIn("CreateVolume", log)  # trace: every CSI call is logged
        for text in self.outputs + [metrics, log, self.plugin.text()]:
            self.assertNotIn(SPEC_SECRET, text)
            self.assertNotIn(SNAP_SECRET, text)

    def test_lifecycle_snapshot_restore_clone_in_spec_order(self):
        # volume create, from volume init's example: CreateVolume named
        # NAMESPACE-ID (stable across retries), with the spec's parameters,
        # capacity range, capability and secrets.
        ext = self.create("db")
        create = self.plugin.calls("CreateVolume")[-1]
        self.assertEqual(create["code"], "OK")
        req = create["request"]
        self.assertEqual(req["name"], "default-db")
        self.assertEqual(req["parameters"], {"tier": "fast"})
        self.assertEqual(req["capacity_range"],
                         {"required_bytes": str(GiB), "limit_bytes": str(10 * GiB)})
        self.assertEqual(req["volume_capabilities"][0]["access_mode"]["mode"],
                         "SINGLE_NODE_WRITER")
        self.assertEqual(req["volume_capabilities"][0]["mount"]["fs_type"], "ext4")
        self.assertEqual(req["secrets"], {"token": digest(SPEC_SECRET)})
        self.assertNotIn("volume_content_source", req)
        self.assertEqual(create["response"]["volume"]["volume_id"], ext)
        self.assertEqual(self.volume("db")["plugin_id"], "foreign")

        # An alloc claims it: ControllerPublish (the plugin's node id), then
        # NodeStage, then NodePublish under the staging path, with the
        # publish context the controller answered and the volume context.
        self.run_alloc("writer", "db", "hello-foreign")
        self.assertEqual(self.lifecycle(self.plugin.calls(volume=ext)),
                         ["CreateVolume", "ControllerPublishVolume", "NodeStageVolume",
                          "NodePublishVolume"])
        cp, stage, pub = (self.plugin.calls(m, ext)[-1] for m in (
            "ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume"))
        for c in (cp, stage, pub):
            self.assertEqual(c["code"], "OK", c)
            self.assertEqual(c["request"].get("secrets"), {"token": digest(SPEC_SECRET)}, c)
        self.assertEqual(cp["request"]["node_id"], NODE_ID)
        context = cp["response"]["publish_context"]
        self.assertEqual(stage["request"]["publish_context"], context)
        self.assertEqual(pub["request"]["publish_context"], context)
        self.assertEqual(stage["request"]["volume_context"]["foreign/name"], "default-db")
        self.assertEqual(pub["request"]["staging_target_path"],
                         stage["request"]["staging_target_path"])
        self.assertEqual(stage["request"]["volume_capability"]["mount"]["fs_type"], "ext4")
        self.assertIn("noatime", pub["request"]["volume_capability"]["mount"]["mount_flags"])
        self.assertTrue(pub["request"]["target_path"].startswith(os.path.join(self.tmp, "csi")))
        # The alloc wrote through the publication into the plugin's volume.
        self.wait(lambda: self.file_in(ext) == "hello-foreign\n", "the alloc's file in the volume")

        # A snapshot of the claimed volume: CreateSnapshot of its external id,
        # with the name given and the --secret over the volume's own.
        snap = self.b("--json", "volume", "snapshot", "create", "db", "nightly",
                      "--secret", "token=" + SNAP_SECRET).json()
        cs = self.plugin.calls("CreateSnapshot")[-1]
        self.assertEqual(cs["code"], "OK")
        self.assertEqual((cs["request"]["source_volume_id"], cs["request"]["name"]),
                         (ext, "nightly"))
        self.assertEqual(cs["request"]["secrets"], {"token": digest(SNAP_SECRET)})
        self.assertEqual(snap["id"], cs["response"]["snapshot"]["snapshot_id"])
        self.assertEqual(snap["source_volume_id"], "db")
        listed = self.b("--json", "volume", "snapshot", "list", "--plugin", "foreign").json()
        self.assertEqual([s["id"] for s in listed], [snap["id"]])
        self.assertTrue(self.plugin.calls("ListSnapshots"))

        # From the snapshot, and as a clone: CreateVolume with the content
        # source; both hold what the alloc wrote.
        restored = self.create("restored", snapshot_id=snap["id"])
        req = self.plugin.calls("CreateVolume")[-1]["request"]
        self.assertEqual(req["volume_content_source"], {"snapshot": {"snapshot_id": snap["id"]}})
        self.assertEqual(self.file_in(restored), "hello-foreign\n")
        self.assertEqual(self.volume("restored")["snapshot_id"], snap["id"])
        copy = self.create("copy", clone_id="db")
        req = self.plugin.calls("CreateVolume")[-1]["request"]
        self.assertEqual(req["volume_content_source"], {"volume": {"volume_id": ext}})
        self.assertEqual(self.file_in(copy), "hello-foreign\n")
        self.assertEqual(self.volume("copy")["clone_id"], "db")

        # Release: NodeUnpublish of the published target, then NodeUnstage of
        # the staging path, then ControllerUnpublish from the plugin's node.
        before = len(self.plugin.calls())
        self.stop_alloc("writer", "db")
        after = [c for c in self.plugin.calls()[before:] if c["request"].get("volume_id") == ext
                 and c["method"] in LIFECYCLE]
        self.assertEqual([c["method"] for c in after],
                         ["NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"])
        for c in after:
            self.assertEqual(c["code"], "OK", c)
        unpub, unstage, cu = after
        self.assertEqual(unpub["request"]["target_path"], pub["request"]["target_path"])
        self.assertEqual(unstage["request"]["staging_target_path"],
                         stage["request"]["staging_target_path"])
        self.assertEqual(cu["request"]["node_id"], NODE_ID)
        self.assertEqual(cu["request"].get("secrets"), {"token": digest(SPEC_SECRET)})

        # delete: DeleteVolume of each external id; the snapshot: DeleteSnapshot.
        for vid, e in (("copy", copy), ("restored", restored), ("db", ext)):
            self.b("volume", "delete", vid)
            d = self.plugin.calls("DeleteVolume")[-1]
            self.assertEqual((d["request"]["volume_id"], d["code"]), (e, "OK"))
            self.assertFalse(os.path.exists(os.path.join(self.plugin.root, "volumes", e)))
            self.b("volume", "status", vid, expect=3)
        self.b("volume", "snapshot", "delete", "foreign", snap["id"], "--secret",
               "token=" + SNAP_SECRET)
        d = self.plugin.calls("DeleteSnapshot")[-1]
        self.assertEqual((d["request"]["snapshot_id"], d["code"]), (snap["id"], "OK"))
        self.assertEqual(d["request"]["secrets"], {"token": digest(SNAP_SECRET)})

        # No call berth made was refused by the plugin (wrong order or
        # arguments would be FAILED_PRECONDITION, NOT_FOUND, ...).
        self.assertEqual([c for c in self.plugin.calls() if c["code"] != "OK"
                          and c["code"] != "UNIMPLEMENTED"], [])
        self.assert_no_secret_leaked()

    def test_expand_calls_controller_then_node_expand_where_published(self):
        ext = self.create("grow")
        self.run_alloc("user", "grow", "before-expand")
        pub = self.plugin.calls("NodePublishVolume", ext)[-1]
        stage = self.plugin.calls("NodeStageVolume", ext)[-1]
        before = len(self.plugin.calls())
        self.b("volume", "expand", "grow", "2GiB")
        self.wait(lambda: self.plugin.calls("NodeExpandVolume", ext), "NodeExpandVolume")
        calls = [c for c in self.plugin.calls()[before:] if c["request"].get("volume_id") == ext]
        self.assert_in_order(calls, ["ControllerExpandVolume", "NodeExpandVolume"])
        ce = self.plugin.calls("ControllerExpandVolume", ext)[-1]
        ne = self.plugin.calls("NodeExpandVolume", ext)[-1]
        self.assertEqual((ce["code"], ne["code"]), ("OK", "OK"))
        self.assertEqual(ce["request"]["capacity_range"]["required_bytes"], str(2 * GiB))
        if "capacity_range" in ne["request"]:  # optional in NodeExpandVolume
            self.assertEqual(ne["request"]["capacity_range"]["required_bytes"], str(2 * GiB))
        # Online: at the path the volume is published at (and its staging path).
        self.assertEqual(ne["request"]["volume_path"], pub["request"]["target_path"])
        if "staging_target_path" in ne["request"]:
            self.assertEqual(ne["request"]["staging_target_path"],
                             stage["request"]["staging_target_path"])
        # status shows the capacity the plugin reported.
        self.wait(lambda: str(2 * GiB) in json.dumps(self.volume("grow")),
                  "volume status shows the expanded capacity")
        # Shrinking is refused (bad input or by the rules), before any call.
        before = len(self.plugin.calls("ControllerExpandVolume"))
        r = berth(self.agent, "volume", "expand", "grow", "1GiB")
        self.outputs += [r.out, r.err]
        self.assertIn(r.code, (2, 4), r)
        self.assertTrue(r.err)
        self.assertEqual(len(self.plugin.calls("ControllerExpandVolume")), before)
        self.stop_alloc("user", "grow")
        self.assert_no_secret_leaked()

    def test_abnormal_condition_is_shown_in_status(self):
        ext = self.create("sick")
        self.run_alloc("user", "sick", "healthy")
        pub = self.plugin.calls("NodePublishVolume", ext)[-1]
        # Clients ask NodeGetVolumeStats for the published volume, at its path.
        stage = self.plugin.calls("NodeStageVolume", ext)[-1]
        paths = (pub["request"]["target_path"], stage["request"]["staging_target_path"])
        self.wait(lambda: any(c["request"].get("volume_path") in paths and c["code"] == "OK"
                              for c in self.plugin.calls("NodeGetVolumeStats", ext)),
                  "NodeGetVolumeStats at the published (or staging) path")
        message = "the directory of volume %s is gone" % ext
        self.assertNotIn(message, self.b("volume", "status", "sick").out)
        # The plugin's storage vanishes: it reports the volume abnormal.
        self.stop_alloc("user", "sick")
        shutil.rmtree(os.path.join(self.plugin.root, "volumes", ext))
        self.wait(lambda: message in self.b("volume", "status", "sick").out,
                  "volume status shows the plugin's message", timeout=150)
        self.assertIn("abnormal", self.b("volume", "status", "sick").out)
        self.assertTrue(self.plugin.calls("ListVolumes") or
                        self.plugin.calls("ControllerGetVolume", ext))
        # No new claim while abnormal, unless the operator says so.
        r = self.b("volume", "claim", "sick", "--alloc", "late", "--node", "n1", expect=4)
        self.assertIn("abnormal", r.err)
        self.assert_no_secret_leaked()


if __name__ == "__main__":
    unittest.main()
