// Volume actors on demand (control/activation): when the leader spawns,
// stops and forgets a volume's actor.  The cases check each rule; the
// model runs the leader's use of them (leader.cpp: with_volume_actor,
// stop_idle_volume_actors) under random schedules and checks the
// guarantee: one actor per volume at a time, no request after a stop, no
// actor spawned from a catalog older than what the last one committed, and
// every request delivered, in order.
#include <doctest/doctest.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <limits>
#include <random>
#include <set>
#include <utility>
#include <vector>
#include <string>

#include "control/activation.hpp"

using namespace berth;

TEST_CASE("an idle actor is stopped after the idle time, never while busy or stopping") {
  volume_activity a;
  a.idle_since_ms = 1000;
  CHECK_FALSE(should_stop(a, false, 100000, 10));  // no actor
  CHECK_FALSE(should_stop(a, true, 1005, 10));     // idle 5 ms only
  CHECK(should_stop(a, true, 1010, 10));
  CHECK_FALSE(should_stop(a, true, 1000000, -1));  // never
  CHECK(should_stop(a, true, 1000, -1, true));     // forced
  request_sent(a);
  CHECK_FALSE(should_stop(a, true, 1000000, 10));
  CHECK_FALSE(should_stop(a, true, 1000000, 10, true));
  request_done(a, 5000, 7);
  CHECK_EQ(a.in_flight, 0);
  CHECK_EQ(a.min_index, 7u);
  CHECK_FALSE(should_stop(a, true, 5009, 10));
  CHECK(should_stop(a, true, 5010, 10));
  stop_sent(a);
  CHECK_FALSE(should_stop(a, true, 1000000, 10));
  CHECK_FALSE(should_stop(a, true, 1000000, 10, true));
}

TEST_CASE("a new actor starts only after the stop and once the catalog has what was committed") {
  volume_activity a;
  CHECK(can_spawn(a, 0));
  request_sent(a);
  request_done(a, 10, 42);  // the answer carried index 42
  CHECK_FALSE(can_spawn(a, 41));
  CHECK(can_spawn(a, 42));
  stop_sent(a);
  CHECK_FALSE(can_spawn(a, 100));
  stop_done(a, 44);  // committed up to 44 before it quit
  CHECK_FALSE(can_spawn(a, 43));
  CHECK(can_spawn(a, 44));
  // A failed answer (index 0) never lowers what must be applied.
  request_sent(a);
  request_done(a, 20, 0);
  CHECK_EQ(a.min_index, 44u);
  // A late answer's older index does not either.
  stop_done(a, 3);
  CHECK_EQ(a.min_index, 44u);
}

TEST_CASE("the leader forgets a volume only when nothing about it is pending") {
  volume_activity a;
  CHECK(can_forget(a, false, false, 0));
  CHECK_FALSE(can_forget(a, true, false, 0));
  CHECK_FALSE(can_forget(a, false, true, 0));
  request_sent(a);
  CHECK_FALSE(can_forget(a, false, false, 0));
  request_done(a, 1, 9);
  CHECK_FALSE(can_forget(a, false, false, 8));  // the catalog lags: keep min_index
  CHECK(can_forget(a, false, false, 9));
  stop_sent(a);
  CHECK_FALSE(can_forget(a, false, false, 9));
}

namespace {

// The leader's routing of one volume's requests, as leader.cpp does it,
// against actors that commit one index per request.
struct model {
  std::mt19937_64 rng;
  int64_t idle_ms;
  int64_t now = 0;
  uint64_t committed = 0;  // the log's newest index for this volume
  uint64_t applied = 0;    // what the catalog applied
  struct actor {
    int id;
    uint64_t spawned_at_applied;
    std::deque<int> inbox;  // requests sent, not answered
    bool stop_asked = false;
    bool stop_answered_pending = false;
  };
  std::optional<actor> live;
  std::optional<actor> quitting;  // asked to stop, answer not received yet
  bool slot_present = false;
  volume_activity act;
  std::deque<int> waiting;
  int next_actor = 0;
  int next_request = 0;
  std::vector<int> delivered;  // request ids in the order actors received them
  std::string violation;

  explicit model(uint64_t seed, int64_t idle) : rng(seed), idle_ms(idle) {}

  void route(int req) {
    if (!slot_present) {
      slot_present = true;
      act = volume_activity{};
    }
    if (!waiting.empty() || act.stopping || (!live && !can_spawn(act, applied))) {
      waiting.push_back(req);
      return;
    }
    if (!live) {
      if (quitting) violation = "spawned while the previous actor is still stopping";
      if (applied < act.min_index)
        violation = "spawned from a catalog older than the last actor's commits";
      live = actor{next_actor++, applied, {}, false, false};
      act.idle_since_ms = now;
    }
    if (live->stop_asked) violation = "a request sent after a stop";
    request_sent(act);
    live->inbox.push_back(req);
    delivered.push_back(req);
  }

  void rerun_waiting() {
    auto w = std::move(waiting);
    waiting.clear();
    for (int r : w) route(r);
  }

  void maybe_forget() {
    if (slot_present && can_forget(act, live.has_value(), !waiting.empty(), applied))
      slot_present = false;
  }

