"""Nomad's CSI read endpoints and the OpenAPI document (issue 30, first part)
end to end: a berthd --dev agent driving a berth-hostpath of the test's own,
asked over HTTP the way Nomad's clients ask (paths, query parameters,
X-Nomad-* headers, Nomad's field names), after volumes were made and claimed
through the real shell.  With --acl: no token is refused, X-Nomad-Token and
Authorization: Bearer are taken.  /v1/openapi.json names every path served,
and every path it names answers."""

import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

from cluster import Plugin
from harness import Agent, berth, undo_mounts

SECRET = "hunter2-http-api"
CAPS = [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}]
SCALE = float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))


def spec(vid, **more):
    d = {"id": vid, "plugin_id": "hostpath", "capabilities": CAPS, "capacity_min": 1048576,
         "secrets": {"token": SECRET}}
    d.update(more)
    return json.dumps(d)


def get(agent, path, headers=None, method="GET", body=None):
    """(status, body as JSON, headers) of one request to the metrics port."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (agent.metrics_port, path),
                                 method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(req, timeout=90) as r:
            return r.status, json.loads(r.read().decode()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode()), dict(e.headers)


def wait(cond, what, timeout=60):
    deadline = time.time() + timeout * SCALE
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError("never: " + what)


def start_dev(owner, prefix):
    """A berthd --dev agent driving a berth-hostpath of its own, in a new
    temporary directory, set on `owner` (tmp, plugin, agent), once its
    plugin is healthy; `stop_dev` ends them."""
    owner.tmp = tempfile.mkdtemp(prefix=prefix)
    owner.plugin = Plugin(owner.tmp, "hp", "csi-dev").start()
    owner.agent = Agent(os.path.join(owner.tmp, "data"),
                        extra_args=["--plugin", "hostpath=monolith:" + owner.plugin.socket])
    owner.agent.start()

    def healthy():
        r = berth(owner.agent, "--json", "plugin", "status", "hostpath")
        return r.code == 0 and r.json()["controllers_healthy"] == 1
    wait(healthy, "the plugin healthy")
    owner.node = berth(owner.agent, "--json", "node", "status").json()[0]["id"]


def stop_dev(owner):
    owner.agent.kill()
    owner.plugin.kill()
    undo_mounts(owner.tmp)
    shutil.rmtree(owner.tmp, ignore_errors=True)


class NomadApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        start_dev(cls, "berth-http-api-")
        try:
            for vid in ("db", "logs", "cache"):
                r = berth(cls.agent, "volume", "create", "-", stdin=spec(vid))
                assert r.code == 0, r
            r = berth(cls.agent, "volume", "claim", "db", "--alloc", "web-1", "--node", cls.node)
            assert r.code == 0, r
        except BaseException:
            stop_dev(cls)
            raise

    @classmethod
    def tearDownClass(cls):
        stop_dev(cls)

    def test_volume_list_is_nomads_with_its_filters_pages_and_headers(self):
        status, body, headers = get(self.agent, "/v1/volumes?type=csi")
        self.assertEqual(status, 200, body)
        self.assertEqual([v["ID"] for v in body], ["cache", "db", "logs"])
        db = next(v for v in body if v["ID"] == "db")
        self.assertEqual(list(db), [
            "ID", "Namespace", "Name", "ExternalID", "Topologies", "AccessMode", "AttachmentMode",
            "CurrentReaders", "CurrentWriters", "Schedulable", "PluginID", "Provider",
            "ControllerRequired", "ControllersHealthy", "ControllersExpected", "NodesHealthy",
            "NodesExpected", "ResourceExhausted", "CreateIndex", "ModifyIndex"])
        self.assertEqual((db["AccessMode"], db["AttachmentMode"], db["CurrentWriters"]),
                         ("single-node-writer", "file-system", 1))
        self.assertEqual((db["PluginID"], db["Schedulable"], db["ControllersHealthy"],
                          db["NodesHealthy"]), ("hostpath", True, 1, 1))
        idle = next(v for v in body if v["ID"] == "logs")
        self.assertEqual((idle["AccessMode"], idle["CurrentWriters"]), ("", 0))
        # The index is the highest modify index read; the leader answered.
        self.assertEqual(int(headers["X-Nomad-Index"]), max(v["ModifyIndex"] for v in body))
        self.assertEqual(headers["X-Nomad-KnownLeader"], "true")
        self.assertEqual(headers["X-Nomad-LastContact"], "0")
        self.assertNotIn("X-Nomad-NextToken", headers)

        # Pages: X-Nomad-NextToken names the next one, until the last.
        seen, token = [], ""
        for _ in range(5):
            status, page, h = get(self.agent, "/v1/volumes?type=csi&per_page=2" +
                                  ("&next_token=" + token if token else ""))
            self.assertEqual(status, 200, page)
            self.assertLessEqual(len(page), 2)
            seen += [v["ID"] for v in page]
            token = h.get("X-Nomad-NextToken", "")
            if not token:
                break
        self.assertEqual(seen, ["cache", "db", "logs"])
        # Filters by prefix: of the volume, the plugin, the node holding a claim.
        self.assertEqual([v["ID"] for v in get(self.agent, "/v1/volumes?type=csi&prefix=c")[1]],
                         ["cache"])
        self.assertEqual(get(self.agent, "/v1/volumes?type=csi&plugin_id=nope")[1], [])
        self.assertEqual(len(get(self.agent, "/v1/volumes?type=csi&plugin_id=host")[1]), 3)
        self.assertEqual([v["ID"] for v in
                          get(self.agent, "/v1/volumes?type=csi&node_id=" + self.node)[1]], ["db"])
        self.assertEqual(get(self.agent, "/v1/volumes?type=csi&namespace=other")[1], [])
        self.assertEqual(len(get(self.agent, "/v1/volumes?type=csi&namespace=*")[1]), 3)
        # Nomad's filter expression over the stubs' fields, before the page is cut.
        q = urllib.parse.quote
        self.assertEqual([v["ID"] for v in get(self.agent, "/v1/volumes?type=csi&filter=" +
                                                q('CurrentWriters == 1'))[1]], ["db"])
        self.assertEqual([v["ID"] for v in get(self.agent, "/v1/volumes?type=csi&filter=" +
                                                q('ID != "db" and PluginID == "hostpath"') +
                                                "&per_page=1")[1]], ["cache"])
        status, body, _ = get(self.agent, "/v1/volumes?type=csi&filter=" + q("ID =="))
        self.assertEqual(status, 400, body)
        self.assertIn("filter", body["error"])
        # Bad input: a clear error, as JSON, naming the parameter.
        status, body, _ = get(self.agent, "/v1/volumes?type=csi&per_page=many")
        self.assertEqual(status, 400)
        self.assertIn("per_page", body["error"])
        status, body, _ = get(self.agent, "/v1/volumes?type=host")
        self.assertEqual(status, 400)
        self.assertIn("'csi'", body["error"])
        # Without type: berth's own shape, as before.
        status, body, _ = get(self.agent, "/v1/volumes")
        self.assertEqual((status, sorted(v["id"] for v in body)), (200, ["cache", "db", "logs"]))

    def test_volume_read_is_nomads_and_carries_no_secret(self):
        status, v, headers = get(self.agent, "/v1/volume/csi/db")
        self.assertEqual(status, 200, v)
        self.assertEqual((v["ID"], v["Namespace"], v["PluginID"]), ("db", "default", "hostpath"))
        self.assertEqual(v["WriteAllocs"], {"web-1": None})
        self.assertEqual(v["ReadAllocs"], {})
        self.assertEqual(v["RequestedCapabilities"],
                         [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}])
        self.assertIsNone(v["Secrets"])
        self.assertEqual(v["Capacity"], 1048576)
        self.assertTrue(v["ExternalID"])
        self.assertEqual(v["Provider"], "berth-hostpath")
        self.assertEqual(int(headers["X-Nomad-Index"]), v["ModifyIndex"])
        self.assertNotIn(SECRET, json.dumps(v))
        status, body, _ = get(self.agent, "/v1/volume/csi/nosuch")
        self.assertEqual(status, 404)
        self.assertIn("nosuch", body["error"])
        status, body, _ = get(self.agent, "/v1/volume/csi/db?namespace=other")
        self.assertEqual(status, 404)
        self.assertEqual(get(self.agent, "/v1/volume/csi/")[0], 404)  # no id: no such path

    def test_plugins_and_status_are_nomads(self):
        status, plugins, headers = get(self.agent, "/v1/plugins?type=csi")
        self.assertEqual(status, 200, plugins)
        self.assertEqual([(p["ID"], p["ControllersHealthy"], p["NodesHealthy"]) for p in plugins],
                         [("hostpath", 1, 1)])
        self.assertIn("X-Nomad-Index", headers)
        status, p, _ = get(self.agent, "/v1/plugin/csi/hostpath")
        self.assertEqual(status, 200, p)
        self.assertEqual(list(p["Controllers"]), [self.node])
        self.assertEqual(list(p["Nodes"]), [self.node])
        ctrl = p["Controllers"][self.node]
        self.assertTrue(ctrl["Healthy"])
        self.assertTrue(ctrl["ControllerInfo"]["SupportsCreateDeleteSnapshot"])
        self.assertEqual(p["Nodes"][self.node]["NodeInfo"]["ID"], "csi-dev")
        self.assertEqual(get(self.agent, "/v1/plugin/csi/nosuch")[0], 404)
        status, leader, _ = get(self.agent, "/v1/status/leader")
        self.assertEqual(status, 200)
        self.assertRegex(leader, r"^127\.0\.0\.1:\d+$")
        status, peers, _ = get(self.agent, "/v1/status/peers")
        self.assertEqual((status, peers), (200, [leader]))

    def test_the_agents_log_lines_stream_as_text_and_as_nomads_frames(self):
        """GET /v1/agent/monitor: berth monitor over HTTP (Nomad's path)."""
        base = "http://127.0.0.1:%d/v1/agent/monitor" % self.agent.metrics_port
        with urllib.request.urlopen(base + "?plain=true&lines=5&log_level=debug",
                                    timeout=60) as r:
            self.assertEqual(r.status, 200)
            self.assertTrue(r.headers["Content-Type"].startswith("text/plain"))
            first = r.readline().decode()
            self.assertTrue(first.strip(), first)
        with urllib.request.urlopen(base + "?lines=3", timeout=60) as r:
            frame = json.loads(r.readline().decode())
            text = base64.b64decode(frame["Data"]).decode()
            self.assertTrue(text.endswith("\n"), text)
            self.assertLessEqual(len(text.splitlines()), 3)
            self.assertNotIn(SECRET, text)
        for query, word in (("log_level=loud", "log_level"), ("lines=x", "lines"),
                            ("plain=yes", "plain"), ("colour=red", "colour"),
                            ("node_id=no-such-node", "no-such-node")):
            try:
                with urllib.request.urlopen(base + "?" + query, timeout=60) as r:
                    self.fail("%s answered %d" % (query, r.status))
            except urllib.error.HTTPError as e:
                self.assertIn(e.code, (400, 404), query)
                self.assertIn(word, json.loads(e.read().decode())["error"], query)

    def test_the_openapi_document_names_every_path_and_every_path_answers(self):
        status, doc, _ = get(self.agent, "/v1/openapi.json")
        self.assertEqual(status, 200)
        self.assertTrue(doc["openapi"].startswith("3."))
        # A real validator (swagger-parser, from the npm registry: tools.npm).
        tools = os.environ.get("BERTH_NPM_TOOLS", "")
        self.assertTrue(tools and os.path.isdir(os.path.join(tools, "node_modules")),
                        "BERTH_NPM_TOOLS names no installed tools; run "
                        "scripts/npm-tools.sh DIR and set BERTH_NPM_TOOLS=DIR")
        doc_file = os.path.join(self.tmp, "openapi.json")
        with open(doc_file, "w") as f:
            json.dump(doc, f)
        here = os.path.dirname(os.path.abspath(__file__))
        check = subprocess.run(["node", os.path.join(here, "..", "tools", "validate-openapi.js"),
                                doc_file], capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, NODE_PATH=os.path.join(tools, "node_modules")))
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        paths = doc["paths"]
        for p in ("/v1/volumes", "/v1/volume/csi/{id}", "/v1/plugins", "/v1/plugin/csi/{id}",
                  "/v1/status/leader", "/v1/status/peers", "/v1/openapi.json", "/v1/event/stream",
                  "/v1/agent/monitor", "/v1/plugin/fingerprint",
                  "/v1/status", "/v1/volume", "/v1/plugin", "/v1/nodes", "/v1/node", "/v1/allocs",
                  "/v1/alloc", "/v1/raft/peers", "/v1/alloc/stop", "/v1/volume/detach",
                  "/v1/node/drain", "/v1/volume/register", "/v1/volume/create",
                  "/v1/volume/deregister", "/v1/volume/delete", "/v1/volume/expand",
                  "/v1/volume/modify", "/v1/volume/availability", "/v1/volume/snapshot/create",
                  "/v1/volume/snapshot/delete", "/v1/volume/snapshots", "/v1/alloc/run",
                  "/v1/node/eligibility", "/v1/acl/bootstrap", "/v1/acl/policies",
                  "/v1/acl/policy", "/v1/acl/policy/delete", "/v1/acl/token", "/v1/acl/tokens",
                  "/v1/acl/token/self", "/v1/acl/token/delete", "/v1/operator/snapshot",
                  "/v1/raft/remove-peer", "/v1/raft/transfer-leadership", "/v1/system/gc",
                  "/v1/volumes/external"):
            self.assertIn(p, paths)
        self.assertIn("type=csi", paths["/v1/volumes"]["get"]["summary"])
        self.assertIn("id", [p["name"] for p in paths["/v1/volume/csi/{id}"]["get"]["parameters"]
                             if p["in"] == "path"])
        # Every documented GET answers, none with "no such path" (404 only
        # for an object that is not there), with its required parameters.
        for path, ops in paths.items():
            if "get" not in ops or path in ("/v1/event/stream", "/v1/agent/monitor"):
                continue
            concrete = path.replace("{id}", "db" if "volume" in path else "hostpath")
            query = []
            for prm in ops["get"]["parameters"]:
                if prm["in"] == "query" and prm.get("required"):
                    query.append("%s=%s" % (prm["name"], {"/v1/plugin": "hostpath",
                                                          "/v1/volumes/external": "hostpath",
                                                          "/v1/node": self.node,
                                                          "/v1/alloc": "web-1"}.get(path, "db")))
            url = concrete + ("?" + "&".join(query) if query else "")
            if path == "/v1/operator/snapshot":  # the state's bytes, not JSON
                with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.agent.metrics_port,
                                                                      url), timeout=60) as r:
                    self.assertEqual(r.status, 200)
                    self.assertTrue(r.read())
                continue
            status, body, _ = get(self.agent, url)
            if path.startswith("/v1/acl/"):  # this agent has no --acl: the rules refuse
                self.assertEqual(status, 409, (url, body))
                self.assertIn("ACLs are off", body["error"])
                continue
            self.assertEqual(status, 200, (url, body))
        # Every documented POST is a path the server knows (a GET of it is 405).
        for path, ops in paths.items():
            if "post" in ops and "get" not in ops:
                self.assertEqual(get(self.agent, path)[0], 405, path)


