#!/usr/bin/python3
"""berth's benchmarks: a 3-server cluster on 127.0.0.1 (tests/integration/
cluster.py), berth-bench against it for each workload and concurrency, the
CPU seconds and peak RSS of every process, the leader's group-commit metrics,
and leader failover under load.  Prints a table and writes bench/report.json.

Numbers only: nothing here passes or fails on timing.

  bench/run.py [--build build] [--duration 10] [--log 1,16,64,256,1024]
               [--claims 1,8,32] [--volumes 400] [--failover 5] [--raft-tick 0.1]
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--duration", type=float, default=10, help="seconds measured per run")
    p.add_argument("--log", default="1,16,64,256,1024", help="concurrency levels of the log workload")
    p.add_argument("--claims", default="1,8,32", help="concurrency levels of the claims workload")
    p.add_argument("--volumes", type=int, default=400, help="volumes for the claims workload")
    p.add_argument("--failover", type=int, default=5, help="leader-kill trials (0: none)")
    p.add_argument("--raft-tick", default="0.1", help="seconds per Raft tick (berthd's default: 0.1)")
    p.add_argument("--report", default=os.path.join(HERE, "report.json"))
    p.add_argument("--keep", action="store_true", help="keep the cluster's directory and logs")
    p.add_argument("--perf", action="store_true",
                   help="perf record the leader during the largest log run (bench/perf-*.txt)")
    return p.parse_args()


ARGS = parse_args()
BUILD = os.path.abspath(ARGS.build)
os.environ.setdefault("BERTHD_BIN", os.path.join(BUILD, "apps/berthd/berthd"))
os.environ.setdefault("BERTH_BIN", os.path.join(BUILD, "apps/berth/berth"))
os.environ.setdefault("BERTH_HOSTPATH_BIN", os.path.join(BUILD, "apps/berth-hostpath/berth-hostpath"))
BENCH = os.path.join(BUILD, "bench/berth-bench")
sys.path.insert(0, os.path.join(ROOT, "tests/integration"))

import cluster  # noqa: E402  (needs the environment above)
from harness import berth  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- processes ---------------------------------------------------------------

class Plugin(cluster.Plugin):
    """berth-hostpath without its fsync'ed call log (a test aid, not part of
    the plugin's work); its state.json is still written durably."""

    def __init__(self, tmp, name, node_id):
        super().__init__(tmp, name, node_id)
        i = self.argv.index("--call-log")
        del self.argv[i:i + 2]


class Client(cluster.Client):
    """A berth client whose plugin has its own id, so that each volume lives
    on exactly one client's berth-hostpath."""

    def __init__(self, tmp, name, servers, plugin_id, plugin_socket):
        super().__init__(tmp, name, servers, plugin_socket)
        i = self.argv.index("--plugin")
        self.argv[i + 1] = "%s=monolith:%s" % (plugin_id, plugin_socket)


