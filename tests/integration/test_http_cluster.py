"""The shell's commands over HTTP (issue 30) on 3 servers with --acl and TLS
and a real client, every request sent to a follower's HTTPS port as curl or
a script would send it: the ACL bootstrap, a policy and a token made over
HTTP; requests without a token refused (403); the whole claim cycle (a
volume created, an alloc run that writes it, a claim that wakes a blocking
query, its release, expand,
availability, eligibility, gc, deregister); a retried alloc run with the same
Idempotency-Key applied once, a retried create answered as it is; every
error class (400, 403, 404, 409, 413, 415, and 503 once the follower has no
leader); the state saved over HTTP."""

import json
import os
import ssl
import threading
import time
import unittest
import urllib.error
import urllib.request

from test_tls import TlsCluster, TlsShell

SPEC = {"id": "web", "plugin_id": "hostpath", "capacity_min": 1048576,
        "capabilities": [{"access_mode": "single-node-writer",
                          "attachment_mode": "file-system"}],
        "secrets": {"token": "http-cluster-secret"}}
READER = 'namespace "default" { policy = "read" }\nnode { policy = "read" }\n'
BOOT = {"accessor_id": "6f1f3c5e-6d2b-4d53-9f0e-0a6f2b7c1d01",
        "secret_id": "0b9c7a52-1e4f-4c8e-a3d2-5e6f7a8b9c0d"}


def metrics_port(server):
    """The metrics (HTTPS) port of a server, from the banner it printed."""
    return int(server.banner.split("metrics on 127.0.0.1:")[1].split()[0].rstrip(",)"))


