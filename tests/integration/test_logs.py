"""berthd's log and `berth monitor`, with real processes on 127.0.0.1: the
lines of a claim cycle (levels, components, ids), of a failing plugin, no
secret at any level (trace), JSON lines, and monitor streaming a server's
lines and, through the leader, a separate client's."""

import json
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

from cluster import Plugin, Process, free_port
from harness import BERTH, BERTHD, Agent, berth, undo_mounts

SECRET = "s3cr3t-log-token"
FLAG_SECRET = "pw-in-a-mount-flag"

SPEC = {
    "id": "data",
    "plugin_id": "hostpath",
    "capabilities": [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}],
    "capacity_min": "1MiB",
    "parameters": {"tier": SECRET + "-param"},
    "secrets": {"token": SECRET},
    "mount_options": {"mount_flags": ["noatime", "x-" + FLAG_SECRET]},
}

# 2026-11-23T17:00:00.123Z info leader volume claimed namespace=default ...
LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (trace|debug|info|warn|error) "
                  r"(\S+) (.*)$")


def parse(text):
    """(time, level, component, rest) of every line of berthd's stderr."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            out.append(m.groups())
    return out


def find(lines, level, component, message, **ids):
    """The lines at `level` of `component` starting with `message` and holding key=value ids."""
    found = []
    for _, lvl, comp, rest in lines:
        if lvl != level or comp != component or not rest.startswith(message):
            continue
        if all(re.search(r"(^| )%s=%s( |$)" % (k, re.escape(str(v))), rest) for k, v in ids.items()):
            found.append(rest)
    return found


class Monitor:
    """`berth monitor` running in the background; its stdout lines in a queue."""

    def __init__(self, address, *args):
        self.proc = subprocess.Popen([BERTH, "--address", address, "monitor"] + list(args),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern, timeout=30):
        """Reads lines until one matches; fails on timeout or exit."""
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError("monitor never showed %r; it showed %s" % (pattern, self.seen))
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError("monitor exited (%s): %s; it showed %s" % (
                    self.proc.wait(), self.proc.stderr.read(), self.seen))
            self.seen.append(line)
            if re.search(pattern, line):
                return line

    def stop(self):
        if self.proc.stderr.closed:
            return "\n".join(self.seen)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        # What it printed after the last wait_for.
        while True:
            try:
                line = self.lines.get(timeout=5)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        self.proc.stdout.close()
        return "\n".join(self.seen) + err


class DevAgentLogs(unittest.TestCase):
    def start(self, *args):
        self.tmp = tempfile.mkdtemp(prefix="berth-logs-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.addCleanup(undo_mounts, self.tmp)  # (runs before the rmtree)
        self.agent = Agent(os.path.join(self.tmp, "data"), extra_args=[
            "--node-name", "n1", "--fingerprint-interval", "0.2"] + list(args)).start()
        self.addCleanup(self.agent.kill)
        self.wait_plugin()

    def wait_plugin(self, timeout=30):
        deadline = time.time() + timeout
        while True:
            r = berth(self.agent, "--json", "plugin", "status", "hostpath")
            if r.code == 0 and r.json()["nodes_healthy"] == 1:
                return
            if time.time() > deadline:
                self.fail("the dev agent's plugin never became healthy: %r" % r)
            time.sleep(0.1)

    def run_berth(self, *args, stdin=None, expect=0):
        r = berth(self.agent, *args, stdin=stdin)
        self.assertEqual(r.code, expect, r)
        return r

    def log(self):
        with open(self.agent.log_path) as f:
            return f.read()

    def claim_cycle(self):
        """create, claim, release, delete: each command returns after its change is applied."""
        ext = self.run_berth("--json", "volume", "create", "-",
                             stdin=json.dumps(SPEC)).json()["external_id"]
        self.run_berth("volume", "claim", "data", "--alloc", "a1", "--node", "n1")
        self.run_berth("volume", "release", "data", "--alloc", "a1")
        self.run_berth("volume", "delete", "data")
        return ext

    def test_claim_cycle_logs_each_committed_change_at_info_with_its_ids(self):
        self.start()
        self.claim_cycle()
        lines = parse(self.log())
        self.assertTrue(find(lines, "info", "raft", "this server leads", server="n1"), lines)
        self.assertTrue(find(lines, "info", "berthd", "started", name="n1"))
        self.assertTrue(find(lines, "info", "leader", "plugin instance added", plugin="hostpath",
                             node="n1", type="node", healthy="true"))
        self.assertTrue(find(lines, "info", "leader", "volume registered", namespace="default",
                             volume="data", plugin="hostpath"))
        claimed = find(lines, "info", "leader", "volume claimed", namespace="default",
                       volume="data", alloc="a1", node="n1", plugin="hostpath", mode="write")
        self.assertEqual(len(claimed), 1, lines)
        self.assertTrue(find(lines, "info", "leader", "alloc created", alloc="a1", node="n1"))
        self.assertTrue(find(lines, "info", "leader", "volume claim release step", volume="data",
                             alloc="a1", node="n1"))
        self.assertEqual(len(find(lines, "info", "leader", "volume released", volume="data",
                                  alloc="a1", node="n1")), 1, lines)
        self.assertEqual(len(find(lines, "info", "leader", "volume deregistered",
                                  namespace="default", volume="data")), 1, lines)
        # The default level is info: no trace or debug lines, and no failures.
        self.assertEqual([l for l in lines if l[1] in ("trace", "debug")], [])
        self.assertEqual([l for l in lines if l[1] in ("warn", "error")], [])
        # Every line of berthd's has the format (berth-hostpath, which
        # --dev starts, shares the stderr).
        text = self.log()
        stamped = [l for l in text.splitlines() if re.match(r"^\d{4}-\d\d-\d\dT", l)]
        self.assertEqual(len(lines), len(stamped), text)
        self.assertNotIn(SECRET, text)

    def test_failing_plugin_calls_are_warnings_with_the_plugins_code_and_message(self):
        self.start()
        r = self.run_berth("volume", "register", "-", stdin=json.dumps(dict(
            SPEC, id="ghost", external_id="hp-does-not-exist")), expect=4)
        self.assertIn("NOT_FOUND", r.err)
        lines = parse(self.log())
        failed = find(lines, "warn", "csi", "CSI call failed", plugin="hostpath",
                      method="ValidateVolumeCapabilities", code="NOT_FOUND",
                      external_id="hp-does-not-exist")
        self.assertEqual(len(failed), 1, lines)
        self.assertIn('message="volume hp-does-not-exist does not exist"', failed[0])
        self.assertNotIn(SECRET, self.log())

    def test_nothing_secret_at_trace_on_stderr_nor_through_monitor(self):
        self.start("--log-level", "trace")
        monitor = Monitor(self.agent.address, "--log-level", "trace", "--lines", "2048")
        self.addCleanup(monitor.stop)
        monitor.wait_for(r" info berthd started ")
        ext = self.claim_cycle()
        monitor.wait_for(r" info leader volume deregistered .*volume=data")
        shown = monitor.stop()
        text = self.log()
        lines = parse(text)
        # trace really was on: every CSI call of the cycle is there.
        for method in ("CreateVolume", "ControllerPublishVolume", "NodeStageVolume",
                       "NodePublishVolume", "NodeUnpublishVolume", "NodeUnstageVolume",
                       "ControllerUnpublishVolume", "DeleteVolume"):
            self.assertTrue(find(lines, "trace", "csi", "CSI call done", plugin="hostpath",
                                 method=method), method)
        self.assertTrue(find(lines, "trace", "csi", "CSI call done", method="NodePublishVolume",
                             external_id=ext))
        self.assertIn(" trace csi CSI call done ", shown)
        self.assertIn(" info leader volume claimed ", shown)
        for secret in (SECRET, FLAG_SECRET):
            self.assertNotIn(secret, text)
            self.assertNotIn(secret, shown)

    def test_json_lines(self):
        self.start("--log-json")
        self.claim_cycle()
        # (berth-hostpath, which --dev starts, shares the stderr.)
        records = [json.loads(l) for l in self.log().splitlines()
                   if not l.startswith("berth-hostpath:")]
        self.assertTrue(records)
        for r in records:
            self.assertRegex(r["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertIn(r["level"], ("info", "warn", "error"))
        claimed = [r for r in records if r["message"] == "volume claimed"]
        self.assertEqual(len(claimed), 1, records)
        self.assertEqual((claimed[0]["component"], claimed[0]["namespace"], claimed[0]["volume"],
                          claimed[0]["alloc"], claimed[0]["node"]),
                         ("leader", "default", "data", "a1", "n1"))
        self.assertNotIn(SECRET, self.log())

    def test_monitor_shows_recent_lines_then_new_ones_at_its_level(self):
        self.start()
        # Recent lines first.
        info = Monitor(self.agent.address, "--lines", "100")
        self.addCleanup(info.stop)
        info.wait_for(r" info raft this server leads ")
        # A monitor at debug makes berthd produce debug lines (stderr stays at info).
        debug = Monitor(self.agent.address, "--log-level", "debug", "--lines", "1")
        self.addCleanup(debug.stop)
        debug.wait_for(r".")  # it asked: berthd now produces debug lines
        errors = Monitor(self.agent.address, "--log-level", "error", "--lines", "100")
        self.addCleanup(errors.stop)
        # --node: the node's client, through the leader (here the same process).
        node = Monitor(self.agent.address, "--node", "n1", "--lines", "1")
        self.addCleanup(node.stop)
        node.wait_for(r".")
        self.claim_cycle()
        info.wait_for(r" info leader volume claimed .*alloc=a1")
        node.wait_for(r" info leader volume released .*alloc=a1")
        debug.wait_for(r" debug server request done command=volume_claim outcome=ok ")
        errors_shown = errors.stop()
        self.assertNotIn(" info ", errors_shown)
        self.assertNotIn(" debug ", self.log())
        r = berth(self.agent, "monitor", "--node", "nope")
        self.assertEqual(r.code, 3, r)
        self.assertIn("node 'nope' has no connected berth client", r.err)
        r = berth(self.agent, "monitor", "--log-level", "loud")
        self.assertEqual(r.code, 2, r)

    def test_help_documents_the_flags(self):
        out = subprocess.run([BERTHD, "--help"], capture_output=True, text=True).stdout
        self.assertIn("--log-level", out)
        self.assertIn("--log-json", out)
        out = subprocess.run([BERTH, "monitor", "--help"], capture_output=True, text=True).stdout
        for flag in ("--log-level", "--node", "--server", "--lines"):
            self.assertIn(flag, out)


class ClientLogs(unittest.TestCase):
    """A server and a separate client process: the client's CSI calls are in
    the client's log, and `berth monitor --node` reads them through the
    leader."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-logs-client-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.addCleanup(undo_mounts, self.tmp)  # (runs before the rmtree)
        self.processes = []
        port, raft = free_port(), free_port()
        self.address = "127.0.0.1:%d" % port
        self.server = Process("s1", [
            BERTHD, "--server", "--name", "s1", "--data-dir", os.path.join(self.tmp, "s1"),
            "--port", str(port), "--raft-port", str(raft), "--metrics-port", "0",
            "--bootstrap-expect", "1", "--raft-tick", "0.05"], os.path.join(self.tmp, "s1.log"))
        self.start(self.server)
        self.plugin = Plugin(self.tmp, "p1", "csi-c1")
        self.start(self.plugin)
        self.client = Process("c1", [
            BERTHD, "--client", "--name", "c1", "--data-dir", os.path.join(self.tmp, "c1"),
            "--servers", self.address, "--metrics-port", "0", "--log-level", "debug",
            "--plugin", "hostpath=monolith:" + self.plugin.socket,
            "--fingerprint-interval", "0.2"], os.path.join(self.tmp, "c1.log"))
        self.start(self.client)
        deadline = time.time() + 30
        while True:
            r = berth(self.address, "--json", "plugin", "status", "hostpath")
            if r.code == 0 and r.json()["nodes_healthy"] == 1:
                break
            if time.time() > deadline:
                self.fail("the client's plugin never became healthy: %r" % r)
            time.sleep(0.1)

    def start(self, p):
        self.processes.append(p)
        self.addCleanup(p.kill)
        p.start()

    def test_monitor_node_reads_the_clients_lines_through_the_leader(self):
        server_monitor = Monitor(self.address, "--lines", "100")
        self.addCleanup(server_monitor.stop)
        client_monitor = Monitor(self.address, "--node", "c1", "--log-level", "trace",
                                 "--lines", "100")
        self.addCleanup(client_monitor.stop)
        client_monitor.wait_for(r" info berthd started .*name=c1")
        ext = json.loads(berth(self.address, "--json", "volume", "create", "-",
                               stdin=json.dumps(SPEC)).out)["external_id"]
        r = berth(self.address, "volume", "claim", "data", "--alloc", "a1", "--node", "c1")
        self.assertEqual(r.code, 0, r)
        # The server logs the committed claim; the client its CSI calls.
        server_monitor.wait_for(r" info leader volume claimed .*volume=data alloc=a1 node=c1")
        client_monitor.wait_for(r" trace csi CSI call done .*method=NodePublishVolume "
                                r"external_id=%s" % re.escape(ext))
        # The plugin dies: the client warns about its failed probes, the
        # server that the instance is unhealthy.
        self.plugin.kill()
        client_monitor.wait_for(r" warn csi CSI call failed plugin=hostpath method=\S+ "
                                r"code=UNAVAILABLE")
        server_monitor.wait_for(r" warn leader plugin instance unhealthy plugin=hostpath node=c1")
        shown = client_monitor.stop() + server_monitor.stop()
        with open(self.client.log_path) as f:
            client_log = f.read()
        with open(self.server.log_path) as f:
            server_log = f.read()
        # The client's stderr is at debug: its trace lines went to the monitor only.
        self.assertNotIn(" trace ", client_log)
        self.assertRegex(client_log, r" warn csi CSI call failed plugin=hostpath method=\S+ "
                                     r"code=UNAVAILABLE")
        for text in (shown, client_log, server_log):
            self.assertNotIn(SECRET, text)
            self.assertNotIn(FLAG_SECRET, text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
