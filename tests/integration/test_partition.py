"""A client cut off from every server fences itself before its volume moves
(issue 26): 3 servers and 2 clients as real processes on 127.0.0.1, with the
clients' plugins sharing one root, so a volume can be published on either
client. Client c1 reaches the servers only through TCP proxies that the test
can cut (every connection closed, new ones refused at once) while c1's
process, its plugin and its alloc go on. What the proxies cut is c1's own
connections: its heartbeats, so it gets no lease. The servers reach c1 only
through those connections (berthd opens no automatic connections, issue 59),
so the cut is one both ways; the fault suite's partition-client also cuts in
network namespaces. This test checks the client's side of the lease.

c1 runs an alloc that writes a single-node-writer volume. Once c1 is cut
off, c2 asks for the same volume again and again. When c2's claim is
acknowledged: c1's alloc process is gone, c1 unpublished the volume before
c2 published it (the plugins' call logs), the volume never had two live
write publications, and no line c1's alloc wrote comes after c2's
publication. After the heal, c1 reports what it did and keeps nothing.

A second case kills c1's agent (SIGKILL): its alloc's supervisor,
berth-alloc, stops the writer when the lease the agent last wrote runs out,
before the volume moves to c2.

A third case freezes c1's agent (SIGSTOP: it cannot fence itself) on a
cluster started with --keep-down-writers: the down node's claim is never
released without it, until the operator detaches it.

A fourth (issue 27) freezes a client whose volume is being released: its
connection stays open and silent, so no down message comes; the release's
NodeUnpublishVolume fails once the node actor leaves a ping unanswered
(actors/node_call.hpp), not after the step's whole timeout (75 s), and the
release finishes once the client runs again."""

import glob
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fault"))

from checker import check_single_writer_plugin  # noqa: E402
from cluster import ClusterTestCase, Client, Plugin  # noqa: E402
from harness import BERTHD, SHELL_TIMEOUT, SHORT_FENCE, berth  # noqa: E402
from cut_proxy import CutProxy  # noqa: E402

# Short timeouts keep the test quick: a lease of 2 s, a margin of 4 s, which
# covers a fence with a 1 s kill timeout (harness.SHORT_FENCE).
DOWN_TIMEOUT = "6"
WRITER = ('while true; do echo "%s $(date +%%s%%N)" >> "$BERTH_VOLUME_DATA/log"; '
          'sleep 0.05; done')


