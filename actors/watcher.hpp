// The volume watcher: a leader-side actor that releases the claims of
// terminal, lost and vanished allocs, and resumes releases a failed step or
// a leader change left half done.  It decides from the committed volumes
// and allocs the leader tells it about (claims_to_release, a pure rule) and
// asks the leader to release each such claim; the volume actor then runs
// and commits the release steps one by one.  A failed step is retried with
// exponential backoff and jitter until it succeeds.
#pragma once

#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "actors/actors.hpp"
#include "actors/clock.hpp"
#include "actors/metrics.hpp"

namespace berth {

struct watcher_state {
  using volume_key = std::pair<std::string, std::string>;  // namespace, id
  using claim_key = std::tuple<std::string, std::string, std::string>;  // ns, volume, alloc
  struct work {
    uint32_t attempts = 0;
    std::string last_error;
    int64_t due_ms = 0;      // steady clock
    int64_t next_retry_ms = 0;  // wall clock, for operators
    bool in_flight = false;
  };
  leader_actor leader;
  std::shared_ptr<metrics> stats;
  std::map<volume_key, v1::Volume> volumes;  // volumes with claims
  std::map<std::string, v1::AllocState> allocs;
  std::map<std::string, std::set<volume_key>> volumes_of_alloc;
  std::map<claim_key, work> pending;
  bool ticking = false;
  std::minstd_rand rng{static_cast<std::minstd_rand::result_type>(random_seed())};
  static inline const char* name = "watcher";
};

watcher_actor::behavior_type watcher(watcher_actor::stateful_pointer<watcher_state> self,
                                     leader_actor leader, std::shared_ptr<metrics> stats);

}  // namespace berth
