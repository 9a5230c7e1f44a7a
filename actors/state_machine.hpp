// The state machine: applies committed entries to the SQLite state tables
// with the applied index.  Runs detached (SQLite I/O off the scheduler).
#pragma once

#include <memory>

#include "actors/actors.hpp"
#include "actors/metrics.hpp"
#include "persistence/state_store.hpp"

namespace berth {

struct state_machine_state {
  std::shared_ptr<state_store> store;
  std::shared_ptr<metrics> stats;
  static inline const char* name = "state_machine";
};

state_machine_actor::behavior_type state_machine(
    state_machine_actor::stateful_pointer<state_machine_state> self,
    std::shared_ptr<state_store> store, std::shared_ptr<metrics> stats);

}  // namespace berth
