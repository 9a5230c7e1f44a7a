// Actors berthd cannot serve without (the server, the replicated log, the
// state machine, the event journal, the node actor): when one ends, for
// whatever reason, the process must not linger half-alive (voting in Raft,
// answering no one).  `watch_vital` calls `ended` once when the actor
// ends; berthd's `ended` logs the actor and its reason and exits with
// status 70, as a fail-stop does, so a supervisor (systemd) restarts it.
#pragma once

#include <functional>
#include <string>

#include <caf/actor_cast.hpp>
#include <caf/error.hpp>
#include <caf/fwd.hpp>

namespace berth {

using vital_ended = std::function<void(const std::string& name, const caf::error& reason)>;

void watch_vital(const caf::strong_actor_ptr& actor, std::string name, vital_ended ended);

template <class Handle>
void watch_vital(const Handle& actor, std::string name, vital_ended ended) {
  watch_vital(caf::actor_cast<caf::strong_actor_ptr>(actor), std::move(name), std::move(ended));
}

// berthd's `ended`: logs "an actor berthd cannot serve without ended" with
// the actor and the reason, then std::_Exit(70).
void exit_process(const std::string& name, const caf::error& reason);

}  // namespace berth
