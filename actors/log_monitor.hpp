// The log monitor: one per berthd process, registered in the actor system
// under monitor_atom (find it with log_monitor_of).  Serves `berth monitor`
// from the process's ring of recent log lines (log/log.hpp): a request with
// no new line yet waits (long poll) until one is written or its wait_ms
// passes.  It never logs itself: its own lines would wake it.
#pragma once

#include <vector>

#include "actors/actors.hpp"

namespace berth {

struct log_monitor_state {
  struct waiting {
    v1::MonitorRequest request;
    int64_t deadline_ms = 0;  // steady clock
    caf::typed_response_promise<pb<v1::MonitorResult>> rp;
  };
  std::vector<waiting> waits;
  static inline const char* name = "log_monitor";
};

// `max_wait_ms`: the longest a berth monitor request waits for a line.
log_monitor_actor::behavior_type log_monitor(
    log_monitor_actor::stateful_pointer<log_monitor_state> self, uint32_t max_wait_ms);

// Spawns the process's log monitor and registers it (once per process).
log_monitor_actor start_log_monitor(caf::actor_system& sys);

// The process's log monitor (invalid before start_log_monitor).
log_monitor_actor log_monitor_of(caf::actor_system& sys);

}  // namespace berth
