"""berth speaking real CSI: a berthd --dev whose node actor drives a real
berth-hostpath process over its unix socket.  The order of CSI calls is
asserted from the plugin's side (its call log), not from berth's."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from harness import TIME_SCALE, Agent, berth

HOSTPATH = os.environ.get("BERTH_HOSTPATH_BIN", "berth-hostpath")
SECRET = "hunter2-csi"

SPEC = {
    "id": "data",
    "plugin_id": "hostpath",
    "capabilities": [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}],
    "capacity_min": "1MiB",
    "parameters": {"tier": "gold"},
    "secrets": {"token": SECRET},
}


class Plugin:
    """A berth-hostpath process the test controls (kill, restart)."""

    def __init__(self, tmp, node_id="csi-n1", extra_args=()):
        self.dir = os.path.join(tmp, "plugin")
        os.makedirs(self.dir, exist_ok=True)
        self.socket = os.path.join(self.dir, "csi.sock")
        self.root = os.path.join(tmp, "hostpath-root")
        self.call_log = os.path.join(tmp, "calls.log")
        self.node_id = node_id
        self.extra_args = list(extra_args)
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [HOSTPATH, "--endpoint", "unix://" + self.socket, "--root", self.root,
             "--node-id", self.node_id, "--call-log", self.call_log] + self.extra_args,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while not os.path.exists(self.socket):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("berth-hostpath did not start")
            time.sleep(0.05)
        return self

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def records(self):
        """Every logged call as the plugin wrote it (method, ids, at_ns, end_ns...)."""
        if not os.path.exists(self.call_log):
            return []
        with open(self.call_log) as f:
            return [json.loads(line) for line in f]

    def calls(self, volume_id=None):
        """(method, code_name) of every logged call, for one volume if given."""
        if not os.path.exists(self.call_log):
            return []
        out = []
        with open(self.call_log) as f:
            for line in f:
                c = json.loads(line)
                if volume_id is None or c.get("volume_id") == volume_id:
                    out.append((c["method"], c["code_name"]))
        return out

    def methods(self, volume_id, skip=("NodeGetVolumeStats",)):
        return [m for m, code in self.calls(volume_id) if code == "OK" and m not in skip]


def agent_with_plugin(tmp, plugin, plugin_options="", timeout=30):
    """A berthd --dev (node n1) driving `plugin` (a started Plugin) as
    plugin "hostpath" (`plugin_options`: ",max_controller_calls=N" ...),
    returned once the plugin is healthy."""
    agent = Agent(os.path.join(tmp, "data"), extra_args=[
        "--node-name", "n1", "--plugin", "hostpath=monolith:" + plugin.socket + plugin_options,
        "--fingerprint-interval", "0.2", "--csi-root", os.path.join(tmp, "csi")]).start()
    deadline = time.time() + timeout * TIME_SCALE
    while True:
        r = berth(agent, "--json", "plugin", "status", "hostpath")
        if r.code == 0 and r.json()["nodes_healthy"] == 1 and r.json()["controllers_healthy"] == 1:
            return agent
        if time.time() > deadline:
            agent.kill()
            raise RuntimeError("the plugin never turned healthy: %r" % r)
        time.sleep(0.1)


def unmount_under(path):
    """Lazily unmounts whatever a test left mounted under `path`."""
    with open("/proc/self/mounts") as f:
        mounts = [l.split()[1] for l in f if path in l.split()[1]]
    for m in reversed(mounts):
        subprocess.run(["umount", "-l", m], check=False)
    return mounts


class CsiTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-csi-")
        self.plugin = Plugin(self.tmp).start()
        # Cleanups run even when setUp fails (tearDown would not).
        self.addCleanup(self.plugin.kill)
        self.agent = Agent(os.path.join(self.tmp, "data"), extra_args=[
            "--node-name", "n1", "--plugin", "hostpath=monolith:" + self.plugin.socket,
            "--fingerprint-interval", "0.2", "--csi-root", os.path.join(self.tmp, "csi")]).start()
        self.addCleanup(self.agent.kill)
        self.outputs = []
        self.wait_plugin(healthy=1)

    def tearDown(self):
        self.agent.kill()
        self.plugin.kill()
        with open(self.agent.log_path) as f:
            self.outputs.append(f.read())
        if os.path.exists(self.plugin.call_log):
            with open(self.plugin.call_log) as f:
                self.outputs.append(f.read())
        for text in self.outputs:
            self.assertNotIn(SECRET, text)
        # Nothing stays mounted under the test's directory.
        with open("/proc/self/mounts") as f:
            leftover = [l.split()[1] for l in f if self.tmp in l.split()[1]]
        for m in reversed(leftover):
            subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.assertEqual(leftover, [], "mounts left behind")

    def run_berth(self, *args, stdin=None, expect=0):
        r = berth(self.agent, *args, stdin=stdin)
        self.outputs += [r.out, r.err]
        self.assertEqual(r.code, expect, r)
        return r

    def plugin_status(self):
        return self.run_berth("--json", "plugin", "status", "hostpath").json()

    def wait_plugin(self, healthy, timeout=30):
        deadline = time.time() + timeout
        while True:
            r = berth(self.agent, "--json", "plugin", "status", "hostpath")
            if r.code == 0 and r.json()["nodes_healthy"] == healthy \
                    and r.json()["controllers_healthy"] == healthy:
                return r.json()
            if time.time() > deadline:
                self.fail("plugin never had %d healthy instances: %r" % (healthy, r))
            time.sleep(0.1)

    def create(self, spec=SPEC):
        vol = self.run_berth("--json", "volume", "create", "-", stdin=json.dumps(spec)).json()
        self.assertTrue(vol["external_id"].startswith("hp-"), vol)
        return vol

    def test_fingerprint_registers_the_plugin_with_correct_counts(self):
        p = self.plugin_status()
        self.assertEqual(p["provider"], "berth-hostpath")
        self.assertNotEqual(p["provider_version"], "")
        self.assertEqual((p["controllers_healthy"], p["controllers_expected"]), (1, 1))
        self.assertEqual((p["nodes_healthy"], p["nodes_expected"]), (1, 1))
        self.assertTrue(p["controller_required"])
        self.assertEqual(p["nodes"][0]["csi_node_id"], "csi-n1")
        self.assertTrue(p["nodes"][0]["stage_unstage"])
        node = self.run_berth("--json", "node", "status", "n1").json()
        self.assertEqual(node["plugin_ids"], ["hostpath"])
        table = self.run_berth("plugin", "status").out
        self.assertRegex(table, r"hostpath\s+berth-hostpath\s+\S+\s+1/1\s+1/1")

    def test_created_volume_is_published_written_and_released_in_spec_order(self):
        vol = self.create()
        ext = vol["external_id"]
        self.assertTrue(os.path.isdir(os.path.join(self.plugin.root, "volumes", ext)))
        self.assertEqual(vol["capacity_min"], 1 << 20)
        self.assertEqual([c for c in self.plugin.calls() if c[0] == "CreateVolume"],
                         [("CreateVolume", "OK")])
        self.assertEqual(self.plugin.methods(ext), [])

        claim = self.run_berth("--json", "volume", "claim", "data", "--alloc", "a1",
                               "--node", "n1").json()
        path = claim["published_path"]
        self.assertTrue(path.startswith(os.path.join(self.tmp, "csi", "hostpath", "per-alloc")))
        with open(os.path.join(path, "hello.txt"), "w") as f:
            f.write("written through the publication\n")
        with open(os.path.join(self.plugin.root, "volumes", ext, "hello.txt")) as f:
            self.assertEqual(f.read(), "written through the publication\n")
        self.assertEqual(self.plugin.methods(ext), [
            "ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume"])
        # The controller was told the plugin's own node id, not berth's.
        with open(self.plugin.call_log) as f:
            pub = [json.loads(l) for l in f if "ControllerPublishVolume" in l][0]
        self.assertEqual(pub["node_id"], "csi-n1")

        released = self.run_berth("--json", "volume", "release", "data", "--alloc", "a1").json()
        self.assertEqual(released["claims"], [])
        self.assertFalse(os.path.exists(path))
        self.assertEqual(self.plugin.methods(ext)[3:], [
            "NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"])
        # The node's metrics count its CSI calls; the server times claims.
        series, _ = self.agent.scrape()
        self.assertEqual(series['berth_csi_calls_total{code="OK",method="NodePublishVolume",'
                                'plugin="hostpath"}'], 1)
        self.assertEqual(series['berth_csi_calls_total{code="OK",method="NodeUnstageVolume",'
                                'plugin="hostpath"}'], 1)
        self.assertGreaterEqual(series["berth_claim_seconds_count"], 1)
        # The data stays with the volume; a new claim sees it.
        again = self.run_berth("--json", "volume", "claim", "data", "--alloc", "a2",
                               "--node", "n1").json()
        with open(os.path.join(again["published_path"], "hello.txt")) as f:
            self.assertIn("written", f.read())
        self.run_berth("volume", "release", "data", "--alloc", "a2")

    def test_staging_is_kept_while_another_claim_on_the_node_uses_it(self):
        spec = dict(SPEC, id="shared", capabilities=[
            {"access_mode": "multi-node-multi-writer", "attachment_mode": "file-system"}])
        ext = self.create(spec)["external_id"]
        p1 = self.run_berth("--json", "volume", "claim", "shared", "--alloc", "a1",
                            "--node", "n1").json()["published_path"]
        p2 = self.run_berth("--json", "volume", "claim", "shared", "--alloc", "a2",
                            "--node", "n1", "--read-only").json()["published_path"]
        self.assertNotEqual(p1, p2)
        self.run_berth("volume", "release", "shared", "--alloc", "a1")
        self.assertTrue(os.path.isdir(p2))
        after_first = self.plugin.methods(ext)
        self.assertEqual(after_first[-1], "NodeUnpublishVolume")
        self.assertNotIn("NodeUnstageVolume", after_first)
        self.assertNotIn("ControllerUnpublishVolume", after_first)
        self.run_berth("volume", "release", "shared", "--alloc", "a2")
        self.assertEqual(self.plugin.methods(ext)[-3:], [
            "NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"])

    def test_register_is_validated_by_the_plugin(self):
        r = self.run_berth("volume", "register", "-", stdin=json.dumps(dict(
            SPEC, id="ghost", external_id="hp-does-not-exist")), expect=4)
        self.assertIn("ValidateVolumeCapabilities failed: NOT_FOUND", r.err)
        self.run_berth("volume", "status", "ghost", expect=3)
        vol = self.create()
        r = self.run_berth("volume", "register", "-", stdin=json.dumps(dict(
            SPEC, id="alias", external_id=vol["external_id"])))
        self.assertIn("validated by the plugin", r.out)
        self.assertIn(("ValidateVolumeCapabilities", "OK"), self.plugin.calls(vol["external_id"]))

    def test_a_failed_publish_is_unwound_and_leaves_no_claim(self):
        # "ghost" names the storage of "data", which is then deleted behind
        # its back: the publish fails at the plugin.
        vol = self.create()
        self.run_berth("volume", "register", "-", stdin=json.dumps(dict(
            SPEC, id="ghost", external_id=vol["external_id"])))
        self.run_berth("volume", "delete", "data")
        r = self.run_berth("volume", "claim", "ghost", "--alloc", "a1", "--node", "n1", expect=4)
        self.assertIn("ControllerPublishVolume failed: NOT_FOUND", r.err)
        self.assertIn("the claim was released again", r.err)
        self.assertEqual(self.run_berth("--json", "volume", "status", "ghost").json()["claims"], [])

    def test_killed_plugin_turns_unhealthy_then_healthy_after_restart(self):
        self.plugin.kill()
        p = self.wait_plugin(healthy=0)
        self.assertEqual((p["nodes_expected"], p["controllers_expected"]), (1, 1))
        self.assertIn("UNAVAILABLE", p["nodes"][0]["health_description"])
        r = self.run_berth("volume", "create", "-", stdin=json.dumps(SPEC), expect=5)
        self.assertIn("no healthy controller", r.err)
        self.plugin.start()
        p = self.wait_plugin(healthy=1)
        self.assertEqual(p["nodes"][0]["csi_node_id"], "csi-n1")
        self.create()


class DevPluginTest(unittest.TestCase):
    def test_dev_agent_starts_its_own_plugin(self):
        tmp = tempfile.mkdtemp(prefix="berth-dev-")
        extra = ["--node-name", "dev1", "--fingerprint-interval", "0.2"]
        agent = Agent(os.path.join(tmp, "data"), extra_args=extra).start()
        try:
            deadline = time.time() + 15
            while True:
                r = berth(agent, "--json", "plugin", "status", "hostpath")
                if r.code == 0 and r.json()["nodes_healthy"] == 1:
                    break
                self.assertLess(time.time(), deadline, r)
                time.sleep(0.1)
            vol = berth(agent, "--json", "volume", "create", "-", stdin=json.dumps(SPEC))
            self.assertEqual(vol.code, 0, vol)
            claim = berth(agent, "--json", "volume", "claim", "data", "--alloc", "a1",
                          "--node", "dev1")
            self.assertEqual(claim.code, 0, claim)
            self.assertTrue(os.path.isdir(claim.json()["published_path"]))
            rel = berth(agent, "volume", "release", "data", "--alloc", "a1")
            self.assertEqual(rel.code, 0, rel)
        finally:
            agent.kill()
            with open("/proc/self/mounts") as f:
                for m in reversed([l.split()[1] for l in f if tmp in l.split()[1]]):
                    subprocess.run(["umount", "-l", m], check=False)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
