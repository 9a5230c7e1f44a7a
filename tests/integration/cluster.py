"""A 3-server berth cluster and clients as real processes on 127.0.0.1, for
the cluster and fault tests."""

import atexit
import glob
import json
import os
import random
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

from harness import BERTH, BERTHD, SHELL_TIMEOUT, TIME_SCALE, berth, undo_mounts

HOSTPATH = os.environ.get("BERTH_HOSTPATH_BIN", "berth-hostpath")


def ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


_RESERVED = os.path.join(tempfile.gettempdir(), "berth-test-ports")


def reserve(port):
    """Whether PORT is now this process's alone among the tests running on
    this machine: a file per port in /tmp/berth-test-ports, made with
    O_EXCL and holding the owner's pid.  A binding check alone cannot say
    it: another test may have picked the port and not listen on it yet.
    A file whose owner has exited is taken over."""
    os.makedirs(_RESERVED, exist_ok=True)
    path = os.path.join(_RESERVED, str(port))
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                with open(path) as f:
                    owner = int(f.read().strip() or "0")
            except (OSError, ValueError):
                return False
            if owner == os.getpid():
                return False  # picked by this process before
            if owner and os.path.exists("/proc/%d" % owner):
                return False
            try:
                os.unlink(path)  # its owner exited without giving it back
            except OSError:
                return False
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def _give_back_ports():
    try:
        names = os.listdir(_RESERVED)
    except OSError:
        return
    for name in names:
        path = os.path.join(_RESERVED, name)
        try:
            with open(path) as f:
                if f.read().strip() == str(os.getpid()):
                    os.unlink(path)
        except OSError:
            pass


atexit.register(_give_back_ports)


def free_port():
    """A port free now, for a process started later with it, and reserved
    for this test process (see reserve).  Taken below the kernel's
    ephemeral range: a port the kernel handed out (bind to 0) and given
    back could be handed out again to any outgoing connection of a test
    running beside this one before the process listens on it (a berthd then
    "cannot listen")."""
    low, _ = ephemeral_range()
    first = 10000 if low > 12000 else 1024
    rng = random.SystemRandom()
    for _ in range(400):
        port = rng.randrange(first, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if reserve(port):
            return port
    raise RuntimeError("no free port in %d..%d on 127.0.0.1" % (first, low))


class Process:
    def __init__(self, name, argv, log_path):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.proc = None
        self.banner = ""

    def start(self):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=log, text=True)
        log.close()
        self.banner = self.proc.stdout.readline()
        if not self.banner.startswith("berthd:"):
            self.proc.kill()
            with open(self.log_path) as f:
                raise RuntimeError("%s did not start: %r %s" % (self.name, self.banner, f.read()))
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig=9):
        if self.alive():
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()


class Server(Process):
    def __init__(self, tmp, name, port, raft_port, join, tick="0.05", snapshot_threshold=30,
                 extra_args=()):
        self.data_dir = os.path.join(tmp, name)
        self.port = port
        self.raft_port = raft_port
        argv = [BERTHD, "--server", "--name", name, "--data-dir", self.data_dir,
                "--port", str(port), "--raft-port", str(raft_port), "--metrics-port", "0",
                "--bootstrap-expect", "3", "--raft-tick", tick,
                # Small, so that the tests take, send and install snapshots.
                "--snapshot-threshold", str(snapshot_threshold)]
        for j in join:
            argv += ["--join", j]
        argv += list(extra_args)
        super().__init__(name, argv, os.path.join(tmp, name + ".log"))

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def state_tables(self):
        """Every row of the state tables and the applied index (server stopped)."""
        db = sqlite3.connect(os.path.join(self.data_dir, "state.db"))
        try:
            out = {"applied": db.execute(
                "SELECT value FROM meta WHERE key='applied_index'").fetchone()}
            for table, order in (("volumes", "namespace, id"), ("claims", "namespace, volume_id, alloc_id"),
                                 ("plugins", "id"), ("nodes", "id"), ("allocs", "id")):
                out[table] = db.execute("SELECT * FROM %s ORDER BY %s" % (table, order)).fetchall()
            return out
        finally:
            db.close()

    def first_log_index(self):
        db = sqlite3.connect(os.path.join(self.data_dir, "log.db"))
        try:
            return db.execute("SELECT MIN(idx) FROM entries").fetchone()[0]
        finally:
            db.close()


