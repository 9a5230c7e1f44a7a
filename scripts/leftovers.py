#!/usr/bin/env python3
"""What a test run left behind: berth processes (berthd, berth-hostpath,
berth, and every alloc command: a process whose environment names a
BERTH_ALLOC_ID) started by the run (their environment carries the run's
BERTH_TEST_RUN, which `make test` sets), and mounts under the tests'
temporary directories (/tmp/berth-*) that were not there before the run
(so two runs at once see each other's mounts).

    leftovers.py snapshot FILE   records what is there now
    leftovers.py check FILE      names what is new since, undoes it, and
                                 exits 1 when there was any

`make test` runs both around ctest, so a test that leaves anything fails
the run and names it. What is left gets up to 10 s to go away first (a
process killed a moment ago may not have been reaped yet)."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

NAMES = {"berthd", "berth-hostpath", "berth"}
TMP = tempfile.gettempdir()


def proc_start(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def berth_processes(run):
    """pid -> (start time, description) of every berth process of the run
    `run` (its BERTH_TEST_RUN; any when empty)."""
    out = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            exe = os.path.basename(os.readlink("/proc/%d/exe" % pid))
            start = proc_start(pid)
        except (OSError, IndexError, ValueError):
            continue  # gone, or a kernel thread
        alloc = next((e.decode(errors="replace").split("=", 1)[1] for e in env
                      if e.startswith(b"BERTH_ALLOC_ID=")), None)
        if run and ("BERTH_TEST_RUN=" + run).encode() not in env:
            continue
        if exe in NAMES or alloc:
            what = " ".join(argv)[:200]
            if alloc:
                what = "alloc command (%s): %s" % (alloc, what)
            out[pid] = (start, what)
    return out


def berth_mounts():
    """Mount points under the tests' temporary directories."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if point.startswith(os.path.join(TMP, "berth-")):
                out.append(point)
    return out


def snapshot(path):
    run = os.environ.get("BERTH_TEST_RUN", "")
    state = {"run": run,
             "processes": {str(p): s for p, (s, _) in berth_processes(run).items()},
             "mounts": berth_mounts()}
    with open(path, "w") as f:
        json.dump(state, f)


def new_since(before):
    procs = {p: w for p, (s, w) in berth_processes(before["run"]).items()
             if before["processes"].get(str(p)) != s}
    mounts = [m for m in berth_mounts() if m not in before["mounts"]]
    return procs, mounts


def check(path):
    with open(path) as f:
        before = json.load(f)
    deadline = time.time() + 10
    procs, mounts = new_since(before)
    while (procs or mounts) and time.time() < deadline:
        time.sleep(0.2)
        procs, mounts = new_since(before)
    if not procs and not mounts:
        print("leftovers: no process and no mount left behind")
        return 0
    print("leftovers: the tests left these behind (now undone):", file=sys.stderr)
    for pid, what in sorted(procs.items()):
        print("  process %d: %s" % (pid, what), file=sys.stderr)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for m in sorted(mounts, key=len, reverse=True):  # the deepest first
        print("  mount: %s" % m, file=sys.stderr)
        subprocess.run(["umount", "-l", m], stderr=subprocess.DEVNULL)
    return 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("snapshot", "check"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    if sys.argv[1] == "snapshot":
        snapshot(sys.argv[2])
    else:
        sys.exit(check(sys.argv[2]))
