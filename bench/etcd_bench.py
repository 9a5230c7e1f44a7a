"""etcd side by side with berth (bench/run.py --etcd): a 3-member etcd 3.4
cluster on 127.0.0.1 (Debian's etcd-server and etcd-client, installed if
missing), each member with its own data directory under the run's temporary
directory and its own client and peer ports, fsync on (etcd's default).

Measured:

- `etcdctl check perf --load=LOAD` against the leader's endpoint.  check
  perf (etcd 3.4, etcdctl/ctlv3/command/check.go) opens one gRPC client
  (connection) per simulated client, puts random 256-byte keys with 1 KiB
  values for 60 s through a rate limiter, and prints only throughput,
  slowest request and standard deviation:
      s: 50 clients, limit 150 puts/s     m: 200 clients, limit 1,000/s
      l: 500 clients, limit 8,000/s       xl: 1,000 clients, limit 15,000/s
  s and m are capped by their limit (they check a target, they do not find
  a maximum); l and xl are not reached on this machine, so they measure
  etcd's throughput with 500 (1,000) requests in flight.
- puts one at a time and with 64 in flight against the leader, for the
  p50 latency that check perf does not print, driven like berth-bench
  drives berth: by etcd-put (bench/etcd_put.cpp, built with the bench
  targets), compiled C++ on gRPC's async API, one thread keeping the puts
  in flight over 4 connections (1 at 1 in flight), 16-byte keys and 96-byte
  values (etcd's replicated entry is then 131 bytes, like berth's log
  entry).  Without the binary: the old path, Python threads through etcd's
  JSON gateway (POST /v3/kv/put on the client port, HTTP/1.1 keep-alive,
  one connection and one request in flight per thread, 20-byte keys,
  100-byte values), which costs etcd a JSON decode and an in-process gRPC
  hop and the machine a Python client.  Each run records its "driver".

Debian ships no etcd `benchmark` tool (dpkg -L etcd-client: etcdctl only).
"""

import base64
import http.client
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_installed():
    if shutil.which("etcd") and shutil.which("etcdctl"):
        return
    cmd = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "etcd-server", "etcd-client"]
    if os.geteuid() != 0:
        cmd = ["sudo"] + cmd
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                   env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))


