// A CSI plugin connection on a node: one csi::client (gRPC channels are
// thread-safe), a gate that decides which jobs run (control/call_gate: the
// plugin's limits, one call per volume, backoff when overloaded), and a
// pool of detached workers that run them, so blocking gRPC calls never
// stall CAF's scheduler.
#pragma once

#include <atomic>

#include <map>
#include <memory>
#include <vector>

#include "actors/actors.hpp"
#include "actors/metrics.hpp"
#include "actors/node_csi.hpp"

namespace berth {

struct csi_plugin_state {
  std::shared_ptr<csi::client> client;
  std::unique_ptr<call_gate> gate;
  struct waiting_job {
    csi_job job;
    caf::typed_response_promise<csi_outcome> rp;
  };
  std::map<uint64_t, waiting_job> jobs;  // by the gate's ticket
  std::vector<csi_plugin_actor> idle;    // workers with nothing to run
  size_t workers = 0;
  bool tick_pending = false;
  // A call that could not start within this (--csi-timeout) is answered
  // without being sent (call_gate::expire).
  int64_t wait_limit_ms = 30000;
  // The node's fence (leader_fence::published): a call of an older
  // leader's term is refused when it starts (null: no check).
  std::shared_ptr<const std::atomic<uint64_t>> fence;
  // The node's publish floor (control/lease): a publish of a claim
  // committed before it is answered without being sent (null: no check).
  std::shared_ptr<const std::atomic<uint64_t>> publish_floor;
  static inline const char* name = "csi_plugin";
};

csi_plugin_actor::behavior_type csi_plugin(
    csi_plugin_actor::stateful_pointer<csi_plugin_state> self, node_plugin plugin,
    std::chrono::milliseconds deadline, std::shared_ptr<metrics> stats,
    std::shared_ptr<const std::atomic<uint64_t>> fence = nullptr,
    std::shared_ptr<const std::atomic<uint64_t>> publish_floor = nullptr);

}  // namespace berth
