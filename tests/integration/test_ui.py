"""The web UI (issue 17) in a real headless browser: Debian's chromium,
driven through the DevTools protocol, against a `berthd --dev` with
volumes (one with a secret) and allocs, and two more nodes (c2 and c3:
berthd --client each with a berth-hostpath on one shared root, plugin
"remote").  The volumes page
lists them, a claim made from the shell appears on the volume's page
without a reload, the detach button refuses what the shell refuses and
frees the claim once its alloc is stopped on a disconnected node, the stop
button stops an alloc (both after their confirmation), no secret is in any
page or in any response the UI fetched, and every page is captured at
1280x800 and 420x800 (the PNGs are written to $BERTH_TEST_OUTPUT/ui/, their
paths printed)."""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import websocket  # python3-websocket (scripts/install-deps.sh)

from cluster import Plugin, Process
from harness import BERTH, BERTHD, TIME_SCALE, Agent, berth, undo_mounts
from test_tls import cli_env, make_certificates, run, tls_args

SECRET = "ui-secret-4b9e1d"
TOKEN = "ui-token-secret-93c2"  # an ACL token's secret (ignored without --acl)
OUT_DIR = os.path.join(os.environ.get("BERTH_TEST_OUTPUT", os.path.join(os.getcwd(), "test-output")),
                       "ui")


def spec(vid, secret=None):
    s = {"id": vid, "plugin_id": "hostpath", "capacity_min": "1GiB",
         "capabilities": [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}]}
    if secret:
        s["secrets"] = {"password": secret}
    return json.dumps(s)


def wait(condition, what, timeout=20):
    """Polls condition() until it returns something true; fails after timeout."""
    deadline = time.time() + timeout * TIME_SCALE
    while True:
        value = condition()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError("timed out after %d s waiting for %s" % (timeout, what))
        time.sleep(0.1)


