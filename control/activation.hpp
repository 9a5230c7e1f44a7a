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
// 5,000 a tick (10,000/s) stays ahead of a stream of registrations.
constexpr size_t max_idle_stops_per_tick = 5000;

// Volume actors the leader keeps running at the most while none has work
// left (--volume-actors-max): beyond it the longest idle are stopped before
// their idle time is up, as Orleans collects activations under memory
// pressure.  A stream of 5,000 registrations/s would otherwise keep 150,000
// actors (~3 KiB each) for the 30 s idle time.
constexpr size_t default_volume_actors_max = 10000;

// Under the resident bound an actor is stopped early only once it has been
// idle this long: one that answered a moment ago is often between two steps
// of a flow (a registration and its expansion, a release's steps), and
// stopping it would only make the next step wait for a new one.
constexpr int64_t min_idle_before_eviction_ms = 1000;

// The actors to stop this tick, the longest idle first, at most `max`.  Of
// the stoppable ones (an actor with nothing in flight and no stop under
// way: idle since, key): every one idle for `idle_after_ms`, and while more
// than `resident_max` actors run (`running`), as many more of those idle
// for `min_idle_ms` as bring them down to it.  None when idle_after_ms < 0
// (never stopped: the bound does not apply either).
template <class Key>
std::vector<Key> actors_to_stop(std::vector<std::pair<int64_t, Key>> stoppable, size_t running,
                                int64_t now_ms, int64_t idle_after_ms, size_t resident_max,
                                size_t max = max_idle_stops_per_tick,
                                int64_t min_idle_ms = min_idle_before_eviction_ms) {
  std::vector<Key> out;
  if (idle_after_ms < 0 || stoppable.empty()) return out;
  size_t timed_out = 0, evictable = 0;
  for (const auto& s : stoppable) {
    if (now_ms - s.first >= idle_after_ms) ++timed_out;
    if (now_ms - s.first >= std::min(idle_after_ms, min_idle_ms)) ++evictable;
  }
  size_t over = running > resident_max ? running - resident_max : 0;
  size_t n = std::min({max, stoppable.size(), std::max(timed_out, std::min(over, evictable))});
  if (n == 0) return out;
  auto by_since = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (n < stoppable.size())
    std::nth_element(stoppable.begin(), stoppable.begin() + static_cast<std::ptrdiff_t>(n),
                     stoppable.end(), by_since);
  stoppable.resize(n);
  out.reserve(n);
  for (auto& [since, key] : stoppable) out.push_back(std::move(key));
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
