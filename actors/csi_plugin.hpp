// A CSI plugin connection: owns a csi::client and runs CSI jobs on its own
// thread (spawned detached), so blocking gRPC calls never stall CAF's
// scheduler.
#pragma once

#include <memory>

#include "actors/actors.hpp"
#include "actors/metrics.hpp"

namespace berth {

struct csi_plugin_state {
  std::shared_ptr<csi::client> client;
  static inline const char* name = "csi_plugin";
};

csi_plugin_actor::behavior_type csi_plugin(csi_plugin_actor::stateful_pointer<csi_plugin_state> self,
                                           std::string plugin_id, std::string endpoint,
                                           std::chrono::milliseconds deadline,
                                           std::shared_ptr<metrics> stats);

}  // namespace berth
