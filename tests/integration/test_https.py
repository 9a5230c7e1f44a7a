"""The HTTP port serves HTTPS when TLS is configured (issue 13), real
berthd processes on 127.0.0.1 with a CA and certificates made by `berth
tls`: /metrics, a JSON view and the web UI over HTTPS verified against the
CA; the event stream delivers an event made after it was opened; plain HTTP
to the port gets a 400 naming HTTPS and no metrics; the loopback HTTP
server behind the front answers nobody else; a connection that sends
nothing is closed after the handshake deadline and does not hold up others,
one beyond the connection limit is closed at once;
with --tls-verify-http-client a request without a client certificate is
refused and one with a certificate of the CA is served."""

import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from cluster import Process, free_port
from harness import BERTH, BERTHD, Agent, listening
from test_tls import cli_env, make_certificates, run, tls_args

PROMETHEUS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                              "prometheus")
PROMETHEUS = shutil.which("prometheus")
VOLUME = {"plugin_id": "hostpath", "capabilities": [
    {"access_mode": "single-node-writer", "attachment_mode": "file-system"}]}


def context(certs, client_cert=None):
    """A client context trusting only the cluster's CA (hostname checked:
    the certificates hold 127.0.0.1), with `client_cert` (a role) if given."""
    ctx = ssl.create_default_context(cafile=certs + "/berth-agent-ca.pem")
    if client_cert:
        ctx.load_cert_chain("%s/global-%s-berth.pem" % (certs, client_cert),
                            "%s/global-%s-berth-key.pem" % (certs, client_cert))
    return ctx