def version():
    out = subprocess.run(["etcd", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"etcd Version: (\S+)", out)
    return m.group(1) if m else out.strip()


def cpu_seconds(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


def peak_rss_mib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            m = re.search(r"VmHWM:\s+(\d+) kB", f.read())
        return int(m.group(1)) / 1024 if m else None
    except OSError:
        return None


class EtcdCluster:
    def __init__(self, tmp, members=3):
        self.tmp = tmp
        os.makedirs(tmp, exist_ok=True)
        self.names = ["e%d" % (i + 1) for i in range(members)]
        self.client_ports = [free_port() for _ in self.names]
        self.peer_ports = [free_port() for _ in self.names]
        self.procs = []

    def endpoint(self, i):
        return "127.0.0.1:%d" % self.client_ports[i]

    @property
    def endpoints(self):
        return ",".join(self.endpoint(i) for i in range(len(self.names)))

    def start(self, timeout=60):
        initial = ",".join("%s=http://127.0.0.1:%d" % (n, p) for n, p in zip(self.names, self.peer_ports))
        for i, name in enumerate(self.names):
            argv = ["etcd", "--name", name, "--data-dir", os.path.join(self.tmp, name),
                    "--listen-client-urls", "http://127.0.0.1:%d" % self.client_ports[i],
                    "--advertise-client-urls", "http://127.0.0.1:%d" % self.client_ports[i],
                    "--listen-peer-urls", "http://127.0.0.1:%d" % self.peer_ports[i],
                    "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % self.peer_ports[i],
                    "--initial-cluster", initial, "--initial-cluster-state", "new",
                    "--initial-cluster-token", "berth-bench-%d" % os.getpid(),
                    "--logger", "zap", "--log-level", "warn"]
            log = open(os.path.join(self.tmp, name + ".log"), "a")
            self.procs.append(subprocess.Popen(argv, stdout=log, stderr=log))
            log.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.leader_index() is not None:
                return self
            time.sleep(0.2)
        raise RuntimeError("etcd cluster did not elect a leader within %ds (logs in %s)" % (timeout, self.tmp))

    def etcdctl(self, *args, endpoints=None, timeout=None):
        env = dict(os.environ, ETCDCTL_API="3")
        return subprocess.run(["etcdctl", "--endpoints", endpoints or self.endpoints] + list(args),
                              capture_output=True, text=True, env=env, timeout=timeout)

    def leader_index(self):
        r = self.etcdctl("endpoint", "status", "-w", "json", timeout=10)
        if r.returncode != 0:
            return None
        try:
            for st in json.loads(r.stdout):
                s = st["Status"]
                if s["leader"] and s["leader"] == s["header"]["member_id"]:
                    return self.client_ports.index(int(st["Endpoint"].rsplit(":", 1)[1]))
        except (ValueError, KeyError):
            return None
        return None

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def check_perf(cluster, load, endpoint):
    """etcdctl check perf; returns throughput, slowest, stddev, etcd CPU."""
    pids = [p.pid for p in cluster.procs]
    cpu0 = [cpu_seconds(p) for p in pids]
    t0 = time.time()
    r = cluster.etcdctl("check", "perf", "--load", load, endpoints=endpoint, timeout=300)
    wall = time.time() - t0
    out = r.stdout + r.stderr
    m = re.search(r"Throughput (?:is|too low:) (\d+) writes/s", out)
    slowest = re.search(r"[Ss]lowest request took(?: too long:)? ([\d.]+)s", out)
    stddev = re.search(r"Stddev (?:is|too high:) ([\d.]+)s", out)
    clients = {"s": 50, "m": 200, "l": 500, "xl": 1000}[load]
    return {"tool": "etcdctl check perf --load=%s" % load, "clients": clients,
            "limit_puts_per_s": {"s": 150, "m": 1000, "l": 8000, "xl": 15000}[load],
            "key_bytes": 256, "value_bytes": 1024, "seconds": 60,
            "ops_per_s": int(m.group(1)) if m else None,
            "slowest_ms": float(slowest.group(1)) * 1000 if slowest else None,
            "stddev_ms": float(stddev.group(1)) * 1000 if stddev else None,
            "exit_code": r.returncode,
            "etcd_cores": [round(((cpu_seconds(p) or 0) - (c or 0)) / wall, 2) for p, c in zip(pids, cpu0)],
            "etcd_peak_rss_mib": [peak_rss_mib(p) for p in pids],
            "output": [l for l in out.splitlines() if "PASS" in l or "FAIL" in l or "took" in l or "Stddev" in l]}


DRIVER_GRPC = "etcd-put (gRPC, C++)"
DRIVER_GATEWAY = "JSON gateway (python)"


def grpc_puts(binary, endpoint, concurrency, duration, pids=(), warmup=1.0):
    """Puts with etcd-put: `concurrency` in flight from one thread over
    min(4, concurrency) gRPC connections.  Adds etcd's cores (like
    check_perf) and the driver's CPU seconds."""
    cpu0 = [cpu_seconds(p) for p in pids]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    r = subprocess.run([binary, "--endpoints", endpoint, "--in-flight", str(concurrency),
                        "--duration", str(duration), "--warmup", str(warmup)],
                       capture_output=True, text=True, timeout=duration + warmup + 120)
    wall = time.time() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError("etcd-put failed (%d): %s %s" % (r.returncode, r.stdout, r.stderr))
    out = json.loads(r.stdout)
    out.update({"tool": "etcd-put KV.Put (gRPC async, C++)", "concurrency": concurrency,
                "client_cpu_seconds": round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 2),
                "etcd_cores": [round(((cpu_seconds(p) or 0) - (c or 0)) / wall, 2) for p, c in zip(pids, cpu0)]})
    return out


def gateway_puts(endpoint, concurrency, duration, warmup=1.0, value_bytes=100):
    """Puts through etcd's JSON gateway, `concurrency` threads each with one
    keep-alive connection and one request in flight."""
    host, port = endpoint.rsplit(":", 1)
    value = base64.b64encode(b"v" * value_bytes).decode()
    start = time.time()
    measure_from = start + warmup
    stop_at = measure_from + duration
    lat, errors, lock = [], [0], threading.Lock()

    def worker(slot):
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        n = 0
        mine = []
        while True:
            t0 = time.time()
            if t0 >= stop_at:
                break
            key = base64.b64encode(("bench-%05d-%08d" % (slot, n)).encode()).decode()
            body = json.dumps({"key": key, "value": value})
            try:
                conn.request("POST", "/v3/kv/put", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
            t1 = time.time()
            if not ok:
                with lock:
                    errors[0] += 1
                continue
            n += 1
            if t0 >= measure_from:
                mine.append(t1 - t0)
        with lock:
            lat.extend(mine)
        conn.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat.sort()
    pct = lambda p: 1000 * lat[min(len(lat) - 1, int(p * len(lat)))] if lat else None
    return {"tool": "JSON gateway POST /v3/kv/put (python)", "driver": DRIVER_GATEWAY,
            "concurrency": concurrency,
            "ops": len(lat), "errors": errors[0], "seconds": duration,
            "ops_per_s": round(len(lat) / duration, 1), "p50_ms": pct(0.5), "p99_ms": pct(0.99),
            "max_ms": 1000 * lat[-1] if lat else None, "key_bytes": 20, "value_bytes": value_bytes}


def run(tmp, duration=10, load="l", levels=(1, 64), log=print, etcd_put=None):
    """Starts etcd, measures, stops it (always).  Returns the report part.
    `etcd_put`: the etcd-put binary; the JSON gateway path if it is not
    there."""
    ensure_installed()
    grpc = bool(etcd_put) and os.access(etcd_put, os.X_OK)
    out = {"version": version(), "members": 3, "fsync": "on (etcd default)", "runs": [],
           "driver": DRIVER_GRPC if grpc else DRIVER_GATEWAY}
    c = EtcdCluster(os.path.join(tmp, "etcd"))
    try:
        c.start()
        leader = c.endpoint(c.leader_index())
        out["leader_endpoint"] = leader
        log("etcd %s: 3 members on 127.0.0.1 (%s), leader %s" % (out["version"], c.endpoints, leader))
        if not grpc:
            log("etcd: %s not built, puts through the JSON gateway from python" % (etcd_put or "etcd-put"))
        for n in levels:
            if grpc:
                r = grpc_puts(etcd_put, leader, n, duration, pids=[p.pid for p in c.procs])
                how = "etcd-put: gRPC, C++, %d connections, %d B keys, %d B values; etcd cores %s" % (
                    r["connections"], r["key_bytes"], r["value_bytes"], r["etcd_cores"])
            else:
                r = gateway_puts(leader, n, duration)
                how = "JSON gateway puts, python client"
            out["runs"].append(r)
            log("etcd   %5d %8.1f %7.2f %7.2f %7.1f %5d   (%s)" % (
                n, r["ops_per_s"], r["p50_ms"] or 0, r["p99_ms"] or 0, r["max_ms"] or 0, r["errors"], how))
        r = check_perf(c, load, leader)
        out["check_perf"] = r
        log("etcd   %5d %8s %7s %7s %7.1f %5s   (etcdctl check perf --load=%s: 60 s, 256 B keys, 1 KiB "
            "values; exit %d; etcd cores %s)" % (
                r["clients"], r["ops_per_s"], "-", "-", r["slowest_ms"] or 0, "-", load, r["exit_code"],
                r["etcd_cores"]))
    finally:
        c.stop()
    return out
