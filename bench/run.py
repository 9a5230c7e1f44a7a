#!/usr/bin/python3
"""berth's benchmarks: a 3-server cluster on 127.0.0.1 (tests/integration/
cluster.py), berth-bench against it for each workload and concurrency, the
CPU seconds and peak RSS of every process, the leader's group-commit metrics,
and leader failover under load.  Prints a table and writes bench/results/report.json
(the results folder: reports and profiles, apart from the code).

Numbers only: nothing here passes or fails on timing.

  bench/run.py [--build build] [--duration 10] [--log 1,16,64,256,1024]
               [--claims 1,8,32,128] [--volumes 1000] [--failover 10]
               [--failover-restarted 5] [--etcd l | --etcd none]
               [--scale 1000000] [--scale-budget 1200] [--raft-tick 0.1]
               [--storm 1000] [--storm-delay-ms 200] [--storm-limit 64]
               [--storm-slow-limit 1] [--storm-rounds 3] [--storm-node-limit N]
               [--fingerprint-interval 0.2]
               [--only log,etcd,claims,storm,failover,scale]

At the end: a table of the targets, berth's figures, etcd's measured in the
same run (bench/etcd_bench.py) and the peers' figures quoted in issue 7.
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
# Reports and profiles: bench/results/, never beside the code.
RESULTS = os.path.join(HERE, "results")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--duration", type=float, default=10, help="seconds measured per run")
    p.add_argument("--log", default="1,16,64,256,1024", help="concurrency levels of the log workload")
    p.add_argument("--claims", default="1,8,32,128", help="concurrency levels of the claims workload")
    p.add_argument("--volumes", type=int, default=1000, help="volumes for the claims workload")
    p.add_argument("--failover", type=int, default=10,
                   help="leader-kill trials, each on a fresh cluster (0: none)")
    p.add_argument("--failover-restarted", type=int, default=5,
                   help="leader-kill trials on one long-lived cluster, the killed server restarted "
                        "between trials (0: none)")
    p.add_argument("--etcd", default="l", choices=("none", "s", "m", "l", "xl"),
                   help="etcd side by side: etcdctl check perf load (l: 500 clients), "
                        "plus puts 1 and 64 in flight; none: skip")
    p.add_argument("--scale", type=int, default=1000000,
                   help="volumes to register for the scale workload on its own cluster (0: none)")
    p.add_argument("--scale-concurrency", type=int, default=256, help="registrations in flight")
    p.add_argument("--scale-budget", type=float, default=1200,
                   help="seconds of registration after which the scale workload stops at the "
                        "count reached (reported as such)")
    p.add_argument("--scale-min-free-gib", type=float, default=6,
                   help="stop registering when the machine's MemAvailable falls below this "
                        "(the machine is shared; reported as such)")
    p.add_argument("--scale-chunk-timeout", type=float, default=300,
                   help="seconds after which a chunk of 50,000 registrations that has not finished "
                        "ends the registration (reported)")
    p.add_argument("--snapshot-threshold", default="8192",
                   help="berthd --snapshot-threshold (berthd's default: 8192)")
    p.add_argument("--server-args", default="",
                   help="more berthd flags for every server, e.g. '--volume-idle-timeout never'")
    p.add_argument("--raft-tick", default="0.1", help="seconds per Raft tick (berthd's default: 0.1)")
    p.add_argument("--tls", action="store_true",
                   help="after the log levels, run them again on a second cluster with mutual TLS "
                        "(certificates made with berth tls), for the cost of TLS")
    p.add_argument("--report", default=os.path.join(RESULTS, "report.json"))
    p.add_argument("--keep", action="store_true", help="keep the cluster's directory and logs")
    p.add_argument("--perf", action="store_true",
                   help="perf record the leader during the largest log run, and the leader and "
                        "client c1 during an extra run of the largest claims level (bench/results/perf-*.txt)")
    p.add_argument("--storm", type=int, default=1000,
                   help="attach storm: claims submitted at once on a plugin of its own (0: none)")
    p.add_argument("--storm-delay-ms", type=int, default=200,
                   help="the storm plugin's ControllerPublishVolume delay (berth-hostpath --delay)")
    p.add_argument("--storm-limit", type=int, default=64,
                   help="the storm client's max_controller_calls")
    p.add_argument("--fingerprint-interval", default="0.2",
                   help="the bench clients' berthd --fingerprint-interval (cluster.py's 0.2 s; "
                        "berthd's default is 5 s): every fingerprint makes 5 identity CSI calls")
    p.add_argument("--storm-node-limit", type=int, default=0,
                   help="the storm clients' max_node_calls (0: berthd's default, 16)")
    p.add_argument("--storm-slow-limit", type=int, default=1,
                   help="a second storm on a fresh plugin, client and volumes at this "
                        "max_controller_calls (1: one call at a time, Nomad's design; 0: none)")
    p.add_argument("--storm-rounds", type=int, default=3,
                   help="storms (claim all, release all) at --storm-limit while one claim at a time "
                        "runs on hostpath-c1, for its p99 under a storm (0: none)")
    p.add_argument("--only", default="log,etcd,claims,storm,failover,scale",
                   help="the parts to run, comma-separated (default: all): log, etcd, claims, "
                        "storm, failover, scale")
    a = p.parse_args()
    a.parts = {x.strip() for x in a.only.split(",") if x.strip()}
    unknown = a.parts - {"log", "etcd", "claims", "storm", "failover", "scale"}
    if unknown:
        p.error("--only: unknown part(s) %s" % ", ".join(sorted(unknown)))
    return a


ARGS = parse_args()
BUILD = os.path.abspath(ARGS.build)
os.environ.setdefault("BERTHD_BIN", os.path.join(BUILD, "apps/berthd/berthd"))
os.environ.setdefault("BERTH_BIN", os.path.join(BUILD, "apps/berth/berth"))
os.environ.setdefault("BERTH_HOSTPATH_BIN", os.path.join(BUILD, "apps/berth-hostpath/berth-hostpath"))
BENCH = os.path.join(BUILD, "bench/berth-bench")
ETCD_PUT = os.path.join(BUILD, "bench/etcd-put")  # etcd's puts (bench/etcd_bench.py); optional
sys.path.insert(0, os.path.join(ROOT, "tests/integration"))

import cluster  # noqa: E402  (needs the environment above)
import etcd_bench  # noqa: E402
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


class StormPlugin(Plugin):
    """berth-hostpath whose ControllerPublishVolume takes ARGS.storm_delay_ms
    longer: a slow cloud attach."""

    def __init__(self, tmp, name, node_id):
        super().__init__(tmp, name, node_id)
        self.argv += ["--delay", "ControllerPublishVolume=%d" % ARGS.storm_delay_ms]


class Client(cluster.Client):
    """A berth client whose plugin has its own id, so that each volume lives
    on exactly one client's berth-hostpath; `options`: the plugin's
    ,max_controller_calls=N,max_node_calls=N suffix."""

    def __init__(self, tmp, name, servers, plugin_id, plugin_socket, options=""):
        super().__init__(tmp, name, servers, plugin_socket)
        i = self.argv.index("--plugin")
        self.argv[i + 1] = "%s=monolith:%s%s" % (plugin_id, plugin_socket, options)
        i = self.argv.index("--fingerprint-interval")
        self.argv[i + 1] = str(ARGS.fingerprint_interval)


def bench_cluster(tmp):
    """A 3-server cluster with berthd's default snapshot threshold
    (cluster.py's test servers snapshot every 30 entries, to exercise
    snapshots; that would measure snapshotting, not the log)."""
    c = cluster.Cluster(tmp, tick=ARGS.raft_tick)
    for s in c.servers:
        i = s.argv.index("--snapshot-threshold")
        s.argv[i + 1] = str(ARGS.snapshot_threshold)
        s.argv += ARGS.server_args.split()
    return c


# A process's CPU seconds and peak RSS: the same readers etcd's side uses.
cpu_seconds = etcd_bench.cpu_seconds
peak_rss_mib = etcd_bench.peak_rss_mib


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
           "berth_request_seconds_sum", "berth_request_seconds_count",
           "berth_client_db_writes_total", "berth_client_db_commits_total",
           "berth_client_db_commit_seconds_sum", "berth_client_db_commit_seconds_count",
           "berth_csi_call_seconds_sum", "berth_csi_call_seconds_count")

# The CSI calls of a claim's and a release's path (not the probes of a
# fingerprint or the health checks): their time is the plugin's own time
# in a cycle, as the client's CSI client measures it (gRPC included).
CLAIM_PATH_CALLS = ("ControllerPublishVolume", "ControllerUnpublishVolume", "NodeStageVolume",
                    "NodeUnstageVolume", "NodePublishVolume", "NodeUnpublishVolume")


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


def scrape_text(process):
    port = metrics_port(process)
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
            return r.read().decode()
    except (OSError, TypeError):
        return ""


def csi_gauges(text, plugin):
    """{(metric, kind): value} of berth_csi_calls_in_flight and
    berth_csi_call_limit for `plugin` in a client's /metrics text."""
    out = {}
    for line in text.splitlines():
        if not line.startswith(("berth_csi_calls_in_flight{", "berth_csi_call_limit{")):
            continue
        series, value = line.rsplit(" ", 1)
        labels = dict(re.findall(r'(\w+)="([^"]*)"', series))
        if labels.get("plugin") == plugin:
            out[(series.split("{")[0], labels.get("kind"))] = float(value)
    return out


