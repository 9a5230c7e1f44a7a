// The two clocks the actors read: wall time (unix milliseconds, stored in
// records and shown to operators) and steady time (for timeouts, never
// stored).  The pure rules take `now` from their callers instead.
#pragma once

#include <chrono>
#include <cstdint>

namespace berth {

inline int64_t wall_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

inline int64_t steady_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace berth
