#include "control/activation.hpp"

#include <algorithm>

namespace berth {

bool should_stop(const volume_activity& a, bool has_actor, int64_t now_ms, int64_t idle_after_ms,
                 bool force) {
  if (!has_actor || a.stopping || a.in_flight > 0) return false;
  if (force) return true;
  return idle_after_ms >= 0 && now_ms - a.idle_since_ms >= idle_after_ms;
}

bool can_spawn(const volume_activity& a, uint64_t applied) {
  return !a.stopping && applied >= a.min_index;
}

bool can_forget(const volume_activity& a, bool has_actor, bool anyone_waiting, uint64_t applied) {
  return !has_actor && !anyone_waiting && a.in_flight == 0 && !a.stopping &&
         applied >= a.min_index;
}

void request_sent(volume_activity& a) {
  ++a.in_flight;
}

void request_done(volume_activity& a, int64_t now_ms, uint64_t index) {
  if (a.in_flight > 0) --a.in_flight;
  a.idle_since_ms = std::max(a.idle_since_ms, now_ms);
  a.min_index = std::max(a.min_index, index);
}

void stop_sent(volume_activity& a) {
  a.stopping = true;
}

void stop_done(volume_activity& a, uint64_t last_index) {
  a.stopping = false;
  a.min_index = std::max(a.min_index, last_index);
}

}  // namespace berth