class HttpClusterTest(TlsShell, unittest.TestCase):
    def setUp(self):
        self.tls = TlsCluster("berth-http-cluster-", server_args=("--acl",))
        self.addCleanup(self.tls.stop)
        self.cluster = self.tls.cluster
        self.ctx = ssl.create_default_context(cafile=self.tls.certs + "/berth-agent-ca.pem")

    def http(self, method, path, body=None, token=None, headers=None, raw=False, via=None):
        """(status, answer, headers): JSON unless raw, then the bytes."""
        h = dict(headers or {})
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        if token:
            h["Authorization"] = "Bearer " + token
        req = urllib.request.Request("https://127.0.0.1:%d%s" % (via or self.port, path),
                                     data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=120, context=self.ctx) as r:
                out = r.read()
                return r.status, (out if raw else json.loads(out.decode())), dict(r.headers)
        except urllib.error.HTTPError as e:
            out = e.read()
            return e.code, json.loads(out.decode()), dict(e.headers)

    def ok(self, method, path, body=None, token=None, headers=None):
        status, answer, _ = self.http(method, path, body, token or self.mgmt, headers)
        self.assertEqual(status, 200, (method, path, answer))
        return answer

    def test_the_shells_commands_over_https_through_a_follower(self):
        leader = self.cluster.wait_leader()
        follower = next(s for s in self.cluster.servers if s is not leader)
        self.port = metrics_port(follower)
        self.mgmt = None

        # The bootstrap over HTTP, without a token; sent again with the
        # same ids it answers the token it made (a lost answer is safe).
        status, boot, _ = self.http("POST", "/v1/acl/bootstrap", BOOT)
        self.assertEqual(status, 200, boot)
        self.assertEqual(boot["secret_id"], BOOT["secret_id"])
        self.assertEqual(boot["type"], "management")
        status, again, _ = self.http("POST", "/v1/acl/bootstrap", BOOT)
        self.assertEqual((status, again["accessor_id"]), (200, BOOT["accessor_id"]), again)
        self.mgmt = BOOT["secret_id"]
        status, _, _ = self.http("POST", "/v1/acl/bootstrap", {})
        self.assertEqual(status, 409)  # bootstrapped already
        # A key alone cannot make a token retry-safe.
        status, body, _ = self.http("POST", "/v1/acl/token", {"name": "x"}, self.mgmt,
                                    {"Idempotency-Key": "k"})
        self.assertEqual(status, 400, body)
        self.assertIn("accessor_id", body["error"])

        # Without a token: refused, and nothing changed.
        for method, path, body in (("GET", "/v1/volumes", None),
                                   ("POST", "/v1/volume/create", SPEC),
                                   ("POST", "/v1/system/gc", {})):
            status, answer, _ = self.http(method, path, body)
            self.assertEqual(status, 403, (path, answer))
            self.assertIn("token", answer["error"])
        self.assertEqual(self.ok("GET", "/v1/volumes"), [])

        # A policy and a token carrying it.
        self.ok("POST", "/v1/acl/policy", {"name": "reader", "rules": READER,
                                           "description": "reads"})
        self.assertEqual([p["name"] for p in self.ok("GET", "/v1/acl/policies")], ["reader"])
        self.assertIn("node", self.ok("GET", "/v1/acl/policy?name=reader")["rules"])
        reader = self.ok("POST", "/v1/acl/token", {"name": "r", "policies": ["reader"]})
        self.assertTrue(reader["secret_id"])
        tokens = self.ok("GET", "/v1/acl/tokens")
        self.assertEqual(len(tokens), 2)
        self.assertFalse(any("secret_id" in t for t in tokens))
        self.assertEqual(self.ok("GET", "/v1/acl/token/self", token=reader["secret_id"])["name"],
                         "r")
        self.assertEqual(self.ok("GET", "/v1/acl/token?id=" + reader["accessor_id"])["policies"],
                         ["reader"])

        # The client and its plugin.
        shared = os.path.join(self.tls.tmp, "storage")
        os.environ["BERTH_TOKEN"] = self.mgmt  # the helpers' shells
        self.tls.add_client("c1", shared)
        self.poll(lambda: self.nodes_healthy(leader.address) == 1, "the client's plugin healthy",
                  timeout=60)

        # Create; a retry of the same spec answers the volume as it is.
        made = self.ok("POST", "/v1/volume/create", SPEC)
        self.assertEqual((made["id"], made["plugin_id"]), ("web", "hostpath"))
        self.assertNotIn("http-cluster-secret", json.dumps(made))
        again = self.ok("POST", "/v1/volume/create", SPEC)
        self.assertIn("exists already", again["message"])
        status, body, _ = self.http("POST", "/v1/volume/create",
                                    dict(SPEC, plugin_id="other"), self.mgmt)
        self.assertEqual(status, 409, body)
        self.assertIn("exists already with plugin 'hostpath'", body["error"])

        # An alloc run sent twice with one Idempotency-Key: one alloc.
        run = {"node": "c1", "volumes": ["data=web"],
               "command": ["sh", "-c", 'echo "$BERTH_ALLOC_ID" > "$BERTH_VOLUME_DATA/f"']}
        key = {"Idempotency-Key": "nightly-backup-1"}
        first = self.ok("POST", "/v1/alloc/run", run, headers=key)
        second = self.ok("POST", "/v1/alloc/run", run, headers=key)
        self.assertEqual(first["id"], second["id"])
        self.assertEqual([a["id"] for a in self.ok("GET", "/v1/allocs")], [first["id"]])
        self.poll(lambda: self.ok("GET", "/v1/alloc?id=" + first["id"])["state"] == "complete",
                  "the alloc complete", timeout=60)
        self.poll(lambda: self.ok("GET", "/v1/volume?id=web")["claims"] == [],
                  "its claim released", timeout=60)

        # A blocking query through the follower: held at the volume's index,
        # a claim wakes it with a higher one; with nothing to wake it, it
        # ends with its wait, unchanged.
        _, vol, headers = self.http("GET", "/v1/volume/csi/web", token=self.mgmt)
        index = int(headers["X-Nomad-Index"])
        answers = []
        held = threading.Thread(target=lambda: answers.append(self.http(
            "GET", "/v1/volume/csi/web?index=%d&wait=120s" % index, token=self.mgmt)))
        held.start()
        claim = {"id": "web", "alloc": "w-1", "node": "c1"}
        self.assertTrue(self.ok("POST", "/v1/volume/claim", claim)["published_path"])
        held.join(timeout=90)
        self.assertFalse(held.is_alive(), "the blocking query was not woken by the claim")
        status, woken, headers = answers[0]
        self.assertEqual((status, woken["WriteAllocs"]), (200, {"w-1": None}), woken)
        self.assertGreater(int(headers["X-Nomad-Index"]), index)
        now = int(headers["X-Nomad-Index"])
        started = time.time()
        status, same, headers = self.http("GET", "/v1/volume/csi/web?index=%d&wait=1s" % now,
                                          token=self.mgmt)
        self.assertEqual((status, int(headers["X-Nomad-Index"])), (200, now), same)
        self.assertGreaterEqual(time.time() - started, 0.9)  # it waited, then answered

        # The claim made over HTTP; a second writer is refused (409); the reader
        # token reads but cannot claim (403).
        status, body, _ = self.http("POST", "/v1/volume/claim", dict(claim, alloc="w-2"),
                                    self.mgmt)
        self.assertEqual(status, 409, body)
        status, body, _ = self.http("POST", "/v1/volume/claim", dict(claim, alloc="w-3"),
                                    reader["secret_id"])
        self.assertEqual(status, 403, body)
        self.assertEqual(self.ok("GET", "/v1/volume?id=web", token=reader["secret_id"])["id"],
                         "web")
        self.ok("POST", "/v1/volume/release", {"id": "web", "alloc": "w-1"})
        self.poll(lambda: self.ok("GET", "/v1/volume?id=web")["claims"] == [], "w-1 released",
                  timeout=60)

        # The event stream through the follower, in Nomad's frames: the two
        # claims taken and freed; refused without a token.
        until = int(self.http("GET", "/v1/volume/csi/web", token=self.mgmt)[2]["X-Nomad-Index"])
        status, raw, _ = self.http("GET", "/v1/event/stream?topic=CSIVolume:web&until_index=%d"
                                   % until, token=self.mgmt, raw=True)
        self.assertEqual(status, 200)
        frames = [json.loads(line) for line in raw.decode().splitlines() if line]
        claims = [(e["Payload"]["Claim"]["AllocationID"], e["Payload"]["Claim"]["State"])
                  for f in frames for e in f["Events"] if e["Type"] == "CSIVolumeClaim"]
        for alloc in (first["id"], "w-1"):
            self.assertIn((alloc, "taken"), claims)
            self.assertIn((alloc, "freed"), claims)
        self.assertNotIn("http-cluster-secret", raw.decode())
        status, body, _ = self.http("GET", "/v1/event/stream?topic=CSIVolume&until_index=1")
        self.assertEqual(status, 403, body)

        # The follower's log lines: for an agent-reading token only.
        req = urllib.request.Request("https://127.0.0.1:%d/v1/agent/monitor?plain=true&lines=1"
                                     % self.port, headers={"X-Nomad-Token": self.mgmt})
        with urllib.request.urlopen(req, timeout=60, context=self.ctx) as r:
            self.assertTrue(r.readline().strip())
        req = urllib.request.Request("https://127.0.0.1:%d/v1/agent/monitor" % self.port,
                                     headers={"X-Nomad-Token": reader["secret_id"]})
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=60, context=self.ctx)
        self.assertEqual(refused.exception.code, 403)

        # Expand, availability, eligibility, gc.
        grown = self.ok("POST", "/v1/volume/expand", {"id": "web", "size": "2MiB"})
        self.assertEqual(grown["capacity_min"], 2 * 1048576, grown)
        self.ok("POST", "/v1/volume/availability", {"id": "web", "availability": "pause"})
        status, body, _ = self.http("POST", "/v1/volume/claim", claim, self.mgmt)
        self.assertEqual(status, 409, body)
        self.ok("POST", "/v1/volume/availability", {"id": "web", "availability": "active"})
        self.assertIn("message", self.ok("POST", "/v1/node/eligibility",
                                         {"id": "c1", "eligible": False}))
        self.assertFalse(self.ok("GET", "/v1/node?id=c1")["eligible"])
        self.ok("POST", "/v1/node/eligibility", {"id": "c1", "eligible": True})
        self.ok("PUT", "/v1/system/gc")
        self.ok("POST", "/v1/system/gc", {})

        # Bad input changes nothing (400); an unknown volume is 404; no
        # JSON is 415; a body too large is 413.
        for body in ({"id": "web", "size": "big"}, {"id": "web"}, {"id": "web", "size": 5,
                                                                      "extra": 1}):
            status, answer, _ = self.http("POST", "/v1/volume/expand", body, self.mgmt)
            self.assertEqual(status, 400, (body, answer))
        self.assertEqual(self.ok("GET", "/v1/volume?id=web")["capacity_min"], 2 * 1048576)
        status, _, _ = self.http("POST", "/v1/volume/expand", {"id": "nope", "size": "1GiB"},
                                 self.mgmt)
        self.assertEqual(status, 404)
        status, _, _ = self.http("POST", "/v1/volume/deregister", b'{"id": "web"}', self.mgmt,
                                 {"Content-Type": "text/plain"})
        self.assertEqual(status, 415)
        status, _, _ = self.http("POST", "/v1/volume/deregister",
                                 json.dumps({"id": "x" * 70000}).encode(), self.mgmt)
        self.assertEqual(status, 413)

        # The state saved over HTTP: the bytes and their index.
        status, snap, headers = self.http("GET", "/v1/operator/snapshot", token=self.mgmt,
                                          raw=True)
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "application/octet-stream")
        self.assertGreater(int(headers["X-Berth-Snapshot-Index"]), 0)
        self.assertGreater(len(snap), 0)

        # Deregister; a retry is the same answer (the volume is gone).
        gone = self.ok("POST", "/v1/volume/deregister", {"id": "web"})
        self.assertTrue(gone["deregistered"])
        self.assertEqual(self.ok("GET", "/v1/volumes"), [])

        # The follower without a leader: 503, naming it.
        for s in self.cluster.servers:
            if s is not follower:
                s.kill()
        status, body, _ = self.http("GET", "/v1/volumes", token=self.mgmt)
        self.assertEqual(status, 503, body)
        self.assertTrue(body["error"])


if __name__ == "__main__":
    unittest.main()
