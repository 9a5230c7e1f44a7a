// The leader actor: the control plane's entry point.  It validates
// commands, spawns and routes to the volume and plugin actors, owns the node
// records, and keeps a read catalog of everything committed (updated by the
// actors after each commit, before they answer).
#pragma once

#include <map>
#include <string>
#include <utility>

#include "actors/actors.hpp"
#include "actors/metrics.hpp"
#include "persistence/state_store.hpp"

namespace berth {

struct leader_state {
  using volume_key = std::pair<std::string, std::string>;  // namespace, id
  replicated_log_actor log;
  std::shared_ptr<metrics> stats;
  std::map<volume_key, volume_actor> volume_actors;
  std::map<volume_key, v1::Volume> volumes;  // committed, with secrets
  std::map<std::string, plugin_actor> plugin_actors;
  std::map<std::string, v1::Plugin> plugins;
  std::map<std::string, v1::Node> nodes;
  std::map<std::string, node_actor> node_actors;  // nodes with a berth client
  std::map<std::string, size_t> next_controller;  // round-robin per plugin
  agent_identity identity;  // set by the agent right after publishing
  static inline const char* name = "leader";
};

// Starts with the committed state (restored from the state tables) and
// spawns a volume actor per volume and a plugin actor per plugin.
leader_actor::behavior_type leader(leader_actor::stateful_pointer<leader_state> self,
                                   replicated_log_actor log, state_contents initial,
                                   std::shared_ptr<metrics> stats);

}  // namespace berth