def csi_call_seconds(text, plugin):
    """{method: (seconds sum, count)} of berth_csi_call_seconds for `plugin`."""
    out = {}
    for line in text.splitlines():
        if line.startswith(("berth_csi_call_seconds_sum{", "berth_csi_call_seconds_count{")):
            series, value = line.rsplit(" ", 1)
            labels = dict(re.findall(r'(\w+)="([^"]*)"', series))
            if labels.get("plugin") != plugin:
                continue
            s, n = out.get(labels.get("method"), (0.0, 0.0))
            if series.startswith("berth_csi_call_seconds_sum"):
                s = float(value)
            else:
                n = float(value)
            out[labels.get("method")] = (s, n)
    return out


class GaugeWatcher:
    """Scrapes a client's /metrics every 50 ms in a thread and keeps the
    largest CSI calls in flight (and the limit) seen for one plugin."""

    def __init__(self, client, plugin):
        import threading
        self.client, self.plugin = client, plugin
        self.max = {}
        self.samples = 0
        self.stop_flag = False
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.stop_flag:
            for k, v in csi_gauges(scrape_text(self.client), self.plugin).items():
                self.max[k] = max(self.max.get(k, v), v)
            self.samples += 1
            time.sleep(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag = True
        self.thread.join()

    def result(self):
        g = lambda m, k: self.max.get((m, k))  # noqa: E731
        return {"max_controller_in_flight": g("berth_csi_calls_in_flight", "controller"),
                "max_node_in_flight": g("berth_csi_calls_in_flight", "node"),
                "controller_limit": g("berth_csi_call_limit", "controller"),
                "node_limit": g("berth_csi_call_limit", "node"),
                "scrapes": self.samples}


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
    clients = [p for p in watched.values() if isinstance(p, cluster.Client)]
    m0 = {p.name: scrape(p) for p in servers + clients}
    threads0 = thread_cpu(leader.proc.pid)
    load0 = loadavg()
    argv = [BENCH, "--address", address, "--workload", workload, "-c", str(concurrency),
            "--duration", str(duration), "--warmup", str(warmup)] + list(extra)
    t0 = time.time()
    bench = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    bench_peak = 0
    bench_cpu = 0
    try:
        while bench.poll() is None:
            bench_peak = max(bench_peak, peak_rss_mib(bench.pid) or 0)
            bench_cpu = cpu_seconds(bench.pid) or bench_cpu
            time.sleep(0.2)
    except BaseException:  # interrupted: do not leave berth-bench behind
        bench.kill()
        raise
    out, err = bench.communicate()
    wall = time.time() - t0
    if bench.returncode != 0 or not out.strip():
        raise RuntimeError("berth-bench failed (%d): %s %s" % (bench.returncode, out, err))
    r = json.loads(out.strip().splitlines()[-1])
    m1 = {p.name: scrape(p) for p in servers + clients}
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
    # Each client's client.db group commit: publication records written
    # and the transactions (fsyncs) they took.
    r["client_db"] = {}
    for p in clients:
        a, b = m0[p.name], m1[p.name]
        writes = delta(a, b, "berth_client_db_writes_total")
        commits = delta(a, b, "berth_client_db_commits_total")
        csec = delta(a, b, "berth_client_db_commit_seconds_sum")
        r["client_db"][p.name] = {
            "writes": int(writes), "commits": int(commits),
            "writes_per_commit": round(writes / commits, 2) if commits else None,
            "commit_ms_mean": round(1000 * csec / commits, 3) if commits else None}
    # The claim path's CSI calls on every client: count and seconds.
    r["csi_calls"] = {}
    for p in clients:
        a, b = m0[p.name], m1[p.name]
        for series in b:
            if not series.startswith("berth_csi_call_seconds_sum{"):
                continue
            method = (re.search(r'method="([^"]+)"', series) or [None, None])[1]
            if method not in CLAIM_PATH_CALLS:
                continue
            calls, sec = r["csi_calls"].get(method, (0, 0.0))
            r["csi_calls"][method] = (calls + int(delta(a, b, series.replace("_sum{", "_count{"))),
                                      sec + delta(a, b, series))
    r["csi_calls"] = {m: {"calls": n, "seconds": round(sec, 4)} for m, (n, sec) in r["csi_calls"].items()}
    # Log entries the leader wrote per completed operation (warm-up
    # included on both sides; a claims cycle: its commits).
    if r.get("ops_all"):
        r["leader_entries_per_op"] = round(r["leader_log"]["entries"] / r["ops_all"], 2)
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
    if r["workload"] in ("storm", "unstorm"):
        srv_ms = srv.get("volume_claim" if r["workload"] == "storm" else "volume_release", 0)
    wall = r["wall_seconds"]
    print("%-7s %5d %8.1f %7.2f %7.2f %7.1f %5d %7.2f %6.2f %6.2f %6.2f %6.2f %6.2f %6s %6.3f %5.1f" % (
        r["workload"], r["concurrency"], r["ops_per_s"], r["p50_ms"], r["p99_ms"], r["max_ms"],
        r["errors"], srv_ms, (procs[leader_name]["cpu_seconds"] or 0) / wall, max(followers or [0]) / wall,
        (procs["berth-bench"]["cpu_seconds"] or 0) / wall, max(plugins or [0]) / wall,
        lg["write_ms_mean"] or 0, lg["entries_per_write"], max(fwr or [0]), r["loadavg_before"]),
        flush=True)


def cycle_costs(r, leader_name):
    """A claims run's cost per cycle: the CPU of each process, and (printed
    for 1 in flight) the cycle's latency beside its budget of 4 sequential
    fsyncs plus the plugin's own time (issue 28)."""
    ops = r.get("ops_all") or 0
    if not ops:
        return
    cpu = {n: round(1000 * p["cpu_seconds"] / ops, 3) for n, p in r["processes"].items()
           if p.get("cpu_seconds") is not None}
    r["cpu_ms_per_cycle"] = cpu
    r["cpu_ms_per_cycle_all"] = round(sum(cpu.values()), 3)
    print("  CPU per cycle (ms): %s; all %.2f" % (
        ", ".join("%s %.2f" % kv for kv in sorted(cpu.items())), r["cpu_ms_per_cycle_all"]), flush=True)
    fsync = r["leader_log"]["write_ms_mean"]
    dbs = [v["commit_ms_mean"] for v in r["client_db"].values() if v.get("commit_ms_mean")]
    plugin_ms = sum(v["seconds"] for v in r["csi_calls"].values()) * 1000 / ops
    calls = sum(v["calls"] for v in r["csi_calls"].values()) / ops
    commits = sum(v["commits"] for v in r["client_db"].values()) / ops
    r["latency_budget"] = {
        "leader_log_write_ms_mean": fsync, "client_db_commit_ms_mean": max(dbs) if dbs else None,
        "plugin_ms_per_cycle": round(plugin_ms, 3), "csi_calls_per_cycle": round(calls, 2),
        "leader_writes_per_cycle": round(r["leader_log"]["writes"] / ops, 2),
        "client_db_commits_per_cycle": round(commits, 2)}
    if r["concurrency"] != 1 or fsync is None:
        return
    one = max([fsync] + dbs)
    budget = 4 * one + plugin_ms
    r["latency_budget"].update({"fsync_ms": one, "budget_ms": round(budget, 3),
                                "p50_over_budget": round(r["p50_ms"] / budget, 2)})
    print("  1 in flight: cycle p50 %.2f ms; budget 4 fsyncs x %.2f ms (the slower of the leader's log write "
          "%.2f ms and client.db's commit %s ms) + the plugin's own time %.2f ms (%.1f CSI calls) = %.2f ms: "
          "%.2fx; per cycle %.1f leader log writes, %.1f client.db commits" % (
              r["p50_ms"], one, fsync, "%.2f" % max(dbs) if dbs else "-", plugin_ms, calls, budget,
              r["p50_ms"] / budget, r["latency_budget"]["leader_writes_per_cycle"], commits), flush=True)


# ops/s, p50/p99/max: as berth-bench sees them (one op = one request for
# log, one claim + release for claims).  srv ms: the leader's mean time per
# op (berth_request_seconds; claims: claim + release), without the shell
# round trip.  CPU columns: cores (CPU seconds per wall second) of the
# leader, the busiest follower, berth-bench and the busiest berth-hostpath.
# wr ms, ent/wr: the leader's mean log write (fsync included) and entries per
# write (group commit); fwr ms: the slower follower's mean log write.
# load: 1-minute load average before the run (2 cores).
HEADER = ("%-7s %5s %8s %7s %7s %7s %5s %7s %6s %6s %6s %6s %6s %6s %6s %5s" % (
    "work", "conc", "ops/s", "p50 ms", "p99 ms", "max ms", "errs", "srv ms", "leadC", "follC",
    "benchC", "plugC", "wr ms", "ent/wr", "fwr ms", "load"))


# --- claims and attach storms ---------------------------------------------------

def wait_plugin(address, plugin, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = berth(address, "--json", "plugin", "status", plugin)
        if r.code == 0 and r.json().get("nodes_healthy") == 1 and r.json().get("controllers_healthy", 1) >= 1:
            return True
        time.sleep(0.1)
    raise RuntimeError("plugin %s not healthy within %d s" % (plugin, timeout))


def perf_start(pid, path):
    return subprocess.Popen(["perf", "record", "-g", "-F", "499", "-o", path, "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def perf_stop(perf, data, out_path, title):
    perf.send_signal(signal.SIGINT)
    perf.wait()
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        f.write("# %s\n" % title)
        for sort in ("dso", "dso,sym"):
            f.flush()
            subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-g", "none",
                            "--sort", sort, "--percent-limit", "0.5"], stdout=f, stderr=subprocess.DEVNULL)


def storm_setup(c, tmp, leader, plugin_id, node, limit, prefix):
    """A storm plugin (berth-hostpath with the ControllerPublishVolume delay)
    on a client of its own with max_controller_calls=limit, and ARGS.storm
    volumes PREFIX0..N-1 created on it (not timed)."""
    servers = [s.address for s in c.servers]
    plugin = StormPlugin(tmp, "plugin-" + node, "csi-" + node).start()
    options = ",max_controller_calls=%d" % limit
    if ARGS.storm_node_limit:
        options += ",max_node_calls=%d" % ARGS.storm_node_limit
    client = Client(tmp, node, servers, plugin_id, plugin.socket, options).start()
    c.processes += [plugin, client]
    wait_plugin(leader.address, plugin_id)
    args = ["--volumes", str(ARGS.storm), "--prefix", prefix, "--node", "%s=%s" % (node, plugin_id)]
    t0 = time.time()
    setup = run_bench(leader.address, "setup", 8, 0, c.processes, leader, args, warmup=0)
    print("storm: plugin %s on client %s (%s, ControllerPublishVolume +%d ms): "
          "created %d volumes in %.1f s (%d errors)" % (plugin_id, node, options.lstrip(","), ARGS.storm_delay_ms,
                                                       setup["ops"], time.time() - t0, setup["errors"]),
          flush=True)
    return client, args


def storm_once(c, leader, client, plugin_id, args, limit):
    """All ARGS.storm claims at once, then (timed separately) their release."""
    extra = args + ["--timeout", "1800", "--alloc-tag", "first"]
    t0 = csi_call_seconds(scrape_text(client), plugin_id)
    with GaugeWatcher(client, plugin_id) as w:
        r = run_bench(leader.address, "storm", ARGS.storm, 0, c.processes, leader, extra, warmup=0)
    t1 = csi_call_seconds(scrape_text(client), plugin_id)
    r["leader"] = leader.name
    r["limit"] = limit
    r["gauges"] = w.result()
    # The storm client's mean time per CSI call during the storm (the RPC
    # itself, as berth_csi_call_seconds measures it).
    r["csi_call_ms_mean"] = {m: round(1000 * (t1[m][0] - t0.get(m, (0, 0))[0]) / (t1[m][1] - t0.get(m, (0, 0))[1]), 1)
                             for m in t1 if t1[m][1] > t0.get(m, (0, 0))[1]}
    print("storm: mean CSI call ms on %s during the storm: %s" % (
        plugin_id, ", ".join("%s %s" % kv for kv in sorted(r["csi_call_ms_mean"].items()))), flush=True)
    print_row(r, leader.name)
    u = run_bench(leader.address, "unstorm", ARGS.storm, 0, c.processes, leader, extra, warmup=0)
    u["leader"] = leader.name
    u["limit"] = limit
    print_row(u, leader.name)
    return r, u


def storm_part(c, tmp, leader, report):
    """The attach storm at ARGS.storm_limit (with the largest controller
    calls in flight the storm client's /metrics showed), one claim at a time
    on hostpath-c1 idle and during storms, then a storm at
    ARGS.storm_slow_limit on a fresh plugin, client and volumes."""
    out = {"claims": ARGS.storm, "delay_ms": ARGS.storm_delay_ms, "limit": ARGS.storm_limit,
           "node_limit": ARGS.storm_node_limit or None}
    report["storm"] = out
    print(HEADER, flush=True)
    client, args = storm_setup(c, tmp, leader, "storm", "c3", ARGS.storm_limit, "storm-v")
    r, u = storm_once(c, leader, client, "storm", args, ARGS.storm_limit)
    out["run"], out["release"] = r, u
    out["seconds"] = r["seconds"]
    print("storm: %d claims at max_controller_calls=%d acknowledged after %.2f s (ideal %d x %g s / %d = "
          "%.3f s); largest controller calls in flight seen: %s (limit %s; %d scrapes); released in %.2f s"
          % (ARGS.storm, ARGS.storm_limit, r["seconds"], ARGS.storm, ARGS.storm_delay_ms / 1000,
             ARGS.storm_limit, ARGS.storm * ARGS.storm_delay_ms / 1000 / ARGS.storm_limit,
             r["gauges"]["max_controller_in_flight"], r["gauges"]["controller_limit"], r["gauges"]["scrapes"],
             u["seconds"]), flush=True)

    # One claim at a time on hostpath-c1 (no delay): idle, then while storms
    # run on the storm plugin.
    c1args = ["--volumes", str(ARGS.volumes), "--node", "c1=hostpath-c1", "--node", "c2=hostpath-c2",
              "--only-node", "c1"]
    p99 = {}
    out["p99"] = p99
    if ARGS.storm_rounds:
        idle = run_bench(leader.address, "claims", 1, ARGS.duration, c.processes, leader, c1args)
        idle["leader"] = leader.name
        idle["note"] = "hostpath-c1 only, idle"
        print_row(idle, leader.name)
        p99["idle"] = {"p50_ms": idle["p50_ms"], "p99_ms": idle["p99_ms"], "max_ms": idle["max_ms"],
                       "ops": idle["ops"]}
        spans_path = os.path.join(tmp, "c1-spans.txt")
        window_s = (r["seconds"] + u["seconds"] + 1.5) * ARGS.storm_rounds + 3
        load0 = loadavg()
        bg = subprocess.Popen([BENCH, "--address", leader.address, "--workload", "claims", "-c", "1",
                               "--duration", "%.1f" % window_s, "--warmup", "1", "--latency-log", spans_path]
                              + c1args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        windows, rounds = [], []
        for i in range(ARGS.storm_rounds):
            t0 = time.time() * 1000
            tag = ["--timeout", "1800", "--alloc-tag", "round%d" % i]
            sr = subprocess.run([BENCH, "--address", leader.address, "--workload", "storm"] + tag + args,
                                capture_output=True, text=True)
            t1 = time.time() * 1000
            ur = subprocess.run([BENCH, "--address", leader.address, "--workload", "unstorm"] + tag + args,
                                capture_output=True, text=True)
            windows.append((t0, t1))
            try:
                rounds.append({"storm": json.loads(sr.stdout.strip().splitlines()[-1]),
                               "release": json.loads(ur.stdout.strip().splitlines()[-1])})
            except (IndexError, ValueError):
                rounds.append({"error": sr.stderr[-500:] + ur.stderr[-500:]})
            if time.time() * 1000 - t0 > 120000:
                break
        bgout, bgerr = bg.communicate()
        try:
            bgr = json.loads(bgout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            bgr = {"error": bgerr[-500:]}
        with open(spans_path) as f:
            spans = [tuple(int(x) for x in l.split()) for l in f if l.strip()]
        # An operation counts as under the storm when it overlaps a storm's
        # claim phase (from submitting to the last acknowledgement).
        under = sorted((b - a) for a, b in spans if any(a < w1 and b > w0 for w0, w1 in windows))

        def pct(v, q):
            return v[min(len(v) - 1, int(q * len(v)))] if v else None
        p99["under_storm"] = {"p50_ms": pct(under, 0.5), "p99_ms": pct(under, 0.99),
                              "max_ms": under[-1] if under else None, "ops": len(under),
                              "storm_seconds": [round((w1 - w0) / 1000, 2) for w0, w1 in windows],
                              "loadavg_before": load0, "loadavg_after": loadavg(),
                              "background_run": bgr, "rounds": rounds}
        ratio = p99["under_storm"]["p99_ms"] / idle["p99_ms"] if under and idle["p99_ms"] else None
        p99["ratio"] = ratio and round(ratio, 2)
        print("claims 1 at a time on hostpath-c1: idle p50 %.1f / p99 %.1f ms (%d ops); during %d storm(s) "
              "of %s s: p50 %s / p99 %s ms (%d ops, ms resolution); p99 ratio %s" % (
                  idle["p50_ms"], idle["p99_ms"], idle["ops"], len(windows),
                  p99["under_storm"]["storm_seconds"], pct(under, 0.5), pct(under, 0.99), len(under),
                  "-" if ratio is None else "%.2fx" % ratio), flush=True)

    if ARGS.storm_slow_limit:
        client1, args1 = storm_setup(c, tmp, leader, "storm1", "c4", ARGS.storm_slow_limit, "storm1-v")
        r1, u1 = storm_once(c, leader, client1, "storm1", args1, ARGS.storm_slow_limit)
        out["slow"] = {"limit": ARGS.storm_slow_limit, "run": r1, "release": u1, "seconds": r1["seconds"]}
        out["slow_over_limit_ratio"] = round(r1["seconds"] / r["seconds"], 2) if r["seconds"] else None
        print("storm: %d claims at max_controller_calls=%d acknowledged after %.2f s; at %d: %.2f s; "
              "ratio %.1fx; largest controller calls in flight seen: %s" % (
                  ARGS.storm, ARGS.storm_slow_limit, r1["seconds"], ARGS.storm_limit, r["seconds"],
                  out["slow_over_limit_ratio"] or 0, r1["gauges"]["max_controller_in_flight"]), flush=True)


# --- failover ----------------------------------------------------------------

def failover_trial(c, tmp, i, restart=True, bench_seconds=7):
    leader = c.leader()
    follower = next(s for s in c.servers if s is not leader and s.alive())
    acks = os.path.join(tmp, "acks-%s.txt" % i)
    bench = subprocess.Popen([BENCH, "--address", follower.address, "--workload", "log", "-c", "16",
                              "--duration", str(bench_seconds), "--warmup", "0.5", "--acks", acks,
                              "--timeout", "10", "--give-up", "30"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    killed_ms = time.time() * 1000
    leader.kill(signal.SIGKILL)
    try:
        out, err = bench.communicate(timeout=60 + bench_seconds)
        r = json.loads(out.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        # A slot stops only between operations: requests still failing
        # (no leader serving) long after the end.
        bench.kill()
        bench.communicate()
        r = {"errors": -1, "error_samples": ["berth-bench did not finish within %d s of its end: "
                                             "requests still failing" % 60]}
    try:
        with open(acks) as f:
            times = [int(l) for l in f if l.strip()]
    except FileNotFoundError:
        times = []
    # Acks within 20 ms of the kill can only be answers the old leader sent
    # before it died (an election takes at least 10 ticks).
    after = [t for t in times if t > killed_ms + 20]
    first = (after[0] - killed_ms) / 1000 if after else None
    gaps = [b - a for a, b in zip(times, times[1:])]
    new_leader = c.wait_leader(exclude=leader, timeout=60)
    if not restart:
        return {"killed": leader.name, "new_leader": new_leader.name, "bench_via": follower.name,
                "first_ack_after_kill_s": first,
                "longest_ack_gap_s": max(gaps) / 1000 if gaps else None,
                "errors": r["errors"], "abandoned": r.get("abandoned"),
                "error_samples": r["error_samples"][:2]}
    # Back as a follower, for the next trial (its ports may still be taken).
    start_server(leader)
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


# --- scale ---------------------------------------------------------------------

def rss_mib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
        return int(m.group(1)) / 1024 if m else None
    except OSError:
        return None


def r3(x):
    return None if x is None else round(x, 3)


def mem_available_gib():
    with open("/proc/meminfo") as f:
        m = re.search(r"MemAvailable:\s+(\d+) kB", f.read())
    return int(m.group(1)) / 2 ** 20


def dir_mib(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return round(total / 2 ** 20, 1)


def peer_status(c, name):
    for p in c.peers():
        if p.get("id") == name:
            return p
    return None


def wait_serving(addresses, volume, timeout, stale=False):
    """Seconds (from now) until one of `addresses` answers `volume status
    VOLUME` (through the leader unless stale); None on timeout."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        for a in addresses:
            args = [a, "--json", "--timeout", "1", "volume", "status", volume] + (["--stale"] if stale else [])
            if berth(*args).code == 0:
                return time.time() - t0
        time.sleep(0.05)
    return None


def start_server(s, tries=150):
    """Starts a stopped server; returns when its successful attempt began.
    Its ports may be taken meanwhile: by the killed process's own connections
    in TIME_WAIT (up to 60 s), or by another process (cluster.py picks the
    ports once); the waiting is not counted."""
    for attempt in range(tries):
        t = time.time()
        try:
            s.start()
            return t
        except RuntimeError:
            if attempt == tries - 1:
                raise
            time.sleep(0.5)


def scale_run(tmp, report):
    """Registers ARGS.scale volumes on a fresh cluster (chunks of berth-bench
    register, ARGS.scale_concurrency in flight, stopping after
    ARGS.scale_budget seconds at the count reached), then measures with that
    state: peak RSS, failover, one server's restart and the whole cluster's
    restart-to-serve."""
    n = ARGS.scale
    d = os.path.join(tmp, "scale")
    os.makedirs(d)
    sc = bench_cluster(d)
    out = {"requested": n, "concurrency": ARGS.scale_concurrency, "budget_s": ARGS.scale_budget,
           "snapshot_threshold": int(ARGS.snapshot_threshold), "chunks": []}
    report["scale"] = out
    try:
        sc.start()
        leader = sc.leader()
        # The volumes' plugin: one fingerprint makes plugin bench-p0 known.
        subprocess.run([BENCH, "--address", leader.address, "--workload", "log", "-c", "1", "--count", "1",
                        "--warmup", "0"], check=True, capture_output=True)
        print("scale: registering %d volumes on a fresh cluster (leader %s), %d in flight, budget %.0f s" % (
            n, leader.name, ARGS.scale_concurrency, ARGS.scale_budget), flush=True)
        chunk = max(1000, min(50000, n // 20 or 1))
        done = 0
        t0 = time.time()
        cpu0 = {s.name: cpu_seconds(s.proc.pid) for s in sc.servers}
        stopped = None
        while done < n:
            if time.time() - t0 >= ARGS.scale_budget:
                stopped = "--scale-budget (%.0f s)" % ARGS.scale_budget
                break
            if mem_available_gib() < ARGS.scale_min_free_gib:
                stopped = "--scale-min-free-gib (MemAvailable %.1f GiB)" % mem_available_gib()
                break
            upto = min(n, done + chunk)
            tc = time.time()
            b = subprocess.Popen([BENCH, "--address", leader.address, "--workload", "register",
                                  "-c", str(ARGS.scale_concurrency), "--first", str(done), "--volumes", str(upto),
                                  "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # A chunk that makes no progress for long (no stable leader) or
            # a machine running out of memory ends the registration.
            # (Waiting on the process, not sleeping: a chunk's end counts
            # at once, not up to a second later.)
            while not stopped:
                try:
                    b.wait(timeout=1)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if time.time() - tc > ARGS.scale_chunk_timeout:
                    stopped = "a chunk not finished after %.0f s" % ARGS.scale_chunk_timeout
                elif mem_available_gib() < ARGS.scale_min_free_gib / 2:
                    stopped = "MemAvailable %.1f GiB during a chunk" % mem_available_gib()
            if stopped:
                b.kill()
                b.communicate()
                out["peers_when_stopped"] = sc.peers()
                out["peak_rss_mib_when_stopped"] = {s.name: peak_rss_mib(s.proc.pid) for s in sc.servers}
                print("scale: STOPPED during the chunk %d..%d: %s; peers %s; peak RSS MiB %s" % (
                    done, upto, stopped, [(p.get("id"), p.get("role"), p.get("term")) for p in
                                          out["peers_when_stopped"]], out["peak_rss_mib_when_stopped"]),
                      flush=True)
                break
            bout, berr = b.communicate()
            if b.returncode != 0:
                raise RuntimeError("berth-bench register failed: %s %s" % (bout, berr))
            r = json.loads(bout.strip().splitlines()[-1])
            done = upto
            rss = {s.name: round(rss_mib(s.proc.pid) or 0) for s in sc.servers}
            row = {"registered": done, "chunk_s": round(time.time() - tc, 2), "ops_per_s": r["ops_per_s"],
                   "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "errors": r["errors"], "rss_mib": rss,
                   "loadavg": loadavg()}
            out["chunks"].append(row)
            print("scale: %8d registered, %6.0f/s (p50 %.1f ms, p99 %.0f ms, %d retried), RSS MiB %s, load %.1f"
                  % (done, r["ops_per_s"], r["p50_ms"], r["p99_ms"], r["errors"], rss, row["loadavg"]),
                  flush=True)
        secs = time.time() - t0
        out["registered"] = done
        out["register_seconds"] = round(secs, 1)
        out["register_per_s"] = round(done / secs, 1)
        out["stopped_by"] = stopped
        out["cpu_seconds"] = {s.name: round((cpu_seconds(s.proc.pid) or 0) - (cpu0[s.name] or 0), 1)
                              for s in sc.servers}
        leader_now = sc.leader()
        out["leader"] = leader_now.name if leader_now else None
        out["leader_changed"] = leader_now is not leader
        out["peak_rss_mib"] = {s.name: peak_rss_mib(s.proc.pid) for s in sc.servers}
        out["leader_peak_rss_mib"] = out["peak_rss_mib"][leader.name]
        time.sleep(2)
        out["data_dir_mib"] = {s.name: dir_mib(s.data_dir) for s in sc.servers}
        print("scale: %d volumes in %.1f s = %.0f/s%s; leader %s peak RSS %.0f MiB (followers %s); data dirs MiB %s"
              % (done, secs, done / secs, " (STOPPED by %s)" % stopped if stopped else "", leader.name,
                 out["leader_peak_rss_mib"], {k: round(v) for k, v in out["peak_rss_mib"].items() if k != leader.name},
                 out["data_dir_mib"]), flush=True)
        last = "scale-v%d" % (done - 1)
        if stopped and stopped.startswith("a chunk"):
            print("scale: no measurements with the state: the cluster was not serving", flush=True)
            return

        # Failover with that state: SIGKILL the leader under a log load
        # through a follower; first acknowledged request after the kill.
        t = failover_trial(sc, d, "scale", restart=False, bench_seconds=25)
        out["failover"] = t
        out["failover_new_leader_peak_rss_mib"] = peak_rss_mib(
            next(s for s in sc.servers if s.name == t["new_leader"]).proc.pid)
        print("scale: failover with %d volumes: killed %s, new leader %s, first ack after %s s "
              "(%d failed requests retried); new leader's peak RSS %.0f MiB" % (
                  done, t["killed"], t["new_leader"], r3(t["first_ack_after_kill_s"]), t["errors"],
                  out["failover_new_leader_peak_rss_mib"] or 0), flush=True)

        # One server restarted (the killed one, now a follower): from the
        # process's start to its banner (listening), to answering a stale
        # read of the last volume from its own state tables, and until list-
        # peers shows it a follower with the leader's applied index.
        killed = next(s for s in sc.servers if s.name == t["killed"])
        target = max((p.get("applied_index", 0) for p in sc.peers()), default=0)
        t_try = time.time()
        ts = start_server(killed)
        banner = time.time() - ts
        port_wait = ts - t_try
        stale = caught = None
        while time.time() - ts < 120 and (stale is None or caught is None):
            if stale is None and berth(killed.address, "--json", "--timeout", "1", "volume", "status", last,
                                       "--stale").code == 0:
                stale = time.time() - ts
            if caught is None:
                p = peer_status(sc, killed.name)
                if p and p.get("role") == "follower" and p.get("applied_index", 0) >= target:
                    caught = time.time() - ts
            time.sleep(0.1)
        out["restart_one"] = {"server": killed.name, "to_banner_s": round(banner, 3),
                              "waited_for_port_s": round(port_wait, 2),
                              "to_stale_read_s": stale and round(stale, 3),
                              "to_caught_up_s": caught and round(caught, 3), "target_applied_index": target}
        print("scale: one server (%s) restarted: banner after %.2f s, serves a stale read after %s s, "
              "caught up (applied index %d) after %s s" % (killed.name, banner, stale and round(stale, 2),
                                                           target, caught and round(caught, 2)), flush=True)

        # The whole cluster restarted (SIGKILL all, start all): from the
        # first start to the first answer to `volume status` of the last
        # volume through the leader (elected, state loaded, actors spawned).
        for s in sc.servers:
            s.kill()
        ts = None
        waits = []  # seconds each server waited for its ports (not berth's time)
        for s in sc.servers:
            t_try = time.time()
            t = start_server(s)
            waits.append(t - t_try)
            ts = ts or t  # from the first server's successful start
        started = time.time() - ts - sum(waits[1:])
        served = wait_serving([s.address for s in sc.servers], last, 120)
        served = None if served is None else served + started  # port waits excluded
        new = sc.leader()
        out["restart_all"] = {"to_all_banners_s": round(started, 3), "to_serve_s": served and round(served, 3),
                              "waited_for_ports_s": [round(w, 2) for w in waits],
                              "leader": new.name if new else None,
                              "leader_peak_rss_mib": new and r3(peak_rss_mib(new.proc.pid))}
        print("scale: whole cluster restarted: all 3 listening after %.2f s, leader serves volume status "
              "after %s s (leader %s, peak RSS %s MiB)" % (started, served and round(served, 2),
                                                           out["restart_all"]["leader"],
                                                           out["restart_all"]["leader_peak_rss_mib"]), flush=True)
        # And failover again on the restarted cluster.
        try:
            t = failover_trial(sc, d, "scale-2", restart=False, bench_seconds=25)
        except AssertionError as e:  # no new leader within wait_leader's 60 s
            t = {"first_ack_after_kill_s": None, "error": str(e)}
        out["failover_after_restart"] = t
        print("scale: failover after the restart: first ack after %s s%s" % (
            r3(t["first_ack_after_kill_s"]), " (%s)" % t["error"] if t.get("error") else ""), flush=True)
    finally:
        sc.stop()
        if not ARGS.keep:
            shutil.rmtree(d, ignore_errors=True)


# --- the summary ----------------------------------------------------------------

# Peers' figures quoted in issue 7 (measured there on this kind of machine,
# not in this run).
ISSUE_ETCD_1, ISSUE_ETCD_64 = 210, 900          # puts/s: 1 and 64 in flight
ISSUE_LIBRAFT_1, ISSUE_LIBRAFT_1024 = 1300, 14000  # entries/s: 1 and 1024 in flight


def summary(report):
    """target / berth / etcd here / etcd (issue) / libraft (issue)."""
    runs = [r for r in report["runs"] if not r.get("side_by_side")]
    log = {r["concurrency"]: r for r in runs if r["workload"] == "log" and not r.get("tls")}
    claims = [r for r in runs if r["workload"] == "claims"]
    side = next((r for r in report["runs"] if r.get("side_by_side")), None)
    etcd = report.get("etcd") or {}
    erun = {r["concurrency"]: r for r in etcd.get("runs", [])}
    cp = etcd.get("check_perf") or {}
    fo = report.get("failover") or {}
    sc = report.get("scale") or {}

    def f(x, fmt="%.0f", unit=""):
        return "-" if x is None else (fmt % x) + unit

    def ratio(a, b):
        return "-" if not a or not b else "%.2fx" % (a / b)

    rows = []
    l1 = log.get(1)
    e1 = erun.get(1)
    rows.append(("log 1 at a time: p50", "<= etcd's", l1 and f(l1["p50_ms"], "%.2f", " ms"),
                 e1 and f(e1["p50_ms"], "%.2f", " ms"), "", ""))
    rows.append(("log 1 at a time: rate", "", l1 and f(l1["ops_per_s"], "%.0f", "/s"),
                 e1 and f(e1["ops_per_s"], "%.0f", "/s"), "~%d/s" % ISSUE_ETCD_1, "~%d/s" % ISSUE_LIBRAFT_1))
    l64, e64 = log.get(64), erun.get(64)
    rows.append(("log 64 in flight", "", l64 and f(l64["ops_per_s"], "%.0f", "/s"),
                 e64 and f(e64["ops_per_s"], "%.0f", "/s"), "~%d/s" % ISSUE_ETCD_64, ""))
    best = max(log.values(), key=lambda r: r["ops_per_s"]) if log else None
    rows.append(("log many in flight (best)", ">= 25,000/s (1024)",
                 best and "%s/s (%d)" % (f(best["ops_per_s"]), best["concurrency"]), "", "",
                 "~%d/s (1024)" % ISSUE_LIBRAFT_1024))
    if best and (best.get("leader_log") or {}).get("entries"):
        # CPU of the three servers over the entries the log wrote in that run.
        cpu = sum(p["cpu_seconds"] for n, p in (best.get("processes") or {}).items()
                  if n != "berth-bench" and p.get("cpu_seconds") is not None)
        rows.append(("log: CPU per entry, 3 servers (best)", "<= 60 us",
                     "%.0f us" % (cpu / best["leader_log"]["entries"] * 1e6), "", "", ""))
    if side or cp:
        rows.append(("log %s in flight, 60 s" % (cp.get("clients") or (side and side["concurrency"])), "",
                     side and f(side["ops_per_s"], "%.0f", "/s"),
                     cp.get("ops_per_s") and "%d/s (check perf)" % cp["ops_per_s"], "", ""))
    bc = max(claims, key=lambda r: r["ops_per_s"]) if claims else None
    rows.append(("claim cycles (best)", ">= 2,000/s", bc and "%s/s (%d)" % (f(bc["ops_per_s"], "%.1f"),
                                                                           bc["concurrency"]), "", "", ""))
    if bc and bc.get("cpu_ms_per_cycle_all"):
        rows.append(("claim cycles: CPU per cycle (best)", "", "%.2f ms (%d)" % (
            bc["cpu_ms_per_cycle_all"], bc["concurrency"]), "", "", ""))
    c1 = next((r for r in claims if r["concurrency"] == 1), None)
    lb = (c1 or {}).get("latency_budget") or {}
    if lb.get("budget_ms"):
        rows.append(("claim cycle p50, 1 in flight", "<= budget", "%.2f ms (%.2fx of %.2f)" % (
            c1["p50_ms"], lb["p50_over_budget"], lb["budget_ms"]), "", "", ""))
    st = report.get("storm") or {}
    if st.get("run"):
        g = st["run"].get("gauges") or {}
        rows.append(("storm: %d claims, limit %d" % (st["claims"], st["limit"]), "<= 5 s",
                     "%s (max %s in flight)" % (f(st.get("seconds"), "%.2f", " s"),
                                                f(g.get("max_controller_in_flight"))), "", "", ""))
    if st.get("slow"):
        rows.append(("storm: limit %d" % st["slow"]["limit"], "", f(st["slow"].get("seconds"), "%.1f", " s"),
                     "", "", ""))
        rows.append(("storm: limit %d / limit %d" % (st["slow"]["limit"], st["limit"]), "",
                     f(st.get("slow_over_limit_ratio"), "%.1f", "x"), "", "", ""))
    p99 = st.get("p99") or {}
    if p99.get("idle"):
        rows.append(("claim p99 (1 at a time), idle", "", f(p99["idle"]["p99_ms"], "%.1f", " ms"), "", "", ""))
    if p99.get("under_storm"):
        rows.append(("claim p99 during storm / idle", "<= 2x", "%s (%s)" % (
            f(p99["under_storm"]["p99_ms"], "%.0f", " ms"), f(p99.get("ratio"), "%.2f", "x")), "", "", ""))
    fr = (fo.get("fresh") or {}).get("median_first_ack_after_kill_s")
    fl = (fo.get("restarted") or {}).get("median_first_ack_after_kill_s")
    rows.append(("failover, fresh (median)", "<= 1.5 s", f(fr, "%.2f", " s"), "", "", ""))
    if fo.get("restarted", {}).get("trials"):
        rows.append(("failover, after restarts (median)", "", f(fl, "%.2f", " s"), "", "", ""))
    if sc.get("registered"):
        tag = "%d vol" % sc["registered"]
        rows.append(("scale: registration (%s)" % tag, ">= 5,000/s", f(sc["register_per_s"], "%.0f", "/s"),
                     "", "", ""))
        rows.append(("scale: leader peak RSS (%s)" % tag, "<= 1 GiB", f(sc.get("leader_peak_rss_mib"), "%.0f", " MiB"),
                     "", "", ""))
        peaks = sc.get("peak_rss_mib") or {}
        followers = [v for k, v in peaks.items() if k != sc.get("leader") and v]
        if followers and sc.get("leader_peak_rss_mib"):
            rows.append(("scale: followers' peak RSS / leader's", "within 20%",
                         "%.2f-%.2fx" % (min(followers) / sc["leader_peak_rss_mib"],
                                         max(followers) / sc["leader_peak_rss_mib"]), "", "", ""))
        ra = sc.get("restart_all") or {}
        rows.append(("scale: restart-to-serve (%s)" % tag, "<= 10 s", f(ra.get("to_serve_s"), "%.2f", " s"),
                     "", "", ""))
        rows.append(("scale: failover (%s)" % tag, "<= 3 s",
                     f((sc.get("failover") or {}).get("first_ack_after_kill_s"), "%.2f", " s"), "", "", ""))
        rows.append(("scale: failover after that restart", "<= 3 s",
                     f((sc.get("failover_after_restart") or {}).get("first_ack_after_kill_s"), "%.2f", " s"),
                     "", "", ""))
        ro = sc.get("restart_one") or {}
        rows.append(("scale: 1 server restarted, stale read", "<= 5 s", f(ro.get("to_stale_read_s"), "%.2f", " s"),
                     "", "", ""))
        rows.append(("scale: 1 server restarted, caught up", "<= 10 s", f(ro.get("to_caught_up_s"), "%.2f", " s"),
                     "", "", ""))
        if sc.get("stopped_by"):
            rows.append(("scale: STOPPED at %d of %d by %s" % (sc["registered"], sc["requested"],
                                                              sc["stopped_by"]), "", "", "", "", ""))
    print()
    print("%-36s %-12s %-20s %-20s %-14s %-16s" % ("", "target", "berth", "etcd here", "etcd (issue)",
                                                   "libraft (issue)"))
    for r in rows:
        print("%-36s %-12s %-20s %-20s %-14s %-16s" % tuple(x or "" for x in r))
    ratios = {}
    if l1 and e1:
        ratios["one_at_a_time_throughput"] = l1["ops_per_s"] / e1["ops_per_s"]
        ratios["one_at_a_time_p50_latency"] = l1["p50_ms"] / e1["p50_ms"]
    if l64 and e64:
        ratios["64_in_flight_throughput"] = l64["ops_per_s"] / e64["ops_per_s"]
        ratios["64_in_flight_p50_latency"] = l64["p50_ms"] / e64["p50_ms"] if e64["p50_ms"] else None
    if side and cp.get("ops_per_s") and cp["clients"] >= 500:  # s and m are capped by their limit
        ratios["check_perf_%d_throughput" % cp["clients"]] = side["ops_per_s"] / cp["ops_per_s"]
    report["ratios_berth_over_etcd"] = {k: v and round(v, 3) for k, v in ratios.items()}
    if ratios:
        print("berth / etcd here: " + ", ".join("%s %s" % (k, "-" if v is None else "%.2fx" % v)
                                                for k, v in ratios.items()))
    if not etcd.get("runs"):
        print("(etcd here: not run%s. Issue figures: quoted, not measured here.)" % (
            ": " + etcd["error"] if etcd.get("error") else ""), flush=True)
        return
    last = etcd["runs"][-1]
    if etcd.get("driver") == etcd_bench.DRIVER_GRPC:
        how = ("with etcd-put (C++, gRPC's async API, one thread, %d connections at most, %d B keys, "
               "%d B values), driven as berth-bench drives berth" % (
                   max(r["connections"] for r in etcd["runs"]), last["key_bytes"], last["value_bytes"]))
    else:
        how = "through etcd's JSON gateway from python (etcd-put not built; %d B keys, %d B values)" % (
            last["key_bytes"], last["value_bytes"])
    print("(etcd here: this run, 3 members on 127.0.0.1, fsync on; 1 and 64 in flight %s, %s through "
          "etcdctl check perf (256 B keys, 1 KiB values). Issue figures: quoted, not measured here.)" % (
              how, cp.get("clients") or "-"), flush=True)


def tls_log_part(tmp, levels, report):
    """The log levels again, on a second 3-server cluster whose every
    connection is mutual TLS (berth tls makes the CA and certificates;
    berth-bench connects with the cli certificate), while the plain cluster
    keeps running idle.  Rows are tagged tls."""
    certs = os.path.join(tmp, "tls-certs")
    os.makedirs(certs)
    berth_bin = os.environ["BERTH_BIN"]
    for args in (["ca", "create"], ["cert", "create", "--server"], ["cert", "create", "--cli"]):
        subprocess.run([berth_bin, "tls"] + args, cwd=certs, check=True, capture_output=True)

    def files(role):
        return ["--tls-ca", certs + "/berth-agent-ca.pem",
                "--tls-cert", "%s/global-%s-berth.pem" % (certs, role),
                "--tls-key", "%s/global-%s-berth-key.pem" % (certs, role)]

    saved = {k: os.environ.get(k) for k in ("BERTH_CACERT", "BERTH_CLIENT_CERT", "BERTH_CLIENT_KEY")}
    os.environ.update(BERTH_CACERT=certs + "/berth-agent-ca.pem",
                      BERTH_CLIENT_CERT=certs + "/global-cli-berth.pem",
                      BERTH_CLIENT_KEY=certs + "/global-cli-berth-key.pem")
    tmp2 = os.path.join(tmp, "tls-cluster")
    os.makedirs(tmp2)
    c = bench_cluster(tmp2)
    for s in c.servers:
        s.argv += files("server")
    try:
        c.start()
        leader = c.leader() or c.wait_leader()
        print("TLS cluster in %s; leader %s: the log levels with mutual TLS" % (tmp2, leader.name),
              flush=True)
        print(HEADER, flush=True)
        for n in levels:
            r = run_bench(leader.address, "log", n, ARGS.duration, c.processes, leader,
                          extra=files("cli"))
            r["leader"] = leader.name
            r["tls"] = True
            report["runs"].append(r)
            print_row(r, leader.name)
    finally:
        c.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --- main --------------------------------------------------------------------

def main():
    for b in (BENCH, os.environ["BERTHD_BIN"], os.environ["BERTH_HOSTPATH_BIN"]):
        if not os.access(b, os.X_OK):
            sys.exit("run.py: %s is missing; build first (make bench)" % b)
    tmp = tempfile.mkdtemp(prefix="berth-bench-")
    report = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": os.uname().nodename,
              "cpus": os.cpu_count(), "raft_tick": float(ARGS.raft_tick),
              "duration_per_run_s": ARGS.duration, "snapshot_threshold": int(ARGS.snapshot_threshold),
              "loadavg_at_start": loadavg(), "runs": [], "failover": None,
              "fingerprint_interval": float(ARGS.fingerprint_interval), "argv": sys.argv[1:]}
    c = bench_cluster(tmp)
    try:
        c.start()
        leader = c.leader()
        print("cluster in %s; leader %s; load average %.1f (2 cores: >2 means others are busy "
              "and numbers are noisy)" % (tmp, leader.name, loadavg()), flush=True)
        print(HEADER, flush=True)
        levels = [int(x) for x in ARGS.log.split(",") if x] if "log" in ARGS.parts else []
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
                os.makedirs(RESULTS, exist_ok=True)
                with open(os.path.join(RESULTS, "perf-leader-log.txt"), "w") as f:
                    for sort in ("dso", "dso,sym"):
                        f.flush()
                        subprocess.run(["perf", "report", "-i", os.path.join(tmp, "perf.data"),
                                        "--stdio", "--no-children", "--sort", sort,
                                        "--percent-limit", "0.5"], stdout=f, stderr=subprocess.DEVNULL)
            r["leader"] = leader.name
            report["runs"].append(r)
            print_row(r, leader.name)

        if ARGS.tls and levels:
            tls_log_part(tmp, levels, report)

        if ARGS.etcd != "none" and "etcd" in ARGS.parts:
            # berth at check perf's concurrency for check perf's 60 s, right
            # before etcd (the machine's load drifts), then etcd.
            clients = {"s": 50, "m": 200, "l": 500, "xl": 1000}[ARGS.etcd]
            r = run_bench(leader.address, "log", clients, 60, c.processes, leader)
            r["leader"] = leader.name
            r["side_by_side"] = "etcd check perf --load=%s" % ARGS.etcd
            report["runs"].append(r)
            print_row(r, leader.name)
            try:
                report["etcd"] = etcd_bench.run(tmp, duration=ARGS.duration, load=ARGS.etcd,
                                                levels=(1, 64), log=lambda m: print(m, flush=True),
                                                etcd_put=ETCD_PUT)
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                report["etcd"] = {"error": str(e)}
                print("etcd side by side failed: %s" % e, flush=True)

        claim_levels = [int(x) for x in ARGS.claims.split(",") if x] if "claims" in ARGS.parts else []
        storm = ARGS.storm and "storm" in ARGS.parts
        if claim_levels or storm:
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
            if claim_levels:
                print(HEADER, flush=True)
            for n in claim_levels:
                r = run_bench(leader.address, "claims", n, ARGS.duration, c.processes, leader,
                              ["--volumes", str(ARGS.volumes)] + node_args)
                r["leader"] = leader.name
                report["runs"].append(r)
                print_row(r, leader.name)
                cycle_costs(r, leader.name)
            if claim_levels and ARGS.perf:
                # The largest level again under perf (not counted in the best:
                # perf takes CPU), recording the leader and client c1.
                n = claim_levels[-1]
                c1 = next(p for p in c.processes if p.name == "c1")
                p1 = next(p for p in c.processes if p.name == "plugin-c1")
                data = {who: os.path.join(tmp, "perf-%s.data" % who) for who in ("leader", "c1", "plugin-c1")}
                perfs = {"leader": perf_start(leader.proc.pid, data["leader"]),
                         "c1": perf_start(c1.proc.pid, data["c1"]),
                         "plugin-c1": perf_start(p1.proc.pid, data["plugin-c1"])}
                r = run_bench(leader.address, "claims", n, ARGS.duration, c.processes, leader,
                              ["--volumes", str(ARGS.volumes)] + node_args)
                for who, perf in perfs.items():
                    perf_stop(perf, data[who], os.path.join(RESULTS, "perf-%s-claims.txt" % who),
                              "perf record -g -F 499 of %s during claims %d in flight" % (who, n))
                r["leader"] = leader.name
                r["perf"] = True
                report["perf_claims_run"] = r
                print_row(r, leader.name)
                print("(that run under perf: bench/results/perf-leader-claims.txt, "
                      "bench/results/perf-c1-claims.txt, bench/results/perf-plugin-c1-claims.txt)",
                      flush=True)
            if storm:
                storm_part(c, tmp, leader, report)
            for p in list(c.processes):  # clients and plugins are not needed any more
                if not p.name.startswith("s"):
                    p.kill()
                    c.processes.remove(p)

        if (ARGS.failover or ARGS.failover_restarted) and "failover" in ARGS.parts:
            report["failover"] = {"raft_tick": float(ARGS.raft_tick)}
            # (a) One long-lived cluster: kill the leader, restart it, repeat.
            # (b) A fresh cluster per trial, where every server has already
            #     connected to every other one during bootstrap.
            for kind, count in (("restarted", ARGS.failover_restarted), ("fresh", ARGS.failover)):
                trials = []
                for i in range(count):
                    if kind == "restarted":
                        try:
                            t = failover_trial(c, tmp, i)
                        except RuntimeError as e:  # the killed server cannot come back
                            print("failover (restarted cluster): stopped: %s" % e, flush=True)
                            break
                    else:
                        fresh = bench_cluster(os.path.join(tmp, "fresh-%d" % i))
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

        if ARGS.scale and "scale" in ARGS.parts:
            c.stop()  # the scale workload has its own cluster; free the cores
            scale_run(tmp, report)
    finally:
        c.stop()
        with open("/proc/self/mounts") as f:
            for m in reversed([l.split()[1] for l in f if tmp in l.split()[1]]):
                subprocess.run(["umount", "-l", m], check=False)
        if not ARGS.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        try:
            summary(report)
        except Exception as e:  # a partial report still gets written
            print("summary failed: %r" % e)
        report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        report["loadavg_at_end"] = loadavg()
        os.makedirs(os.path.dirname(os.path.abspath(ARGS.report)), exist_ok=True)
        with open(ARGS.report, "w") as f:
            json.dump(report, f, indent=2)
        print("report: %s" % ARGS.report)


if __name__ == "__main__":
    main()