class Plugin(Process):
    def __init__(self, tmp, name, node_id, shared_root=None, extra_args=()):
        """shared_root: a ROOT shared with other plugins (--shared-root);
        extra_args: more berth-hostpath flags (e.g. --delay CALL=MS)."""
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        self.node_id = node_id
        self.socket = os.path.join(self.dir, "csi.sock")
        self.call_log = os.path.join(self.dir, "calls.log")
        self.root = shared_root or os.path.join(self.dir, "root")
        argv = [HOSTPATH, "--endpoint", "unix://" + self.socket, "--root", self.root,
                "--node-id", node_id, "--call-log", self.call_log]
        if shared_root:
            argv.append("--shared-root")
        argv += list(extra_args)
        super().__init__(name, argv, os.path.join(tmp, name + ".log"))

    def start(self):
        # A socket left by a killed run is removed by the plugin itself; wait
        # for the new one, not the stale file.
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while not os.path.exists(self.socket):
            if time.time() > deadline:
                raise RuntimeError("berth-hostpath did not start")
            time.sleep(0.05)
        return self


class Client(Process):
    def __init__(self, tmp, name, servers, plugin_socket, extra_args=()):
        argv = [BERTHD, "--client", "--name", name, "--data-dir", os.path.join(tmp, name),
                "--servers", ",".join(servers), "--metrics-port", "0",
                "--plugin", "hostpath=monolith:" + plugin_socket, "--fingerprint-interval", "0.2"]
        argv += list(extra_args)
        super().__init__(name, argv, os.path.join(tmp, name + ".log"))


class Cluster:
    def __init__(self, tmp, tick=None, snapshot_threshold=30, server_args=(), client_args=()):
        """server_args: more berthd flags for every server; client_args: for
        every client add_client starts (before its own); tick: their
        --raft-tick (0.05 s, times BERTH_TEST_TIME_SCALE: under a sanitizer's
        slowness a short tick makes elections that never settle)."""
        if tick is None:
            tick = "%g" % (0.05 * max(float(os.environ.get("BERTH_TEST_TIME_SCALE", "1")), 1))
        self.tmp = tmp
        self.client_args = tuple(client_args)
        ports = [(free_port(), free_port()) for _ in range(3)]
        raft = ["127.0.0.1:%d" % r for _, r in ports]
        self.servers = [Server(tmp, "s%d" % (i + 1), p, r, [a for a in raft if a != raft[i]], tick,
                               snapshot_threshold, server_args)
                        for i, (p, r) in enumerate(ports)]
        self.processes = list(self.servers)

    def start(self):
        for s in self.servers:
            s.start()
        self.wait_leader()
        return self

    def add_client(self, name="c1", plugin_args=(), shared_root=None, client_args=()):
        """Starts a berth-hostpath (node id csi-NAME, more flags in
        plugin_args; shared_root: storage shared with the other clients'
        plugins, see Plugin) and a berthd --client NAME driving it (more
        flags in client_args); both stop with the cluster.  Returns (plugin,
        client)."""
        plugin = Plugin(self.tmp, "plugin-" + name, "csi-" + name, shared_root=shared_root,
                        extra_args=plugin_args)
        client = Client(self.tmp, name, [s.address for s in self.servers], plugin.socket,
                        self.client_args + tuple(client_args))
        self.processes += [client, plugin]
        plugin.start()
        client.start()
        return plugin, client

    def any_address(self):
        return next(s.address for s in self.servers if s.alive())

    def peers(self, via=None):
        r = berth(via or self.any_address(), "--json", "--timeout", "5", "operator", "raft",
                  "list-peers")
        return r.json() if r.code == 0 else []

    def leader(self):
        for p in self.peers():
            if p["role"] == "leader":
                return next(s for s in self.servers if s.name == p["id"])
        return None

    def wait_leader(self, timeout=60, exclude=None):
        """The first server that names a leader.  The deadline is generous
        (a fresh clone's make test beside two busy loops and a build: the
        servers elected s3 in 1.5 s and no shell had an answer within 20 s
        and 2 s per call)."""
        timeout *= max(TIME_SCALE, 1)
        deadline = time.time() + timeout
        while time.time() < deadline:
            for s in self.servers:
                if not s.alive() or s is exclude:
                    continue
                r = berth(s.address, "--json", "--timeout", "5", "status")
                if r.code == 0 and r.json().get("leader"):
                    return s
            time.sleep(0.05)
        raise AssertionError("no leader within %ss: %s" % (timeout, self.peers()))

    def stop(self):
        for p in self.processes:
            try:
                p.kill()
            except Exception:  # keep stopping the others
                pass


