"""A client agent's restart leaves its allocs running (issue 59, item 5).

deploy/systemd/berth-client.service stops the agent with KillMode=process:
`systemctl stop` and `systemctl restart` send SIGTERM to berthd's main
process only, and the allocs' supervisors (berth-alloc) and their commands
stay, guarded by their own lease fence (control/lease.hpp). The unit's
semantics without systemd: the test SIGTERMs the agent's process alone and
starts it again with the same arguments and data directory, on 3 servers and
one client (c1) whose allocs write single-node-writer volumes.

RestartTest: the agent comes back within its lease. Its allocs ran on while
it was away (the same supervisor and command processes, still writing), keep
their claims and stay `running`; the restarted agent renews the lease in the
file the supervisors read (they run on past several leases), and takes them
back: `alloc stop` of one ends its command, and its claim is released
through the node (NodeUnpublishVolume in the plugin's call log after the
restart), while the other runs on.

AwayTest: the agent stays away past its lease. The supervisor of the writing
alloc stops its command when the lease runs out (its stderr says the lease
ran out), and the servers release the claim only after that: the command is
seen dead while the claim is still taken. The agent started again reports
the alloc ended, unmounts what it still had, and the volume is claimed again
through it."""

import glob
import json
import os
import signal
import sqlite3
import time
import unittest

from cluster import ClusterTestCase
from harness import SHELL_TIMEOUT, SHORT_FENCE, TIME_SCALE, berth

SCALE = max(TIME_SCALE, 1)
WRITER = ('while true; do echo "%s $(date +%%s%%N)" >> "$BERTH_VOLUME_DATA/log"; '
          'sleep 0.05; done')


def alive(pid):
    """Whether pid runs (a zombie left to a parent that does not reap it
    does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def children(pid):
    """The pids whose parent is pid."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(p))
    return out


class RestartBase(ClusterTestCase):
    PREFIX = "berth-restart-"
    VOLUMES = ()
    CLIENTS = ("c1",)

    def setUp(self):
        super().setUp()
        # Storage shared by the clients' plugins: with c1 away, c2's
        # controller finishes the release of c1's claims.
        shared = os.path.join(self.tmp, "shared-root")
        started = {name: self.cluster.add_client(
            name, shared_root=shared,
            client_args=["--csi-root", os.path.join(self.tmp, name + "-csi")] + list(SHORT_FENCE))
            for name in self.CLIENTS}
        self.plugin, self.client = started["c1"]  # c1's: the agent the test restarts

        def healthy():
            r = self.ask("--json", "plugin", "status", "hostpath")
            return r.code == 0 and r.json().get("nodes_healthy") == len(self.CLIENTS)
        self.wait(healthy, "the clients' plugins healthy")
        for vid in self.VOLUMES:
            spec = {"id": vid, "plugin_id": "hostpath",
                    "capabilities": [{"access_mode": "single-node-writer",
                                      "attachment_mode": "file-system"}]}
            self.b("volume", "create", "-", stdin=json.dumps(spec))

    def ask(self, *args):
        """The shell through self.via, whatever its exit code."""
        return berth(self.via, "--timeout", SHELL_TIMEOUT, *args, timeout=90)

    def run_writer(self, alloc, vid):
        """Runs alloc `alloc` on c1 writing volume `vid`; returns its
        supervisor's pid and its command's once it writes."""
        self.b("alloc", "run", "--node", "c1", "--id", alloc, "--volume", "data=" + vid, "--",
               "sh", "-c", WRITER % alloc)
        self.wait(lambda: self.last_write(alloc) is not None, alloc + " writing")
        pid = self.alloc_pid(alloc)
        self.assertTrue(alive(pid), "%s's supervisor (pid %d) does not run" % (alloc, pid))
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
        self.assertIn(b"--lease-file", argv, alloc + " runs without its lease fence")
        commands = children(pid)
        self.assertEqual(len(commands), 1, commands)
        # The supervisor leads a process group of its own, its command's:
        # a signal to the agent's group (Ctrl-C in a terminal) reaches
        # neither.
        self.assertEqual(os.getpgid(pid), pid)
        self.assertEqual(os.getpgid(commands[0]), pid)
        self.assertNotEqual(os.getpgid(self.client.proc.pid), pid)
        return pid, commands[0]

    def alloc_pid(self, alloc):
        """The pid of alloc's supervisor, from c1's records."""
        db = sqlite3.connect(os.path.join(self.tmp, "c1", "client.db"), timeout=5)
        try:
            row = db.execute("SELECT pid FROM allocs WHERE id=?", (alloc,)).fetchone()
            return row[0] if row else 0
        finally:
            db.close()

    def last_write(self, alloc):
        """The time (ns) of the last line alloc wrote to its volume."""
        last = None
        for path in glob.glob(os.path.join(self.plugin.root, "**", "log"), recursive=True):
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2 and parts[0] == alloc and parts[1].isdigit():
                        last = max(last or 0, int(parts[1]))
        return last

    def claims(self, vid):
        return self.b("--json", "volume", "status", vid).json().get("claims", [])

    def alloc_state(self, alloc):
        return self.b("--json", "alloc", "status", alloc).json()["state"]

    def calls(self):
        with open(self.plugin.call_log) as f:
            return [json.loads(l) for l in f if l.strip()]

    def stop_agent(self):
        """What `systemctl stop` or `restart` does with KillMode=process:
        SIGTERM to the agent's main process alone."""
        self.client.kill(signal.SIGTERM)
        self.assertFalse(self.client.alive())