class Browser:
    """Headless chromium with one page, spoken to over the DevTools protocol."""

    def __init__(self, tmp, extra_args=()):
        binary = shutil.which("chromium")
        if binary is None:
            raise RuntimeError("chromium is not installed (bash scripts/install-deps.sh)")
        profile = os.path.join(tmp, "chromium-profile")
        self.log = open(os.path.join(tmp, "chromium.log"), "w")
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-sync",
             "--disable-background-networking", "--disable-component-update",
             "--remote-debugging-port=0", "--remote-allow-origins=*",
             "--user-data-dir=" + profile, "--window-size=1280,800"] + list(extra_args) +
            ["about:blank"],
            stdout=subprocess.DEVNULL, stderr=self.log)
        port_file = os.path.join(profile, "DevToolsActivePort")

        def port():
            if self.proc.poll() is not None:
                raise RuntimeError("chromium exited: see " + self.log.name)
            try:
                with open(port_file) as f:
                    return int(f.readline())
            except (OSError, ValueError):
                return None
        self.port = wait(port, "chromium's DevToolsActivePort", timeout=30)
        targets = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % self.port))
        page = [t for t in targets if t["type"] == "page"][0]
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60,
                                              suppress_origin=True)
        self.next_id = 0
        self.responses = {}  # requestId -> URL of every /v1/ response but the stream
        self.requests = []   # (URL, headers) of every /v1/ request, in order
        self.send("Network.enable", maxTotalBufferSize=64 << 20, maxResourceBufferSize=16 << 20)
        self.send("Page.enable")
        self.size(1280, 800)

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.log.close()

    def _event(self, msg):
        if msg.get("method") == "Network.requestWillBeSent":
            r = msg["params"]["request"]
            if "/v1/" in r["url"]:
                self.requests.append((r["url"], r["headers"]))
        if msg.get("method") == "Network.responseReceived":
            url = msg["params"]["response"]["url"]
            if "/v1/" in url and "/v1/event/stream" not in url:
                self.responses[msg["params"]["requestId"]] = url

    def send(self, method, **params):
        self.next_id += 1
        me = self.next_id
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == me:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg["result"]
            self._event(msg)

    def eval(self, expression):
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError("%s: %s" % (expression, r["exceptionDetails"]))
        return r["result"].get("value")

    def wait(self, expression, what, timeout=20):
        return wait(lambda: self.eval(expression), what, timeout)

    def size(self, width, height):
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def click(self, selector):
        """A real mouse click at the element's centre (it must be visible there)."""
        rect = self.wait(
            "(() => { const e = document.querySelector(%s); if (!e) return null;"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " const x = r.left + r.width / 2, y = r.top + r.height / 2;"
            " const top = document.elementFromPoint(x, y);"
            " return top && (top === e || e.contains(top)) ? [x, y] : null; })()"
            % json.dumps(selector), "a clickable " + selector)
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=rect[0], y=rect[1],
                      button="left", clickCount=1)

    def load(self, url):
        """Loads the UI and waits until its page is there (not the one before)."""
        self.send("Page.navigate", url=url)
        self.wait("document.location.href.startsWith(%s) && !!document.getElementById('view')"
                  % json.dumps(url), "the page of " + url)

    def ask(self, selector):
        """Clicks an action's button and waits for its confirmation dialog."""
        self.click(selector)
        self.wait("document.getElementById('confirm').open", "the confirmation dialog")

    def open(self, hash_route):
        """Shows a page of the UI (client-side route) and waits until it is drawn."""
        self.eval("location.hash = %s" % json.dumps(hash_route))
        # draw() titles the page after the route it drew.
        self.wait("document.title === %s && document.getElementById('body')"
                  ".getAttribute('aria-busy') === 'false'" % json.dumps("berth · " + hash_route[2:]),
                  "page " + hash_route)

    def screenshot(self, name):
        os.makedirs(OUT_DIR, exist_ok=True)
        png = base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])
        path = os.path.join(OUT_DIR, name + ".png")
        with open(path, "wb") as f:
            f.write(png)
        print("screenshot: " + path, file=sys.stderr)
        return path

    def bodies(self):
        """The body of every /v1/ response the page received (but the event stream)."""
        out = {}
        for request_id, url in list(self.responses.items()):
            r = self.send("Network.getResponseBody", requestId=request_id)
            out[request_id] = (url, base64.b64decode(r["body"]).decode() if r["base64Encoded"]
                               else r["body"])
        return out


def stop_browser_and_agent(cls, processes=()):
    """A test class's tearDown: its browser, any extra processes, and its
    berthd agent, each only if it was started."""
    if cls.browser:
        cls.browser.close()
    for p in processes:
        p.kill()
    if cls.agent:
        cls.agent.kill()


class WebUiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="berth-ui-")
        # c2 is never marked down while a test runs (its claim stays for detach).
        cls.agent = Agent(os.path.join(cls.tmp, "data"),
                          ["--node-down-timeout", "300"]).start()
        cls.outputs = []
        cls.browser = None
        cls.processes = []  # the other nodes' clients and plugins
        cls.client = None   # c2's
        try:
            cls.prepare()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def b(cls, *args, stdin=None, expect=0):
        r = berth(cls.agent, *args, stdin=stdin)
        cls.outputs += [r.out, r.err]
        if r.code != expect:
            raise AssertionError("berth %s: %r" % (" ".join(args), r))
        return r

    @classmethod
    def prepare(cls):
        started = time.time()
        cls.node = wait(lambda: [n["id"] for n in cls.b("--json", "node", "status").json()],
                        "the dev agent's node")[0]

        def plugin_healthy():
            r = berth(cls.agent, "--json", "plugin", "status", "hostpath")
            return r.code == 0 and r.json()["nodes_healthy"] == 1
        wait(plugin_healthy, "the hostpath plugin healthy")
        # Two more nodes, c2 and c3, with the plugin "remote": berth-hostpath on one
        # root (shared storage), so that c3's controller can detach what c2 published.
        root = os.path.join(cls.tmp, "remote-root")
        for name in ("c2", "c3"):
            plugin = Plugin(cls.tmp, "plugin-" + name, "csi-" + name, shared_root=root).start()
            client = Process(name, [
                BERTHD, "--client", "--name", name, "--data-dir", os.path.join(cls.tmp, name),
                "--servers", cls.agent.address, "--metrics-port", "0", "--fingerprint-interval",
                "0.2", "--plugin", "remote=monolith:" + plugin.socket],
                os.path.join(cls.tmp, name + ".log"))
            cls.processes += [plugin, client.start()]
            if name == "c2":
                cls.client = client
            else:
                cls.c3_plugin = plugin

        def remote_healthy():
            r = berth(cls.agent, "--json", "plugin", "status", "remote")
            return r.code == 0 and (r.json()["nodes_healthy"], r.json()["controllers_healthy"]) == (2, 2)
        wait(remote_healthy, "the remote plugin healthy")
        cls.b("volume", "create", "-", stdin=spec("db", SECRET))
        cls.b("volume", "create", "-", stdin=spec("logs"))
        cls.b("volume", "create", "-", stdin=spec("cache"))
        cls.b("--namespace", "team", "volume", "create", "-", stdin=spec("scratch"))
        shared = json.loads(spec("shared"))
        shared["plugin_id"] = "remote"
        cls.b("volume", "create", "-", stdin=json.dumps(shared))
        # web-1 runs until stopped; batch-1's command exits at once.
        cls.b("alloc", "run", "--node", cls.node, "--volume", "data=logs", "--id", "web-1")
        cls.b("alloc", "run", "--node", cls.node, "--volume", "data=cache", "--id", "batch-1",
              "--", "true")
        cls.base = "http://127.0.0.1:%d" % cls.agent.metrics_port
        cls.browser = Browser(cls.tmp)
        cls.browser.load(cls.base + "/ui/")
        cls.browser.wait("document.getElementById('live').dataset.mode === 'on'",
                         "the UI following the event stream")
        print("set-up: %.1f s" % (time.time() - started), file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        stop_browser_and_agent(cls, cls.processes)
        undo_mounts(cls.tmp)
        with open(cls.agent.log_path) as f:
            log = f.read()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        # Secrets never appear in berthd's log or in the shell's output.
        for text in cls.outputs + [log]:
            assert SECRET not in text, "the volume's secret leaked: " + text[:500]
            assert TOKEN not in text, "the token leaked: " + text[:500]

    def rows(self, selector, attribute):
        return self.browser.eval("[...document.querySelectorAll(%s)].map(e => e.dataset.%s)"
                                 % (json.dumps(selector), attribute))

    def volume(self, vid):
        return self.b("--json", "volume", "status", vid).json()

    def alloc(self, aid):
        return self.b("--json", "alloc", "status", aid).json()

    def test_the_volumes_page_lists_every_volume_and_filters_them(self):
        ui = self.browser
        ui.open("#/volumes")
        self.assertEqual(sorted(self.rows("tr[data-volume]", "volume")),
                         ["default/cache", "default/db", "default/logs", "default/shared",
                          "team/scratch"])
        # web-1's claim on logs is shown with its state in words.
        self.assertEqual(ui.eval("document.querySelector('tr[data-volume=\"default/logs\"]')"
                                 ".querySelector('.badge').textContent"), "claimed")
        # Typing into the search box filters the list.
        ui.click("input[data-filter=q]")
        ui.send("Input.insertText", text="cach")
        ui.wait("[...document.querySelectorAll('tr[data-volume]')].map(e => e.dataset.volume)"
                ".join() === 'default/cache'", "only cache listed")
        ui.eval("(() => { const e = document.querySelector('input[data-filter=q]'); e.value = '';"
                " e.dispatchEvent(new Event('input')); })()")
        ui.wait("document.querySelectorAll('tr[data-volume]').length === 5", "all listed again")

    def detach(self, node):
        """Clicks "Detach from NODE", then the dialog's confirmation; returns the answer shown."""
        ui = self.browser
        ui.eval("document.getElementById('toast').hidden = true")
        ui.ask("button[data-action=detach][data-node=%s]" % json.dumps(node))
        self.assertIn("Detach volume shared from node " + node,
                      ui.eval("document.getElementById('confirm-title').textContent"))
        ui.screenshot("confirm-detach")
        ui.click("#confirm-ok")
        # The toast says what it does, then what berthd answered.
        return ui.wait("(() => { const t = document.getElementById('toast');"
                       " return !t.hidden && !t.textContent.endsWith('…') && t.textContent; })()",
                       "the detach's answer")

    def test_a_claim_from_the_shell_appears_without_reload_and_detach_frees_it(self):
        ui = self.browser
        ui.open("#/volume/default/shared")
        self.assertEqual(self.rows("tr[data-claim]", "claim"), [])
        ui.eval("window.noReload = 'still the same page'")
        self.b("volume", "claim", "shared", "--alloc", "ui-a1", "--node", "c2")
        ui.wait("document.querySelector('tr[data-claim=\"ui-a1\"] .badge')?.textContent === 'taken'",
                "the shell's claim on the page")
        # The leader's checks, as for the shell: the alloc still runs.
        answer = self.detach("c2")
        self.assertIn("still used on node 'c2' by running alloc(s): ui-a1; stop them first", answer)
        self.assertEqual(len(self.volume("shared")["claims"]), 1)
        # Its client gone and the alloc stopped, the claim waits for detach
        # (which c3's controller finishes).
        self.client.kill()

        def stop():
            r = berth(self.agent, "alloc", "stop", "ui-a1")
            self.outputs += [r.out, r.err]
            return r.out if r.code == 0 else None
        stopped = wait(stop, "ui-a1 stopped")
        self.assertIn("berth volume detach VOLUME c2", stopped)
        ui.wait("!!document.querySelector('tr[data-claim=\"ui-a1\"]')", "the claim still shown")
        answer = self.detach("c2")
        self.assertIn("claim of alloc 'ui-a1' released", answer)
        self.assertEqual(self.volume("shared")["claims"], [])
        ui.wait("!document.querySelector('tr[data-claim]')", "the claim gone from the page")
        self.assertEqual(ui.eval("window.noReload"), "still the same page")

    def test_a_group_run_appears_with_its_group(self):
        ui = self.browser
        ui.open("#/allocs")
        self.b("alloc", "run", "--node", self.node, "--group", "ui-g", "--count", "2", "--",
               "true")
        row = "document.querySelector('tr[data-alloc=\"ui-g[1]\"]')"
        ui.wait("!!" + row, "ui-g[1] listed without reload")
        self.assertEqual(ui.eval(row + ".querySelectorAll('td')[3].textContent"), "ui-g")
        ui.open("#/alloc/" + "ui-g%5B0%5D")
        ui.wait("[...document.querySelectorAll('dl.facts .fact')].some(f => "
                "f.querySelector('dt').textContent === 'Group' && "
                "f.querySelector('dd').textContent === 'ui-g')",
                "the alloc page names its group")

    def test_cancelling_the_confirmation_does_nothing(self):
        ui = self.browser
        ui.open("#/allocs")
        ui.ask("tr[data-alloc=web-1] button[data-action=stop]")
        ui.click("#confirm-cancel")
        ui.wait("!document.getElementById('confirm').open", "the dialog closed")
        self.assertEqual(self.alloc("web-1")["state"], "running")

    def test_a_release_the_watcher_retries_shows_its_attempts_and_last_error(self):
        ui = self.browser
        ui.open("#/volume/default/shared")
        self.b("volume", "claim", "shared", "--alloc", "ui-r1", "--node", "c3")
        ui.wait("document.querySelector('tr[data-claim=\"ui-r1\"] .badge')?.textContent === 'taken'",
                "the claim on the page")
        # c3's plugin dies: NodeUnpublishVolume fails, the watcher retries.
        self.c3_plugin.kill()
        berth(self.agent, "volume", "release", "shared", "--alloc", "ui-r1")
        row = "document.querySelector('tr[data-claim=\"ui-r1\"]')"
        text = ui.wait("(() => { const r = %s; return r && /next retry/.test(r.innerText) &&"
                       " /last error: /.test(r.innerText) && r.innerText; })()" % row,
                       "the watcher's attempts and last error on the page")
        self.assertRegex(text, r"\d+ attempt\(s\); next retry (in \d+ s|now)")
        self.assertNotEqual(ui.eval(row + ".querySelector('.badge').textContent"), "taken")
        ui.screenshot("volume-release-retrying")
        # Back, the plugin lets the watcher finish the release.
        self.c3_plugin.start()
        wait(lambda: self.volume("shared")["claims"] == [], "the release done", 40)
        ui.wait("!" + row, "the claim gone from the page")

    def test_a_token_goes_with_every_request_and_stays_out_of_the_page(self):
        ui = self.browser
        ui.open("#/volumes")
        ui.click("#token-button")
        ui.wait("document.getElementById('token-dialog').open", "the token dialog")
        ui.click("#token-input")
        ui.send("Input.insertText", text=TOKEN)
        sent = len(ui.requests)
        ui.click("#token-save")
        ui.wait("sessionStorage.getItem('berth-token') === %s" % json.dumps(TOKEN), "the token kept")
        self.assertEqual(ui.eval("document.getElementById('token-button').textContent"), "Token ✓")
        # The page and the event stream are asked again, with the token.
        ui.wait("document.getElementById('live').dataset.mode === 'on'", "the stream followed again")

        def with_token(path):
            ui.eval("0")  # reads the browser's events that came meanwhile
            return [h.get("X-Berth-Token") for u, h in ui.requests[sent:] if path in u]
        wait(lambda: TOKEN in with_token("/v1/event/stream") and TOKEN in with_token("/v1/volumes"),
             "requests with the token")
        self.assertNotIn(TOKEN, ui.eval("document.documentElement.outerHTML"))
        # Forgotten, it is sent no more.
        ui.click("#token-button")
        ui.wait("document.getElementById('token-dialog').open", "the token dialog")
        ui.click("#token-clear")
        ui.wait("sessionStorage.getItem('berth-token') === null", "the token forgotten")
        sent = len(ui.requests)
        ui.open("#/nodes")
        wait(lambda: with_token("/v1/nodes"), "the nodes asked for")
        self.assertEqual(set(with_token("/v1/")), {None})

    def test_the_drain_button_drains_a_node(self):
        ui = self.browser
        ui.open("#/node/c3")
        ui.ask("button[data-action=drain]")
        ui.click("#drain-keep-plugins")
        self.assertTrue(ui.eval("document.getElementById('drain-keep-plugins').checked"))
        ui.screenshot("confirm-drain")
        ui.click("#confirm-ok")

        # Nothing runs on c3: the drain finishes on the leader's next ticks.
        def drained():
            n = self.b("--json", "node", "status", "c3").json()
            return n["drained_at_ms"] and n
        node = wait(drained, "c3 drained")
        self.assertFalse(node["eligible"])
        # The checkbox reached the leader: the plugin instance stays.
        self.assertEqual((node["plugin_ids"], node["plugins_withdrawn"]), (["remote"], False))
        ui.wait("document.querySelector('h1 .badge:nth-of-type(2)')?.textContent === 'ineligible'",
                "the drained node ineligible on the page")
        self.b("node", "eligibility", "c3", "--enable")

    def test_the_stop_button_stops_a_running_alloc(self):
        ui = self.browser
        ui.open("#/allocs")
        ui.wait("document.querySelector('tr[data-alloc=batch-1]')?.dataset.state === 'complete'",
                "batch-1 complete")
        self.assertEqual(ui.eval("document.querySelector('tr[data-alloc=batch-1] "
                                 "button[data-action=stop]')"), None)
        # Not the one the cancel test leaves running: an alloc of its own,
        # in the other namespace.
        self.b("--namespace", "team", "alloc", "run", "--node", self.node, "--volume",
               "data=scratch", "--id", "web-2")
        ui.wait("document.querySelector('tr[data-alloc=web-2]')?.dataset.state === 'running'",
                "web-2 running on the page")
        ui.ask("tr[data-alloc=web-2] button[data-action=stop]")
        ui.click("#confirm-ok")
        wait(lambda: self.alloc("web-2")["state"] == "complete", "web-2 complete", 40)
        wait(lambda: self.b("--namespace", "team", "--json", "volume", "status", "scratch")
             .json()["claims"] == [], "web-2's claim released", 40)
        ui.wait("document.querySelector('tr[data-alloc=web-2]')?.dataset.state === 'complete'",
                "web-2 complete on the page")

    def test_every_page_at_1280x800_and_420x800_without_a_secret(self):
        ui = self.browser
        pages = [("volumes", "#/volumes"), ("volume", "#/volume/default/db"),
                 ("plugins", "#/plugins"), ("plugin", "#/plugin/hostpath"),
                 ("nodes", "#/nodes"), ("node", "#/node/" + self.node),
                 ("allocs", "#/allocs"), ("alloc", "#/alloc/web-1"), ("peers", "#/peers")]
        paths = []
        # The answer of an earlier action, closed as one would (a click).
        if ui.eval("!document.getElementById('toast').hidden"):
            ui.click("#toast")
            ui.wait("document.getElementById('toast').hidden", "the message closed")
        for width, suffix in ((1280, ""), (420, "-narrow")):
            ui.size(width, 800)
            for name, route in pages:
                ui.open(route)
                self.assertFalse(ui.eval("!!document.querySelector('.error-box')"),
                                 "%s: %s" % (route, ui.eval("document.getElementById('body').innerText")))
                # Nothing wider than the window (no sideways scrolling of the page).
                self.assertLessEqual(ui.eval("document.documentElement.scrollWidth"), width, route)
                html = ui.eval("document.documentElement.outerHTML")
                self.assertNotIn(SECRET, html, route)
                paths.append(ui.screenshot(name + suffix))
        ui.size(1280, 800)
        self.assertEqual(len(paths), 18)
        # The pages show what they are about.
        ui.open("#/node/" + self.node)
        self.assertIn("Volumes published here", ui.eval("document.body.innerText"))
        ui.open("#/peers")
        self.assertEqual(ui.eval("document.querySelector('tr[data-peer] .badge').textContent"),
                         "leader")
        # No response the UI fetched holds the secret; the volume's did come.
        bodies = ui.bodies()
        urls = [u for u, _ in bodies.values()]
        self.assertTrue(any("/v1/volume?namespace=default&id=db" in u for u in urls), urls)
        for url, body in bodies.values():
            self.assertNotIn(SECRET, body, url)
        # Nor the event stream it follows (read here to its current end).
        last = max(p["last_index"] for p in self.get("/v1/raft/peers")[1])
        with urllib.request.urlopen(self.base + "/v1/event/stream?index=1&until_index=%d" % last,
                                    timeout=30) as r:
            stream = r.read().decode()
        self.assertIn('"db"', stream)
        self.assertNotIn(SECRET, stream)

    def get(self, path, method="GET", body=None, headers=None):
        req = urllib.request.Request(self.base + path, method=method, data=body,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read().decode()), r.headers
        except urllib.error.HTTPError as e:
            text = e.read().decode()
            return e.code, json.loads(text) if text.startswith("{") else text, e.headers

    def test_the_api_behind_the_buttons(self):
        status, body, _ = self.get("/v1/alloc/stop?id=web-1")
        self.assertEqual(status, 405, body)
        # A form another site could post (text/plain) is refused.
        status, body, _ = self.get("/v1/alloc/stop", "POST", b'{"id": "web-1"}',
                                   {"Content-Type": "text/plain"})
        self.assertEqual(status, 415, body)
        self.assertEqual(self.alloc("web-1")["state"], "running")
        status, body, _ = self.get("/v1/volume/detach", "POST", b'{"id": "db"}',
                                   {"Content-Type": "application/json"})
        self.assertEqual((status, body["error"]), (400, "parameter 'node' is missing"))
        status, body, _ = self.get("/v1/node/drain", "POST",
                                   json.dumps({"id": self.node, "deadline": "soon"}).encode(),
                                   {"Content-Type": "application/json"})
        self.assertEqual(status, 400, body)
        self.assertIn("not a duration", body["error"])
        # The leader's checks, as for the shell: detach keeps running allocs' claims.
        status, body, _ = self.get("/v1/volume/detach", "POST",
                                   json.dumps({"id": "logs", "node": self.node}).encode(),
                                   {"Content-Type": "application/json",
                                    "X-Berth-Token": "ignored-without-acls"})
        self.assertEqual(status, 409, body)
        self.assertIn("stop them first", body["error"])
        status, body, _ = self.get("/v1/volume?id=nope")
        self.assertEqual(status, 404, body)
        status, body, _ = self.get("/v1/nope")
        self.assertEqual(status, 404)
        self.assertIn("/v1/raft/peers", body["error"])
        status, body, _ = self.get("/v1/alloc?id=web-1")
        self.assertEqual((status, body["id"], [c["volume_id"] for c in body["claims"]]),
                         (200, "web-1", ["logs"]))
        # The UI's files come from berthd itself, with their types.
        req = urllib.request.Request(self.base + "/ui")
        with urllib.request.urlopen(req, timeout=10) as r:  # follows the redirect to /ui/
            self.assertEqual(r.url, self.base + "/ui/")
            self.assertTrue(r.headers["Content-Type"].startswith("text/html"))
            self.assertIn("default-src 'self'", r.headers["Content-Security-Policy"])
        for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
            with urllib.request.urlopen(self.base + "/ui/" + name, timeout=10) as r:
                self.assertTrue(r.headers["Content-Type"].startswith(kind), name)
        self.assertEqual(self.get("/ui/nope.js")[0], 404)



READER = """
namespace "default" {
  policy = "read"
}
node { policy = "read" }
plugin { policy = "read" }
"""


class WebUiAclTest(unittest.TestCase):
    """The UI of a berthd --dev --acl: it asks for a token, shows what the
    token may read, and a button the token may not use is refused."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="berth-ui-acl-")
        cls.agent = Agent(os.path.join(cls.tmp, "data"), ["--acl"]).start()
        cls.browser = None
        cls.outputs = []
        try:
            cls.mgmt = cls.b("", "--json", "acl", "bootstrap").json()["secret_id"]
            node = wait(lambda: [n["id"] for n in cls.b(cls.mgmt, "--json", "node", "status").json()],
                        "the dev agent's node")[0]
            wait(lambda: cls.b(cls.mgmt, "--json", "plugin", "status", "hostpath").json()
                 ["nodes_healthy"] == 1, "the hostpath plugin healthy")
            cls.b(cls.mgmt, "volume", "create", "-", stdin=spec("db", SECRET))
            cls.b(cls.mgmt, "alloc", "run", "--node", node, "--volume", "data=db", "--id", "web-1")
            cls.b(cls.mgmt, "acl", "policy", "apply", "reader", "-", stdin=READER)
            cls.reader = cls.b(cls.mgmt, "--json", "acl", "token", "create", "--name", "ui",
                               "--policy", "reader").json()["secret_id"]
            cls.base = "http://127.0.0.1:%d" % cls.agent.metrics_port
            cls.browser = Browser(cls.tmp)
            cls.browser.load(cls.base + "/ui/")
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        stop_browser_and_agent(cls)
        with open(cls.agent.log_path) as f:
            log = f.read()
        undo_mounts(cls.tmp)
        shutil.rmtree(cls.tmp, ignore_errors=True)
        for text in cls.outputs[1:] + [log]:  # [0]: bootstrap prints the management secret
            assert SECRET not in text, "the volume's secret leaked: " + text[:500]

    @classmethod
    def b(cls, token, *args, stdin=None):
        r = berth(cls.agent, *((["--token", token] if token else []) + list(args)), stdin=stdin)
        cls.outputs += [r.out, r.err]
        if r.code != 0:
            raise AssertionError("berth %s: %r" % (" ".join(args), r))
        return r

    def test_the_ui_asks_for_a_token_and_the_token_decides(self):
        ui = self.browser
        # Without a token: refused, and the UI asks for one, saying why.
        reason = ui.wait("document.getElementById('token-dialog').open &&"
                         " document.getElementById('token-reason').textContent", "the token prompt")
        self.assertIn("token", reason)
        ui.wait("document.querySelector('.error-box')?.dataset.status === '403'", "the refusal")
        ui.wait("document.getElementById('live').dataset.mode === 'refused'", "the stream refused")
        ui.screenshot("acl-token-prompt")
        ui.click("#token-input")
        ui.send("Input.insertText", text=self.reader)
        ui.click("#token-save")
        # The reader's token reads the volumes and follows the events.
        ui.wait("!!document.querySelector('tr[data-volume=\"default/db\"]')", "db listed")
        ui.wait("document.getElementById('live').dataset.mode === 'on'", "the stream followed")
        ui.open("#/allocs")
        ui.wait("document.querySelector('tr[data-alloc=web-1]')?.dataset.state === 'running'",
                "web-1 listed")
        # It may not stop an alloc: the leader refuses, the UI says so and asks again.
        ui.ask("tr[data-alloc=web-1] button[data-action=stop]")
        ui.click("#confirm-ok")
        ui.wait("document.getElementById('toast').classList.contains('bad')", "the refusal shown")
        ui.wait("document.getElementById('token-dialog').open", "the token asked again")
        ui.click("#token-cancel")
        self.assertEqual(self.b(self.mgmt, "--json", "alloc", "status", "web-1").json()["state"],
                         "running")
        html = ui.eval("document.documentElement.outerHTML")
        for secret in (SECRET, self.reader, self.mgmt):
            self.assertNotIn(secret, html)


class WebUiHttpsTest(unittest.TestCase):
    """The UI of a berthd --dev with --tls-*: served over HTTPS (chromium
    told to accept the cluster's CA's certificate with
    --ignore-certificate-errors: trusting a CA takes an NSS database), it
    follows the event stream through the HTTPS front and shows a volume made
    from the shell without a reload."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="berth-ui-https-")
        cls.agent = cls.browser = None
        try:
            cls.certs, _ = make_certificates(cls.tmp)
            cls.agent = Agent(os.path.join(cls.tmp, "data"),
                              tls_args(cls.certs, "server")).start()
            cls.browser = Browser(cls.tmp, ["--ignore-certificate-errors"])
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        stop_browser_and_agent(cls)
        undo_mounts(cls.tmp)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_ui_over_https_follows_the_event_stream(self):
        ui = self.browser
        ui.load("https://127.0.0.1:%d/ui/" % self.agent.metrics_port)
        self.assertEqual(ui.eval("location.protocol"), "https:")
        ui.wait("document.getElementById('live').dataset.mode === 'on'",
                "the UI following the event stream over HTTPS")
        ui.open("#/volumes")
        r = run([BERTH, "--address", self.agent.address, "volume", "create", "-"],
                env=cli_env(self.certs), stdin=spec("over-tls"))
        self.assertEqual(r.returncode, 0, r)
        ui.wait("!!document.querySelector('tr[data-volume=\"default/over-tls\"]')",
                "the volume made from the shell listed without a reload")
        ui.screenshot("https-volumes")


if __name__ == "__main__":
    unittest.main(verbosity=2)
