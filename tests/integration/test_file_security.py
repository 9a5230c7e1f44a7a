"""File security (issue 13) on a 3-server cluster with two clients, as real
processes on 127.0.0.1, under the umask 022 of a default install:

- file modes: every data directory is 0700 (one that existed with 0755 is
  tightened, and its berthd says so once); every file berthd wrote in it
  (state.db, log.db, client.db and their -wal/-shm, raft-snapshot.bin) is
  0600, and so is the file `berth operator snapshot save` writes.  Not
  checked: DATA/allocs/* (the allocs' own output) and DATA/csi/* (the
  volumes' mount points: their contents are the volumes').
- secrets only where they are used: a volume's secret reaches the servers'
  state and the CSI calls that send it (CreateVolume, ControllerPublish,
  NodeStage/NodePublish, ControllerUnpublish), never NodeUnpublish's request;
  it is in no file of either client (client.db, its WAL) and in no berthd's
  log at trace level."""

import json
import os
import re
import stat
import time
import unittest

from cluster import ClusterTestCase, Client
from harness import SHELL_TIMEOUT, berth

SECRET = "s3cr3t-of-volume-v-8472"
VOLUME = {"id": "v", "plugin_id": "hostpath", "secrets": {"password": SECRET},
          "capabilities": [{"access_mode": "single-node-writer",
                            "attachment_mode": "file-system"}]}
TRACE = ("--log-level", "trace")
# Not berthd's own files: the allocs' output and the volumes' mount points.
SKIPPED = ("allocs", "csi")


def files_under(data_dir):
    out = []
    for root, dirs, files in os.walk(data_dir):
        if root == data_dir:
            dirs[:] = [d for d in dirs if d not in SKIPPED]
        out += [os.path.join(root, f) for f in files]
    return out


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def contains(path, needle):
    with open(path, "rb") as f:
        return needle.encode() in f.read()


class FileSecurityTest(ClusterTestCase):
    PREFIX = "berth-filesec-"
    SERVER_ARGS = TRACE
    SNAPSHOT_THRESHOLD = 10  # raft-snapshot.bin is written (and checked)

    def setUp(self):
        self.old_umask = os.umask(0o022)
        self.addCleanup(os.umask, self.old_umask)
        super().setUp()

    def shell(self, *args, stdin=None):
        """The shell; exit 5 (e.g. the plugin not yet known to the leader)
        is retried briefly, as a script would."""
        deadline = time.time() + 20
        while True:
            r = berth(self.via, "--timeout", SHELL_TIMEOUT, *args, stdin=stdin, timeout=90)
            if r.code != 5 or time.time() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(r.code, 0, r)
        return r

    def test_modes_and_secrets(self):
        # c2's data directory exists already, open to group and others.
        c2_dir = os.path.join(self.tmp, "c2")
        os.makedirs(c2_dir)
        os.chmod(c2_dir, 0o755)
        # One storage behind both plugins: either client's controller serves.
        shared = os.path.join(self.tmp, "shared-root")
        _, c1 = self.cluster.add_client("c1", shared_root=shared, client_args=TRACE)
        _, c2 = self.cluster.add_client("c2", shared_root=shared, client_args=TRACE)
        self.wait(lambda: self.b("--json", "plugin", "status", "hostpath").json()
                  .get("nodes_healthy") == 2, "both clients' plugins healthy")
        self.shell("volume", "create", "-", stdin=json.dumps(VOLUME))
        self.shell("volume", "claim", "v", "--alloc", "a1", "--node", "c1")
        saved = os.path.join(self.tmp, "saved.snap")
        self.shell("operator", "snapshot", "save", saved)
        self.shell("volume", "release", "v", "--alloc", "a1")
        self.shell("volume", "claim", "v", "--alloc", "a2", "--node", "c2")
        self.shell("volume", "release", "v", "--alloc", "a2")
        self.wait(lambda: not self.b("--json", "volume", "status", "v").json()["claims"],
                  "the claims released")

        # --- file modes
        self.assertEqual(mode(saved), 0o600)
        data_dirs = [s.data_dir for s in self.cluster.servers] + \
            [os.path.join(self.tmp, c) for c in ("c1", "c2")]
        seen = set()
        for d in data_dirs:
            self.assertEqual(mode(d), 0o700, d)
            for f in files_under(d):
                seen.add(os.path.basename(f))
                self.assertEqual(mode(f) & 0o077, 0, "%s is %o" % (f, mode(f)))
        # The files the check is about were there to be checked.
        for name in ("state.db", "log.db", "client.db", "state.db-wal", "log.db-wal",
                     "client.db-wal"):
            self.assertIn(name, seen)
        self.assertTrue(any(os.path.exists(os.path.join(s.data_dir, "raft-snapshot.bin"))
                            for s in self.cluster.servers),
                        "no server took a snapshot (snapshot threshold)")
        with open(c2.log_path) as f:
            c2_log = f.read()
        self.assertEqual(c2_log.count("data directory made private"), 1, c2_log[-2000:])

        # --- secrets: in the servers' state, in no client file or any log.
        leader_dir = self.cluster.leader().data_dir
        state = b""
        for f in os.listdir(leader_dir):
            if f.startswith("state.db"):
                with open(os.path.join(leader_dir, f), "rb") as db:
                    state += db.read()
        self.assertIn(SECRET.encode(), state)  # the check below can fail
        for c in ("c1", "c2"):
            for f in files_under(os.path.join(self.tmp, c)):
                self.assertFalse(contains(f, SECRET), f)
        for p in self.cluster.processes:
            if isinstance(p, Client) or p in self.cluster.servers:
                self.assertFalse(contains(p.log_path, SECRET), p.log_path)
        # Which steps brought the secret to a client: the publication's,
        # never NodeUnpublish's.
        steps = {}
        for c in (c1, c2):
            with open(c.log_path) as f:
                for m in re.finditer(r"volume step received step=(\w+) .*?alloc=(\w*) "
                                     r"secrets=(\d+)", f.read()):
                    steps.setdefault(m.group(1), set()).add(int(m.group(3)))
        self.assertEqual(steps.get("publish"), {1}, steps)
        self.assertEqual(steps.get("unpublish"), {0}, steps)
        for step in ("controller_publish", "controller_unpublish"):
            self.assertEqual(steps.get(step), {1}, steps)


if __name__ == "__main__":
    unittest.main()
