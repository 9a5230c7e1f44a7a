"""`berth volume init` end to end: the example spec it writes (YAML with a
comment above every key, or JSON) is taken by `volume create` as it is on a
berthd --dev agent (whose plugin is the example's "hostpath"), an existing
file is kept unless --force, and --output - writes to stdout."""

import json
import os
import shutil
import tempfile
import time
import unittest

from harness import Agent, berth


class VolumeInitTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-init-")
        self.agent = Agent(os.path.join(self.tmp, "data")).start()
        self.addCleanup(self.cleanup)
        deadline = time.time() + 60 * float(os.environ.get("BERTH_TEST_TIME_SCALE", "1"))
        while True:
            r = berth(self.agent, "--json", "plugin", "status", "hostpath")
            if r.code == 0 and r.json()["controllers_healthy"] == 1:
                break
            self.assertLess(time.time(), deadline, "the dev agent's plugin never turned healthy")
            time.sleep(0.1)

    def cleanup(self):
        self.agent.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def b(self, *args, expect=0, cwd=None):
        r = berth(self.agent, *args) if cwd is None else self.in_dir(cwd, *args)
        self.assertEqual(r.code, expect, r)
        return r

    def in_dir(self, cwd, *args):
        old = os.getcwd()
        os.chdir(cwd)
        try:
            return berth(self.agent, *args)
        finally:
            os.chdir(old)

    def test_example_is_created_as_it_is(self):
        # Without --output: volume.yaml in the current directory.
        r = self.b("volume", "init", cwd=self.tmp)
        path = os.path.join(self.tmp, "volume.yaml")
        self.assertIn("volume.yaml", r.out)
        with open(path) as f:
            text = f.read()
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)  # it will hold secrets
        lines = text.splitlines()
        for key in ("id", "plugin_id", "external_id", "capabilities", "capacity_min",
                    "snapshot_id", "clone_id", "topology_request", "secrets"):
            i = next(i for i, l in enumerate(lines) if l.startswith(key + ":"))
            self.assertTrue(lines[i - 1].startswith("#"), key)

        vol = self.b("--json", "volume", "create", path).json()
        self.assertEqual((vol["id"], vol["plugin_id"], vol["capacity_min"]),
                         ("db", "hostpath", 1 << 30))
        self.assertTrue(vol["external_id"])
        self.assertEqual(vol["capabilities"][0]["access_mode"], "single-node-writer")
        self.assertNotIn("xyzzy", self.b("volume", "status", "db").out)  # the secret

        # An existing file is kept; --force overwrites it.
        with open(path, "w") as f:
            f.write("mine\n")
        r = self.b("volume", "init", expect=4, cwd=self.tmp)
        self.assertIn("--force", r.err)
        with open(path) as f:
            self.assertEqual(f.read(), "mine\n")
        self.b("volume", "init", "--force", cwd=self.tmp)
        with open(path) as f:
            self.assertEqual(f.read(), text)

        # JSON: the same keys, no comments; created as it is once its id is new.
        jpath = os.path.join(self.tmp, "v.json")
        self.b("volume", "init", "--json", "--output", jpath)
        with open(jpath) as f:
            spec = json.load(f)
        self.assertEqual(set(spec), {line.split(":")[0] for line in lines
                                     if line and line[0].isalpha()})
        spec["id"] = "db2"
        with open(jpath, "w") as f:
            json.dump(spec, f)
        self.assertEqual(self.b("--json", "volume", "create", jpath).json()["id"], "db2")

        # --output - : the example on stdout, nothing written.
        out = self.b("volume", "init", "--output", "-").out
        self.assertEqual(out, text)
        self.assertIn("init", self.b("volume", "--help").out)
        self.b("volume", "init", "--type", "host", "--output", "-", expect=2)


if __name__ == "__main__":
    unittest.main()