class RestartTest(RestartBase):
    # A lease long enough for the agent's restart (it is away under a
    # second), short enough that the allocs outlive several of them after
    # it: the supervisors run on only if the restarted agent renews the
    # lease in their file.
    LEASE = 4 * SCALE
    SERVER_ARGS = ("--node-down-timeout", "%g" % (30 * SCALE),
                   "--node-lease", "%g" % LEASE) + SHORT_FENCE
    VOLUMES = ("sw1", "sw2")

    def test_allocs_run_on_across_an_agent_restart_and_the_agent_takes_them_back(self):
        a1 = self.run_writer("a1", "sw1")
        a2 = self.run_writer("a2", "sw2")

        self.stop_agent()
        stopped_at = time.time_ns()
        # The supervisors and their commands run on without the agent.
        for alloc, (sup, cmd) in (("a1", a1), ("a2", a2)):
            self.assertTrue(alive(sup), "%s's supervisor ended with its agent" % alloc)
            self.assertTrue(alive(cmd), "%s's command ended with its agent" % alloc)
            self.wait(lambda: (self.last_write(alloc) or 0) > stopped_at,
                      alloc + " writing while its agent is away", 5)

        self.client.start()  # the same arguments and data directory
        restarted_at = time.time_ns()
        calls_before = len(self.calls())

        # Several leases later: the same processes run and write (the
        # restarted agent renews the lease the supervisors read), their
        # claims are taken and the allocs running.
        time.sleep(3 * self.LEASE)
        for alloc, vid, (sup, cmd) in (("a1", "sw1", a1), ("a2", "sw2", a2)):
            self.assertTrue(alive(sup) and alive(cmd),
                            "%s stopped after its agent's restart" % alloc)
            self.assertEqual(children(sup), [cmd])
            self.assertGreater(self.last_write(alloc), restarted_at + 2 * self.LEASE * 1e9,
                               alloc + " stopped writing")
            with open(os.path.join(self.tmp, "c1", "allocs", alloc, "stderr"),
                      errors="replace") as f:
                self.assertNotIn("lease ran out", f.read())
            self.assertEqual(self.alloc_state(alloc), "running")
            claims = self.claims(vid)
            self.assertEqual([(c["alloc_id"], c["node_id"]) for c in claims], [(alloc, "c1")],
                             claims)
        # The agent was not taken for a node that lost its allocs.
        node = self.b("--json", "node", "status", "c1").json()
        self.assertEqual(node["status"], "ready", node)
        # The volumes stay mounted where they were: nothing published again.
        self.assertEqual([c["method"] for c in self.calls()[calls_before:]
                          if c["method"] in ("NodeStageVolume", "NodePublishVolume")], [])

        # The restarted agent stops a1 (its command ends, its supervisor
        # reports it) and releases its claim through its plugin.
        self.b("alloc", "stop", "a1")
        self.wait(lambda: not alive(a1[1]) and not alive(a1[0]), "a1's processes ended", 30)
        self.wait(lambda: not self.claims("sw1"), "a1's claim released", 30)
        self.assertIn(self.alloc_state("a1"), ("complete", "failed"))
        unpublished = [c for c in self.calls()[calls_before:]
                       if c["method"] == "NodeUnpublishVolume" and c.get("code") == 0]
        self.assertEqual(len(unpublished), 1, unpublished)
        # a2 runs on, its claim taken.
        self.assertTrue(alive(a2[0]) and alive(a2[1]))
        self.assertEqual(self.alloc_state("a2"), "running")
        self.assertEqual([c["alloc_id"] for c in self.claims("sw2")], ["a2"])
        self.b("alloc", "stop", "a2")
        self.wait(lambda: not self.claims("sw2"), "a2's claim released", 30)
        self.assertFalse(alive(a2[1]))


