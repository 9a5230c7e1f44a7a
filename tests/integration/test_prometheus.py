"""A real Prometheus server scrapes a 3-server, 1-client cluster every second
with deploy/prometheus/rules.yml loaded; after a claim, its query API shows
the claim on the leader, the healthy plugin and the replicated log, and every
alerting rule evaluates without error against the real series."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Client, Cluster, Plugin, free_port  # noqa: E402
from harness import berth  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RULES = os.path.join(REPO, "deploy", "prometheus", "rules.yml")
PROMETHEUS = shutil.which("prometheus") or (
    "/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None)


def metrics_port(process):
    return int(re.search(r"metrics on 127\.0\.0\.1:(\d+)", process.banner).group(1))


@unittest.skipIf(PROMETHEUS is None,
                 "the prometheus binary is missing (scripts/install-deps.sh installs the Debian "
                 "package prometheus)")
class PrometheusTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-prom-")
        self.prom = None
        self.cluster = Cluster(self.tmp)
        try:
            self.cluster.start()
            self.plugin = Plugin(self.tmp, "plugin-c1", "csi-c1").start()
            self.cluster.processes.append(self.plugin)
            self.client = Client(self.tmp, "c1", [s.address for s in self.cluster.servers],
                                 self.plugin.socket).start()
            self.cluster.processes.append(self.client)
        except BaseException:
            self.tearDown()
            raise

    def tearDown(self):
        if self.prom is not None and self.prom.poll() is None:
            self.prom.kill()
            self.prom.wait(timeout=10)
        self.cluster.stop()
        with open("/proc/self/mounts") as f:
            for m in reversed([l.split()[1] for l in f if l.split()[1].startswith(self.tmp)]):
                subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_prometheus(self, servers, clients):
        config = os.path.join(self.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n")
            f.write("rule_files: [%s]\n" % json.dumps(RULES))
            f.write("scrape_configs:\n")
            for job, targets in (("berth-servers", servers), ("berth-clients", clients)):
                f.write("  - job_name: %s\n    scrape_interval: 1s\n    static_configs:\n" % job)
                f.write("      - targets: %s\n" % json.dumps(targets))
        self.port = free_port()
        log = open(os.path.join(self.tmp, "prometheus.log"), "w")
        self.prom = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + config,
             "--storage.tsdb.path=" + os.path.join(self.tmp, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=log, stderr=log)
        log.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            self.assertIsNone(self.prom.poll(), "prometheus exited: " + self.prom_log())
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port,
                                            timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.fail("prometheus not ready within 30s: " + self.prom_log())

    def prom_log(self):
        with open(os.path.join(self.tmp, "prometheus.log")) as f:
            return f.read()[-3000:]

    def api(self, path, **params):
        url = "http://127.0.0.1:%d/api/v1/%s?%s" % (self.port, path,
                                                   urllib.parse.urlencode(params))
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read().decode())
        self.assertEqual(body["status"], "success", body)
        return body["data"]

    def query(self, expr):
        """[(labels, value)] of an instant vector."""
        data = self.api("query", query=expr)
        self.assertEqual(data["resultType"], "vector", data)
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def eventually(self, what, check, timeout=30):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = check()
            if last is True:
                return
            time.sleep(0.5)
        self.fail("%s: not within %ss; last: %s" % (what, timeout, last))

    def test_prometheus_scrapes_the_cluster(self):
        started = time.time()
        # The plugin becomes healthy, a volume is created and claimed for writing.
        deadline = time.time() + 20
        while True:
            r = berth(self.cluster.any_address(), "--json", "plugin", "status", "hostpath")
            if r.code == 0 and r.json()["nodes_healthy"] == 1:
                break
            self.assertLess(time.time(), deadline, "the plugin never became healthy: %s" % r)
            time.sleep(0.1)
        spec = {"id": "db", "plugin_id": "hostpath", "capabilities": [
            {"access_mode": "single-node-writer", "attachment_mode": "file-system"}]}
        r = berth(self.cluster.any_address(), "--timeout", "20", "volume", "create", "-",
                  stdin=json.dumps(spec))
        self.assertEqual(r.code, 0, r)
        r = berth(self.cluster.any_address(), "--timeout", "20", "volume", "claim", "db",
                  "--alloc", "a1", "--node", "c1")
        self.assertEqual(r.code, 0, r)
        leader = self.cluster.leader()
        self.assertIsNotNone(leader)
        leader_target = "127.0.0.1:%d" % metrics_port(leader)

        servers = ["127.0.0.1:%d" % metrics_port(s) for s in self.cluster.servers]
        clients = ["127.0.0.1:%d" % metrics_port(self.client)]
        self.start_prometheus(servers, clients)

        def all_up():
            up = self.query("count(up == 1)")
            return True if up and up[0][1] == 4 else self.query("up")
        self.eventually("every target up", all_up)

        def claim_on_leader():
            got = self.query('berth_claims{mode="write",state="taken"}')
            ones = [m["instance"] for m, v in got if v == 1]
            return True if ones == [leader_target] else got
        self.eventually("the write claim, on the leader only", claim_on_leader)

        def plugin_healthy():
            got = self.query('berth_plugin_nodes_healthy{plugin="hostpath"}')
            return True if [v for m, v in got if m["instance"] == leader_target] == [1] else got
        self.eventually("hostpath healthy on one node", plugin_healthy)
        expected = self.query('berth_plugin_nodes_expected{plugin="hostpath",instance="%s"}'
                              % leader_target)
        self.assertEqual([v for _, v in expected], [1])

        def log_written():
            got = self.query("max(berth_log_last_index) > 0")
            # Every server has the log, so each reports an index.
            per_server = self.query('berth_log_last_index{job="berth-servers"} > 0')
            return True if got and len(per_server) == 3 else (got, per_server)
        self.eventually("a log index on every server", log_written)
        volumes = self.query('berth_volumes{state="claimed",instance="%s"}' % leader_target)
        self.assertEqual([v for _, v in volumes], [1])

        # Every alerting rule of rules.yml evaluates against these series.
        def rules_evaluated():
            groups = self.api("rules")["groups"]
            rules = [r for g in groups for r in g["rules"]]
            if not rules or any(r.get("lastEvaluation", "").startswith("0001") for r in rules):
                return rules
            bad = [(r["name"], r.get("health"), r.get("lastError")) for r in rules
                   if r.get("health") != "ok"]
            return True if not bad else bad
        self.eventually("rules.yml evaluated without errors", rules_evaluated)
        firing = self.query('ALERTS{alertstate="firing"}')
        self.assertEqual(firing, [], "a healthy cluster fires no alert")
        print("prometheus test took %.1fs" % (time.time() - started), file=sys.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
