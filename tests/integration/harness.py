"""Helpers for berth's integration tests: real berthd processes on
127.0.0.1, driven through the real `berth` shell, as an operator would."""

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

BERTHD = os.environ.get("BERTHD_BIN", "berthd")
BERTH = os.environ.get("BERTH_BIN", "berth")
# --dev starts berth-hostpath; tell it which binary when the build says.
HOSTPATH_ARGS = (["--hostpath-bin", os.environ["BERTH_HOSTPATH_BIN"]]
                 if os.environ.get("BERTH_HOSTPATH_BIN") else [])


class Agent:
    """A `berthd --dev` process on an ephemeral port."""

    def __init__(self, data_dir, extra_args=(), env=None):
        """env: berthd's environment (default: this process's)."""
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.env = env
        self.proc = None
        self.port = None
        self.log_path = data_dir.rstrip("/") + ".log"

    def start(self, port=0):
        log = open(self.log_path, "a")
        self.log = log
        self.proc = subprocess.Popen(
            [BERTHD, "--dev", "--data-dir", self.data_dir, "--port", str(port),
             "--metrics-port", "0"] + HOSTPATH_ARGS + self.extra_args,
            stdout=subprocess.PIPE, stderr=log, text=True, env=self.env)
        line = self.proc.stdout.readline()
        m = re.search(r"127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("berthd did not start: %r (log %s: %s)" %
                               (line, self.log_path, open(self.log_path).read()))
        self.port = int(m.group(1))
        self.metrics_port = int(re.search(r"metrics on 127\.0\.0\.1:(\d+)", line).group(1))
        self.banner = line
        return self

    def scrape(self):
        """The /metrics page as {series: value}, e.g. 'berth_volumes{state="claimed"}'."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=10) as r:
            text = r.read().decode()
        series = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                series[name] = float(value)
        return series, text

    def view(self, path):
        """A JSON view of the metrics port (/v1/...): (status, body)."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.metrics_port, path),
                                        timeout=10) as r:
                return r.status, json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read().decode())

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)
        if self.proc:
            self.proc.stdout.close()
            self.log.close()

    def restart(self):
        port = self.port
        self.kill()
        return self.start(port)


class Result:
    def __init__(self, proc):
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self):
        return json.loads(self.out)

    def __repr__(self):
        return "exit %d\nstdout: %s\nstderr: %s" % (self.code, self.out, self.err)


def kill_allocs(tmp):
    """SIGKILLs the process group of every process whose working directory
    is under `tmp`: alloc commands (each in a process group of its own) that
    a test's berthd started and that outlive it once berthd is killed."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cwd = os.readlink("/proc/%s/cwd" % pid)
        except OSError:
            continue
        if cwd == tmp or cwd.startswith(tmp.rstrip("/") + "/"):
            try:
                os.killpg(os.getpgid(int(pid)), signal.SIGKILL)
            except OSError:
                pass


def undo_mounts(tmp):
    """Kills the alloc commands left under the directory `tmp` (kill_allocs),
    then unmounts (lazily, innermost first) every mount under it that a
    test's berthd left behind (alloc volumes, staged volumes)."""
    kill_allocs(tmp)
    with open("/proc/self/mounts") as f:
        for m in reversed([l.split()[1] for l in f if tmp in l.split()[1]]):
            subprocess.run(["umount", "-l", m], check=False)


# BERTH_TEST_TIME_SCALE (the sanitizer runs set 4): everything runs that many
# times slower, so the shell's own deadline stretches with it.
TIME_SCALE = float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))
# A fence short enough for the short node-down timeouts of the tests (6 s:
# a 2 s lease and a 4 s margin; 3 s: 1 s and 2 s). berthd refuses a margin
# (--node-down-timeout - --node-lease) below max(--kill-timeout,
# --node-lease/4) + --fence-unmount-time + 0.25 s + --node-down-timeout/1000
# (control/lease.hpp, fence_margin_ms): 10.26 s with the defaults (5 s, 5 s),
# 1.76 s with these. For the servers (the fence they assume) and the clients
# (the grace their allocs get: --fence-unmount-time is a servers' option,
# which a client ignores).
SHORT_FENCE = ("--kill-timeout", "1", "--fence-unmount-time", "0.5")
# The shell's --timeout for tests that pass their own: 30 s, scaled.
SHELL_TIMEOUT = str(int(30 * max(TIME_SCALE, 1)))


def berth(agent_or_address, *args, stdin=None, timeout=60):
    """Runs the shell against an agent or HOST:PORT. Under a time scale, a
    command without --timeout gets the shell's default (30 s) scaled."""
    address = agent_or_address if isinstance(agent_or_address, str) else agent_or_address.address
    argv = [BERTH, "--address", address]
    if TIME_SCALE > 1 and "--timeout" not in args:
        argv += ["--timeout", str(int(30 * TIME_SCALE))]
    proc = subprocess.run(argv + list(args), input=stdin, capture_output=True, text=True,
                          timeout=timeout * max(TIME_SCALE, 1))
    return Result(proc)


class TempDir:
    def __enter__(self):
        self.path = tempfile.mkdtemp(prefix="berth-test-")
        return self.path

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)


# --- listening sockets (/proc) -----------------------------------------------

TCP_LISTEN = "0A"


def _proc_address(hex_addr):
    """An address of /proc/net/tcp{,6}: 32-bit words in host order (little
    endian here), the port big endian."""
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(raw), int(port, 16)


def listening(pid):
    """Every listening TCP socket of process `pid`: [(address, port)]."""
    inodes = set()
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue  # closed meanwhile
        m = re.fullmatch(r"socket:\[(\d+)\]", target)
        if m:
            inodes.add(m.group(1))
    out = []
    for table in ("tcp", "tcp6"):
        with open("/proc/%d/net/%s" % (pid, table)) as f:
            next(f)  # the header
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == TCP_LISTEN and inode in inodes:
                    out.append(_proc_address(local))
    return out
