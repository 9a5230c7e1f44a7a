// The replicated log, single-member version: assigns indexes, batches every
// proposal that arrives while the previous write is in flight into the next
// durable write (group commit), acknowledges proposals once durable, and
// hands committed entries to the state machine in order.
#pragma once

#include <vector>

#include <caf/typed_response_promise.hpp>

#include "actors/actors.hpp"

namespace berth {

struct replicated_log_state {
  struct pending {
    uint64_t index;
    std::string data;
    caf::typed_response_promise<uint64_t> promise;
  };
  uint64_t term = 1;
  uint64_t last_index = 0;
  bool writing = false;
  std::vector<pending> queued;  // waiting for the next write
  log_writer_actor writer;
  state_machine_actor machine;
  static inline const char* name = "replicated_log";
};

replicated_log_actor::behavior_type replicated_log(
    replicated_log_actor::stateful_pointer<replicated_log_state> self, uint64_t last_index,
    log_writer_actor writer, state_machine_actor machine);

}  // namespace berth
