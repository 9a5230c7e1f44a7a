// Starting a berthd: a server (the control plane: replicated log, state
// machine, server actor and, while it leads, the leader actor), a client
// (a node actor and its plugins), or both in one process (--dev: a
// single-member cluster).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace caf {
class actor_system;
}

#include "control/activation.hpp"
#include "control/admission.hpp"
#include "tls/tls.hpp"

namespace berth {

struct agent_options {
  bool dev = false;
  bool server = false;
  bool client = false;
  std::string name;  // this berthd: server name and node id (default: host name)
  std::string data_dir;
  std::string bind = "127.0.0.1";
  uint16_t port = 4747;       // the shell endpoint
  uint16_t raft_port = 4748;  // servers: the replicated log
  size_t bootstrap_expect = 1;
  std::vector<std::string> join;     // servers: other servers' raft addresses
  std::vector<std::string> servers;  // clients: servers' shell endpoints
  double raft_tick = 0.1;            // seconds
  uint64_t snapshot_threshold = 8192;  // applied entries between Raft snapshots
  uint64_t snapshot_piece_size = 1 << 20;  // bytes per piece of a snapshot sent
  size_t event_journal_size = 20000;   // recent events kept for the event stream
  std::string metrics_bind = "127.0.0.1";
  uint16_t metrics_port = 4746;
  int scheduler_threads = 2;
  std::vector<std::string> plugin_flags;  // --plugin ID=TYPE:SOCKET
  std::string csi_root;                   // default: DATA/csi
  double fingerprint_interval = 5;        // seconds
  bool forget_leader_term = false;        // after the servers were rebuilt as a new cluster
  double csi_timeout = 30;                // seconds per CSI call
  std::string hostpath_bin;               // --dev: the plugin to start
  double node_down_timeout = 45;          // servers: seconds without heartbeat
  double node_lease = 0;                  // servers: seconds; 0: a third of the above
  int64_t node_lease_ms = 15000;          // as resolved
  // Every berthd: the SIGTERM grace of a client's allocs (its fence and
  // stops); the servers' lease check assumes clients use at most theirs.
  double kill_timeout = 5;        // seconds
  double fence_unmount_time = 5;  // servers: seconds a fence's unmount may take
  bool keep_down_writers = false;
  std::string alloc_gc_threshold = "5m";  // servers: as given; parsed into alloc_gc_ms
  std::string node_gc_threshold = "24h";
  int64_t alloc_gc_ms = 5 * 60 * 1000;  // < 0: never
  int64_t node_gc_ms = 24 * 60 * 60 * 1000;
  std::string volume_idle_timeout = "30s";  // servers: as given; parsed into volume_idle_ms
  int64_t volume_idle_ms = 30 * 1000;       // < 0: never
  size_t volume_actors_max = default_volume_actors_max;
  size_t plugin_window = default_plugin_window;  // servers: berthd --plugin-window
  std::string volume_health_interval = "60s";  // servers: parsed into volume_health_ms
  int64_t volume_health_ms = 60 * 1000;        // < 0: never
  std::string volume_stats_interval = "60s";   // clients: parsed into volume_stats_ms
  int64_t volume_stats_ms = 60 * 1000;         // < 0: never
  bool acl = false;                         // servers: --acl (every server of the cluster)
  tls::files tls;                           // --tls-ca, --tls-cert, --tls-key (all or none)
  bool tls_verify_http_client = false;      // the HTTPS port requires a client certificate
};

struct agent_started {
  uint16_t port = 0;
  uint16_t raft_port = 0;
  uint16_t metrics_port = 0;
  uint64_t applied_index = 0;
  size_t volumes = 0;
  size_t plugins = 0;
  std::string name;
  std::vector<std::string> plugin_ids;
};

// Thrown by start_agent when a file of the data directory is damaged (its
// message names the file and the way to recover).
struct damaged_data : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Starts the agent's actors in `sys`.  Throws std::runtime_error with a
// message for the operator (naming the file or port and the fix) when the
// agent cannot start, damaged_data when its data is damaged; nothing is
// changed on disk in that case.
agent_started start_agent(caf::actor_system& sys, const agent_options& opts);

}  // namespace berth
