// The leader actor: the control plane's entry point.  It validates
// commands, spawns and routes to the volume and plugin actors, owns the node
// records, and keeps a read catalog of everything committed (updated by the
// actors after each commit, before they answer).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actors/actors.hpp"
#include "actors/metrics.hpp"
#include "persistence/state_store.hpp"

namespace berth {

struct leader_options {
  // A node whose client sent no heartbeat for this long is marked down and
  // its allocs lost.
  std::chrono::milliseconds node_down_timeout{20000};
  // How long alloc stop and a failed alloc run wait for the alloc's claims
  // to be released before answering (the watcher goes on after that).
  std::chrono::milliseconds release_wait{30000};
  // The Raft term this leader serves (set when it starts): every CSI
  // request it sends carries it, and nodes refuse older terms.
  uint64_t term = 0;
};

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
  // Allocs and nodes as last proposed: the leader is their only writer, so
  // a change builds on the one before even while that one commits.
  std::map<std::string, v1::Alloc> allocs;
  std::map<std::string, int64_t> last_seen;  // node -> steady ms of its last heartbeat
  watcher_actor watcher;
  leader_options options;
  // Callers waiting until an alloc's claims are all freed, with deadlines
  // (steady ms); called with false on timeout.
  struct waiter {
    std::string alloc;
    int64_t deadline_ms;
    std::function<void(bool)> done;
  };
  std::vector<waiter> waiters;
  // Claims being made, per node and plugin (volume keys): counted against
  // the plugin's max volumes per node together with the published ones.
  std::map<std::pair<std::string, std::string>, std::set<volume_key>> claiming;
  uint64_t ticks = 0;
  static inline const char* name = "leader";
};

// Starts with the committed state (restored from the state tables) and
// spawns a volume actor per volume and a plugin actor per plugin.
leader_actor::behavior_type leader(leader_actor::stateful_pointer<leader_state> self,
                                   replicated_log_actor log, state_contents initial,
                                   std::shared_ptr<metrics> stats, leader_options options);

}  // namespace berth