class PartitionBase(ClusterTestCase):
    PREFIX = "berth-partition-"
    SERVER_ARGS = ("--node-down-timeout", DOWN_TIMEOUT) + SHORT_FENCE

    def setUp(self):
        super().setUp()
        self.shared = os.path.join(self.tmp, "shared-root")
        self.proxies = [CutProxy(s.address) for s in self.cluster.servers]
        self.addCleanup(self.stop_everything)
        self.plugins, self.clients = {}, {}
        for name in ("c1", "c2"):
            plugin = Plugin(self.tmp, "plugin-" + name, "csi-" + name, shared_root=self.shared)
            servers = ([p.address for p in self.proxies] if name == "c1"
                       else [s.address for s in self.cluster.servers])
            client = Client(self.tmp, name, servers, plugin.socket,
                            ["--csi-root", os.path.join(self.tmp, name + "-csi")] +
                            list(SHORT_FENCE))
            self.cluster.processes += [client, plugin]
            plugin.start()
            client.start()
            self.plugins[name], self.clients[name] = plugin, client
        self.wait(lambda: self.healthy_nodes() == 2, "both clients' plugins healthy")
        spec = {"id": "sw", "plugin_id": "hostpath",
                "capabilities": [{"access_mode": "single-node-writer",
                                  "attachment_mode": "file-system"}]}
        self.b("volume", "create", "-", stdin=json.dumps(spec))

    def stop_everything(self):
        for p in self.proxies:
            p.close()
        for c in self.clients.values():
            try:
                os.kill(c.proc.pid, signal.SIGCONT)
            except (OSError, AttributeError):
                pass
        # Alloc commands a failed test left running are killed by the
        # cluster's clean-up (undo_mounts: only those under this test's
        # directory; a pkill by command line killed integration.expand's
        # writer when both ran at once).

    def ask(self, *args):
        """The shell through self.via, whatever its exit code."""
        return berth(self.via, "--timeout", SHELL_TIMEOUT, *args, timeout=90)

    def healthy_nodes(self):
        r = self.ask("--json", "plugin", "status", "hostpath")
        return r.json().get("nodes_healthy", -1) if r.code == 0 else -1

    def alloc_pid(self, node, alloc):
        db = sqlite3.connect(os.path.join(self.tmp, node, "client.db"), timeout=5)
        try:
            row = db.execute("SELECT pid FROM allocs WHERE id=?", (alloc,)).fetchone()
            return row[0] if row else 0
        finally:
            db.close()

    def client_table(self, node, table):
        db = sqlite3.connect(os.path.join(self.tmp, node, "client.db"), timeout=5)
        try:
            return db.execute("SELECT * FROM %s" % table).fetchall()
        finally:
            db.close()

    def calls(self, node):
        with open(self.plugins[node].call_log) as f:
            return [json.loads(l) for l in f if l.strip()]

    def volume(self):
        return self.b("--json", "volume", "status", "sw").json()

    def run_writer(self, node, alloc):
        return self.ask("alloc", "run", "--node", node, "--id", alloc, "--volume", "data=sw", "--",
                      "sh", "-c", WRITER % node)

    def start_c1_writer(self):
        """Runs alloc w1 writing the volume on c1; returns its pid (its
        supervisor's) once it writes."""
        self.assertEqual(self.run_writer("c1", "w1").code, 0)
        self.wait(lambda: any(n == "c1" for n, _ in self.writes()), "c1's alloc writing")
        pid = self.alloc_pid("c1", "w1")
        self.assertGreater(pid, 0)
        self.assertTrue(alive(pid))
        return pid

    def claim_on_c2(self):
        """c2 asks until the volume is its own: refused (exit 4) while c1
        holds it. Returns when it was acknowledged and c2's alloc."""
        attempt = 0
        deadline = time.time() + 90
        while time.time() < deadline:
            attempt += 1
            w2 = "w2-%d" % attempt  # a refused run stays refused: a new alloc each time
            r = self.run_writer("c2", w2)
            if r.code == 0:
                return time.time(), w2
            self.assertIn(r.code, (4, 5, 7), r)  # refused or unavailable, nothing else
            if r.code == 7:  # unknown outcome: the run may have been made
                self.ask("alloc", "stop", w2)
            time.sleep(0.2)
        self.fail("c2 never got the volume after c1 was cut off")

    def moved_to_c2(self, pid, since, what):
        """c2 claims the volume (claim_on_c2); by then c1's alloc `pid` is
        gone and c1's lease had run out. Returns c2's alloc."""
        acknowledged, w2 = self.claim_on_c2()
        moved_after = acknowledged - since
        self.assertFalse(alive(pid), "c1's alloc (pid %d) still runs %.1f s after %s, when c2's "
                         "claim was acknowledged: two writers" % (pid, moved_after, what))
        self.assertGreater(moved_after, 2.0, "the volume moved before c1's lease ran out")
        return w2

    def writes(self):
        """The lines every alloc wrote to the shared volume: (node, ns)."""
        out = []
        for path in glob.glob(os.path.join(self.shared, "**", "log"), recursive=True):
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2 and parts[1].isdigit():
                        out.append((parts[0], int(parts[1])))
        return out


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of the client's is not writing: look at its state.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class CutOffClientTest(PartitionBase):
    def test_cut_off_client_fences_before_the_volume_moves(self):
        pid = self.start_c1_writer()

        for p in self.proxies:
            p.cut()
        cut_at = time.time()
        # c1's alloc had stopped by the time c2's claim was acknowledged.
        w2 = self.moved_to_c2(pid, cut_at, "the cut")

        # The plugins' logs: c1 unpublished before c2 published; never two writers.
        c1 = [e for e in self.calls("c1") if e.get("code") == 0]
        c2 = [e for e in self.calls("c2") if e.get("code") == 0]
        unpub = [e["at_ns"] for e in c1 if e["method"] == "NodeUnpublishVolume"]
        pub2 = [e["at_ns"] for e in c2 if e["method"] == "NodePublishVolume"]
        self.assertTrue(unpub, "c1 never unpublished the volume")
        self.assertTrue(pub2, "c2 never published the volume")
        self.assertLess(max(unpub), min(pub2), "c2 published before c1 unpublished")
        ext = self.volume()["external_id"]
        obs = {"volumes": {"sw": {"access_mode": "single-node-writer", "external_id": ext}},
               "call_logs": {"csi-c1": self.calls("c1"), "csi-c2": self.calls("c2")}}
        self.assertEqual(check_single_writer_plugin(obs), [])
        # No line of c1's comes after c2's publication.
        self.wait(lambda: any(n == "c2" for n, _ in self.writes()), "c2's alloc writing")
        last_c1 = max(ns for n, ns in self.writes() if n == "c1")
        self.assertLess(last_c1, min(pub2), "c1 wrote after c2 published the volume")
        # c1 recorded its fence while it was cut off.
        with open(self.clients["c1"].log_path, errors="replace") as f:
            self.assertIn("lease ran out", f.read())

        # After the heal, c1 reports the alloc's end and keeps nothing of it.
        for p in self.proxies:
            p.heal()
        self.wait(lambda: self.client_table("c1", "fenced") == [], "c1's fence finished", 60)
        self.assertEqual(self.client_table("c1", "mounts"), [])
        a = self.b("--json", "alloc", "status", "w1").json()
        self.assertIn(a["state"], ("complete", "failed", "lost"), a)
        self.b("alloc", "stop", w2)
        self.wait(lambda: not self.volume().get("claims"), "the volume free again")