def cpu_seconds(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
    except OSError:
        return None


def thread_cpu(pid):
    """CPU seconds of each thread of a process: {tid: (name, seconds)}."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                head, rest = f.read().rsplit(")", 1)
            fields = rest.split()
            out[tid] = (head.split("(", 1)[1], (int(fields[11]) + int(fields[12])) / CLK_TCK)
        except OSError:
            pass
    return out


def peak_rss_mib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            m = re.search(r"VmHWM:\s+(\d+) kB", f.read())
        return int(m.group(1)) / 1024 if m else None
    except OSError:
        return None


def reset_peak_rss(pid):
    try:  # "5" resets VmHWM to the current RSS (Linux >= 4.0)
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
    except OSError:
        pass


def metrics_port(process):
    m = re.search(r"metrics on [\d.]+:(\d+)", process.banner)
    return int(m.group(1)) if m else None


SCRAPED = ("berth_log_batch_entries_sum", "berth_log_batch_entries_count",
           "berth_log_write_seconds_sum", "berth_log_write_seconds_count",
           "berth_request_seconds_sum", "berth_request_seconds_count")


def scrape(process):
    """The log and request metrics of a server: histogram sums and counts,
    keyed by series (labels included)."""
    port = metrics_port(process)
    out = {}
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
            text = r.read().decode()
    except (OSError, TypeError):
        return out
    for line in text.splitlines():
        if line.startswith(SCRAPED):
            series, value = line.rsplit(" ", 1)
            out[series] = float(value)
    return out


def delta(m0, m1, series):
    return m1.get(series, 0) - m0.get(series, 0)


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


# --- one run -----------------------------------------------------------------

def run_bench(address, workload, concurrency, duration, processes, leader, extra=(), warmup=1.0):
    """Runs berth-bench once; returns its JSON result with per-process CPU and
    peak RSS and the leader's group-commit numbers for the run."""
    watched = {p.name: p for p in processes if p.alive()}
    for p in watched.values():
        reset_peak_rss(p.proc.pid)
    cpu0 = {n: cpu_seconds(p.proc.pid) for n, p in watched.items()}
    servers = [p for p in watched.values() if isinstance(p, cluster.Server)]
    m0 = {p.name: scrape(p) for p in servers}
    threads0 = thread_cpu(leader.proc.pid)
    load0 = loadavg()
    argv = [BENCH, "--address", address, "--workload", workload, "-c", str(concurrency),
            "--duration", str(duration), "--warmup", str(warmup)] + list(extra)
    t0 = time.time()
    bench = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    bench_peak = 0
    bench_cpu = 0
    while bench.poll() is None:
        bench_peak = max(bench_peak, peak_rss_mib(bench.pid) or 0)
        bench_cpu = cpu_seconds(bench.pid) or bench_cpu
        time.sleep(0.2)
    out, err = bench.communicate()
    wall = time.time() - t0
    if bench.returncode != 0 or not out.strip():
        raise RuntimeError("berth-bench failed (%d): %s %s" % (bench.returncode, out, err))
    r = json.loads(out.strip().splitlines()[-1])
    m1 = {p.name: scrape(p) for p in servers}
    # The leader's busiest threads: is one of them (an actor that runs
    # detached, or a scheduler worker) saturated?
    threads1 = thread_cpu(leader.proc.pid)
    busy = sorted(((t1 - threads0.get(tid, (n, 0))[1], n, tid) for tid, (n, t1) in threads1.items()),
                  reverse=True)[:6]
    r["leader_threads"] = [{"tid": tid, "name": n, "cores": round(sec / wall, 3)} for sec, n, tid in busy]
    r["wall_seconds"] = round(wall, 2)
    r["loadavg_before"] = load0
    r["loadavg_after"] = loadavg()
    r["processes"] = {}
    for n, p in watched.items():
        c1 = cpu_seconds(p.proc.pid)
        r["processes"][n] = {
            "cpu_seconds": None if c1 is None or cpu0[n] is None else round(c1 - cpu0[n], 2),
            "peak_rss_mib": peak_rss_mib(p.proc.pid)}
    r["processes"]["berth-bench"] = {"cpu_seconds": round(bench_cpu, 2), "peak_rss_mib": bench_peak}
    # Each server's log writes (entries per write = group commit, and the
    # mean time of a write including its fsync), and the leader's own view
    # of the requests' latency (without the shell protocol's round trip).
    r["log_writes"] = {}
    for p in servers:
        a, b = m0[p.name], m1[p.name]
        writes = delta(a, b, "berth_log_batch_entries_count")
        entries = delta(a, b, "berth_log_batch_entries_sum")
        wsec = delta(a, b, "berth_log_write_seconds_sum")
        r["log_writes"][p.name] = {
            "writes": int(writes), "entries": int(entries),
            "entries_per_write": round(entries / writes, 2) if writes else None,
            "write_ms_mean": round(1000 * wsec / writes, 3) if writes else None,
            "write_busy_fraction": round(wsec / wall, 3)}
    r["leader_log"] = r["log_writes"][leader.name]
    r["leader_request_ms_mean"] = {}
    for series in m1[leader.name]:
        if series.startswith("berth_request_seconds_sum"):
            n = delta(m0[leader.name], m1[leader.name], series.replace("_sum", "_count"))
            if n:
                command = re.search(r'command="([^"]+)"', series).group(1)
                r["leader_request_ms_mean"][command] = round(
                    1000 * delta(m0[leader.name], m1[leader.name], series) / n, 3)
    return r


# --- the table ---------------------------------------------------------------

def print_row(r, leader_name):
    procs = r["processes"]
    followers = [v["cpu_seconds"] or 0 for n, v in procs.items() if n.startswith("s") and n != leader_name]
    plugins = [v["cpu_seconds"] or 0 for n, v in procs.items() if n.startswith("plugin-")]
    lg = r["leader_log"]
    fwr = [v["write_ms_mean"] or 0 for n, v in r["log_writes"].items() if n != leader_name]
    srv = r["leader_request_ms_mean"]
    srv_ms = srv.get("plugin_fingerprint", 0) if r["workload"] == "log" else \
        srv.get("volume_claim", 0) + srv.get("volume_release", 0)
    wall = r["wall_seconds"]
    print("%-6s %5d %8.1f %7.2f %7.2f %7.1f %5d %7.2f %6.2f %6.2f %6.2f %6.2f %6.2f %6s %6.3f %5.1f" % (
        r["workload"], r["concurrency"], r["ops_per_s"], r["p50_ms"], r["p99_ms"], r["max_ms"],
        r["errors"], srv_ms, (procs[leader_name]["cpu_seconds"] or 0) / wall, max(followers or [0]) / wall,
        (procs["berth-bench"]["cpu_seconds"] or 0) / wall, max(plugins or [0]) / wall,
        lg["write_ms_mean"] or 0, lg["entries_per_write"], max(fwr or [0]), r["loadavg_before"]),
        flush=True)


# ops/s, p50/p99/max: as berth-bench sees them (one op = one request for
# log, one claim + release for claims).  srv ms: the leader's mean time per
# op (berth_request_seconds; claims: claim + release), without the shell
# round trip.  CPU columns: cores (CPU seconds per wall second) of the
# leader, the busiest follower, berth-bench and the busiest berth-hostpath.
# wr ms, ent/wr: the leader's mean log write (fsync included) and entries per
# write (group commit); fwr ms: the slower follower's mean log write.
# load: 1-minute load average before the run (2 cores).
HEADER = ("%-6s %5s %8s %7s %7s %7s %5s %7s %6s %6s %6s %6s %6s %6s %6s %5s" % (
    "work", "conc", "ops/s", "p50 ms", "p99 ms", "max ms", "errs", "srv ms", "leadC", "follC",
    "benchC", "plugC", "wr ms", "ent/wr", "fwr ms", "load"))


# --- failover ----------------------------------------------------------------

def failover_trial(c, tmp, i, restart=True):
    leader = c.leader()
    follower = next(s for s in c.servers if s is not leader and s.alive())
    acks = os.path.join(tmp, "acks-%d.txt" % i)
    bench = subprocess.Popen([BENCH, "--address", follower.address, "--workload", "log", "-c", "16",
                              "--duration", "7", "--warmup", "0.5", "--acks", acks, "--timeout", "10"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    killed_ms = time.time() * 1000
    leader.kill(signal.SIGKILL)
    out, err = bench.communicate(timeout=60)
    r = json.loads(out.strip().splitlines()[-1])
    with open(acks) as f:
        times = [int(l) for l in f if l.strip()]
    # Acks within 20 ms of the kill can only be answers the old leader sent
    # before it died (an election takes at least 10 ticks).
    after = [t for t in times if t > killed_ms + 20]
    first = (after[0] - killed_ms) / 1000 if after else None
    gaps = [b - a for a, b in zip(times, times[1:])]
    new_leader = c.wait_leader(exclude=leader)
    if not restart:
        return {"killed": leader.name, "new_leader": new_leader.name, "bench_via": follower.name,
                "first_ack_after_kill_s": first,
                "longest_ack_gap_s": max(gaps) / 1000 if gaps else None,
                "errors": r["errors"], "error_samples": r["error_samples"][:2]}
    # Back as a follower, for the next trial.  Its port was free when the
    # cluster started; another process may have taken it since.
    for attempt in range(10):
        try:
            leader.start()
            break
        except RuntimeError:
            if attempt == 9:
                raise
            time.sleep(0.5)
    deadline = time.time() + 30
    while time.time() < deadline:  # wait until every server is back in the cluster
        peers = c.peers()
        if len(peers) == 3 and all(p["role"] in ("leader", "follower") for p in peers) and \
                len({p["term"] for p in peers}) == 1:
            break
        time.sleep(0.2)
    time.sleep(1)
    return {"killed": leader.name, "new_leader": new_leader.name, "bench_via": follower.name,
            "first_ack_after_kill_s": first, "longest_ack_gap_s": max(gaps) / 1000 if gaps else None,
            "errors": r["errors"], "error_samples": r["error_samples"][:2]}


# --- main --------------------------------------------------------------------

def main():
    for b in (BENCH, os.environ["BERTHD_BIN"], os.environ["BERTH_HOSTPATH_BIN"]):
        if not os.access(b, os.X_OK):
            sys.exit("run.py: %s is missing; build first (make bench)" % b)
    tmp = tempfile.mkdtemp(prefix="berth-bench-")
    report = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": os.uname().nodename,
              "cpus": os.cpu_count(), "raft_tick": float(ARGS.raft_tick),
              "duration_per_run_s": ARGS.duration, "runs": [], "failover": None}
    c = cluster.Cluster(tmp, tick=ARGS.raft_tick)
    try:
        c.start()
        leader = c.leader()
        print("cluster in %s; leader %s; load average %.1f (2 cores: >2 means others are busy "
              "and numbers are noisy)" % (tmp, leader.name, loadavg()), flush=True)
        print(HEADER, flush=True)
        levels = [int(x) for x in ARGS.log.split(",") if x]
        for n in levels:
            perf = None
            if ARGS.perf and n == levels[-1]:
                perf = subprocess.Popen(["perf", "record", "-F", "999", "-o",
                                         os.path.join(tmp, "perf.data"), "-p", str(leader.proc.pid)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            r = run_bench(leader.address, "log", n, ARGS.duration, c.processes, leader)
            if perf:
                perf.send_signal(signal.SIGINT)
                perf.wait()
                with open(os.path.join(HERE, "perf-leader-log.txt"), "w") as f:
                    for sort in ("dso", "dso,sym"):
                        f.flush()
                        subprocess.run(["perf", "report", "-i", os.path.join(tmp, "perf.data"),
                                        "--stdio", "--no-children", "--sort", sort,
                                        "--percent-limit", "0.5"], stdout=f, stderr=subprocess.DEVNULL)
            r["leader"] = leader.name
            report["runs"].append(r)
            print_row(r, leader.name)

        if ARGS.claims:
            servers = [s.address for s in c.servers]
            nodes = []
            for name in ("c1", "c2"):
                plugin = Plugin(tmp, "plugin-" + name, "csi-" + name).start()
                client = Client(tmp, name, servers, "hostpath-" + name, plugin.socket).start()
                c.processes += [plugin, client]
                nodes.append("%s=hostpath-%s" % (name, name))
            deadline = time.time() + 30
            for name in ("c1", "c2"):
                while time.time() < deadline:
                    r = berth(leader.address, "--json", "plugin", "status", "hostpath-" + name)
                    if r.code == 0 and r.json()["nodes_healthy"] == 1:
                        break
                    time.sleep(0.1)
            node_args = sum((["--node", x] for x in nodes), [])
            t0 = time.time()
            setup = run_bench(leader.address, "setup", 8, 0, c.processes, leader,
                              ["--volumes", str(ARGS.volumes)] + node_args, warmup=0)
            print("created %d volumes in %.1f s (%d errors)" % (setup["ops"], time.time() - t0,
                                                             setup["errors"]), flush=True)
            report["setup"] = setup
            print(HEADER, flush=True)
            for n in [int(x) for x in ARGS.claims.split(",") if x]:
                r = run_bench(leader.address, "claims", n, ARGS.duration, c.processes, leader,
                              ["--volumes", str(ARGS.volumes)] + node_args)
                r["leader"] = leader.name
                report["runs"].append(r)
                print_row(r, leader.name)
            for p in list(c.processes):  # clients and plugins are not needed any more
                if not p.name.startswith("s"):
                    p.kill()
                    c.processes.remove(p)

        if ARGS.failover:
            report["failover"] = {"raft_tick": float(ARGS.raft_tick)}
            # (a) One long-lived cluster: kill the leader, restart it, repeat.
            # (b) A fresh cluster per trial, where every server has already
            #     connected to every other one during bootstrap.
            for kind in ("restarted", "fresh"):
                trials = []
                for i in range(ARGS.failover):
                    if kind == "restarted":
                        try:
                            t = failover_trial(c, tmp, i)
                        except RuntimeError as e:  # the killed server cannot come back
                            print("failover (restarted cluster): stopped: %s" % e, flush=True)
                            break
                    else:
                        fresh = cluster.Cluster(os.path.join(tmp, "fresh-%d" % i), tick=ARGS.raft_tick)
                        os.makedirs(fresh.tmp)
                        try:
                            fresh.start()
                            t = failover_trial(fresh, fresh.tmp, i, restart=False)
                        finally:
                            fresh.stop()
                    trials.append(t)
                    print("failover (%s cluster) %d: killed %s, new leader %s, first ack after %.3f s "
                          "(longest gap between acks %.3f s, %d failed requests retried)" % (
                              kind, i + 1, t["killed"], t["new_leader"], t["first_ack_after_kill_s"] or -1,
                              t["longest_ack_gap_s"] or -1, t["errors"]), flush=True)
                firsts = [t["first_ack_after_kill_s"] for t in trials if t["first_ack_after_kill_s"]]
                med = statistics.median(firsts) if firsts else None
                report["failover"][kind] = {"trials": trials, "median_first_ack_after_kill_s": med}
                if firsts:
                    print("failover (%s cluster) median over %d trials: %.3f s" % (kind, len(firsts), med),
                          flush=True)
    finally:
        c.stop()
        with open("/proc/self/mounts") as f:
            for m in reversed([l.split()[1] for l in f if tmp in l.split()[1]]):
                subprocess.run(["umount", "-l", m], check=False)
        if not ARGS.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        with open(ARGS.report, "w") as f:
            json.dump(report, f, indent=2)
        print("report: %s" % ARGS.report)


if __name__ == "__main__":
    main()
