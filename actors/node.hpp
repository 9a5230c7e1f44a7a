// The node actor: the berth client of one host.  It owns a connection
// (csi_plugin actor) per configured plugin, fingerprints the plugins
// periodically (GetPluginInfo, Probe, capabilities, NodeGetInfo) and reports
// changes to the leader, runs the CSI calls that publish and unpublish
// volumes on this host (actors/node_csi, paths and records in
// actors/node_mounts) and the allocs' commands (actors/node_allocs).  Every
// storage-changing call carries its leader's Raft term and is refused when a
// newer leader is known (fenced).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "actors/actors.hpp"
#include "actors/lease_guard.hpp"
#include "actors/metrics.hpp"
#include "actors/node_allocs.hpp"
#include "actors/node_csi.hpp"
#include "actors/node_fence.hpp"
#include "actors/node_mounts.hpp"
#include "control/lease.hpp"
#include "persistence/client_store.hpp"

namespace berth {

struct node_config {
  std::string node_id;
  // Sent with the node's own reports: the servers bind the node id to it
  // (ACLs, control/acl).  Made at the client's first start (DATA/node-secret).
  std::string node_secret;
  std::string csi_root;
  std::vector<node_plugin> plugins;
  std::chrono::milliseconds fingerprint_interval{5000};
  // NodeGetVolumeStats of the published volumes every this long
  // (--volume-stats-interval); < 0: never.
  std::chrono::milliseconds volume_stats_interval{60000};
  std::chrono::milliseconds csi_timeout{30000};
  // Start with no recorded leader term (servers rebuilt as a new cluster).
  bool forget_leader_term = false;
  // Where alloc commands run (DATA/allocs/<id>: stdout, stderr, exit).
  std::string alloc_dir;
  // Each alloc's command runs under this supervisor (berth-alloc, found by
  // default_alloc_supervisor), which reads the lease from `lease_file`
  // (empty: ALLOC_DIR/../lease), written at the start and on every renewal.
  std::string alloc_supervisor;
  std::string lease_file;
  // How long a stopped alloc's command gets after SIGTERM before SIGKILL.
  std::chrono::milliseconds kill_timeout{5000};
  // Client mode: the servers' shell endpoints (HOST:PORT) to register with;
  // any of them forwards to the leader.  Empty in --dev (local server).
  std::vector<std::string> servers;
};

struct node_state {
  node_config config;
  api_actor api;            // a server (forwarding to the leader)
  std::shared_ptr<metrics> stats;
  size_t next_server = 0;   // client mode: which server to try next
  bool connecting = false;
  std::map<std::string, csi_plugin_actor> connections;
  std::map<std::string, v1::PluginInstance> instances;  // last probed
  std::map<std::string, std::string> reported;          // last reported, serialized
  // Plugins whose probe is still running: a tick probes only the others, so
  // a plugin that does not answer holds one probe, not one per tick (each
  // would take a thread of its own until its deadline).
  std::set<std::string> probing;
  // The client's database and what it holds.
  std::shared_ptr<client_store> store;
  mount_table mounts;
  // client.db's group commit (node.cpp, write_mount): the mount writes
  // queued since the last flush, each with what runs once it is durable
  // (no write: a call waiting for the writes queued before it,
  // after_mount_writes).
  std::vector<
      std::pair<std::optional<mount_write>, std::function<void(const std::optional<failure>&)>>>
      mount_writes;
  alloc_table allocs;
  // Plugins probed healthy since this client started: CSI calls wait for
  // that (after a restart the plugin may not be back yet).
  std::set<std::string> ready_plugins;
  waiting_calls waiting;
  // alloc stop: answered once the command exited.
  struct stopping {
    caf::typed_response_promise<int32_t> rp;
    int64_t kill_at_ms;  // steady clock: SIGKILL after this
    bool unmount;
  };
  std::map<std::string, std::vector<stopping>> stops;
  // Allocs stopped before this client knew them: their run request, if it
  // comes after the stop, is refused (no command runs that nobody owns).
  std::set<std::string> stopped_before_start;
  std::deque<std::string> stopped_order;
  // The actors whose CSI steps reached this node (the latest 10,000): a
  // ping from one of them is answered with whether its step arrived
  // (actors/node_call.hpp: a step lost on a route that died is retried).
  std::set<caf::actor_addr> step_senders;
  std::deque<caf::actor_addr> step_sender_order;
  bool polling = false;
  // Answers to alloc runs held back by a test's hold point
  // (BERTH_HOLD=node.run-answer=MS, persistence/crashpoint.hpp): each is
  // delivered by the first poll at or after its steady time.
  std::vector<std::pair<int64_t, caf::typed_response_promise<bool>>> held_run_answers;
  bool measuring = false;  // a volume stats measure is under way
  // The newest leader term CSI requests or heartbeat answers came from
  // (also in client.db): requests of an older leader are refused.
  leader_fence fence;
  // The lease a leader granted with the last confirmed heartbeat
  // (control/lease.hpp): when it runs out, this node fences itself.
  berth::lease lease;
  int64_t lease_recorded_wall_ms = 0;  // last renewal written to client.db
  // The host's boot id, which the lease file names (control/lease:
  // lease_file_text), and the lease end the file holds now.
  std::string boot_id;
  int64_t lease_file_until_ms = -1;
  int missed_heartbeats = 0;           // in a row: another server is tried after 2
  // The self-fence: allocs this node stops on its own (also in client.db,
  // so a restart finishes it), with when to SIGKILL (steady ms), and the
  // publications being unmounted.
  std::map<std::string, int64_t> fenced;
  std::map<std::string, int64_t> fence_kill_at;
  std::set<mount_key> unmounting;
  // The servers' NodeUnpublish requests in flight: the volume stats skip
  // them (a NodeGetVolumeStats after the NodeUnpublish asks about a volume
  // no longer published there, NOT_FOUND).
  std::set<mount_key> unpublishing;
  // Stops those writers the moment the lease runs out, on its own thread
  // (actors/lease_guard): kept current with the lease and the writers.
  std::shared_ptr<lease_guard> guard;
  // The publish floor (control/lease), shared with the plugin connections.
  std::shared_ptr<std::atomic<uint64_t>> publish_floor =
      std::make_shared<std::atomic<uint64_t>>(floor_lapsed);
  // Publishes that came before this client's first lease (control/lease:
  // publish_waits_for_lease): asked again once it is granted, refused after
  // first_lease_wait.
  struct unleased_publish {
    caf::typed_response_promise<pb<v1::NodeVolumeResult>> rp;
    pb<v1::NodeVolumeRequest> req;
    int64_t since_ms;  // steady clock
  };
  std::vector<unleased_publish> awaiting_lease;
  // The last client.db problem printed (printed once, not every poll).
  std::string last_problem;
  static inline const char* name = "node";
};

// `api`: the local server in --dev; invalid in client mode (the node
// connects to config.servers, and to the next one when its server fails).
// `store`: the client's database (DATA/client.db), restored at start.
node_actor::behavior_type node(node_actor::stateful_pointer<node_state> self, node_config config,
                               api_actor api, std::shared_ptr<metrics> stats,
                               std::shared_ptr<client_store> store);

}  // namespace berth
