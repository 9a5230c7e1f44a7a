// The event journal: the events of the entries this server applied (from
// its state machine), bounded (control/events' event_journal), and the
// event stream's long polls waiting for new ones.  Every server runs one and
// answers `berth event stream` from it, leader or not, so a consumer keeps
// streaming through a leader change.
#pragma once

#include <cstdint>
#include <map>

#include "actors/actors.hpp"
#include "control/events.hpp"

namespace berth {

struct event_journal_state {
  struct waiting {
    v1::EventStreamRequest request;
    caf::typed_response_promise<pb<v1::Response>> rp;
  };
  event_journal journal{1, 0};
  std::map<uint64_t, waiting> waits;  // by id
  uint64_t next_wait = 1;
  static inline const char* name = "event_journal";
};

// Keeps at least `capacity` events; starts after `applied` (what the state
// tables held at start: earlier events are not served).
event_journal_actor::behavior_type event_journal_server(
    event_journal_actor::stateful_pointer<event_journal_state> self, size_t capacity,
    uint64_t applied);

}  // namespace berth
