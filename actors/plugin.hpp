// The plugin actor: one per plugin.  It owns the plugin's controller and
// node instances, so its healthy/expected counts change only through its
// own serialized, committed updates.
#pragma once

#include <deque>
#include <functional>

#include "actors/actors.hpp"

namespace berth {

struct plugin_state {
  v1::Plugin plugin;
  replicated_log_actor log;
  // Controller RPCs of this plugin run one at a time: the next waits here.
  std::deque<std::function<void()>> controller_queue;
  bool controller_busy = false;
  static inline const char* name = "plugin";
};

plugin_actor::behavior_type plugin(plugin_actor::stateful_pointer<plugin_state> self,
                                   replicated_log_actor log, v1::Plugin initial);

}  // namespace berth