def get(port, path, ctx, timeout=10):
    """(status, body) of GET https://127.0.0.1:PORT/PATH."""
    try:
        with urllib.request.urlopen("https://127.0.0.1:%d%s" % (port, path), timeout=timeout,
                                    context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def listening_ports(pid):
    """The TCP ports process PID listens on (from /proc)."""
    return {port for _, port in listening(pid)}


def wait_until(condition, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


class HttpsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="berth-https-")
        cls.agent = cls.strict = None
        try:
            cls.certs, cls.other = make_certificates(cls.tmp)
            cls.agent = Agent(os.path.join(cls.tmp, "dev"),
                              extra_args=tls_args(cls.certs, "server")).start()
            cls.strict = Agent(os.path.join(cls.tmp, "strict"),
                               extra_args=tls_args(cls.certs, "server") +
                               ["--tls-verify-http-client"]).start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for a in (cls.agent, cls.strict):
            if a:
                a.kill()
        with open("/proc/self/mounts") as f:
            for m in reversed([l.split()[1] for l in f if cls.tmp in l.split()[1]]):
                subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def b(self, *args, stdin=None):
        r = run([BERTH, "--address", self.agent.address, "--timeout", "30"] + list(args),
                env=cli_env(self.certs), stdin=stdin)
        self.assertEqual(r.returncode, 0, "%s\n%s" % (r.stdout, r.stderr))
        return r

    def test_metrics_a_view_and_the_ui_over_https_verified_against_the_ca(self):
        self.assertIn("(HTTPS)", self.agent.banner)
        port = self.agent.metrics_port
        status, text = get(port, "/metrics", context(self.certs))
        self.assertEqual(status, 200)
        self.assertIn("# TYPE berth_", text)
        status, body = get(port, "/v1/status", context(self.certs))
        self.assertEqual(status, 200, body)
        self.assertIn("node_name", json.loads(body))
        status, page = get(port, "/ui/", context(self.certs))
        self.assertEqual(status, 200)
        self.assertIn("<html", page.lower())
        # TLS 1.2 is enough; older is refused.
        ctx = context(self.certs)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        self.assertEqual(get(port, "/metrics", ctx)[0], 200)
        # It is the cluster's CA that vouches for the port: a client that
        # trusts only another CA refuses it.
        with self.assertRaises(urllib.error.URLError) as e:
            get(port, "/metrics", ssl.create_default_context(
                cafile=self.other + "/berth-agent-ca.pem"))
        self.assertIsInstance(e.exception.reason, ssl.SSLCertVerificationError)

    def test_the_event_stream_delivers_an_event_made_after_it_opened(self):
        conn = http.client.HTTPSConnection("127.0.0.1", self.agent.metrics_port, timeout=15,
                                           context=context(self.certs))
        try:
            conn.request("GET", "/v1/event/stream?topic=volume")
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.getheader("Content-Type"), "application/x-ndjson")
            # Only now is the volume made: its event must come through the
            # open response, not at its end.
            self.b("volume", "create", "-", stdin=json.dumps(dict(VOLUME, id="https-ev")))
            deadline = time.time() + 30
            seen = []
            while time.time() < deadline:
                line = r.readline()
                self.assertTrue(line, "the stream ended")
                seen.append(line)
                if b"https-ev" in line:
                    break
            else:
                self.fail("no event of volume https-ev in %r" % seen)
        finally:
            conn.close()

    def test_plain_http_to_the_https_port_gets_a_400_and_no_metrics(self):
        with socket.create_connection(("127.0.0.1", self.agent.metrics_port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                answer += chunk
        text = answer.decode()
        self.assertTrue(text.startswith("HTTP/1.1 400 "), text)
        self.assertIn("this port serves HTTPS", text)
        self.assertNotIn("berth_", text)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.agent.metrics_port,
                                   timeout=10)
        self.assertEqual(e.exception.code, 400)

    def test_the_loopback_http_server_behind_the_front_answers_nobody_else(self):
        ports = listening_ports(self.agent.proc.pid) - {self.agent.port, self.agent.metrics_port}
        answered = []
        for port in ports:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                            timeout=5) as r:
                    self.fail("port %d served /metrics: %d" % (port, r.status))
            except urllib.error.HTTPError as e:
                answered.append((e.code, e.read().decode()))
            except (urllib.error.URLError, ConnectionError, http.client.HTTPException):
                pass  # the raft or another non-HTTP port
        self.assertIn(403, [code for code, _ in answered], ports)
        self.assertIn("internal HTTP port", [b for c, b in answered if c == 403][0])

    def test_silent_connections_are_closed_and_hold_up_no_one_within_the_limit(self):
        port = self.agent.metrics_port
        silent = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(10)]
        try:
            start = time.time()
            self.assertEqual(get(port, "/metrics", context(self.certs))[0], 200)
            self.assertLess(time.time() - start, 5)
            # Up to the limit (64 connections at once); the one beyond is
            # closed at once, long before the handshake deadline.
            silent += [socket.create_connection(("127.0.0.1", port), timeout=30)
                       for _ in range(54)]
            with socket.create_connection(("127.0.0.1", port), timeout=5) as beyond:
                self.assertEqual(beyond.recv(1), b"")
            self.assertLess(time.time() - start, 5)
            # The handshake deadline (10 s) closes them all, and the port
            # serves again.
            for s in silent:
                self.assertEqual(s.recv(1), b"")
            self.assertLess(time.time() - start, 20)
            self.assertEqual(get(port, "/metrics", context(self.certs))[0], 200)
        finally:
            for s in silent:
                s.close()

    def test_verify_http_client_refuses_a_request_without_a_client_certificate(self):
        port = self.strict.metrics_port
        with self.assertRaises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            get(port, "/metrics", context(self.certs))
        # A certificate of another CA: refused too.
        ctx = context(self.certs)
        ctx.load_cert_chain(self.other + "/global-cli-berth.pem",
                            self.other + "/global-cli-berth-key.pem")
        with self.assertRaises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            get(port, "/metrics", ctx)
        for role in ("cli", "client"):
            status, text = get(port, "/metrics", context(self.certs, role))
            self.assertEqual(status, 200, role)
            self.assertIn("# TYPE berth_", text)
        # Without the option a client certificate is verified when given.
        status, _ = get(self.agent.metrics_port, "/metrics", context(self.certs, "cli"))
        self.assertEqual(status, 200)
        with self.assertRaises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
            get(self.agent.metrics_port, "/metrics", ctx)

    @unittest.skipUnless(PROMETHEUS, "the prometheus binary is missing (scripts/install-deps.sh)")
    def test_prometheus_scrapes_over_https_with_deploys_tls_config(self):
        """deploy/prometheus/prometheus-tls.yml, its addresses and files
        replaced by this test's: the servers job (CA, server_name, a cli
        certificate) scrapes both dev agents, the strict one included; the
        clients job scrapes a berthd --client."""
        client = Process("c1", [
            BERTHD, "--client", "--name", "c1", "--data-dir", os.path.join(self.tmp, "c1"),
            "--servers", self.agent.address, "--metrics-port", "0"] +
            tls_args(self.certs, "client"), os.path.join(self.tmp, "c1.log")).start()
        prom = None
        try:
            client_port = int(re.search(r"metrics on 127\.0\.0\.1:(\d+) \(HTTPS\)",
                                        client.banner).group(1))
            with open(os.path.join(PROMETHEUS_DIR, "prometheus-tls.yml")) as f:
                config = f.read()
            targets = {"10.77.0.11:4746": self.agent.metrics_port,
                       "10.77.0.12:4746": self.strict.metrics_port,
                       "10.77.0.13:4746": self.agent.metrics_port,
                       "10.77.0.21:4746": client_port, "10.77.0.22:4746": client_port}
            for old, port in targets.items():
                self.assertIn(old, config)
                config = config.replace(old, "127.0.0.1:%d" % port)
            config = config.replace("/etc/berth/tls/", self.certs + "/")
            config = config.replace("scrape_interval: 15s", "scrape_interval: 1s")
            config = config.replace("- rules.yml", "- " + os.path.join(PROMETHEUS_DIR, "rules.yml"))
            path = os.path.join(self.tmp, "prometheus.yml")
            with open(path, "w") as f:
                f.write(config)
            port = free_port()
            log = open(os.path.join(self.tmp, "prometheus.log"), "w")
            prom = subprocess.Popen(
                [PROMETHEUS, "--config.file=" + path,
                 "--storage.tsdb.path=" + os.path.join(self.tmp, "tsdb"),
                 "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"],
                stdout=log, stderr=log)
            log.close()

            def targets_up():
                try:
                    url = "http://127.0.0.1:%d/api/v1/targets?state=active" % port
                    with urllib.request.urlopen(url, timeout=5) as r:
                        active = json.loads(r.read().decode())["data"]["activeTargets"]
                except OSError:
                    return None
                health = {(t["labels"]["job"], t["labels"]["name"]): (t["health"], t["lastError"])
                          for t in active}
                self.last_health = health
                return len(health) == 5 and all(h == "up" for h, _ in health.values())
            self.last_health = None
            try:
                wait_until(targets_up, "every target up", timeout=60)
            except AssertionError:
                with open(os.path.join(self.tmp, "prometheus.log")) as f:
                    self.fail("targets: %s\nprometheus: %s" % (self.last_health, f.read()[-2000:]))
        finally:
            if prom:
                prom.kill()
                prom.wait(timeout=10)
            client.kill()

    def test_verify_http_client_without_tls_is_refused(self):
        r = run([BERTHD, "--dev", "--data-dir", os.path.join(self.tmp, "bad"),
                 "--tls-verify-http-client"])
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("--tls-verify-http-client needs --tls-ca", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