class WritesAndBlockingTest(unittest.TestCase):
    """Each test with a dev agent of its own: a claim and its release with
    curl's requests; Nomad's blocking queries (?index=N&wait=D) on the CSI
    reads (a query held at the current index is answered once a claim
    changes the volume, with a higher index; one with nothing to wake it is
    answered when its wait ends, unchanged); Nomad's volume and snapshot
    writes."""

    def setUp(self):
        start_dev(self, "berth-http-block-")
        self.addCleanup(stop_dev, self)
        self.assertEqual(berth(self.agent, "volume", "create", "-", stdin=spec("db")).code, 0)

    def test_a_claim_and_its_release_over_http(self):
        json_post = {"Content-Type": "application/json"}
        status, body, _ = get(self.agent, "/v1/volume/claim", json_post, "POST",
                              {"id": "db", "alloc": "web-1", "node": self.node})
        self.assertEqual(status, 200, body)
        self.assertTrue(os.path.isdir(body["published_path"]), body)
        self.assertEqual([(c["alloc_id"], c["state"]) for c in body["claims"]],
                         [("web-1", "taken")])
        # The shell sees the same claim; a second writer is refused (409).
        self.assertEqual(berth(self.agent, "--json", "volume", "status", "db").json()["claims"][0]
                         ["alloc_id"], "web-1")
        status, body, _ = get(self.agent, "/v1/volume/claim", json_post, "POST",
                              {"id": "db", "alloc": "web-2", "node": self.node})
        self.assertEqual(status, 409, body)
        status, body, _ = get(self.agent, "/v1/volume/claim", json_post, "POST", {"id": "db"})
        self.assertEqual(status, 400)
        self.assertIn("alloc", body["error"])
        status, body, _ = get(self.agent, "/v1/volume/claim", json_post, "POST",
                              {"id": "db", "alloc": "web-3", "node": self.node,
                               "access_mode": "rw"})
        self.assertEqual(status, 400)
        status, body, _ = get(self.agent, "/v1/volume/release", json_post, "POST",
                              {"id": "db", "alloc": "web-1"})
        self.assertEqual(status, 200, body)
        wait(lambda: get(self.agent, "/v1/volume?id=db")[1]["claims"] == [], "the claim freed")

    def test_nomads_event_stream(self):
        """GET /v1/event/stream asked as Nomad's clients ask (Nomad's topics,
        Topic:key, or X-Nomad-Token): Nomad's frames {Index, Events[]},
        the backlog first; berth's own lines otherwise."""
        json_post = {"Content-Type": "application/json"}
        status, body, _ = get(self.agent, "/v1/volume/claim", json_post, "POST",
                              {"id": "db", "alloc": "web-1", "node": self.node})
        self.assertEqual(status, 200, body)
        status, body, _ = get(self.agent, "/v1/volume/release", json_post, "POST",
                              {"id": "db", "alloc": "web-1"})
        self.assertEqual(status, 200, body)
        wait(lambda: get(self.agent, "/v1/volume?id=db")[1]["claims"] == [], "the claim freed")
        until = int(get(self.agent, "/v1/volume/csi/db")[2]["X-Nomad-Index"])

        def stream(query, headers=None):
            url = "http://127.0.0.1:%d/v1/event/stream?%s" % (self.agent.metrics_port, query)
            req = urllib.request.Request(url, headers=headers or {})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    text = r.read().decode()
                    return r.status, r.headers.get("Content-Type"), [json.loads(line) for line in
                                                                    text.splitlines() if line]
            except urllib.error.HTTPError as e:
                return e.code, None, json.loads(e.read().decode())

        status, ctype, frames = stream("topic=CSIVolume:db&until_index=%d" % until)
        self.assertEqual((status, ctype), (200, "application/json"), frames)
        self.assertTrue(frames)
        events = [e for f in frames for e in f["Events"]]
        for f in frames:
            self.assertEqual(sorted(f), ["Events", "Index"])
            self.assertTrue(all(e["Index"] == f["Index"] for e in f["Events"]), f)
        self.assertEqual([f["Index"] for f in frames], sorted({f["Index"] for f in frames}))
        self.assertEqual({e["Topic"] for e in events}, {"CSIVolume"})
        self.assertEqual({e["Key"] for e in events}, {"db"})
        self.assertEqual(events[0]["Type"], "CSIVolumeRegistered")
        self.assertEqual(events[0]["Payload"]["Volume"]["PluginID"], "hostpath")
        self.assertIsNone(events[0]["Payload"]["Volume"]["Secrets"])
        claims = [e["Payload"]["Claim"] for e in events if e["Type"] == "CSIVolumeClaim"]
        self.assertEqual(claims[0]["AllocationID"], "web-1")
        self.assertEqual(claims[0]["State"], "taken")
        self.assertEqual(claims[-1]["State"], "freed")
        self.assertNotIn(SECRET, json.dumps(frames))

        # A key that is a FilterKey (the claim's alloc); Node alone.
        _, _, by_alloc = stream("topic=CSIVolume:web-1&until_index=%d" % until)
        self.assertEqual({e["Type"] for f in by_alloc for e in f["Events"]}, {"CSIVolumeClaim"})
        _, _, nodes = stream("topic=Node&until_index=%d" % until)
        node_events = [e for f in nodes for e in f["Events"]]
        self.assertTrue(node_events)
        self.assertEqual({e["Topic"] for e in node_events}, {"Node"})
        self.assertIn(self.node, {e["Payload"]["Node"]["ID"] for e in node_events})

        # X-Nomad-Token and no topic: every topic, Nomad's frames.
        _, _, every = stream("until_index=%d" % until, {"X-Nomad-Token": "anything"})
        self.assertTrue({"CSIVolume", "CSIPlugin", "Node"} <=
                        {e["Topic"] for f in every for e in f["Events"]}, every)
        # Nomad's topics berth has no events of: nothing but the end.
        status, _, none = stream("topic=Job:web&topic=Evaluation&until_index=%d" % until)
        self.assertEqual((status, none), (200, []))
        status, _, body = stream("topic=Bogus:x")
        self.assertEqual(status, 400)
        self.assertIn("'Bogus'", body["error"])
        # berth's own stream is unchanged: one berth event per line.
        status, ctype, lines = stream("index=1&topic=volume&until_index=%d" % until)
        self.assertEqual((status, ctype), (200, "application/x-ndjson"))
        self.assertEqual(lines[0]["topic"], "volume")
        self.assertEqual(lines[0]["key"], "db")

    def test_a_blocking_query_wakes_on_a_change_and_ends_with_its_wait(self):
        status, v, headers = get(self.agent, "/v1/volume/csi/db")
        self.assertEqual((status, v["WriteAllocs"]), (200, {}))
        index = int(headers["X-Nomad-Index"])
        answers = []
        held = threading.Thread(target=lambda: answers.append(
            get(self.agent, "/v1/volume/csi/db?index=%d&wait=120s" % index)))
        held.start()
        # The claim is made while the query is held (or before it reached
        # the server: either way its index is past the one asked for).
        r = berth(self.agent, "volume", "claim", "db", "--alloc", "web-1", "--node", self.node)
        self.assertEqual(r.code, 0, r)
        held.join(timeout=90 * SCALE)
        self.assertFalse(held.is_alive(), "the blocking query was not woken by the claim")
        status, v, headers = answers[0]
        self.assertEqual(status, 200, v)
        self.assertEqual(v["WriteAllocs"], {"web-1": None})
        self.assertGreater(int(headers["X-Nomad-Index"]), index)

        # The list blocks too; with nothing to wake it, it ends with its wait.
        status, vols, headers = get(self.agent, "/v1/volumes?type=csi")
        now = int(headers["X-Nomad-Index"])
        started = time.time()
        status, again, headers = get(self.agent, "/v1/volumes?type=csi&index=%d&wait=1s" % now)
        self.assertEqual(status, 200, again)
        self.assertGreaterEqual(time.time() - started, 0.9)  # it waited, then answered
        self.assertEqual(int(headers["X-Nomad-Index"]), now)
        self.assertEqual(again, vols)
        # An index already passed is answered at once; bad ones are named.
        self.assertEqual(get(self.agent, "/v1/volumes?type=csi&index=1&wait=5m")[1], vols)
        status, body, _ = get(self.agent, "/v1/volumes?type=csi&index=abc")
        self.assertEqual(status, 400)
        self.assertIn("Invalid index", body["error"])
        status, body, _ = get(self.agent, "/v1/volume/csi/db?index=3&wait=soon")
        self.assertEqual(status, 400)
        self.assertIn("Invalid wait time", body["error"])

    def test_nomads_writes_create_register_detach_deregister_delete(self):
        caps = [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}]
        outputs = []
        # Create: CreateVolume through the plugin, answered with the volume.
        status, body, headers = get(self.agent, "/v1/volume/csi/web/create", method="PUT", body={
            "Volumes": [{"ID": "web", "Name": "web data", "PluginID": "hostpath",
                         "RequestedCapabilities": caps, "RequestedCapacityMin": 1048576,
                         "Secrets": {"token": SECRET}}]})
        outputs.append(json.dumps(body))
        self.assertEqual(status, 200, body)
        made = body["Volumes"][0]
        self.assertEqual((made["ID"], made["Name"], made["PluginID"]),
                         ("web", "web data", "hostpath"))
        self.assertTrue(made["ExternalID"])
        self.assertIsNone(made["Secrets"])
        self.assertGreater(int(headers["X-Nomad-Index"]), 0)
        shown = berth(self.agent, "--json", "volume", "status", "web").json()
        self.assertEqual(shown["external_id"], made["ExternalID"])
        self.assertIn("CreateVolume", [c["method"] for c in self.calls()])

        # Register: an existing volume by its ExternalID (Nomad's body, any case).
        status, body, _ = get(self.agent, "/v1/volume/csi/ignored", method="PUT", body={
            "volumes": [{"id": "ext", "pluginID": "hostpath", "externalId": made["ExternalID"],
                         "requestedCapabilities": caps, "Topologies": [{"foo": "bar"}]}],
            "PolicyOverride": False})
        outputs.append(json.dumps(body))
        self.assertEqual(status, 200, body)
        self.assertEqual(body["Volumes"][0]["ID"], "ext")
        self.assertEqual(get(self.agent, "/v1/volume/csi/ext")[0], 200)

        # Bad input: a clear error naming Nomad's field; nothing registered.
        status, body, _ = get(self.agent, "/v1/volume/csi/bad", method="PUT", body={
            "Volumes": [{"ID": "bad", "PluginID": "hostpath", "ExternalID": "x",
                         "RequestedCapabilities": [{"AccessMode": "rw",
                                                    "AttachmentMode": "file-system"}]}]})
        self.assertEqual(status, 400, body)
        self.assertIn("RequestedCapabilities[0].AccessMode", body["error"])
        self.assertEqual(get(self.agent, "/v1/volume/csi/bad")[0], 404)
        self.assertEqual(get(self.agent, "/v1/volume/csi/bad", method="PUT", body={"Volumes": []})[0],
                         400)
        self.assertEqual(get(self.agent, "/v1/volume/csi/bad", method="PUT", body={"Nope": 1})[0],
                         400)

        # Detach needs its node; deregister takes force=true|false only.
        status, body, _ = get(self.agent, "/v1/volume/csi/ext/detach", method="DELETE")
        self.assertEqual(status, 400)
        self.assertIn("node", body["error"])
        status, body, _ = get(self.agent, "/v1/volume/csi/ext/detach?node=" + self.node,
                              method="DELETE")
        self.assertEqual(status, 200, body)
        self.assertEqual(get(self.agent, "/v1/volume/csi/ext?force=maybe", method="DELETE")[0], 400)
        status, body, _ = get(self.agent, "/v1/volume/csi/ext", method="DELETE")
        self.assertEqual(status, 200, body)
        self.assertEqual(get(self.agent, "/v1/volume/csi/ext")[0], 404)

        # Delete: DeleteVolume through the plugin, then gone.
        status, body, _ = get(self.agent, "/v1/volume/csi/web/delete", method="DELETE")
        self.assertEqual(status, 200, body)
        self.assertEqual(get(self.agent, "/v1/volume/csi/web")[0], 404)
        self.assertIn("DeleteVolume", [c["method"] for c in self.calls()])
        for text in outputs:
            self.assertNotIn(SECRET, text)

    def test_nomads_snapshot_endpoints(self):
        status, body, _ = get(self.agent, "/v1/volumes/snapshot", method="PUT", body={
            "Snapshots": [{"SourceVolumeID": "db", "Name": "nightly",
                           "Secrets": {"token": SECRET}, "Parameters": {"label": "x"}}]})
        self.assertEqual(status, 200, body)
        snap = body["Snapshots"][0]
        self.assertEqual((snap["SourceVolumeID"], snap["Name"], snap["PluginID"]),
                         ("db", "nightly", "hostpath"))
        self.assertTrue(snap["ID"] and snap["IsReady"])
        self.assertIsNone(snap["Secrets"])
        # A retry of the same body finds the same snapshot (Name is the key); POST too.
        status, again, _ = get(self.agent, "/v1/volumes/snapshot", method="POST", body={
            "Snapshots": [{"SourceVolumeID": "db", "Name": "nightly",
                           "Parameters": {"label": "x"}}]},
            headers={"Content-Type": "application/json"})
        self.assertEqual(status, 200, again)
        self.assertEqual(again["Snapshots"][0]["ID"], snap["ID"])
        # A POST that is not JSON (a form another site's page could post) is refused.
        self.assertEqual(get(self.agent, "/v1/volumes/snapshot", method="POST", body={
            "Snapshots": [{"SourceVolumeID": "db", "Name": "other"}]})[0], 415)
        status, listed, _ = get(self.agent, "/v1/volumes/snapshot?plugin_id=hostpath",
                                {"X-Nomad-CSI-Secrets": "token=" + SECRET})
        self.assertEqual(status, 200, listed)
        self.assertEqual([s["ID"] for s in listed["Snapshots"]], [snap["ID"]])
        self.assertEqual(listed["Snapshots"][0]["ExternalSourceVolumeID"],
                         get(self.agent, "/v1/volume/csi/db")[1]["ExternalID"])
        # Bad input names what is wrong, never a secret's text.
        status, body, _ = get(self.agent, "/v1/volumes/snapshot?plugin_id=hostpath",
                              {"X-Nomad-CSI-Secrets": "token=a," + SECRET})
        self.assertEqual(status, 400)
        self.assertIn("pair 2", body["error"])
        self.assertNotIn(SECRET, body["error"])
        self.assertEqual(get(self.agent, "/v1/volumes/snapshot?plugin_id=hostpath",
                             method="DELETE")[0], 400)  # no snapshot_id
        self.assertEqual(get(self.agent, "/v1/volumes/snapshot", method="PUT",
                             body={"Snapshots": [{"Name": "x"}]})[0], 400)
        # Delete, twice: the second says it was gone already.
        path = "/v1/volumes/snapshot?plugin_id=hostpath&snapshot_id=" + snap["ID"]
        status, body, _ = get(self.agent, path, {"X-Nomad-CSI-Secrets": "token=" + SECRET},
                              method="DELETE")
        self.assertEqual(status, 200, body)
        self.assertIn("deleted (DeleteSnapshot)", body["message"])
        status, body, _ = get(self.agent, path, method="DELETE")
        self.assertIn("already deleted", body["message"])
        self.assertEqual(get(self.agent, "/v1/volumes/snapshot?plugin_id=hostpath")[1],
                         {"Snapshots": []})

    def test_the_shells_other_commands(self):
        """Register, create --count, modify, snapshot create/list/delete with
        an Idempotency-Key, alloc run --explain and --group, the state saved
        and restored, delete."""
        j = {"Content-Type": "application/json"}
        post = lambda path, body, headers=None: get(self.agent, path, dict(j, **(headers or {})),
                                                    "POST", body)
        # A volume made, deregistered (its storage stays) and registered
        # again from its spec with the storage's external id.
        status, made, _ = post("/v1/volume/create", json.loads(spec("db-alias")))
        self.assertEqual(status, 200, made)
        status, body, _ = post("/v1/volume/deregister", {"id": "db-alias"})
        self.assertEqual((status, body["deregistered"]), (200, True), body)
        status, body, _ = post("/v1/volume/register",
                               json.loads(spec("db-alias", external_id=made["external_id"])))
        self.assertEqual(status, 200, body)
        self.assertEqual(body["external_id"], made["external_id"])
        status, body, _ = post("/v1/volume/register", {"id": "bad", "plugin_id": "hostpath"})
        self.assertEqual(status, 400, body)
        self.assertIn("capabilities", body["error"])
        # create ?count=2: the members, each made once.
        status, body, _ = post("/v1/volume/create?count=2", json.loads(spec("shard")))
        self.assertEqual(status, 200, body)
        self.assertEqual([v["id"] for v in body], ["shard[0]", "shard[1]"])
        status, again, _ = post("/v1/volume/create?count=2", json.loads(spec("shard")))
        self.assertEqual([v["external_id"] for v in again], [v["external_id"] for v in body])
        self.assertEqual(post("/v1/volume/create?count=0", json.loads(spec("s")))[0], 400)
        # modify: the plugin takes the parameters, the volume records them.
        status, body, _ = post("/v1/volume/modify", {"id": "db", "parameters": {"iops": "500"}})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["mutable_parameters"], {"iops": "500"}, body)
        self.assertEqual(post("/v1/volume/modify", {"id": "db", "parameters": ["iops"]})[0], 400)
        # A snapshot sent twice with one key: one snapshot.
        key = {"Idempotency-Key": "snap-7"}
        status, first, _ = post("/v1/volume/snapshot/create", {"volume": "db"}, key)
        self.assertEqual(status, 200, first)
        status, second, _ = post("/v1/volume/snapshot/create", {"volume": "db"}, key)
        self.assertEqual(second["id"], first["id"])
        status, listed, _ = get(self.agent, "/v1/volume/snapshots?plugin=hostpath",
                                {"X-Nomad-CSI-Secrets": "token=" + SECRET})
        self.assertEqual([x["id"] for x in listed["snapshots"]], [first["id"]])
        status, body, _ = post("/v1/volume/snapshot/delete",
                               {"plugin": "hostpath", "snapshot_id": first["id"]})
        self.assertEqual(status, 200, body)
        self.assertEqual(get(self.agent, "/v1/volume/snapshots?plugin=hostpath")[1]["snapshots"],
                         [])
        # alloc run --explain places without running; a group of two runs two.
        status, body, _ = post("/v1/alloc/run", {"volumes": ["data=db"], "explain": True})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["chosen"], self.node)
        self.assertEqual(get(self.agent, "/v1/allocs")[1], [])
        status, body, _ = post("/v1/alloc/run", {"group": "g", "count": 2, "per_alloc": True,
                                                 "volumes": ["data=shard"]})
        self.assertEqual(status, 200, body)
        self.assertEqual(sorted(a["id"] for a in body["allocs"]), ["g[0]", "g[1]"])
        self.assertEqual(post("/v1/alloc/run", {"volumes": "data=db"})[0], 400)
        for a in ("g[0]", "g[1]"):
            self.assertEqual(post("/v1/alloc/stop", {"id": a})[0], 200)
        # The state saved, a volume deregistered, the state restored: it is back.
        url = "http://127.0.0.1:%d/v1/operator/snapshot" % self.agent.metrics_port
        with urllib.request.urlopen(url, timeout=60) as r:
            saved = r.read()
        self.assertEqual(post("/v1/volume/deregister", {"id": "db-alias"})[0], 200)
        self.assertEqual(get(self.agent, "/v1/volume?id=db-alias")[0], 404)
        req = urllib.request.Request(url, data=saved, method="PUT",
                                     headers={"Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(req, timeout=120) as r:
            self.assertEqual(r.status, 200)
        self.assertEqual(get(self.agent, "/v1/volume?id=db-alias")[0], 200)
        # delete through the plugin.
        status, body, _ = post("/v1/volume/delete", {"id": "shard[1]"})
        self.assertEqual(status, 200, body)
        self.assertTrue(body["deleted"])
        self.assertEqual(get(self.agent, "/v1/volume?id=shard[1]")[0], 404)
        # A plugin instance reported by hand, then removed; a bad type is 400.
        status, body, _ = post("/v1/plugin/fingerprint",
                               {"id": "handmade", "node": "n-hand", "type": "controller",
                                "provider": "hand.csi", "controller_publish": True})
        self.assertEqual(status, 200, body)
        status, plugin, _ = get(self.agent, "/v1/plugin?id=handmade")
        self.assertEqual(status, 200, plugin)
        self.assertEqual(plugin["controllers_healthy"], 1, plugin)
        self.assertEqual(plugin["provider"], "hand.csi", plugin)
        status, body, _ = post("/v1/plugin/fingerprint", {"id": "handmade", "node": "n-hand",
                                                          "type": "tape"})
        self.assertEqual(status, 400, body)
        self.assertIn("type", body["error"])
        status, body, _ = post("/v1/plugin/fingerprint", {"id": "handmade", "node": "n-hand",
                                                          "type": "controller", "remove": True})
        self.assertEqual(status, 200, body)
        self.assertEqual(get(self.agent, "/v1/plugin?id=handmade")[1].get("controllers_healthy",
                                                                           0), 0)

    def calls(self):
        if not os.path.exists(self.plugin.call_log):
            return []
        with open(self.plugin.call_log) as f:
            return [json.loads(l) for l in f if l.strip()]


class NomadApiAclTest(unittest.TestCase):
    """With --acl a request needs a token: X-Nomad-Token and Authorization:
    Bearer are taken as X-Berth-Token is; none or a wrong one is refused."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="berth-http-acl-")
        cls.agent = Agent(os.path.join(cls.tmp, "data"), ["--acl"]).start()
        try:
            r = berth(cls.agent, "--json", "acl", "bootstrap")
            assert r.code == 0, r
            cls.mgmt = r.json()["secret_id"]
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.agent.kill()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_tokens_in_nomads_headers(self):
        path = "/v1/volumes?type=csi"
        self.assertEqual(get(self.agent, path)[0], 403)
        self.assertEqual(get(self.agent, path, {"X-Nomad-Token": "not-a-token"})[0], 403)
        self.assertEqual(get(self.agent, path, {"X-Nomad-Token": self.mgmt})[:2], (200, []))
        self.assertEqual(get(self.agent, path, {"Authorization": "Bearer " + self.mgmt})[:2],
                         (200, []))
        self.assertEqual(get(self.agent, path, {"X-Berth-Token": self.mgmt})[:2], (200, []))
        self.assertEqual(get(self.agent, path, {"Authorization": "Basic " + self.mgmt})[0], 403)
        # The document is public: it holds no state.
        self.assertEqual(get(self.agent, "/v1/openapi.json")[0], 200)


if __name__ == "__main__":
    unittest.main()
