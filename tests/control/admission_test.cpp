// control/admission: which of the leader's claims and releases run now.
#include "control/admission.hpp"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace berth;

TEST_CASE("admission: a lane runs up to its window, then queues in arrival order") {
  admission a(2);
  auto t1 = a.add("claim/p");
  auto t2 = a.add("claim/p");
  auto t3 = a.add("claim/p");
  auto t4 = a.add("claim/p");
  CHECK(t1.start);
  CHECK(t2.start);
  CHECK_FALSE(t3.start);
  CHECK_FALSE(t4.start);
  CHECK(a.running("claim/p") == 2);
  CHECK(a.queued("claim/p") == 2);
  CHECK(a.queued() == 2);
  CHECK(a.finish(t2.ticket) == t3.ticket);
  CHECK(a.finish(t1.ticket) == t4.ticket);
  CHECK(a.queued() == 0);
  CHECK(a.finish(t3.ticket) == std::nullopt);
  CHECK(a.finish(t4.ticket) == std::nullopt);
  CHECK(a.running("claim/p") == 0);
}

TEST_CASE("admission: a storm on one plugin never holds up another plugin's claim") {
  admission a(64);
  std::vector<uint64_t> storm;
  for (int i = 0; i < 1000; ++i) storm.push_back(a.add(claim_lane("storm")).ticket);
  CHECK(a.running(claim_lane("storm")) == 64);
  CHECK(a.queued(claim_lane("storm")) == 936);
  CHECK(a.add(claim_lane("hostpath")).start);
  // Nor a plugin's releases its own claims.
  CHECK(a.add(release_lane("storm")).start);
  CHECK(claim_lane("p") != release_lane("p"));
}

TEST_CASE("admission: a window of 0 admits everything at once") {
  admission a(0);
  for (int i = 0; i < 500; ++i) CHECK(a.add("claim/p").start);
  CHECK(a.running("claim/p") == 500);
  CHECK(a.queued() == 0);
}

TEST_CASE("admission: ending a ticket twice, or one never handed out, changes nothing") {
  admission a(1);
  auto t1 = a.add("claim/p");
  auto t2 = a.add("claim/p");
  CHECK(a.finish(t1.ticket) == t2.ticket);
  CHECK(a.finish(t1.ticket) == std::nullopt);
  CHECK(a.finish(12345) == std::nullopt);
  CHECK(a.running("claim/p") == 1);
  auto t3 = a.add("claim/p");
  CHECK_FALSE(t3.start);
  CHECK(a.finish(t2.ticket) == t3.ticket);
}

// Property: over random schedules of adds and ends on a few lanes, no lane
// ever runs more than its window, each lane starts its operations in the
// order they came, an operation waits only while its own lane is full, and
// once everything running ends, everything added has run.
TEST_CASE("admission: random schedules keep every lane within its window, in order") {
  for (uint32_t seed = 1; seed <= 500; ++seed) {
    std::mt19937 rng(seed);
    size_t window = std::uniform_int_distribution<size_t>(0, 5)(rng);
    admission a(window);
    const std::vector<std::string> lanes{"claim/a", "claim/b", "release/a"};
    std::map<std::string, std::vector<uint64_t>> added, started;
    std::map<uint64_t, std::string> lane_of;
    std::vector<uint64_t> running;
    auto start = [&](uint64_t t) {
      started[lane_of.at(t)].push_back(t);
      running.push_back(t);
    };
    int ops = std::uniform_int_distribution<int>(1, 300)(rng);
    for (int i = 0; i < ops; ++i) {
      if (running.empty() || std::bernoulli_distribution(0.55)(rng)) {
        const auto& lane = lanes[std::uniform_int_distribution<size_t>(0, 2)(rng)];
        bool full = window != 0 && a.running(lane) >= window;
        auto r = a.add(lane);
        lane_of[r.ticket] = lane;
        added[lane].push_back(r.ticket);
        REQUIRE_MESSAGE(r.start == !full, "seed " << seed);
        if (r.start) start(r.ticket);
      } else {
        auto k = std::uniform_int_distribution<size_t>(0, running.size() - 1)(rng);
        auto t = running[k];
        running.erase(running.begin() + static_cast<long>(k));
        if (auto next = a.finish(t)) {
          REQUIRE_MESSAGE(lane_of.at(*next) == lane_of.at(t), "seed " << seed);
          start(*next);
        }
      }
      for (const auto& lane : lanes) {
        if (window != 0) REQUIRE_MESSAGE(a.running(lane) <= window, "seed " << seed);
        // A queued operation means its lane is full.
        if (a.queued(lane) > 0) REQUIRE_MESSAGE(a.running(lane) == window, "seed " << seed);
      }
    }
    while (!running.empty()) {
      auto t = running.back();
      running.pop_back();
      if (auto next = a.finish(t)) start(*next);
    }
    CHECK_MESSAGE(a.queued() == 0, "seed " << seed);
    for (const auto& lane : lanes)
      CHECK_MESSAGE(started[lane] == added[lane], "seed " << seed << " lane " << lane);
  }
}
