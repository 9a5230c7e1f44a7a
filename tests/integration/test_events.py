"""The event stream on a 3-server cluster with a client, as real processes on
127.0.0.1: `berth event stream` follows every committed change through a
SIGKILL of the leader it was reading from (no gap, no duplicate), the same
lines come from any server (shell and HTTP), a consumer resumes by index,
filters by topic, and never sees a secret; a restarted server says which
index its journal starts at."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from cluster import Cluster
from harness import BERTH, berth

SCALE = float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))
SECRET = "hunter2-event-secret"


def volume_spec(vid):
    return json.dumps({"id": vid, "plugin_id": "hostpath",
                       "secrets": {"password": SECRET},
                       "capabilities": [{"access_mode": "multi-node-multi-writer",
                                         "attachment_mode": "file-system"}]})


def parse(lines):
    return [json.loads(l) for l in lines]


class EventStreamTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-events-")
        # No snapshots: a follower that installed one would (rightly) have no
        # events before it, and the reference streams start at index 1.
        self.cluster = Cluster(self.tmp, snapshot_threshold=100000)
        self.addCleanup(self.cluster.stop)
        self.cluster.start()
        self.plugin, self.client = self.cluster.add_client("c1")
        self.streams = []

    def tearDown(self):
        for p in self.streams:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.cluster.stop()
        with open("/proc/self/mounts") as f:
            for m in reversed([l.split()[1] for l in f if self.tmp in l.split()[1]]):
                subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def shell(self, via, *args, stdin=None, expect=0):
        deadline = time.time() + 20 * SCALE
        while True:
            r = berth(via, "--timeout", "20", *args, stdin=stdin)
            if r.code != 5 or expect == 5 or time.time() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(r.code, expect, r)
        return r

    def wait_plugin(self):
        deadline = time.time() + 20 * SCALE
        while time.time() < deadline:
            r = berth(self.cluster.any_address(), "--json", "plugin", "status", "hostpath")
            if r.code == 0 and r.json()["nodes_healthy"] == 1 and \
                    r.json()["controllers_healthy"] == 1:
                return
            time.sleep(0.1)
        self.fail("the client's plugin never became healthy")

    def changes(self, via, names):
        """Registers, claims and releases volumes; returns the newest modify index."""
        for vid in names:
            self.shell(via, "volume", "create", "-", stdin=volume_spec(vid))
        self.shell(via, "volume", "claim", names[0], "--alloc", "a-" + names[0], "--node", "c1")
        self.shell(via, "volume", "release", names[0], "--alloc", "a-" + names[0])
        return max(v["modify_index"] for v in self.shell(via, "--json", "volume", "status").json())

    def wait_output(self, path, what, timeout=30):
        deadline = time.time() + timeout * SCALE
        while time.time() < deadline:
            with open(path) as f:
                if what in f.read():
                    return
            time.sleep(0.1)
        with open(path) as f:
            self.fail("the stream never printed %r: %s" % (what, f.read()))

    def stream(self, via, *args, expect=0):
        r = berth(via, "--timeout", "20", "event", "stream", *args, timeout=120)
        self.assertEqual(r.code, expect, r)
        return r

    def http_stream(self, server, query):
        port = int(server.banner.split("metrics on 127.0.0.1:")[1].split(" ")[0])
        url = "http://127.0.0.1:%d/v1/event/stream?%s" % (port, query)
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                return r.status, r.headers.get("Content-Type"), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type"), e.read().decode()

    def test_stream_follows_a_leader_kill_without_gap_or_duplicate_and_resumes_by_index(self):
        self.wait_plugin()
        leader = self.cluster.leader()
        others = [s for s in self.cluster.servers if s is not leader]
        out_path = os.path.join(self.tmp, "stream.out")
        err_path = os.path.join(self.tmp, "stream.err")
        # The leader first: the stream reads from it until it is killed.
        addresses = ",".join([leader.address] + [s.address for s in others])
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen([BERTH, "--address", addresses, "event", "stream",
                                     "--index", "1"], stdout=out, stderr=err)
        self.streams.append(proc)

        before = self.changes(leader.address, ["v1", "v2", "v3"])
        self.wait_output(out_path, '"key":"v3"')
        leader.kill(signal.SIGKILL)
        self.cluster.wait_leader(exclude=leader)
        last = self.changes(others[0].address, ["v4", "v5", "v6"])
        self.assertGreater(last, before)
        self.wait_output(out_path, '"key":"v6"')
        # Everything up to `last` is printed once its index's line is: the
        # events of an index come in one answer.
        deadline = time.time() + 30 * SCALE
        while time.time() < deadline:
            with open(out_path) as f:
                lines = [l for l in f.read().splitlines() if l]
            if lines and json.loads(lines[-1])["index"] >= last:
                break
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        with open(err_path) as f:
            self.assertIn("going on at index", f.read())
        streamed = [l for l in lines if json.loads(l)["index"] <= last]

        # No duplicate, in order, seq from 0 within each index.
        events = parse(streamed)
        keys = [(e["index"], e["seq"]) for e in events]
        self.assertEqual(len(keys), len(set(keys)))
        self.assertEqual(keys, sorted(keys))
        for i, e in enumerate(events):
            if i == 0 or events[i - 1]["index"] != e["index"]:
                self.assertEqual(e["seq"], 0, e)
            else:
                self.assertEqual(e["seq"], events[i - 1]["seq"] + 1, e)
        types = [(e["type"], e["key"]) for e in events]
        for vid in ["v1", "v2", "v3", "v4", "v5", "v6"]:
            self.assertIn(("VolumeRegistered", vid), types)
        for vid in ["v1", "v4"]:
            self.assertIn(("ClaimTaken", vid + "/a-" + vid), types)
            self.assertIn(("ClaimFreed", vid + "/a-" + vid), types)
        self.assertIn(("AllocCreated", "a-v1"), types)
        self.assertIn(("NodeRegistered", "c1"), types)
        self.assertIn(("PluginCreated", "hostpath"), types)
        self.assertNotIn(SECRET, "\n".join(lines))

        # No gap: a server that was never killed streams exactly the same
        # lines from index 1.
        reference = self.stream(others[1].address, "--index", "1", "--until-index",
                                str(last)).out.splitlines()
        self.assertEqual(streamed, reference)

        # Resumable by index: from the first index after the kill, the same
        # lines as the reference from there (on the other server).
        resume = next(e["index"] for e in events if e["key"] == "v4")
        resumed = self.stream(others[0].address, "--index", str(resume), "--until-index",
                              str(last)).out.splitlines()
        self.assertEqual(resumed, [l for l in reference if json.loads(l)["index"] >= resume])

        # Filters: claim events only; a namespace with none of the volumes
        # keeps the nodes' and plugins' events.
        claims = self.stream(others[0].address, "--topic", "claim", "--index", "1",
                             "--until-index", str(last)).out.splitlines()
        self.assertEqual(claims, [l for l in reference if json.loads(l)["topic"] == "claim"])
        elsewhere = parse(self.stream(others[0].address, "--namespace", "other", "--index", "1",
                                      "--until-index", str(last)).out.splitlines())
        self.assertTrue(elsewhere)
        self.assertEqual({e["topic"] for e in elsewhere} - {"node", "plugin"}, set())
        bad = self.stream(others[0].address, "--topic", "volumes", "--index", "1", expect=2)
        self.assertIn("not a topic", bad.err)

        # The same lines over HTTP on the metrics port.
        status, ctype, body = self.http_stream(others[1], "index=1&until_index=%d" % last)
        self.assertEqual(status, 200, body)
        self.assertEqual(ctype, "application/x-ndjson")
        self.assertEqual(body.splitlines(), reference)
        status, _, body = self.http_stream(others[1], "index=1&topic=claim&until_index=%d" % last)
        self.assertEqual(body.splitlines(), claims)
        status, _, body = self.http_stream(others[1], "index=x")
        self.assertEqual(status, 400, body)

        # A restarted server's journal starts at what it applies after its
        # start: older indexes are refused, naming the oldest it has.
        leader.start()
        r = self.stream(leader.address, "--index", "1", "--until-index", str(last), expect=3)
        self.assertRegex(r.err, r"events before index \d+ are no longer in this server's journal")
        status, _, body = self.http_stream(leader, "index=1")
        self.assertEqual(status, 410, body)
        self.assertGreater(json.loads(body)["first_index"], 1)

    def test_stream_from_now_shows_only_later_changes(self):
        self.wait_plugin()
        via = self.cluster.servers[0].address
        self.shell(via, "volume", "create", "-", stdin=volume_spec("early"))
        out_path = os.path.join(self.tmp, "now.out")
        with open(out_path, "w") as out:
            proc = subprocess.Popen([BERTH, "--address", via, "event", "stream", "--topic",
                                     "volume"], stdout=out, stderr=subprocess.DEVNULL)
        self.streams.append(proc)
        # The stream has started once it prints the next volume change;
        # register until it does (the first may commit before it asked).
        deadline = time.time() + 30 * SCALE
        n = 0
        while time.time() < deadline:
            n += 1
            self.shell(via, "volume", "create", "-", stdin=volume_spec("late%d" % n))
            time.sleep(0.2)
            with open(out_path) as f:
                if f.read().strip():
                    break
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        with open(out_path) as f:
            events = parse(l for l in f.read().splitlines() if l)
        self.assertTrue(events)
        self.assertNotIn("early", [e["key"] for e in events])
        self.assertEqual({e["type"] for e in events}, {"VolumeRegistered"})


if __name__ == "__main__":
    unittest.main()
