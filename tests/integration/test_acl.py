"""ACLs (issue 13) on a 3-server cluster started with --acl and two real
clients on 127.0.0.1, through the shell as an operator uses it: anonymous
requests refused (exit 6) except `berth status`; `acl bootstrap` once; a
policy in Nomad's HCL form; a token with csi-read-volume reads but cannot
claim; a token for namespace team-a cannot see default's volumes and claims
in team-a through the whole claim cycle; a deleted token is refused at once
on every server; a leader change keeps all of it; a client node is bound to
its node secret and an impostor with the same node id is refused; no token
secret in any server's log or state."""

import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

from cluster import Client, ClusterTestCase
from harness import BERTH, SHELL_TIMEOUT, TIME_SCALE, Result, berth

READER = """
# reads the default namespace, and the nodes
namespace "default" {
  policy = "read"
}
node { policy = "read" }
plugin { policy = "read" }
"""

TEAM = """
namespace "team-*" {
  policy = "read"
  capabilities = ["csi-write-volume", "csi-mount-volume", "submit-job", "alloc-lifecycle"]
}
"""


def volume_spec(vid, ns="default"):
    return json.dumps({"id": vid, "namespace": ns, "plugin_id": "hostpath",
                       "capabilities": [{"access_mode": "single-node-writer",
                                         "attachment_mode": "file-system"}]})


