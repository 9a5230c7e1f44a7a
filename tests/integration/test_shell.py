"""The interactive shell, driven through a real terminal (tmux) as a user
would: the prompt names the server and its role, commands print as
`berth COMMAND` does, Tab completes ids fetched from the server, help works,
a restarted berthd is reconnected to transparently, and the history is kept
in ~/.berth_history."""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import BERTH, Agent, berth

VOLUME = {"id": "db", "plugin_id": "hostpath",
          "capabilities": [{"access_mode": "single-node-writer",
                            "attachment_mode": "file-system"}]}


def tmux(*args):
    return subprocess.run(["tmux"] + list(args), capture_output=True, text=True,
                          timeout=10, check=True).stdout


class ShellTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="berth-shell-")
        self.home = os.path.join(self.tmp, "home")
        os.mkdir(self.home)
        # (the harness passes BERTH_HOSTPATH_BIN to --dev itself)
        self.agent = Agent(os.path.join(self.tmp, "data")).start()
        # The dev agent fingerprints its plugin right after starting.
        deadline = time.time() + 10
        while "hostpath" not in berth(self.agent, "plugin", "status").out:
            self.assertLess(time.time(), deadline, "the dev agent's plugin did not appear")
            time.sleep(0.1)
        # A private tmux server (-L), so nothing of the user's is touched and
        # killing it ends every session of this test.
        self.socket = "berth-test-%d" % os.getpid()
        self.session = None

    def tearDown(self):
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        self.agent.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def t(self, *args):
        return tmux("-L", self.socket, *args)

    def screen(self):
        return self.t("capture-pane", "-p", "-t", self.session, "-S", "-200")

    def wait_for(self, text, timeout=10, after=0):
        """Waits until `text` appears on the screen past `after` characters."""
        deadline = time.time() + timeout
        while True:
            screen = self.screen()
            if text in screen[after:]:
                return screen
            if time.time() > deadline:
                self.fail("%r did not appear; the screen:\n%s" % (text, screen))
            time.sleep(0.1)

    def prompt(self):
        # capture-pane drops the blank that ends the prompt.
        return "berth %s (leader)>" % self.agent.address

    def run_line(self, line, expect):
        """Types a line and waits for `expect` and the next prompt after it."""
        before = len(self.screen().rstrip())
        self.t("send-keys", "-t", self.session, "-l", line)
        self.t("send-keys", "-t", self.session, "Enter")
        screen = self.wait_for(expect, after=before)
        start = screen.index(expect, before)
        self.wait_for(self.prompt(), after=start)
        return screen[before:]

    def test_shell(self):
        spec = os.path.join(self.tmp, "my spec.json")
        with open(spec, "w") as f:
            json.dump(VOLUME, f)
        self.session = "shell"
        env = "HOME=%s" % self.home
        self.t("new-session", "-d", "-x", "200", "-y", "50", "-s", self.session,
               "env", env, "TERM=xterm", BERTH, "--address", self.agent.address)
        self.wait_for(self.prompt())

        out = self.run_line("plugin status", "hostpath")
        self.assertIn("CONTROLLERS", out.upper())

        # Shell quoting: a backslash-escaped blank inside a file name.
        self.run_line("volume create " + spec.replace(" ", "\\ "), "created")

        # Tab completes a volume id fetched from the server.
        before = len(self.screen().rstrip())
        self.t("send-keys", "-t", self.session, "-l", "volume status d")
        self.t("send-keys", "-t", self.session, "Tab")
        self.wait_for("volume status db", after=before)
        self.t("send-keys", "-t", self.session, "Enter")
        self.wait_for("External ID", after=before)
        self.wait_for(self.prompt(), after=self.screen().index("External ID", before))

        out = self.run_line("help", "exit, quit")
        for command in ("volume claim", "volume register", "plugin status", "node status",
                        "status"):
            self.assertIn(command, out)
        self.run_line("help volume claim", "--alloc")

        out = self.run_line("status", "Version")
        self.assertIn("Leader", out)

        # berthd dies and comes back on the same port with the same data.
        self.agent.restart()
        out = self.run_line("volume status", "db")
        self.assertNotIn("Error", out)

        self.t("send-keys", "-t", self.session, "-l", "exit")
        self.t("send-keys", "-t", self.session, "Enter")
        history = os.path.join(self.home, ".berth_history")
        # The shell writes its history as it exits: wait until it is complete.
        deadline = time.time() + 10
        lines = []
        while time.time() < deadline:
            if os.path.exists(history):
                with open(history) as f:
                    lines = f.read().splitlines()
                if "exit" in [l.strip() for l in lines]:
                    break
            time.sleep(0.1)
        for line in ("plugin status", "volume status db", "help volume claim", "exit"):
            self.assertIn(line, [l.strip() for l in lines])

    def test_progress_shows_on_a_terminal_only(self):
        """Long commands print progress on a terminal (stderr), never under
        --json or into a pipe."""
        for vid in ("p1", "p2", "p3"):
            with open(os.path.join(self.tmp, vid + ".json"), "w") as f:
                json.dump(dict(VOLUME, id=vid), f)
        # (Each command line built from its own parts: a replace() on the
        # whole line also rewrote a temporary directory named ...p1...)
        def cmd(vid, *flags):
            return " ".join([BERTH, "--address", self.agent.address, *flags, "volume", "create",
                             os.path.join(self.tmp, vid + ".json")])
        tty = subprocess.run(["script", "-qec", cmd("p1"), "/dev/null"], capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(tty.returncode, 0, tty)
        self.assertIn("Creating volume 'p1'", tty.stdout)
        self.assertIn("volume 'p1' created", tty.stdout)
        quiet = subprocess.run(["script", "-qec", cmd("p2", "--json"), "/dev/null"],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(quiet.returncode, 0, quiet)
        self.assertNotIn("Creating", quiet.stdout)
        piped = berth(self.agent, "volume", "create", os.path.join(self.tmp, "p3.json"))
        self.assertEqual(piped.code, 0, piped)
        self.assertNotIn("Creating", piped.out + piped.err)

    def test_snapshot_save_that_cannot_be_written_fails(self):
        """A snapshot that cannot be written is bad input (exit 2, as JSON
        under --json), not a success with an error line."""
        target = os.path.join(self.tmp, "no-such-dir", "state.snap")
        plain = berth(self.agent, "operator", "snapshot", "save", target)
        self.assertEqual(plain.code, 2, plain)
        self.assertIn("Error: cannot create %s.partial: No such file or directory" % target,
                      plain.err)
        self.assertEqual(plain.out, "")
        as_json = berth(self.agent, "--json", "operator", "snapshot", "save", target)
        self.assertEqual(as_json.code, 2, as_json)
        self.assertEqual(json.loads(as_json.err)["error"]["code"], "invalid")
        saved = berth(self.agent, "operator", "snapshot", "save",
                      os.path.join(self.tmp, "state.snap"))
        self.assertEqual(saved.code, 0, saved)
        self.assertTrue(os.path.getsize(os.path.join(self.tmp, "state.snap")) > 0)

    def test_snapshot_save_the_server_cannot_copy_fails_and_the_server_serves_on(self):
        """When the server cannot make its copy of the state (here its
        scratch file, DATA/state.db.snapshot, is a directory; a full disk is
        the usual cause), the save fails naming the file, nothing is
        written, and berthd goes on serving: before, the state machine ended
        berthd (and before that, the server actor ended and berthd lingered
        serving nobody)."""
        scratch = os.path.join(self.tmp, "data", "state.db.snapshot")
        os.mkdir(scratch)
        with open(os.path.join(scratch, "keep"), "w") as f:
            f.write("x")
        target = os.path.join(self.tmp, "state.snap")
        failed = berth(self.agent, "operator", "snapshot", "save", target)
        self.assertNotEqual(failed.code, 0, failed)
        self.assertIn("the state machine made no snapshot", failed.err)
        self.assertIn(scratch, failed.err)
        self.assertFalse(os.path.exists(target))
        self.assertFalse(os.path.exists(target + ".partial"))
        self.assertIsNone(self.agent.proc.poll(), "berthd ended on a failed snapshot")
        # It serves reads and writes on.
        spec = json.dumps({"id": "after", "plugin_id": "hostpath", "capacity_min": "1MiB",
                           "capabilities": [{"access_mode": "single-node-writer",
                                             "attachment_mode": "file-system"}]})
        created = berth(self.agent, "volume", "create", "-", stdin=spec)
        self.assertEqual(created.code, 0, created)
        shutil.rmtree(scratch)
        saved = berth(self.agent, "operator", "snapshot", "save", target)
        self.assertEqual(saved.code, 0, saved)
        self.assertTrue(os.path.getsize(target) > 0)

    def test_json_errors_survive_bytes_that_are_not_utf8(self):
        """A file name that is not UTF-8 shows as U+FFFD in a JSON error
        (dump() used to throw: berth aborted)."""
        name = os.path.join(self.tmp, "\udcff.json")  # the byte 0xff
        r = berth(self.agent, "--json", "volume", "register", name)
        self.assertEqual(r.code, 2, r)
        self.assertIn("\ufffd.json", json.loads(r.err)["error"]["message"])


if __name__ == "__main__":
    unittest.main()
