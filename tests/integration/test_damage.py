"""A damaged data directory (issue 7, "Bad input and damage"): berthd must
refuse to start, quickly, with an error on stderr naming the damaged file and
the way to recover, and never run with wrong state.  An intact copy of the
same data directory still starts with everything in it.

One berthd --dev registers volumes (with a low --snapshot-threshold, so that
the directory also holds raft-snapshot.bin and a compacted log) and stops;
each test damages its own copy of that directory."""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

from harness import BERTHD, HOSTPATH_ARGS, Agent, berth

VOLUMES = 40


def volume_json(i):
    return ('{"id": "vol-%03d", "plugin_id": "manual", "external_id": "ext-%03d", '
            '"capabilities": [{"access_mode": "single-node-writer", '
            '"attachment_mode": "file-system"}]}' % (i, i))


def overwrite(path, offset, data):
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


class DamageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="berth-damage-")
        cls.pristine = os.path.join(cls.tmp, "pristine")
        agent = Agent(cls.pristine, ["--snapshot-threshold", "16"])
        try:
            agent.start()
            r = berth(agent, "plugin", "fingerprint", "manual", "--node", "n1")
            assert r.code == 0, r
            for i in range(VOLUMES):
                r = berth(agent, "volume", "register", "-", stdin=volume_json(i))
                assert r.code == 0, r
        finally:
            agent.kill(signal.SIGTERM)
        # Fold the write-ahead logs into the database files, as SQLite's own
        # checkpoints do every 1000 pages, so that damage to a file's middle
        # lands on the pages that hold the data.
        for name in ("log.db", "state.db"):
            db = sqlite3.connect(os.path.join(cls.pristine, name))
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.close()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def copy(self, name):
        path = os.path.join(self.tmp, name)
        shutil.copytree(self.pristine, path, ignore=shutil.ignore_patterns("csi", "hostpath*"))
        self.addCleanup(shutil.rmtree, path, True)
        return path

    def assert_refuses(self, data_dir, damaged_file):
        """berthd exits non-zero within seconds, naming the file and the fix."""
        start = time.monotonic()
        proc = subprocess.Popen(
            [BERTHD, "--dev", "--data-dir", data_dir, "--port", "0", "--metrics-port", "0"]
            + HOSTPATH_ARGS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            self.fail("berthd still runs on a damaged %s: %s %s" % (damaged_file, out, err))
        took = time.monotonic() - start
        print("%s: exit %s after %.2f s: %s" % (self.id(), proc.returncode, took, err.strip()),
              file=sys.stderr)
        self.assertNotEqual(proc.returncode, 0, "berthd started on a damaged %s: %s %s" %
                            (damaged_file, out, err))
        self.assertLess(took, 10, "berthd took %.1f s to refuse" % took)
        self.assertNotIn("serving the shell", out)
        self.assertIn(os.path.join(data_dir, damaged_file), err)
        self.assertIn("damaged", err)
        self.assertIn("berth operator snapshot restore", err)
        self.assertIn("rejoins the cluster", err)
        # One log line at error says so (docs/user-guide.md, Logs and monitoring).
        self.assertRegex(err, r"(?m)^\d{4}-\d\d-\d\dT\S+Z error (berthd refusing to start on "
                              r"damaged data|raft stopping: cannot go on safely) error=")
        return err

    def test_intact_copy_starts_with_everything(self):
        data = self.copy("intact")
        self.assertTrue(os.path.exists(os.path.join(data, "raft-snapshot.bin")))
        agent = Agent(data)
        self.addCleanup(agent.kill)
        agent.start()
        self.assertIn("%d volumes" % VOLUMES, agent.banner)
        r = berth(agent, "--json", "volume", "status")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(sorted(v["id"] for v in r.json()),
                         ["vol-%03d" % i for i in range(VOLUMES)])

    def test_lost_state_db_is_rebuilt_from_the_snapshot_and_the_log(self):
        # Not damage but loss (or a crash between receiving a snapshot and
        # installing it): the log is compacted, so the state comes from the
        # snapshot, then the log after it.
        data = self.copy("state-lost")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(os.path.join(data, "state.db" + suffix)):
                os.remove(os.path.join(data, "state.db" + suffix))
        db = sqlite3.connect(os.path.join(data, "log.db"))
        first = db.execute("SELECT MIN(idx) FROM entries").fetchone()[0]
        db.close()
        self.assertGreater(first, 1, "the log was not compacted")
        agent = Agent(data)
        self.addCleanup(agent.kill)
        agent.start()
        self.assertIn("%d volumes" % VOLUMES, agent.banner)
        r = berth(agent, "--json", "volume", "status")
        self.assertEqual(r.code, 0, r)
        self.assertEqual(len(r.json()), VOLUMES)

    def test_truncated_state_db(self):
        data = self.copy("state-truncated")
        path = os.path.join(data, "state.db")
        size = os.path.getsize(path)
        self.assertGreater(size, 8192)
        os.truncate(path, size // 2)
        self.assert_refuses(data, "state.db")

    def test_state_db_header_overwritten(self):
        data = self.copy("state-notadb")
        overwrite(os.path.join(data, "state.db"), 0, b"\x00" * 100)
        err = self.assert_refuses(data, "state.db")
        self.assertIn("not a SQLite database", err)

    def test_log_db_entry_bytes_overwritten(self):
        # Bytes in the middle of the log file that belong to a live entry:
        # the page structure stays valid (quick_check passes), only the
        # entry's checksum can tell.
        data = self.copy("log-entry")
        path = os.path.join(data, "log.db")
        db = sqlite3.connect(path)
        rows = db.execute("SELECT idx, data FROM entries ORDER BY idx").fetchall()
        db.close()
        with open(path, "rb") as f:
            content = f.read()
        middle = len(content) // 2
        candidates = []
        for idx, blob in rows:
            at = content.find(blob)
            if at >= 0 and content.find(blob, at + 1) < 0 and len(blob) >= 32:
                candidates.append((abs(at - middle), at, len(blob), idx))
        self.assertTrue(candidates, "no live entry found in the file")
        _, at, length, idx = min(candidates)
        overwrite(path, at + length // 2 - 8, b"\xa5" * 16)
        err = self.assert_refuses(data, "log.db")
        self.assertIn("entry %d" % idx, err)

    def test_log_db_page_overwritten(self):
        # A whole page of the entries table, in the middle of the file.
        data = self.copy("log-page")
        path = os.path.join(data, "log.db")
        db = sqlite3.connect(path)
        try:
            pages = [p for (p,) in db.execute(
                "SELECT pageno FROM dbstat WHERE name='entries' ORDER BY pageno")]
            page_size = db.execute("PRAGMA page_size").fetchone()[0]
        except sqlite3.OperationalError as e:
            self.skipTest("this SQLite has no dbstat table: %s" % e)
        finally:
            db.close()
        page = pages[len(pages) // 2]
        overwrite(path, (page - 1) * page_size, b"\x5a" * page_size)
        self.assert_refuses(data, "log.db")

    def test_log_db_lost(self):
        # The state tables are ahead of an empty log: entries were lost.
        data = self.copy("log-lost")
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(os.path.join(data, "log.db" + suffix)):
                os.remove(os.path.join(data, "log.db" + suffix))
        open(os.path.join(data, "log.db"), "wb").close()
        self.assert_refuses(data, "log.db")

    def test_snapshot_bytes_overwritten(self):
        data = self.copy("snapshot-bytes")
        path = os.path.join(data, "raft-snapshot.bin")
        self.assertTrue(os.path.exists(path), "no snapshot was taken")
        size = os.path.getsize(path)
        overwrite(path, size // 2, b"\xff" * 8)
        err = self.assert_refuses(data, "raft-snapshot.bin")
        self.assertIn("checksum", err)

    def test_truncated_snapshot(self):
        data = self.copy("snapshot-truncated")
        path = os.path.join(data, "raft-snapshot.bin")
        self.assertTrue(os.path.exists(path), "no snapshot was taken")
        os.truncate(path, os.path.getsize(path) // 2)
        err = self.assert_refuses(data, "raft-snapshot.bin")
        self.assertIn("truncated", err)


if __name__ == "__main__":
    unittest.main(verbosity=2)