class AclTest(ClusterTestCase):
    PREFIX = "berth-acl-"
    SERVER_ARGS = ("--acl",)

    def setUp(self):
        self.saved_token = os.environ.pop("BERTH_TOKEN", None)
        super().setUp()

    def tearDown(self):
        os.environ.pop("BERTH_TOKEN", None)
        if self.saved_token is not None:
            os.environ["BERTH_TOKEN"] = self.saved_token

    def as_(self, token, *args, via=None, stdin=None):
        """The shell with this token ("": none, and no BERTH_TOKEN either)."""
        env = {k: v for k, v in os.environ.items() if k != "BERTH_TOKEN"}
        argv = [BERTH, "--address", via or self.via, "--timeout", SHELL_TIMEOUT]
        argv += ["--token", token] if token else []
        proc = subprocess.run(argv + list(args), input=stdin, capture_output=True, text=True,
                              timeout=90 * TIME_SCALE, env=env)
        return Result(proc)

    def expect(self, r, code, *fragments):
        self.assertEqual(r.code, code, r)
        for f in fragments:
            self.assertIn(f, r.err + r.out, r)

    def test_acl_cluster(self):
        # Anonymous: refused with exit code 6 and how to get a token; berth
        # status still answers (it tells who leads).
        self.expect(self.as_("", "volume", "status"), 6, "needs a token", "acl bootstrap")
        self.expect(self.as_("", "node", "status"), 6)
        self.assertEqual(self.as_("", "status").code, 0)
        self.expect(self.as_("made-up-token-0000000000", "volume", "status"), 6, "not known")

        # Bootstrap: once.
        r = self.as_("", "--json", "acl", "bootstrap")
        self.assertEqual(r.code, 0, r)
        boot = r.json()
        mgmt = boot["secret_id"]
        self.assertEqual(boot["type"], "management")
        self.expect(self.as_("", "acl", "bootstrap"), 4, "bootstrapped already")
        os.environ["BERTH_TOKEN"] = mgmt  # for the cluster helpers (peers, leader)

        # The clients bind their node ids to their node secrets; with a
        # management token the plugin shows both nodes.
        shared = os.path.join(self.tmp, "storage")  # one storage behind both plugins
        self.cluster.add_client("c1", shared_root=shared)
        self.cluster.add_client("c2", shared_root=shared)
        self.wait(lambda: (self.as_(mgmt, "--json", "plugin", "status", "hostpath").json() or {})
                  .get("nodes_healthy") == 2, "both clients' plugins healthy")
        accessors = [t["accessor_id"] for t in self.as_(mgmt, "--json", "acl", "token", "list").json()]
        self.assertIn("node:c1", accessors)
        self.assertIn("node:c2", accessors)

        # Policies (HCL, from stdin and from a file); a bad one is refused
        # with its line and changes nothing.
        path = os.path.join(self.tmp, "team.hcl")
        with open(path, "w") as f:
            f.write(TEAM)
        r = self.as_(mgmt, "acl", "policy", "apply", "reader", "-", stdin=READER)
        self.assertEqual(r.code, 0, r)
        self.assertEqual(self.as_(mgmt, "acl", "policy", "apply", "team", path,
                                  "--description", "team namespaces").code, 0)
        r = self.as_(mgmt, "acl", "policy", "apply", "broken", "-",
                     stdin='namespace "x" {\n  policy = "root"\n}\n')
        self.expect(r, 2, "line 2", "deny, read, write")
        names = [p["name"] for p in self.as_(mgmt, "--json", "acl", "policy", "list").json()]
        self.assertEqual(names, ["reader", "team"])

        reader = self.as_(mgmt, "--json", "acl", "token", "create", "--name", "reader",
                          "--policy", "reader").json()
        team = self.as_(mgmt, "--json", "acl", "token", "create", "--name", "team",
                        "--policy", "team").json()
        self.expect(self.as_(mgmt, "acl", "token", "create", "--policy", "nope"), 3, "nope")
        self.expect(self.as_(reader["secret_id"], "acl", "token", "list"), 6, "management token")
        me = self.as_(team["secret_id"], "--json", "acl", "token", "self").json()
        self.assertEqual(me["accessor_id"], team["accessor_id"])
        self.assertNotIn("secret_id", me)

        # Volumes in default (management) and team-a (the team's token).
        self.assertEqual(self.as_(mgmt, "volume", "create", "-",
                                  stdin=volume_spec("vd")).code, 0)
        self.expect(self.as_(team["secret_id"], "volume", "create", "-",
                             stdin=volume_spec("vd2")), 6, "csi-write-volume", "'default'")
        r = self.as_(team["secret_id"], "volume", "create", "-",
                     stdin=volume_spec("vt", "team-a"))
        self.assertEqual(r.code, 0, r)

        # reader: reads default, cannot claim, sees nothing of team-a.
        rs = reader["secret_id"]
        self.assertEqual(self.as_(rs, "volume", "status", "vd").code, 0)
        self.expect(self.as_(rs, "volume", "claim", "vd", "--alloc", "a1", "--node", "c1"), 6,
                    "csi-mount-volume", "'default'")
        listed = [v["id"] for v in self.as_(rs, "-n", "*", "--json", "volume", "status").json()]
        self.assertEqual(listed, ["vd"])
        self.expect(self.as_(rs, "-n", "team-a", "volume", "status", "vt"), 6, "'team-a'")
        self.expect(self.as_(rs, "node", "drain", "c1", "--deadline", "1m"), 6, "node write")

        # team: the claim cycle in team-a; default stays out of reach.
        ts = team["secret_id"]
        listed = [v["id"] for v in self.as_(ts, "-n", "*", "--json", "volume", "status").json()]
        self.assertEqual(listed, ["vt"])
        r = self.as_(ts, "-n", "team-a", "volume", "claim", "vt", "--alloc", "t1", "--node", "c1")
        self.assertEqual(r.code, 0, r)
        claims = self.as_(ts, "-n", "team-a", "--json", "volume", "status", "vt").json()["claims"]
        self.assertEqual([c["alloc_id"] for c in claims], ["t1"])
        self.assertEqual(self.as_(ts, "-n", "team-a", "volume", "release", "vt",
                                  "--alloc", "t1").code, 0)
        self.expect(self.as_(ts, "volume", "status", "vd"), 6, "csi-read-volume")

        # The event stream: each token gets only the events it may read.
        last = max(p["commit_index"] for p in self.cluster.peers())

        def stream(token):
            r = self.as_(token, "event", "stream", "--index", "1", "--until-index", str(last))
            self.assertEqual(r.code, 0, r)
            return {(e["topic"], e["namespace"]) for e in map(json.loads, r.out.splitlines())}
        seen = stream(rs)
        self.assertIn(("volume", "default"), seen)
        self.assertIn(("node", ""), seen)  # node read
        self.assertFalse({("volume", "team-a"), ("claim", "team-a")} & seen, seen)
        seen = stream(ts)
        self.assertIn(("claim", "team-a"), seen)
        self.assertFalse({("volume", "default"), ("node", "")} & seen, seen)
        self.expect(self.as_("", "event", "stream", "--index", "1", "--until-index", str(last)),
                    6, "needs a token")

        # A deleted token is refused at once, on every server.
        self.assertEqual(self.as_(mgmt, "acl", "token", "delete", reader["accessor_id"]).code, 0)
        for s in self.cluster.servers:
            self.expect(self.as_(rs, "volume", "status", "vd", via=s.address), 6, "not known")
            # A stale read is checked with what that server applied: soon.
            self.wait(lambda: self.as_(rs, "volume", "status", "--stale", via=s.address).code == 6,
                      "the deleted token refused by %s's stale reads" % s.name, timeout=10)

        # A leader change keeps tokens, policies and the bootstrap.
        old = self.cluster.leader()
        old.kill(signal.SIGKILL)
        self.cluster.wait_leader(exclude=old)
        self.via = next(s.address for s in self.cluster.servers if s is not old)
        self.assertEqual(self.as_(ts, "-n", "team-a", "volume", "status", "vt").code, 0)
        self.expect(self.as_(rs, "volume", "status", "vd"), 6)
        self.expect(self.as_("", "acl", "bootstrap"), 4, "bootstrapped already")
        self.expect(self.as_(ts, "volume", "status", "vd"), 6)

        # An impostor client with c1's node id (another data directory, so
        # another node secret) is refused: its plugin instance never counts.
        imp = Client(self.tmp, "c1", [s.address for s in self.cluster.servers
                                       if s is not old], self.cluster.processes[-1].socket)
        imp.argv[imp.argv.index("--data-dir") + 1] = os.path.join(self.tmp, "impostor")
        imp.log_path = os.path.join(self.tmp, "impostor.log")
        self.cluster.processes.append(imp)
        imp.start()
        logs = [os.path.join(self.tmp, s.name + ".log") for s in self.cluster.servers]
        self.wait(lambda: any("another node secret" in open(l, errors="replace").read()
                              for l in logs), "the impostor refused in a server's log")

        # No token secret anywhere on the servers: logs, state, raft log.
        for secret in (mgmt, rs, ts):
            for path in glob.glob(os.path.join(self.tmp, "**"), recursive=True):
                if os.path.isfile(path) and "impostor" not in path:
                    with open(path, "rb") as f:
                        self.assertNotIn(secret.encode(), f.read(), path)


if __name__ == "__main__":
    unittest.main()