class DeadAgentTest(PartitionBase):
    """A killed agent cannot fence: nothing of it runs. Its alloc's
    supervisor (berth-alloc, control/lease.hpp: the guard that outlives the
    agent) stops the writer when the lease the agent last wrote runs out,
    before the servers mark c1 down and hand the volume to c2."""

    def test_killed_agent_s_writer_stops_before_the_volume_moves(self):
        pid = self.start_c1_writer()
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            self.assertIn(b"--lease-file", f.read(), "c1's writer runs without a fence")

        self.clients["c1"].kill(signal.SIGKILL)
        killed_at = time.time()
        w2 = self.moved_to_c2(pid, killed_at, "its agent was killed")
        # No line of c1's comes after c2's publication (c1's mount stays
        # until c1 comes back: nobody is left there to unmount it).
        pub2 = [e["at_ns"] for e in self.calls("c2")
                if e.get("code") == 0 and e["method"] == "NodePublishVolume"]
        self.assertTrue(pub2, "c2 never published the volume")
        self.wait(lambda: any(n == "c2" for n, _ in self.writes()), "c2's alloc writing")
        last_c1 = max(ns for n, ns in self.writes() if n == "c1")
        self.assertLess(last_c1, min(pub2), "c1 wrote after c2 published the volume")
        with open(os.path.join(self.tmp, "c1", "allocs", "w1", "stderr"), errors="replace") as f:
            self.assertIn("lease ran out", f.read())

        # c1 comes back: it unmounts what the servers released without it
        # and reports how the alloc ended.
        self.clients["c1"].start()
        self.wait(lambda: self.client_table("c1", "mounts") == [], "c1 unmounted on its return",
                  60)
        a = self.b("--json", "alloc", "status", "w1").json()
        self.assertIn(a["state"], ("complete", "failed", "lost"), a)
        self.b("alloc", "stop", w2)
        self.wait(lambda: not self.volume().get("claims"), "the volume free again")


class FrozenAgentTest(PartitionBase):
    SERVER_ARGS = ("--node-down-timeout", DOWN_TIMEOUT, "--keep-down-writers") + SHORT_FENCE

    def test_keep_down_writers_waits_for_the_node_or_a_detach(self):
        self.assertEqual(self.run_writer("c1", "w1").code, 0)
        os.kill(self.clients["c1"].proc.pid, signal.SIGSTOP)  # a frozen agent: no fence

        def c1_down():
            r = self.ask("--json", "node", "status", "c1")
            return r.code == 0 and r.json().get("status") == "down"
        self.wait(c1_down, "c1 marked down", 60)
        # The writer's claim stays: c2 is refused while c1 may still write.
        r = self.run_writer("c2", "w2-0")
        self.assertEqual(r.code, 4, r)
        claims = self.volume().get("claims", [])
        self.assertEqual([c["alloc_id"] for c in claims], ["w1"], claims)
        # The operator decides: detach it from the down node, then c2 gets it.
        self.b("volume", "detach", "sw", "c1")
        self.wait(lambda: not self.volume().get("claims"), "the claim released by the detach")
        self.assertEqual(self.run_writer("c2", "w2-1").code, 0)
        os.kill(self.clients["c1"].proc.pid, signal.SIGCONT)
        self.b("alloc", "stop", "w2-1")


