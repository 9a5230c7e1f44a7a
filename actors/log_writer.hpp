// The log writer: owns the durable log file and fsyncs every batch.  Runs
// detached (its own thread) so fsync never blocks CAF's scheduler.
#pragma once

#include <memory>

#include "actors/actors.hpp"
#include "actors/metrics.hpp"

namespace berth {

struct log_writer_state {
  std::shared_ptr<log_store> store;
  std::shared_ptr<metrics> stats;
  static inline const char* name = "log_writer";
};

log_writer_actor::behavior_type log_writer(log_writer_actor::stateful_pointer<log_writer_state> self,
                                           std::shared_ptr<log_store> store,
                                           std::shared_ptr<metrics> stats);

}  // namespace berth
