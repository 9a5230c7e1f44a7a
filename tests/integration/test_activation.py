"""Volume actors on demand (issue 12, part 1) on a 3-server cluster with a
real client on 127.0.0.1, through the shell and /metrics: the leader starts
a volume's actor for a request and stops it once the volume has been idle
for --volume-idle-timeout; a volume whose actor was stopped is claimed,
released and deregistered as before, by a new actor started from the
committed state, and a new leader starts with no volume actor at all."""

import json
import re
import unittest
import urllib.request

from cluster import ClusterTestCase
from harness import berth


def volume_spec(vid):
    return json.dumps({"id": vid, "plugin_id": "hostpath",
                       "capabilities": [{"access_mode": "single-node-writer",
                                         "attachment_mode": "file-system"}]})


def metric(server, series):
    """One series of a server's /metrics, e.g. 'berth_actors{kind="volume"}' (None if absent)."""
    port = int(re.search(r"metrics on 127\.0\.0\.1:(\d+)", server.banner).group(1))
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.rsplit(" ", 1)[1])
    return None


def add_client_with_plugin(test):
    """Starts client c1 and waits until its hostpath plugin is healthy."""
    test.cluster.add_client("c1")
    test.wait(lambda: berth(test.via, "--json", "plugin", "status", "hostpath").code == 0 and
              berth(test.via, "--json", "plugin", "status", "hostpath")
              .json()["nodes_healthy"] == 1, "the client's plugin healthy")


def volume_actors(server):
    return metric(server, 'berth_actors{kind="volume"}')


class VolumeActorsOnDemandTest(ClusterTestCase):
    PREFIX = "berth-activation-"
    SERVER_ARGS = ("--volume-idle-timeout", "1s")

    def claims(self, vid):
        return [(c["alloc_id"], c["state"])
                for c in self.b("--json", "volume", "status", vid).json()["claims"]]

    def idle(self, leader):
        self.wait(lambda: volume_actors(leader) == 0, "every volume actor stopped when idle")

    def test_actors_come_and_go_and_the_volume_keeps_working(self):
        add_client_with_plugin(self)
        leader = self.cluster.leader()
        for vid in ("v1", "v2", "v3"):
            self.b("volume", "create", "-", stdin=volume_spec(vid))
        # Registered volumes with nothing to do have no actor on the leader.
        self.idle(leader)
        for event in ("started", "stopped"):
            self.assertGreaterEqual(
                metric(leader, 'berth_volume_actor_events_total{event="%s"}' % event), 3)

        # A claim starts the volume's actor; an idle claimed volume has none.
        self.b("volume", "claim", "v1", "--alloc", "a1", "--node", "c1")
        self.assertEqual(self.claims("v1"), [("a1", "taken")])
        self.idle(leader)
        # The claim is still enforced without an actor: a second writer is
        # refused by a new actor started from the committed volume.
        self.b("volume", "claim", "v1", "--alloc", "a2", "--node", "c1", expect=4)
        self.idle(leader)
        # The release runs its CSI steps through another new actor.
        self.b("volume", "release", "v1", "--alloc", "a1")
        self.assertEqual(self.claims("v1"), [])
        # The alloc record `volume claim` made went with the free, in its
        # entry: gone once the release answered.
        self.b("alloc", "status", "a1", expect=3)
        self.b("volume", "claim", "v1", "--alloc", "a2", "--node", "c1")
        self.assertEqual(self.claims("v1"), [("a2", "taken")])

        # A new leader starts without volume actors and serves at once;
        # the claim it finds is enforced and released through a new actor.
        leader.kill()
        new_leader = self.cluster.wait_leader(exclude=leader)
        self.via = new_leader.address
        self.wait(lambda: self.cluster.leader() is new_leader, "the new leader known")
        self.assertEqual(self.claims("v1"), [("a2", "taken")])
        self.assertEqual(volume_actors(new_leader), 0)
        self.b("volume", "claim", "v1", "--alloc", "a3", "--node", "c1", expect=4)
        # Until the client has registered with the new leader the release
        # answers "unavailable" (exit 5); it is safe to send again.
        self.wait(lambda: berth(self.via, "volume", "release", "v1", "--alloc", "a2").code == 0,
                  "the release through the new leader")
        self.assertEqual(self.claims("v1"), [])
        self.idle(new_leader)
        # Deregistration through an actor started for it; the volume is gone.
        self.b("volume", "deregister", "v2")
        self.b("volume", "status", "v2", expect=3)
        # Re-registering an idle volume goes through a new actor too.
        self.b("volume", "delete", "v3")
        self.b("volume", "create", "-", stdin=volume_spec("v3"))
        self.idle(new_leader)

    def test_bad_idle_timeout_is_refused(self):
        from harness import BERTHD
        import subprocess
        r = subprocess.run([BERTHD, "--server", "--volume-idle-timeout", "soon"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r)
        self.assertIn("--volume-idle-timeout 'soon' is not a duration", r.stderr)


class VolumeActorsBoundTest(ClusterTestCase):
    """--volume-actors-max: beyond it the longest idle volume actors stop
    before their idle time is up (here an hour), and a stopped volume is
    claimed as before."""
    PREFIX = "berth-activation-max-"
    SERVER_ARGS = ("--volume-idle-timeout", "1h", "--volume-actors-max", "2")

    def test_the_longest_idle_stop_beyond_the_bound(self):
        add_client_with_plugin(self)
        leader = self.cluster.leader()
        for i in range(6):
            self.b("volume", "create", "-", stdin=volume_spec("b%d" % i))
        # Six actors started; all but two stopped, long before an hour.
        self.wait(lambda: volume_actors(leader) == 2, "volume actors down to the bound")
        self.assertGreaterEqual(
            metric(leader, 'berth_volume_actor_events_total{event="stopped"}'), 4)
        self.assertEqual(volume_actors(leader), 2)
        # The first volumes were the longest idle: their actors went, and a
        # claim starts one again from the committed volume.
        self.b("volume", "claim", "b0", "--alloc", "a1", "--node", "c1")
        self.assertEqual([(c["alloc_id"], c["state"]) for c in
                          self.b("--json", "volume", "status", "b0").json()["claims"]],
                         [("a1", "taken")])
        self.wait(lambda: volume_actors(leader) == 2, "volume actors back at the bound")
        self.b("volume", "release", "b0", "--alloc", "a1")
        self.b("volume", "claim", "b1", "--alloc", "a2", "--node", "c1")

    def test_a_bound_of_zero_is_refused(self):
        from harness import BERTHD
        import subprocess
        r = subprocess.run([BERTHD, "--server", "--volume-actors-max", "0"],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0, r)
        self.assertIn("--volume-actors-max", r.stderr)


if __name__ == "__main__":
    unittest.main()
