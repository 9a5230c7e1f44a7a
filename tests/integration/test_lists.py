"""Finding things (issue 15): list filters and pages over 10,000 volumes,
through the shell as an operator types them."""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import TIME_SCALE, berth
from test_csi import Plugin, agent_with_plugin

BENCH = os.environ.get("BERTH_BENCH_BIN", "berth-bench")
# Under a sanitizer (a time scale), 1,000: 5,000 registrations took longer
# than 20 minutes under TSan; what the lists do is the same.  BIG: the third
# claimed volume (sorts between scale-v42 and scale-v7 either way).
COUNT = 10000 if TIME_SCALE <= 1 else 1000
BIG = 4242 if COUNT > 4242 else 424


class ListsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="berth-lists-")
        # Clean-ups registered as each process starts: they run even when
        # this set-up fails (tearDownClass would not; an ASan run left the
        # plugin behind when the registrations timed out).
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.plugin = Plugin(cls.tmp).start()
        cls.addClassCleanup(cls.plugin.kill)
        cls.agent = agent_with_plugin(cls.tmp, cls.plugin)
        cls.addClassCleanup(cls.agent.kill)
        # A node plugin reported by hand on node n9 (no berth client there):
        # volumes of it register and claim without CSI calls.
        r = berth(cls.agent, "plugin", "fingerprint", "bulk", "--node", "n9", "--type", "node")
        assert r.code == 0, r
        # COUNT registrations through the shell's protocol, 64 in flight
        # (scale-v0 .. scale-v9999 of plugin bulk).
        subprocess.run([BENCH, "--address", cls.agent.address, "--workload", "register",
                        "--volumes", str(COUNT), "--concurrency", "64", "--plugin", "bulk",
                        "--timeout", str(int(60 * TIME_SCALE)),
                        "--give-up", str(int(30 * TIME_SCALE))], check=True,
                       stdout=subprocess.DEVNULL, timeout=300 * TIME_SCALE)
        for i in (7, 42, BIG):
            r = berth(cls.agent, "volume", "claim", "scale-v%d" % i, "--alloc", "a%d" % i,
                      "--node", "n9")
            assert r.code == 0, r

    def ok(self, *args):
        r = berth(self.agent, *args, timeout=120)
        self.assertEqual(r.code, 0, r)
        return r

    def ids(self, *args):
        return [v["id"] for v in self.ok("--json", "volume", "status", *args).json()]

    def test_pages_cover_every_volume_once_in_order(self):
        seen, token, pages = [], "", 0
        while True:
            args = ["--json", "volume", "status", "--per-page", "1000"]
            if token:
                args += ["--page-token", token]
            page = self.ok(*args).json()
            self.assertLessEqual(len(page["volumes"]), 1000)
            seen += [v["id"] for v in page["volumes"]]
            token = page["next_page_token"]
            pages += 1
            if not token:
                break
        self.assertEqual(pages, COUNT // 1000)
        self.assertEqual(len(seen), COUNT)
        self.assertEqual(len(set(seen)), COUNT)
        self.assertEqual(seen, sorted(seen))
        # The text names the next page.
        text = self.ok("volume", "status", "--per-page", "3").out
        self.assertIn("Next page: --page-token default/scale-v10\n", text)

    def test_flags_and_filters_select_what_they_say(self):
        self.assertEqual(self.ids("--node", "n9"), ["scale-v42", "scale-v%d" % BIG, "scale-v7"])
        self.assertEqual(self.ids("--state", "claimed"), ["scale-v42", "scale-v%d" % BIG, "scale-v7"])
        self.assertEqual(len(self.ids("--state", "unclaimed")), COUNT - 3)
        self.assertEqual(len(self.ids("--plugin", "bulk")), COUNT)
        self.assertEqual(self.ids("--plugin", "other"), [])
        expected = sorted("scale-v%d" % i for i in range(COUNT) if "999" in str(i))
        self.assertEqual(self.ids("--filter", 'id contains "999"'), expected)
        self.assertEqual(self.ids("--filter", 'claims.alloc_id == a42 or id == "scale-v1"'),
                         ["scale-v1", "scale-v42"])
        self.assertEqual(self.ids("--node", "n9", "--filter", "not id contains 42"), ["scale-v7"])
        # A filtered page holds per-page matches, and the next one goes on.
        first = self.ok("--json", "volume", "status", "--state", "claimed", "--per-page", "2").json()
        self.assertEqual([v["id"] for v in first["volumes"]], ["scale-v42", "scale-v%d" % BIG])
        rest = self.ids("--state", "claimed", "--page-token", first["next_page_token"])
        self.assertEqual(rest, ["scale-v7"])
        # Every namespace: these are all in default.
        self.assertEqual(len(self.ids("--namespace", "*", "--state", "claimed")), 3)
        self.assertEqual(self.ids("--namespace", "prod"), [])

    def test_allocs_nodes_and_plugins_filter_too(self):
        allocs = self.ok("--json", "alloc", "status", "--node", "n9", "--state", "running").json()
        self.assertEqual(sorted(a["id"] for a in allocs), ["a42", "a%d" % BIG, "a7"])
        self.assertEqual(self.ok("--json", "alloc", "status", "--state", "failed").json(), [])
        nodes = self.ok("--json", "node", "status", "--state", "ready").json()
        self.assertIn("n1", [n["id"] for n in nodes])
        self.assertEqual(self.ok("--json", "node", "status", "--state", "down").json(), [])
        self.assertEqual(self.ok("--json", "node", "status", "--plugin", "nope").json(), [])
        nodes = self.ok("--json", "node", "status", "--plugin", "hostpath").json()
        self.assertEqual([n["id"] for n in nodes], ["n1"])
        plugins = self.ok("--json", "plugin", "status", "--node", "n9").json()
        self.assertEqual([p["id"] for p in plugins], ["bulk"])

    def test_a_bad_filter_is_refused_naming_where(self):
        r = berth(self.agent, "volume", "status", "--filter", "id ==")
        self.assertEqual(r.code, 2, r)
        self.assertIn("--filter", r.err)
        self.assertIn("column", r.err)
        r = berth(self.agent, "volume", "status", "--state", "sideways")
        self.assertEqual(r.code, 2, r)


if __name__ == "__main__":
    unittest.main()