class AwayTest(RestartBase):
    # A 2 s lease, the node marked down 6 s after its last heartbeat.
    SERVER_ARGS = ("--node-down-timeout", "%g" % (6 * SCALE)) + SHORT_FENCE
    VOLUMES = ("sw1",)
    # c2 only serves the release without c1 (ControllerUnpublishVolume).
    CLIENTS = ("c1", "c2")

    def test_an_agent_away_past_its_lease_leaves_no_writer_when_its_claim_is_released(self):
        sup, cmd = self.run_writer("a1", "sw1")
        # An alloc that writes no single-writer volume is not fenced: it
        # runs on until the agent is back, which stops it (the servers
        # marked it lost with the node).
        self.b("alloc", "run", "--node", "c1", "--id", "a3", "--", "sh", "-c",
               "while true; do sleep 0.1; done")
        self.wait(lambda: self.alloc_state("a3") == "running", "a3 running")
        sup3 = self.alloc_pid("a3")
        self.assertTrue(alive(sup3))
        self.stop_agent()
        stopped_at = time.time()

        # Before the servers start releasing the claim without the node, the
        # writer must have been stopped by its supervisor: it is seen dead
        # while the claim is still taken, and never alive once its release
        # began.
        dead_while_taken = False
        release_began = None
        deadline = time.time() + 60 * SCALE
        while True:
            self.assertLess(time.time(), deadline, "the claim was never released")
            claims = self.claims("sw1")
            taken = any(c["state"] == "taken" for c in claims)
            running = alive(cmd)
            if not taken:
                release_began = release_began or time.time()
                self.assertFalse(running, "a1 still writes after the release of its claim began "
                                 "(%s)" % claims)
                if not claims:
                    break
            elif not running:
                dead_while_taken = True
            time.sleep(0.05)
        self.assertTrue(dead_while_taken, "a1's claim was released before its writer stopped "
                        "(%.1f s after the agent)" % (release_began - stopped_at))
        # The lease (2 s) ran out before the node-down timeout (6 s).
        self.assertGreater(release_began - stopped_at, 4 * SCALE)
        self.assertFalse(alive(sup))
        self.assertTrue(alive(sup3), "a3 (no single-writer volume) was fenced")
        with open(os.path.join(self.tmp, "c1", "allocs", "a1", "stderr"), errors="replace") as f:
            self.assertIn("berth-alloc: the client's lease ran out", f.read())
        with open(os.path.join(self.tmp, "c1", "allocs", "a1", "exit")) as f:
            self.assertIn(f.read().strip(), ("%d" % (128 + signal.SIGTERM),
                                             "%d" % (128 + signal.SIGKILL)))

        # The agent back: it reports how the alloc ended, unmounts what it
        # still had, and the volume is claimed through it again.
        self.client.start()
        self.wait(lambda: self.alloc_state("a1") in ("failed", "lost", "complete"),
                  "a1 reported ended", 30)

        def unmounted():
            db = sqlite3.connect(os.path.join(self.tmp, "c1", "client.db"), timeout=5)
            try:
                return db.execute("SELECT COUNT(*) FROM mounts").fetchone()[0] == 0
            finally:
                db.close()
        self.wait(unmounted, "c1 unmounted a1's volume on its return", 60)
        self.wait(lambda: not alive(sup3), "a3 stopped by the agent back", 30)
        self.assertEqual(self.alloc_state("a3"), "lost")
        _, cmd2 = self.run_writer("a2", "sw1")
        self.assertEqual([c["alloc_id"] for c in self.claims("sw1")], ["a2"])
        self.b("alloc", "stop", "a2")
        self.wait(lambda: not self.claims("sw1"), "a2's claim released", 30)
        self.assertFalse(alive(cmd2))


if __name__ == "__main__":
    unittest.main(verbosity=2)