  void step() {
    switch (rng() % 5) {
      case 0:  // a request arrives
        route(next_request++);
        break;
      case 1:  // the actor answers its oldest request, committing one index
        if (live && !live->inbox.empty()) {
          live->inbox.pop_front();
          request_done(act, now, ++committed);
          maybe_forget();
        }
        break;
      case 2:  // the catalog applies some of what was committed
        if (applied < committed) {
          applied += 1 + rng() % (committed - applied);
          if (!live && !act.stopping) rerun_waiting();
          maybe_forget();
        }
        break;
      case 3:  // the leader's tick
        now += static_cast<int64_t>(rng() % 40);
        if (slot_present && should_stop(act, live.has_value(), now, idle_ms)) {
          if (!live->inbox.empty()) violation = "stopped with requests in flight";
          stop_sent(act);
          live->stop_asked = true;
          quitting = std::move(live);
          live.reset();
        }
        break;
      case 4:  // the stopping actor answers the stop and quits
        if (quitting) {
          stop_done(act, committed);
          quitting.reset();
          rerun_waiting();
          maybe_forget();
        }
        break;
    }
  }

  void drain() {
    for (int i = 0; i < 100000 && (!waiting.empty() || (live && !live->inbox.empty()) ||
                                   quitting || applied < committed);
         ++i) {
      if (live && !live->inbox.empty()) {
        live->inbox.pop_front();
        request_done(act, now, ++committed);
      } else if (quitting) {
        stop_done(act, committed);
        quitting.reset();
        rerun_waiting();
      } else if (applied < committed) {
        applied = committed;
        if (!live) rerun_waiting();
      }
      maybe_forget();
    }
  }
};

}  // namespace

TEST_CASE("random schedules keep one actor per volume and lose no request") {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    for (int64_t idle : {0, 5, 50}) {
      model m(seed, idle);
      for (int i = 0; i < 400 && m.violation.empty(); ++i) m.step();
      m.drain();
      INFO("seed " << seed << " idle " << idle);
      CHECK_MESSAGE(m.violation.empty(), m.violation);
      CHECK(m.waiting.empty());
      REQUIRE_EQ(m.delivered.size(), static_cast<size_t>(m.next_request));
      for (size_t i = 0; i < m.delivered.size(); ++i)
        REQUIRE_EQ(m.delivered[i], static_cast<int>(i));  // in arrival order
      CHECK(m.applied == m.committed);
      CHECK_FALSE(m.quitting.has_value());
    }
  }
}

TEST_CASE("idle actors are stopped a bounded number per tick, the longest idle first") {
  std::vector<std::pair<int64_t, std::string>> idle;
  const int n = static_cast<int>(max_idle_stops_per_tick) + 700;
  for (int i = 0; i < n; ++i) idle.emplace_back(10000 - i, "v" + std::to_string(i));
  // All idle for the timeout (now 50,000, idle since 10,000 or less).
  auto first = actors_to_stop(idle, idle.size(), 50000, 30000, 1'000'000);
  REQUIRE(first.size() == max_idle_stops_per_tick);
  // The ones idle longest (smallest idle_since) are the last numbers.
  std::set<std::string> picked(first.begin(), first.end());
  for (int i = n - static_cast<int>(max_idle_stops_per_tick); i < n; ++i)
    CHECK(picked.count("v" + std::to_string(i)) == 1);
  // Fewer than the bound: all of them; none: none; a bound of one: the longest idle.
  idle.resize(3);
  CHECK(actors_to_stop(idle, 3, 50000, 30000, 1'000'000).size() == 3);
  CHECK(actors_to_stop(std::vector<std::pair<int64_t, std::string>>{}, 0, 50000, 30000, 0).empty());
  CHECK(actors_to_stop(idle, 3, 50000, 30000, 1'000'000, 1) == std::vector<std::string>{"v2"});
  // Never: none, whatever the pressure.
  CHECK(actors_to_stop(idle, 3'000'000, 50000, -1, 0).empty());
}

TEST_CASE("over the resident bound the longest idle stop before their idle time is up") {
  std::mt19937 rng(20261126);
  for (int round = 0; round < 2000; ++round) {
    CAPTURE(round);
    const int64_t now = 1'000'000, idle_after = 30'000;
    std::vector<std::pair<int64_t, int>> stoppable;
    size_t count = rng() % 50;
    for (size_t i = 0; i < count; ++i)
      stoppable.emplace_back(now - static_cast<int64_t>(rng() % 60'000), static_cast<int>(i));
    size_t busy = rng() % 20;  // actors with work: running, never stopped
    size_t running = count + busy;
    size_t resident_max = rng() % 60;
    size_t max = 1 + rng() % 40;
    const int64_t min_idle = static_cast<int64_t>(rng() % 20'000);
    auto out = actors_to_stop(stoppable, running, now, idle_after, resident_max, max, min_idle);
    size_t timed_out = 0, evictable = 0;
    for (const auto& s : stoppable) {
      timed_out += now - s.first >= idle_after;
      evictable += now - s.first >= min_idle;
    }
    size_t over = running > resident_max ? running - resident_max : 0;
    // As many as the timeout or the bound ask (the bound only those idle
    // for min_idle), within what may stop and the tick's bound.
    REQUIRE(out.size() == std::min({max, count, std::max(timed_out, std::min(over, evictable))}));
    // None stopped early that answered less than min_idle ago.
    for (const auto& [since, key] : stoppable)
      if (std::count(out.begin(), out.end(), key)) REQUIRE(now - since >= min_idle);
    // The longest idle: nothing left behind was idle longer than one stopped.
    std::set<int> stopped(out.begin(), out.end());
    REQUIRE(stopped.size() == out.size());
    int64_t newest_stopped = std::numeric_limits<int64_t>::min();
    int64_t oldest_kept = std::numeric_limits<int64_t>::max();
    for (const auto& [since, key] : stoppable)
      if (stopped.count(key))
        newest_stopped = std::max(newest_stopped, since);
      else
        oldest_kept = std::min(oldest_kept, since);
    if (!out.empty()) REQUIRE(newest_stopped <= oldest_kept);
  }
}
