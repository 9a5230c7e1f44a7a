// Starting a berthd: opens the data directory, recovers the state tables
// from the durable log, spawns the actors and publishes the shell endpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace caf {
class actor_system;
}

namespace berth {

struct agent_options {
  bool dev = false;
  std::string data_dir;
  std::string bind = "127.0.0.1";
  uint16_t port = 4747;
  std::string metrics_bind = "127.0.0.1";
  uint16_t metrics_port = 4746;
  int scheduler_threads = 2;
  // The client side: this host's node actor and its plugins.
  std::string node_name;                 // default: the host name
  std::vector<std::string> plugin_flags;  // --plugin ID=TYPE:SOCKET
  std::string csi_root;                   // default: DATA/csi
  double fingerprint_interval = 5;        // seconds
  double csi_timeout = 30;                // seconds per CSI call
  std::string hostpath_bin;               // --dev: the plugin to start
};

struct agent_started {
  uint16_t port = 0;
  uint16_t metrics_port = 0;
  uint64_t applied_index = 0;
  size_t volumes = 0;
  size_t plugins = 0;
  std::string node_name;
  std::vector<std::string> plugin_ids;
};

// Starts the agent's actors in `sys`.  Throws std::runtime_error with a
// message for the operator (naming the file or port and the fix) when the
// agent cannot start; nothing is changed on disk in that case.
agent_started start_agent(caf::actor_system& sys, const agent_options& opts);

}  // namespace berth