def fold_repeats(lines):
    """Consecutive log lines equal but for their first word (the time) as
    one, followed by how many more there were."""
    out, last, more = [], None, 0

    def flush():
        if more:
            out.append("    (the line above %d more time%s, until %s)\n" %
                       (more, "s" if more > 1 else "", until))
    until = ""
    for line in lines:
        body = line.split(" ", 1)[1] if " " in line else line
        if body == last:
            more += 1
            until = line.split(" ", 1)[0]
            continue
        flush()
        out.append(line)
        last, more = body, 0
    flush()
    return out


class ClusterTestCase(unittest.TestCase):
    """A test on a fresh 3-server cluster in its own temporary directory,
    stopped (and its mounts undone) after the test. SERVER_ARGS: more berthd
    flags for the servers; CLIENT_ARGS: for the clients of add_client;
    SNAPSHOT_THRESHOLD: their --snapshot-threshold."""
    PREFIX = "berth-test-"
    SERVER_ARGS = ()
    CLIENT_ARGS = ()
    SNAPSHOT_THRESHOLD = 100000

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix=self.PREFIX)
        self.cluster = Cluster(self.tmp, snapshot_threshold=self.SNAPSHOT_THRESHOLD,
                               server_args=self.SERVER_ARGS, client_args=self.CLIENT_ARGS)
        self.addCleanup(self.cleanup)
        self.cluster.start()
        self.via = self.cluster.any_address()

    def cleanup(self):
        self.cluster.stop()
        undo_mounts(self.tmp)
        if self.failed():
            self.print_logs()
        if os.environ.get("BERTH_TEST_KEEP"):
            print("kept the cluster's directory (servers' logs): " + self.tmp, file=sys.stderr)
            return
        shutil.rmtree(self.tmp, ignore_errors=True)

    def failed(self):
        """Whether this test failed so far (its failure is recorded before
        the clean-ups run)."""
        result = getattr(getattr(self, "_outcome", None), "result", None)
        if result is None:
            return False
        return any(t is self for t, _ in list(result.failures) + list(result.errors))

    def print_logs(self, lines=40):
        """The end of every berthd's log (a failed test's, so CI shows what
        happened: the directory itself is removed).  A line repeated but for
        its time is printed once with its count, so a test that polls (a
        `system gc` every 0.1 s) does not push out what happened before."""
        for path in sorted(glob.glob(os.path.join(self.tmp, "*.log"))):
            try:
                with open(path, errors="replace") as f:
                    tail = fold_repeats(f.readlines())[-lines:]
            except OSError:
                continue
            print("--- last %d lines of %s" % (len(tail), os.path.basename(path)), file=sys.stderr)
            sys.stderr.write("".join(tail))

    def b(self, *args, expect=0, stdin=None):
        """The shell through self.via; asserts its exit code."""
        r = berth(self.via, "--timeout", SHELL_TIMEOUT, *args, stdin=stdin, timeout=90)
        self.assertEqual(r.code, expect, r)
        return r

    def wait(self, cond, what, timeout=60):
        """Polls cond until it holds (fails the test after timeout seconds,
        scaled by BERTH_TEST_TIME_SCALE)."""
        deadline = time.time() + timeout * float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))
        while time.time() < deadline:
            if cond():
                return
            time.sleep(0.1)
        self.fail("never: " + what)