class SilentClientTest(ClusterTestCase):
    PREFIX = "berth-silent-"
    # Never marked down meanwhile: the release must go through the node.
    SERVER_ARGS = ("--node-down-timeout", "600")

    def test_a_step_on_a_client_that_went_silent_fails_on_its_ping_not_its_timeout(self):
        _, client = self.cluster.add_client("c1")

        def healthy():
            r = berth(self.via, "--json", "--timeout", "5", "plugin", "status", "hostpath")
            return r.code == 0 and r.json().get("nodes_healthy") == 1
        self.wait(healthy, "c1's plugin healthy")
        spec = {"id": "sw", "plugin_id": "hostpath",
                "capabilities": [{"access_mode": "single-node-writer",
                                  "attachment_mode": "file-system"}]}
        self.b("volume", "create", "-", stdin=json.dumps(spec))
        self.b("volume", "claim", "sw", "--alloc", "a1", "--node", "c1")
        os.kill(client.proc.pid, signal.SIGSTOP)  # its connections stay open, silent
        try:
            # The shell waits longer than the step's timeout (75 s): only the
            # ping can end the step first.
            r = berth(self.via, "--timeout", "100", "volume", "release", "sw", "--alloc", "a1",
                      timeout=150)
            self.assertNotEqual(r.code, 0, r)
            self.assertIn("berth client did not answer for 10 s while the step ran", r.err)
            claims = self.b("--json", "volume", "status", "sw").json().get("claims", [])
            self.assertEqual([c["alloc_id"] for c in claims], ["a1"], claims)
        finally:
            os.kill(client.proc.pid, signal.SIGCONT)

        # Once the client runs again the release resumes (the volume watcher
        # retries it, as does a shell's release).
        def released():
            r = berth(self.via, "--json", "--timeout", "5", "volume", "status", "sw")
            return r.code == 0 and not r.json().get("claims")
        self.wait(released, "the release finished once c1 runs again")


class LeaseMarginTest(unittest.TestCase):
    """berthd refuses a lease margin that does not cover a client's fence
    (control/lease.hpp, fence_margin_ms), naming the inequality, the values
    and the fix, before it touches its data directory."""

    def berthd(self, *args):
        tmp = tempfile.mkdtemp(prefix="berth-margin-")
        self.addCleanup(shutil.rmtree, tmp, True)
        data = os.path.join(tmp, "d")
        r = subprocess.run([BERTHD, "--data-dir", data, "--port", "0", "--metrics-port", "0"] +
                           list(args), capture_output=True, text=True, timeout=30)
        return r, os.path.exists(data)

    def test_a_margin_shorter_than_the_fence_is_refused(self):
        # The case: a 2 s lease and a 6 s node-down timeout leave 4 s,
        # and the fence needs the 5 s kill timeout and the unmount (5 s).
        for mode in (["--dev"], ["--server", "--name", "s1", "--raft-port", "4999"]):
            r, made = self.berthd(*(mode + ["--node-down-timeout", DOWN_TIMEOUT]))
            self.assertEqual(r.returncode, 2, r)
            self.assertFalse(made)
            self.assertIn("--node-down-timeout - --node-lease must be at least "
                          "max(--kill-timeout, --node-lease/4) + --fence-unmount-time", r.stderr)
            self.assertIn("6 s - 2 s = 4 s < max(5 s, 0.5 s) + 5 s + 0.25 s + 0.006 s = 10.256 s",
                          r.stderr)
            self.assertIn("raise --node-down-timeout to at least 15.", r.stderr)
        # A given lease, a longer kill timeout: the same, with the values given.
        r, _ = self.berthd("--dev", "--node-down-timeout", "20", "--node-lease", "5",
                           "--kill-timeout", "12")
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("20 s - 5 s = 15 s < max(12 s, 1.25 s) + 5 s", r.stderr)
        self.assertIn("(with --node-lease 5 s)", r.stderr)

if __name__ == "__main__":
    unittest.main(verbosity=2)
