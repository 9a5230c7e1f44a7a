// The two clocks the actors read: wall time (unix milliseconds, stored in
// records and shown to operators) and steady time (for timeouts, never
// stored).  The pure rules take `now` from their callers instead.
//
// A deterministic simulation (tests/sim/) runs the actors on CAF's test
// coordinator, whose timers follow a simulated clock: it points the
// sources below at that clock, and seeds the actors' random jitter, so a
// seed replays exactly.  Null (the default) means the system clocks and a
// random seed.  Set them only while no actor runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>

namespace berth {

inline int64_t (*wall_ms_source)() = nullptr;
inline int64_t (*steady_ms_source)() = nullptr;
inline uint64_t (*random_seed_source)() = nullptr;

inline int64_t wall_ms() {
  if (wall_ms_source != nullptr) return wall_ms_source();
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

inline int64_t steady_ms() {
  if (steady_ms_source != nullptr) return steady_ms_source();
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

// The seed of an actor's random number generator (the watcher's retry
// jitter).
inline uint64_t random_seed() {
  if (random_seed_source != nullptr) return random_seed_source();
  return std::random_device{}();
}

}  // namespace berth
