"""The whole volume lifecycle with real processes: a berth server, two
clients (berthd --client) each with its own berth-hostpath plugin, the two
plugins sharing one root (a stand-in for network storage).  Allocs run
commands that write and read the volumes; the CSI call order is asserted
from the plugins' own call logs.

Each test names the complaint about Nomad it covers (../shared/notes/csi.md,
"What Nomad's users complained about")."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from cluster import Process, free_port
from harness import BERTHD, SHORT_FENCE, TIME_SCALE, berth

HOSTPATH = os.environ.get("BERTH_HOSTPATH_BIN", "berth-hostpath")
SECRET = "hunter2-lifecycle"
# The lease is a third of it: 1 s, which a client restarted under a sanitizer
# (a time scale) outlives, so that its alloc is fenced: scaled with the rest.
NODE_DOWN_TIMEOUT = "%g" % (3 * max(TIME_SCALE, 1))


class Plugin:
    """A berth-hostpath for one node, on the root shared by both nodes.  Both
    append to one call log (a write(2) per line), so it holds the calls of
    the whole cluster in the order the plugins answered them."""

    def __init__(self, tmp, node_id, peer, shared_root, extra=()):
        self.node_id = node_id
        self.dir = os.path.join(tmp, "plugin-" + node_id)
        os.makedirs(self.dir, exist_ok=True)
        self.socket = os.path.join(self.dir, "csi.sock")
        self.call_log = os.path.join(tmp, "calls.log")
        self.argv = [HOSTPATH, "--endpoint", "unix://" + self.socket, "--root", shared_root,
                     "--shared-root", "--node-id", node_id, "--peer-node", peer,
                     "--call-log", self.call_log] + list(extra)
        self.proc = None

    def start(self):
        with open(os.path.join(self.dir, "plugin.log"), "a") as log:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.time() + 10
        while not os.path.exists(self.socket) or self.proc.poll() is not None:
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("berth-hostpath did not start")
            time.sleep(0.05)
        return self

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if os.path.exists(self.socket):
            os.unlink(self.socket)

    def calls(self, volume_id=None, methods=None):
        """The logged calls ({method, code_name, ...}), for one volume if given."""
        if not os.path.exists(self.call_log):
            return []
        out = []
        with open(self.call_log) as f:
            for line in f:
                c = json.loads(line)
                if volume_id is not None and c.get("volume_id") != volume_id:
                    continue
                if methods is not None and c["method"] not in methods:
                    continue
                out.append(c)
        return out

    def ok_methods(self, volume_id):
        """The successful calls for a volume that concern this node: its
        node calls (by path) and controller calls targeting it."""
        skip = ("NodeGetVolumeStats", "ValidateVolumeCapabilities")
        out = []
        for c in self.calls(volume_id):
            if c["code_name"] != "OK" or c["method"] in skip:
                continue
            if c["method"].startswith("Controller"):
                if c.get("node_id") != self.node_id:
                    continue
            elif c["method"].startswith("Node"):
                path = c.get("target_path") or c.get("staging_target_path", "")
                if "/%s-csi/" % self.node_id not in path:
                    continue
            out.append(c["method"])
        return out


class Base(unittest.TestCase):
    plugin_extra = {"c1": [], "c2": []}
    node_down_timeout = NODE_DOWN_TIMEOUT

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-lifecycle-")
        self.addCleanup(self.cleanup)
        self.processes = []
        shared = os.path.join(self.tmp, "shared-root")
        self.plugins = {
            "c1": Plugin(self.tmp, "c1", "c2", shared, self.plugin_extra["c1"]),
            "c2": Plugin(self.tmp, "c2", "c1", shared, self.plugin_extra["c2"]),
        }
        port, raft = free_port(), free_port()
        self.address = "127.0.0.1:%d" % port
        self.server = Process("s1", [
            BERTHD, "--server", "--name", "s1", "--data-dir", os.path.join(self.tmp, "s1"),
            "--port", str(port), "--raft-port", str(raft), "--metrics-port", "0",
            "--bootstrap-expect", "1", "--raft-tick", "0.05",
            "--node-down-timeout", self.node_down_timeout] + list(SHORT_FENCE),
            os.path.join(self.tmp, "s1.log"))
        self.processes.append(self.server)
        self.server.start()
        self.clients = {}
        for name, plugin in self.plugins.items():
            plugin.start()
            self.clients[name] = self.client(name)
            self.clients[name].start()
        self.wait(lambda: self.nodes_healthy() == 2, "both plugin instances healthy")

    def client(self, name):
        p = Process(name, [
            BERTHD, "--client", "--name", name, "--data-dir", os.path.join(self.tmp, name),
            "--servers", self.address, "--metrics-port", "0",
            "--plugin", "hostpath=monolith:" + self.plugins[name].socket,
            "--fingerprint-interval", "0.2", "--csi-root", os.path.join(self.tmp, name + "-csi")] +
            list(SHORT_FENCE), os.path.join(self.tmp, name + ".log"))
        self.processes.append(p)
        return p

    def cleanup(self):
        for p in self.processes:
            try:
                p.kill()
            except Exception:
                pass
        for p in self.plugins.values():
            p.kill()
        texts = []
        for root, _, files in os.walk(self.tmp):
            for f in files:
                if f.endswith(".log") or f in ("stdout", "stderr"):
                    with open(os.path.join(root, f), errors="replace") as fh:
                        texts.append(fh.read())
        with open("/proc/self/mounts") as f:
            leftover = [l.split()[1] for l in f if self.tmp in l.split()[1]]
        for m in reversed(leftover):
            subprocess.run(["umount", "-l", m], check=False)
        # Alloc commands still running (a test failed): kill them.
        subprocess.run(["pkill", "-f", "berth-alloc.*" + os.path.basename(self.tmp)], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)
        for t in texts:
            self.assertNotIn(SECRET, t, "a secret reached a log or an alloc's output")

    # --- helpers ---------------------------------------------------------------

    def b(self, *args, expect=0, stdin=None, timeout=90):
        r = berth(self.address, *args, stdin=stdin, timeout=timeout)
        self.assertNotIn(SECRET, r.out + r.err)
        if expect is not None:
            self.assertEqual(r.code, expect, r)
        return r

    def wait(self, cond, what, timeout=60):
        deadline = time.time() + timeout * TIME_SCALE
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.1)
        self.fail("timed out waiting for: " + what)

    def metrics(self, process=None):
        """The server's (or `process`'s) /metrics as {series: value}."""
        import re
        import urllib.request
        banner = (process or self.server).banner
        port = re.search(r"metrics on 127\.0\.0\.1:(\d+)", banner).group(1)
        with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=10) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def nodes_healthy(self):
        r = self.b("--json", "plugin", "status", "hostpath", expect=None)
        return r.json()["nodes_healthy"] if r.code == 0 else -1

    def create(self, vid, mode="single-node-writer", **extra):
        spec = {"id": vid, "plugin_id": "hostpath", "secrets": {"token": SECRET},
                "capabilities": [{"access_mode": mode, "attachment_mode": "file-system"}]}
        spec.update(extra)
        return self.b("--json", "volume", "create", "-", stdin=json.dumps(spec)).json()

    def volume(self, vid):
        return self.b("--json", "volume", "status", vid).json()

    def alloc(self, aid):
        return self.b("--json", "alloc", "status", aid).json()

    def run_alloc(self, node, *volumes, command=(), expect=0, aid=None):
        args = ["--json", "alloc", "run", "--node", node]
        for v in volumes:
            args += ["--volume", v]
        if aid:
            args += ["--id", aid]
        if command:
            args += ["--"] + list(command)
        r = self.b(*args, expect=expect)
        return r.json() if expect == 0 else r

    def wait_alloc(self, aid, states, timeout=30):
        self.wait(lambda: self.alloc(aid)["state"] in states,
                  "alloc %s to be %s" % (aid, states), timeout)
        return self.alloc(aid)

    def wait_unclaimed(self, vid, timeout=30):
        self.wait(lambda: self.volume(vid)["claims"] == [], "volume %s freed" % vid, timeout)

    def alloc_output(self, node, aid):
        with open(os.path.join(self.tmp, node, "allocs", aid, "stdout")) as f:
            return f.read()


class LifecycleTest(Base):

    def test_alloc_writes_then_an_alloc_on_another_client_reads_it(self):
        """Complaints 1 (claims freed when allocs stop) and 11 (secrets)."""
        vol = self.create("shared", "multi-node-single-writer")
        ext = vol["external_id"]
        writer = self.run_alloc("c1", "data=shared", command=(
            "sh", "-c", 'echo "written by $BERTH_ALLOC_ID" > "$BERTH_VOLUME_DATA/file"'))
        self.assertIn(writer["state"], ("running", "complete"))
        done = self.wait_alloc(writer["id"], ("complete",))
        self.assertEqual(done["exit_code"], 0)
        # The watcher released the claim of the complete alloc by itself.
        self.wait_unclaimed("shared")
        self.assertEqual(self.plugins["c1"].ok_methods(ext), [
            "ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume",
            "NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"])

        reader = self.run_alloc("c2", "data=shared:ro", command=("cat", "/dev/null"))
        self.wait_alloc(reader["id"], ("complete",))
        # The watcher releases the first reader's claim on its own; wait for it,
        # or the second reader's claim overlaps that release (valid, but another order).
        self.wait_unclaimed("shared")
        reader = self.run_alloc("c2", "data=shared:ro",
                                command=("sh", "-c", 'cat "$BERTH_VOLUME_DATA/file"'))
        self.wait_alloc(reader["id"], ("complete",))
        self.assertEqual(self.alloc_output("c2", reader["id"]).strip(),
                         "written by " + writer["id"])
        self.wait_unclaimed("shared")
        self.assertEqual(self.plugins["c2"].ok_methods(ext), [
            "ControllerPublishVolume", "NodeStageVolume", "NodePublishVolume",
            "NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"] * 2)

    def test_a_claim_and_its_release_write_client_db_in_timed_group_commits(self):
        """Issue 28: the node's publication records go to client.db through
        the group commit, each commit timed (berth_client_db_* metrics)."""
        names = ("berth_client_db_writes_total", "berth_client_db_commits_total",
                 "berth_client_db_commit_seconds_count", "berth_client_db_commit_seconds_sum")

        def counts():
            m = self.metrics(self.clients["c1"])
            return [m.get(n, 0) for n in names]

        self.create("v")
        before = counts()
        a = self.run_alloc("c1", "d=v")
        claimed = counts()
        # The publication (staging included): its intent written before the
        # plugin is called, its record before the answer, each commit timed.
        self.assertGreaterEqual(claimed[0] - before[0], 2, claimed)
        self.assertGreaterEqual(claimed[1] - before[1], 1, claimed)
        self.assertLessEqual(claimed[1] - before[1], claimed[0] - before[0], claimed)
        self.assertEqual(claimed[2], claimed[1], "every commit is timed")
        self.assertGreater(claimed[3], before[3])
        self.b("alloc", "stop", a["id"])
        self.wait_unclaimed("v")
        released = counts()
        # The record forgotten before the unpublish is answered.
        self.assertGreaterEqual(released[0] - claimed[0], 1, released)
        self.assertGreater(released[1], claimed[1], released)
        self.assertEqual(released[2], released[1], "every commit is timed")
        # c2 published nothing: it wrote nothing.
        m2 = self.metrics(self.clients["c2"])
        self.assertEqual(m2.get("berth_client_db_writes_total", 0), 0)

    def test_a_failing_command_fails_the_alloc_and_still_releases(self):
        """Complaint 1: a failed alloc holds no claim."""
        self.create("v")
        a = self.run_alloc("c1", "v=v", command=("sh", "-c", "exit 3"))
        a = self.wait_alloc(a["id"], ("failed",))
        self.assertEqual(a["exit_code"], 3)
        self.wait_unclaimed("v")

    def test_stop_releases_and_staging_stays_while_another_alloc_uses_it(self):
        """Complaint 7: no NodeUnstage while another alloc on the node uses the staging."""
        vol = self.create("ro", "multi-node-reader-only")
        ext = vol["external_id"]
        a1 = self.run_alloc("c1", "x=ro:ro")
        a2 = self.run_alloc("c1", "x=ro:ro")
        self.assertEqual(len(self.volume("ro")["claims"]), 2)
        r = self.b("alloc", "stop", a1["id"])
        self.assertIn("claims are released", r.out)
        methods = self.plugins["c1"].ok_methods(ext)
        self.assertEqual(methods.count("NodeUnpublishVolume"), 1)
        self.assertNotIn("NodeUnstageVolume", methods)
        self.assertNotIn("ControllerUnpublishVolume", methods)
        self.b("alloc", "stop", a2["id"])
        methods = self.plugins["c1"].ok_methods(ext)
        self.assertEqual(methods[-3:], ["NodeUnpublishVolume", "NodeUnstageVolume",
                                        "ControllerUnpublishVolume"])
        self.assertEqual(self.volume("ro")["claims"], [])
        self.assertEqual(self.alloc(a1["id"])["state"], "complete")
        # Stopping again is fine and says so.
        r = self.b("alloc", "stop", a1["id"])
        self.assertIn("already complete", r.out)

    def test_a_failed_claim_unwinds_what_the_alloc_already_claimed(self):
        """Complaint 1 (ghost claims after a failed attach, Nomad #15415)."""
        first = self.create("first")
        self.create("second")
        holder = self.run_alloc("c2", "s=second")
        r = self.run_alloc("c1", "a=first", "b=second", expect=4)
        self.assertIn("claim of volume 'second'", r.err)
        self.assertIn("every claim it took was released", r.err)
        self.assertEqual(self.volume("first")["claims"], [])
        methods = self.plugins["c1"].ok_methods(first["external_id"])
        self.assertIn("NodePublishVolume", methods)
        self.assertEqual(methods[-3:], ["NodeUnpublishVolume", "NodeUnstageVolume",
                                        "ControllerUnpublishVolume"])
        failed = [a for a in self.b("--json", "alloc", "status").json()
                  if a["id"] != holder["id"]]
        self.assertEqual([a["state"] for a in failed], ["failed"])
        # Bad input changes nothing.
        before = self.b("--json", "alloc", "status").json()
        self.b("alloc", "run", "--node", "c1", "--volume", "nonsense", expect=2)
        self.b("alloc", "run", "--node", "c1", "--volume", "a=missing", expect=3)
        self.b("alloc", "run", "--node", "nowhere", "--volume", "a=first", expect=3)
        self.assertEqual(self.b("--json", "alloc", "status").json(), before)

    def test_client_killed_during_a_release_step_is_retried_at_once(self):
        """A CSI step in flight when its client dies fails as soon as the
        connection closes and is retried, instead of waiting out the 75 s step
        timeout (and holding up the plugin's other controller calls)."""
        vol = self.create("v")
        ext = vol["external_id"]
        a = self.run_alloc("c1", "d=v")
        plugin = self.plugins["c1"].proc
        plugin.send_signal(signal.SIGSTOP)
        self.addCleanup(lambda: plugin.poll() is None and plugin.send_signal(signal.SIGCONT))
        stopped = {}
        t = threading.Thread(target=lambda: stopped.update(
            r=berth(self.address, "alloc", "stop", a["id"], timeout=120)))
        t.start()
        self.addCleanup(t.join)
        # The release's first step (NodeUnpublish) is sent to c1, whose plugin
        # does not answer.
        self.wait(lambda: self.volume("v")["claims"][0]["state"] != "taken",
                  "the release to start")
        time.sleep(1.0)
        killed = time.time()
        self.clients["c1"].kill()
        plugin.send_signal(signal.SIGCONT)
        self.clients["c1"] = self.client("c1")
        self.clients["c1"].start()
        self.wait_unclaimed("v", timeout=40)
        self.assertLess(time.time() - killed, 40)
        t.join(timeout=120)
        self.assertEqual(self.plugins["c1"].ok_methods(ext)[-3:], [
            "NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"])

    def test_controller_plugin_killed_during_a_release_then_restarted(self):
        """Complaint 5: a plugin restart wedges no volume; the watcher retries."""
        vol = self.create("v")
        ext = vol["external_id"]
        a = self.run_alloc("c1", "d=v")
        self.plugins["c1"].kill()
        self.plugins["c2"].kill()
        stopped = {}
        t = threading.Thread(target=lambda: stopped.update(
            r=berth(self.address, "alloc", "stop", a["id"], timeout=90)))
        t.start()
        self.addCleanup(t.join)
        # The release fails while the plugins are down; the volume says why.
        self.wait(lambda: any(c["release_attempts"] > 0 for c in self.volume("v")["claims"]),
                  "a failed release attempt")
        claim = self.volume("v")["claims"][0]
        self.assertNotEqual(claim["release_error"], "")
        text = self.b("volume", "status", "v").out
        self.assertIn("Releases (volume watcher)", text)
        m = self.metrics()
        self.assertGreater(m["berth_watcher_retries_total"], 0)
        self.assertEqual(m["berth_watcher_pending_releases"], 1)
        self.assertEqual(m['berth_allocs{state="complete"}'], 1)
        self.assertIn('berth_mailbox_backlog{kind="leader"}', m)
        self.plugins["c1"].start()
        self.plugins["c2"].start()
        t.join(timeout=90)
        self.assertEqual(stopped["r"].code, 0, stopped["r"])
        self.wait_unclaimed("v", timeout=60)
        self.assertEqual(self.plugins["c1"].ok_methods(ext)[-3:], [
            "NodeUnpublishVolume", "NodeUnstageVolume", "ControllerUnpublishVolume"])
        # The volume can be claimed again, once c2's restarted plugin was
        # probed healthy again (a claim on an unhealthy instance is refused).
        self.wait(lambda: self.nodes_healthy() == 2, "both plugin instances healthy again")
        b2 = self.run_alloc("c2", "d=v")
        self.b("alloc", "stop", b2["id"])

    def test_a_lost_node_frees_its_volume_for_another_node(self):
        """Complaints 2 (allocs stuck when a node is lost) and 8 (plugin counts)."""
        self.create("v")
        a = self.run_alloc("c2", "d=v")
        self.clients["c2"].kill()  # never restarted
        self.wait(lambda: self.b("--json", "node", "status", "c2").json()["status"] == "down",
                  "node c2 marked down")
        self.assertEqual(self.wait_alloc(a["id"], ("lost",))["state"], "lost")
        self.wait_unclaimed("v")
        # c2's plugin instance left the counts.
        p = self.b("--json", "plugin", "status", "hostpath").json()
        self.assertEqual((p["nodes_healthy"], p["nodes_expected"]), (1, 1))
        b2 = self.run_alloc("c1", "d=v")
        self.assertEqual(b2["state"], "running")
        self.b("alloc", "stop", b2["id"])

    def test_detach_frees_a_volume_of_a_stopped_alloc_on_a_disconnected_node(self):
        """Complaints 2 and 10: detach works while the node is unreachable."""
        self.create("v")
        a = self.run_alloc("c2", "d=v")
        r = self.b("volume", "detach", "v", "c2", expect=4)
        self.assertIn("stop them first", r.err)
        self.clients["c2"].kill()
        r = self.b("alloc", "stop", a["id"])
        self.assertIn("berth volume detach", r.out)
        r = self.b("volume", "detach", "v", "c2")
        self.assertIn("claim of alloc '%s' released" % a["id"], r.out)
        self.assertEqual(self.volume("v")["claims"], [])
        r = self.b("volume", "detach", "v", "c2")
        self.assertIn("nothing to detach", r.out)
        b2 = self.run_alloc("c1", "d=v")
        self.b("alloc", "stop", b2["id"])

    def test_deregister_is_refused_while_claimed_then_allowed(self):
        """Complaint 10: no --force needed once the alloc stopped."""
        self.create("v")
        a = self.run_alloc("c1", "d=v")
        r = self.b("volume", "deregister", "v", expect=4)
        self.assertIn("claim", r.err)
        self.b("alloc", "stop", a["id"])
        self.b("volume", "deregister", "v")
        self.b("volume", "status", "v", expect=3)

    def test_volume_delete_goes_through_the_controller(self):
        vol = self.create("gone")
        a = self.run_alloc("c1", "d=gone")
        self.b("volume", "delete", "gone", expect=4)
        self.b("alloc", "stop", a["id"])
        self.b("volume", "delete", "gone")
        self.b("volume", "status", "gone", expect=3)
        deletes = self.plugins["c1"].calls(vol["external_id"], ["DeleteVolume"])
        self.assertEqual([c["code_name"] for c in deletes], ["OK"])

    def test_plugins_without_instances_are_garbage_collected(self):
        """Complaint 9: zombie plugins."""
        self.b("plugin", "fingerprint", "zombie", "--node", "hand-made")
        self.b("plugin", "status", "zombie")
        self.b("plugin", "fingerprint", "zombie", "--node", "hand-made", "--remove")
        self.wait(lambda: self.b("plugin", "status", "zombie", expect=None).code == 3,
                  "the empty plugin collected")
        # A plugin with instances stays.
        self.b("plugin", "status", "hostpath")

    def test_node_status_lists_allocs_and_volumes(self):
        self.create("v")
        a = self.run_alloc("c1", "d=v")
        node = self.b("--json", "node", "status", "c1").json()
        self.assertTrue(node["has_client"])
        self.assertEqual([x["id"] for x in node["allocs"]], [a["id"]])
        self.assertEqual([v["id"] for v in node["volumes"]], ["v"])
        text = self.b("node", "status", "c1").out
        self.assertIn(a["id"], text)
        self.b("alloc", "stop", a["id"])


class ClientRestartTest(Base):
    """A client killed and restarted within its lease. With LifecycleTest's
    3 s node-down timeout the lease is 1 s, and the client records its lease
    at most once a second (control/lease: lease_at_start ends it sooner, never
    later): on a loaded machine the restarted client found its lease out,
    fenced the alloc as it should, and the alloc never completed (make test
    of a fresh clone with two builds beside it). A 30 s timeout gives a 10 s
    lease, so this test sees the restart, not the fence."""
    node_down_timeout = "%g" % (30 * max(TIME_SCALE, 1))

    def test_client_killed_while_its_alloc_runs_then_restarted(self):
        """Complaint 6: a restarted client waits for its plugin, re-mounts nothing,
        and still releases correctly."""
        vol = self.create("v")
        ext = vol["external_id"]
        flag = os.path.join(self.tmp, "go")
        a = self.run_alloc("c1", "d=v", command=(
            "sh", "-c", 'while [ ! -e %s ]; do sleep 0.1; done; echo after > "$BERTH_VOLUME_D/out"'
            % flag))
        published = self.plugins["c1"].ok_methods(ext).count("NodePublishVolume")
        self.clients["c1"].kill()
        self.plugins["c1"].kill()
        self.clients["c1"] = self.client("c1")
        self.clients["c1"].start()
        # The plugin comes back later than the client.
        time.sleep(1.0)
        self.plugins["c1"].start()
        open(flag, "w").close()
        a = self.wait_alloc(a["id"], ("complete",))
        self.assertEqual(a["exit_code"], 0)
        self.wait_unclaimed("v")
        methods = self.plugins["c1"].ok_methods(ext)
        self.assertEqual(methods.count("NodePublishVolume"), published,
                         "the restarted client published again")
        self.assertEqual(methods[-3:], ["NodeUnpublishVolume", "NodeUnstageVolume",
                                        "ControllerUnpublishVolume"])
        # No CSI call failed: the client waited for its plugin.
        failed = [c for c in self.plugins["c1"].calls(ext) if c["code_name"] != "OK"]
        self.assertEqual(failed, [])


class TopologyTest(Base):
    plugin_extra = {"c1": ["--topology", "zone=a"], "c2": ["--topology", "zone=b"]}

    def test_a_claim_outside_the_volume_topology_is_refused(self):
        """Topology: a volume created for zone a is claimed in zone a only."""
        vol = self.create("zoned", topology_request={"required": [{"segments": {"zone": "a"}}]})
        self.assertEqual(vol["accessible_topology"], [{"segments": {"zone": "a"}}])
        r = self.run_alloc("c2", "d=zoned", expect=4)
        self.assertIn("not accessible from node 'c2'", r.err)
        self.assertEqual(self.volume("zoned")["claims"], [])
        a = self.run_alloc("c1", "d=zoned")
        self.b("alloc", "stop", a["id"])
        # No controller in zone c: nothing is created.
        r = self.b("volume", "create", "-", expect=5, stdin=json.dumps({
            "id": "nowhere", "plugin_id": "hostpath",
            "capabilities": [{"access_mode": "single-node-writer",
                              "attachment_mode": "file-system"}],
            "topology_request": {"required": [{"segments": {"zone": "c"}}]}}))
        self.assertIn("required topology", r.err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
