// Starting a berthd: opens the data directory, recovers the state tables
// from the durable log, spawns the actors and publishes the shell endpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

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
};

struct agent_started {
  uint16_t port = 0;
  uint16_t metrics_port = 0;
  uint64_t applied_index = 0;
  size_t volumes = 0;
  size_t plugins = 0;
};

// Starts the agent's actors in `sys`.  Throws std::runtime_error with a
// message for the operator (naming the file or port and the fix) when the
// agent cannot start; nothing is changed on disk in that case.
agent_started start_agent(caf::actor_system& sys, const agent_options& opts);

}  // namespace berth
