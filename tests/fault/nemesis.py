"""The nemesis: one fault at a time, spaced randomly, chosen by the run's seed.

Faults (kinds): SIGKILL and restart (kill-*) or SIGSTOP and SIGCONT
(pause-*) of the leader, of a follower, of a client (berthd --client) or of
a plugin (berth-hostpath); as root, partition-leader and partition-follower
cut a server off the network (netns.py). Each fault is injected, held for a random while, then
healed (restart / SIGCONT) before the next one, and recorded in the history
("nemesis" events)."""

import signal
import threading
import time


class Nemesis:
    KINDS = ("kill-leader", "kill-follower", "kill-client", "kill-plugin",
             "pause-leader", "pause-follower", "pause-client", "pause-plugin")
    # Need root and network namespaces (netns.py): the servers then run in
    # namespaces of their own.
    PARTITION_KINDS = ("partition-leader", "partition-follower")

    def __init__(self, history, rng, cluster, clients, plugins, faults, gap=(0.5, 3.0),
                 hold=(0.3, 2.5), kinds=KINDS, log=print, network=None):
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
        if action == "partition":
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
        for p in list(self.cluster.servers) + self.clients + self.plugins:
            if not p.alive():
                try:
                    self.restart(p)
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
