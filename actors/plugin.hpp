// The plugin actor: one per plugin.  It owns the plugin's controller and
// node instances, so its healthy/expected counts change only through its
// own serialized, committed updates.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>

#include "actors/actors.hpp"
#include "actors/node_call.hpp"

namespace berth {

struct plugin_state {
  v1::Plugin plugin;
  replicated_log_actor log;
  uint64_t term = 0;  // the leader term it serves: its proposals carry it
  // Controller RPCs of this plugin run one at a time: the next waits here.
  std::deque<std::function<void()>> controller_queue;
  int controller_running = 0;  // at most controller_call_limit(plugin)
  // Every controller call not answered yet (queued or running), by a
  // number: answered with an error when this actor stops (its leader
  // stepped down, or the plugin was garbage-collected), because a volume
  // actor awaits each one and would otherwise wait forever (an actor in
  // await takes no exit message either, so it would outlive its leader).
  // Shared with the exit callback, which runs after the state is gone.
  std::shared_ptr<std::map<uint64_t, caf::typed_response_promise<pb<v1::NodeVolumeResult>>>>
      open_calls = std::make_shared<
          std::map<uint64_t, caf::typed_response_promise<pb<v1::NodeVolumeResult>>>>();
  uint64_t next_call = 0;
  // The node actors the leader retired (actors/node_call.hpp): a queued
  // controller call whose controller restarted meanwhile fails at once.
  retired_nodes_ptr retired;
  static inline const char* name = "plugin";
};

plugin_actor::behavior_type plugin(plugin_actor::stateful_pointer<plugin_state> self,
                                   replicated_log_actor log, v1::Plugin initial, uint64_t term,
                                   retired_nodes_ptr retired);

}  // namespace berth
