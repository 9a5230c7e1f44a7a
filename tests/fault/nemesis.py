"""The nemesis: one fault at a time, spaced randomly, chosen by the run's seed.

Faults (kinds): SIGKILL and restart (kill-*) or SIGSTOP and SIGCONT
(pause-*) of the leader, of a follower, of a client (berthd --client) or of
a plugin (berth-hostpath); partition-client cuts a client off every server
(its veth down as root, else the proxies it alone in its namespace reaches
them through: netns.py, isolate.py; or, one way only, TCP proxies) for longer
than the node-down timeout while its alloc writes a single-writer volume and
that volume is claimed on the other client; as root, partition-leader and
partition-follower cut a server off the network (netns.py); restart-client
stops a client agent with SIGTERM and starts it again at once (systemctl
restart with KillMode=process: its allocs' supervisors and commands run on);
drain-client drains a client (`berth node drain --force`, or a deadline of
1 s), then cancels the drain and enables the node again (issue 59). Each fault is injected, held for a random while, then healed
(restart / SIGCONT / proxies let through again) before the next one, and
recorded in the history ("nemesis" events)."""

import json
import os
import signal
import threading
import time

from workload import run_shell

SINGLE_WRITER = ("single-node-writer", "multi-node-single-writer")


class Nemesis:
    KINDS = ("kill-leader", "kill-follower", "kill-client", "kill-plugin",
             "pause-leader", "pause-follower", "pause-client", "pause-plugin",
             "partition-client", "restart-client", "drain-client")
    # Need root and network namespaces (netns.py): the servers then run in
    # namespaces of their own.
    PARTITION_KINDS = ("partition-leader", "partition-follower")

    def __init__(self, history, rng, cluster, clients, plugins, faults, gap=(0.5, 3.0),
                 hold=(0.3, 2.5), kinds=KINDS, log=print, network=None, proxies=None,
                 operator=None, volumes=(), shared_root=None, down_timeout=6.0,
                 client_cut="tcp"):
        """proxies: {CLIENT: [CutProxy per server]} (partition-client);
        operator: workload.Operator, runs and stops the fault's allocs;
        volumes: workload.Volume list; shared_root: the plugins' root (a
        volume's log is shared_root/volumes/EXTERNAL_ID/log); down_timeout:
        the servers' --node-down-timeout (seconds); client_cut: how
        partition-client cuts a client off (network: its veth down; proxies,
        tcp: its proxies cut; run_fault.py --partition-client-mode)."""
        self.history = history
        self.rng = rng
        self.cluster = cluster
        self.clients = clients
        self.plugins = plugins
        self.faults = faults
        self.gap = gap
        self.hold = hold
        self.kinds = kinds
        self.injected = 0
        self.by_kind = {}
        self.stop_event = threading.Event()
        self.thread = None
        self.error = None
        self.log = log
        self.paused = []
        self.network = network
        self.isolated = []
        self.proxies = proxies or {}
        self.operator = operator
        self.volumes = list(volumes)
        self.shared_root = shared_root
        self.down_timeout = down_timeout
        self.client_cut = client_cut
        self.cut = []
        self.drained = []  # clients drained and not enabled again yet
        # One entry per partition-client fault (the run's summary).
        self.client_partitions = []

    def leader(self):
        try:
            return self.cluster.leader()
        except Exception:
            return None

    def wait(self, lo_hi):
        self.stop_event.wait(self.rng.uniform(*lo_hi))

    def restart(self, p):
        """Starts a killed process again; retries while its port is busy."""
        for attempt in range(20):
            try:
                p.start()
                return
            except Exception as e:  # e.g. the port is still held for a moment
                last = e
                time.sleep(0.25)
        raise RuntimeError("cannot restart %s: %s" % (p.name, last))

    def inject(self, kind):
        servers = self.cluster.servers
        action, target = kind.split("-", 1)
        if target == "leader":
            victim = self.leader() or self.rng.choice(servers)
        elif target == "follower":
            leader = self.leader()
            victim = self.rng.choice([s for s in servers if s is not leader])
        elif target == "client":
            victim = self.rng.choice(self.clients)
        else:
            victim = self.rng.choice(self.plugins)
        if kind == "partition-client":
            self.partition_client(victim)
        elif kind == "drain-client":
            self.drain_client(victim)
        elif kind == "restart-client":
            # As systemd's restart with KillMode=process: SIGTERM to the
            # agent alone, then a new agent at once.
            self.history.note(kind, process=victim.name)
            victim.kill(signal.SIGTERM)
            self.restart(victim)
            self.history.note("restart", process=victim.name)
        elif action == "partition":
            self.history.note("partition", process=victim.name)
            self.isolated.append(victim)
            self.network.isolate(victim.ns)
            self.wait(self.hold)
            self.network.rejoin(victim.ns)
            self.isolated.remove(victim)
            self.history.note("rejoin", process=victim.name)
        elif action == "pause":
            self.history.note("pause", process=victim.name)
            self.paused.append(victim)
            victim.proc.send_signal(signal.SIGSTOP)
            self.wait(self.hold)
            victim.proc.send_signal(signal.SIGCONT)
            self.paused.remove(victim)
            self.history.note("resume", process=victim.name)
        else:
            self.history.note(kind, process=victim.name)
            victim.kill(signal.SIGKILL)
            self.wait(self.hold)
            self.restart(victim)
            self.history.note("restart", process=victim.name)
        self.injected += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        self.log("nemesis: %s %s (fault %d)" % (kind, victim.name, self.injected))

    # --- drain-client ---------------------------------------------------------

    def shell(self, args, timeout=10):
        return run_shell(self.rng.choice(self.operator.workload.addresses()), args, timeout)

    def drain_client(self, victim):
        """`berth node drain` of a client, at once or with a 1 s deadline,
        held, then cancelled and the node enabled again: its allocs are
        stopped through it, and no claim of theirs may be freed before
        their writers stopped (checks 2, 4 and 6)."""
        forced = self.rng.random() < 0.5
        args = ["node", "drain", victim.name] + (["--force"] if forced else ["--deadline", "1s"])
        self.history.note("drain-client", process=victim.name)
        code, err, _ = self.shell(args)
        if code != 0:
            self.log("nemesis: drain-client %s: exit %s: %s" % (victim.name, code, err.strip()))
        self.drained.append(victim)
        self.wait(self.hold)
        self.undrain(victim)
        self.history.note("undrain-client", process=victim.name)

    def undrain(self, victim):
        """Cancels a client's drain and enables it, until it holds (a
        server may be down meanwhile: retried for up to 60 s)."""
        deadline = time.time() + 60
        while True:
            self.shell(["node", "drain", victim.name, "--disable"])
            code, err, _ = self.shell(["node", "eligibility", victim.name, "--enable"])
            if code == 0:
                break
            if time.time() > deadline:
                raise RuntimeError("cannot enable %s after its drain: %s" % (victim.name, err))
            time.sleep(0.5)
        if victim in self.drained:
            self.drained.remove(victim)

    # --- partition-client -----------------------------------------------------

    def log_tail(self, volume, size=8192):
        path = os.path.join(self.shared_root or "", "volumes", volume.external_id or "", "log")
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - size))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def volume_state(self, vid):
        """`volume status VOL --json` (None when unanswered)."""
        code, _, out = run_shell(self.rng.choice(self.operator.workload.addresses()),
                                 ["--json", "volume", "status", vid], 5)
        try:
            return json.loads(out) if code == 0 else None
        except ValueError:
            return None

    def start_writer(self, victim):
        """An alloc of the nemesis on `victim` that writes a single-writer
        volume, seen writing (a line of it in the volume's log): (alloc,
        volume), or (None, volume) for a volume a workload alloc on `victim`
        writes, or (None, None)."""
        candidates = [v for v in self.volumes if v.access_mode in SINGLE_WRITER]
        self.rng.shuffle(candidates)
        deadline = time.time() + 10  # the workload holds them now and then
        while time.time() < deadline and not self.stop_event.is_set():
            for v in candidates:
                alloc, outcome = self.operator.run(victim.name, v.id)
                if outcome != "ok":
                    continue
                seen = time.time() + 5
                while time.time() < seen and " %s " % alloc not in self.log_tail(v):
                    time.sleep(0.1)
                return alloc, v.id
            self.stop_event.wait(0.5)
        for v in candidates:  # every one taken: one a workload alloc there writes
            st = self.volume_state(v.id)
            if st and any(c.get("node_id") == victim.name and c.get("mode") == "write" and
                          c.get("state") == "taken" for c in st.get("claims", [])):
                return None, v.id
        return None, None

    def moved(self, vid, node):
        """Whether `node` holds a write claim of volume `vid` (taken)."""
        st = self.volume_state(vid)
        return bool(st) and any(c.get("node_id") == node and c.get("mode") == "write" and
                                c.get("state") == "taken" for c in st.get("claims", []))

    def partition_client(self, victim):
        """Cuts `victim` off every server (mode "network" or "proxies",
        below) for longer than the node-down timeout while its alloc writes
        a single-writer volume; meanwhile
        the workload (its focus) and the nemesis itself claim that volume on
        the other client, until a write claim there is taken (at most
        down_timeout + 15 s). Then the proxies let it through again and the
        nemesis stops the allocs it ran."""
        other = next(c for c in self.clients if c is not victim)
        alloc, vid = self.start_writer(victim)
        ours = [alloc] if alloc else []
        # network: the client's veth goes down. proxies: the only way
        # between the client and the servers is through its proxies. Both
        # cut every connection, both ways. tcp: the client's connections to
        # the servers are cut, and with them every way to it (berthd opens
        # no automatic connections, issue 59: the leader reaches the client
        # only through the server it talks to).
        mode = self.client_cut
        self.history.note("partition-client", process=victim.name, alloc=alloc, volume=vid,
                          mode=mode)
        if mode == "network":
            self.isolated.append(victim)
            self.network.isolate(victim.ns)
        else:
            self.cut.append(victim)
            for p in self.proxies[victim.name]:
                p.cut()
        start = time.time()
        least = start + self.down_timeout + self.rng.uniform(1.0, 3.0)
        most = start + self.down_timeout + 15.0
        run_kind = self.operator.run_kind
        if vid:
            run_kind.focus = {"volume": vid, "node": other.name}
        moved = None
        try:
            while not self.stop_event.is_set():
                now = time.time()
                if now >= most or (now >= least and (moved or not vid)):
                    break
                if vid and not moved and now >= start + self.down_timeout - 1:
                    a, outcome = self.operator.run(other.name, vid)
                    if outcome != "fail":
                        ours.append(a)
                    if outcome == "ok" or self.moved(vid, other.name):
                        moved = a if outcome == "ok" else "workload"
                self.stop_event.wait(0.3)
        finally:
            run_kind.focus = None
            if mode == "network":
                self.network.rejoin(victim.ns)
                self.isolated.remove(victim)
            else:
                for p in self.proxies[victim.name]:
                    p.heal()
                self.cut.remove(victim)
        self.history.note("rejoin-client", process=victim.name, alloc=alloc, volume=vid,
                          moved=moved, mode=mode)
        self.client_partitions.append({"client": victim.name, "alloc": alloc, "volume": vid,
                                       "moved": moved, "mode": mode,
                                       "held": time.time() - start})
        for a in ours:
            self.operator.stop(a)

    def run(self):
        try:
            while self.injected < self.faults and not self.stop_event.is_set():
                self.wait(self.gap)
                if self.stop_event.is_set():
                    break
                self.inject(self.rng.choice(self.kinds))
        except Exception as e:
            self.error = e
            self.log("nemesis failed: %r" % (e,))
        finally:
            self.heal()

    def heal(self):
        """Every process running and not stopped."""
        for p in list(self.paused):
            try:
                p.proc.send_signal(signal.SIGCONT)
            except Exception:
                pass
        self.paused = []
        for s in list(self.isolated):
            try:
                self.network.rejoin(s.ns)
            except Exception as e:
                self.error = self.error or e
        self.isolated = []
        for c in list(self.cut):
            for p in self.proxies.get(c.name, []):
                p.heal()
        self.cut = []
        for p in list(self.cluster.servers) + self.clients + self.plugins:
            if not p.alive():
                try:
                    self.restart(p)
                except Exception as e:
                    self.error = self.error or e
        for c in list(self.drained):
            try:
                self.undrain(c)
            except Exception as e:
                self.error = self.error or e

    def start(self):
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def done(self):
        return not self.thread.is_alive()

    def stop(self):
        self.stop_event.set()
        self.thread.join()
