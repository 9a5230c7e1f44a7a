// Volume actors on demand (virtual actors, as Orleans activates grains): a
// volume's actor exists while it has work (a claim, a release step, a
// registration in flight) and is stopped after it has been idle for a
// while; an idle volume is only its row in the catalog.  These rules decide
// when the leader spawns, stops and forgets a volume's actor; the leader
// (actors/leader.cpp) does the messaging.  The guarantee they keep: all
// requests of one volume go through its one actor, in order; a request that
// arrives while the actor is being stopped waits and is sent to the next
// one, which starts from the catalog only once the catalog applied every
// change the stopped actor committed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace berth {

struct volume_activity {
  int in_flight = 0;           // requests sent to the actor and not answered yet
  int64_t idle_since_ms = 0;   // steady time of the last answer (or of the spawn)
  bool stopping = false;       // a stop was asked and not answered yet
  uint64_t min_index = 0;      // the newest index the actor committed (its answers' modify index)
};

// Whether an idle actor should be stopped now: it exists, no request is in
// flight, no stop is under way, and it has been idle for `idle_after_ms`
// (< 0: actors are never stopped for idleness).  `force` stops an actor
// that has nothing in flight whatever its idle time (a first registration
// that failed).
bool should_stop(const volume_activity& a, bool has_actor, int64_t now_ms, int64_t idle_after_ms,
                 bool force = false);

// Idle actors stopped per leader tick (500 ms) at the most, the longest idle
// first: after a burst of registrations every actor of the burst falls idle
// within seconds, and stopping 100,000 at once (each a request, a reply, an
// exit) starved the servers' threads until the leader lost its leadership.
constexpr size_t max_idle_stops_per_tick = 500;

// Of the idle actors (idle since, key), the ones to stop this tick: the
// longest idle first, at most `max` (the rest wait for the next tick).
template <class Key>
std::vector<Key> idle_stops(std::vector<std::pair<int64_t, Key>> idle,
                            size_t max = max_idle_stops_per_tick) {
  if (idle.size() > max) {
    std::nth_element(idle.begin(), idle.begin() + static_cast<std::ptrdiff_t>(max), idle.end());
    idle.resize(max);
  }
  std::vector<Key> out;
  out.reserve(idle.size());
  for (auto& [since, key] : idle) out.push_back(std::move(key));
  return out;
}

// Whether a new actor may be spawned from the catalog: no stop is under
// way, and the catalog (at `applied`) holds everything the last actor
// committed, so the new one does not start from an older volume.
bool can_spawn(const volume_activity& a, uint64_t applied);

// Whether the leader may drop what it keeps for the volume: no actor, no
// request in flight or waiting, no stop under way, and nothing committed
// that the catalog has not applied.
bool can_forget(const volume_activity& a, bool has_actor, bool anyone_waiting, uint64_t applied);

// Bookkeeping of the leader: a request sent to the actor, its answer (with
// the modify index it carried, 0 when it failed), a stop asked, and the
// stop's answer (ok: the actor quit after committing up to `last_index`).
void request_sent(volume_activity& a);
void request_done(volume_activity& a, int64_t now_ms, uint64_t index);
void stop_sent(volume_activity& a);
void stop_done(volume_activity& a, uint64_t last_index);

}  // namespace berth
