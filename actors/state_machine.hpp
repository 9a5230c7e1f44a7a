// The state machine: applies committed entries to the SQLite state tables
// with the applied index, and tells the event journal the events of every
// entry it applied.  Runs detached (SQLite I/O off the scheduler).
#pragma once

#include <memory>

#include "actors/actors.hpp"
#include "actors/metrics.hpp"
#include "control/catalog.hpp"
#include "persistence/state_store.hpp"

namespace berth {

struct state_machine_state {
  std::shared_ptr<state_store> store;
  std::shared_ptr<metrics> stats;
  event_journal_actor journal;
  // The state tables' contents in memory, as of the same applied index:
  // what each change replaced, for its events (control/events).
  catalog cat;
  // berthd --acl: reads and the server's own answers are checked against
  // the request's token (control/acl) with this catalog.
  bool acl = false;
  static inline const char* name = "state_machine";
};

state_machine_actor::behavior_type state_machine(
    state_machine_actor::stateful_pointer<state_machine_state> self,
    std::shared_ptr<state_store> store, std::shared_ptr<metrics> stats,
    event_journal_actor journal, bool acl);

}  // namespace berth
