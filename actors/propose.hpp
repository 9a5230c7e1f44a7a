// The one way an actor proposes a change: the changes go into one log entry
// (control/entries.hpp), so an operation that changes several objects
// commits them together.  The handle answers with the entry's index once it
// is committed (durable on a majority); chain .then or .await on it.
#pragma once

#include <vector>

#include "actors/actors.hpp"
#include "control/entries.hpp"

namespace berth {

// `term`: the leader term the proposing actor serves (its leader's); the
// log refuses the proposal once it leads another term.
// `expect`: the versions the changes were built from (compare-and-set:
// control/catalog's expectations_of); the entry commits all the same, and
// its apply refuses it whole when one no longer holds (take_refused).
template <class Self>
auto propose(Self self, const replicated_log_actor& log, uint64_t term,
             std::vector<v1::Change> changes, std::vector<v1::Expectation> expect = {}) {
  return self->request(log, caf::infinite, propose_atom::value,
                       wrap(make_entry(std::move(changes), std::move(expect))), term);
}

}  // namespace berth
