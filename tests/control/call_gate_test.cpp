// control/call_gate: which CSI calls of one plugin connection run now.
#include "control/call_gate.hpp"

#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

using namespace berth;

TEST_CASE("call_gate: calls start up to the limit of their kind, in order") {
  call_gate g(2, 3);
  std::vector<uint64_t> c, n;
  for (int i = 0; i < 4; ++i) c.push_back(g.add(call_kind::controller, "c" + std::to_string(i), 0));
  for (int i = 0; i < 4; ++i) n.push_back(g.add(call_kind::node, "n" + std::to_string(i), 0));
  auto s = g.start(0);
  CHECK(s == std::vector<uint64_t>{c[0], c[1], n[0], n[1], n[2]});
  CHECK(g.running(call_kind::controller) == 2);
  CHECK(g.running(call_kind::node) == 3);
  CHECK(g.start(0).empty());
  CHECK(g.finish(c[1], false, 1) == call_gate::verdict::done);
  CHECK(g.start(1) == std::vector<uint64_t>{c[2]});
  CHECK(g.finish(n[0], false, 1) == call_gate::verdict::done);
  CHECK(g.start(1) == std::vector<uint64_t>{n[3]});
}

TEST_CASE("call_gate: a limit of 1 runs one call at a time (Nomad's behaviour)") {
  call_gate g(1, 1);
  auto a = g.add(call_kind::controller, "a", 0);
  auto b = g.add(call_kind::controller, "b", 0);
  CHECK(g.start(0) == std::vector<uint64_t>{a});
  g.finish(a, false, 1);
  CHECK(g.start(1) == std::vector<uint64_t>{b});
}

TEST_CASE("call_gate: two calls for one volume never overlap, and keep their order") {
  call_gate g(8, 8);
  auto a1 = g.add(call_kind::controller, "v", 0);
  auto a2 = g.add(call_kind::node, "v", 0);
  auto b = g.add(call_kind::node, "w", 0);
  auto a3 = g.add(call_kind::controller, "v", 0);
  CHECK(g.start(0) == std::vector<uint64_t>{a1, b});
  g.finish(a1, false, 1);
  CHECK(g.start(1) == std::vector<uint64_t>{a2});
  g.finish(a2, false, 2);
  CHECK(g.start(2) == std::vector<uint64_t>{a3});
}

TEST_CASE("call_gate: identity calls are not limited and name no volume") {
  call_gate g(1, 1);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(g.add(call_kind::identity, "", 0));
  CHECK(g.start(0) == ids);
  CHECK(g.running(call_kind::identity) == 5);
  for (auto t : ids) CHECK(g.finish(t, true, 0) == call_gate::verdict::done);
  CHECK(g.running(call_kind::identity) == 0);
}

TEST_CASE("call_gate: an overloaded answer halves the limit and retries the call after a backoff") {
  call_gate g(8, 8);
  std::vector<uint64_t> t;
  for (int i = 0; i < 8; ++i) t.push_back(g.add(call_kind::controller, "v" + std::to_string(i), 0));
  CHECK(g.start(0).size() == 8);
  CHECK(g.finish(t[0], true, 10) == call_gate::verdict::retry);
  CHECK(g.limit(call_kind::controller) == 4);
  CHECK(g.next_wakeup() == 10 + overload_backoff_ms(1));
  // Not before its backoff, and not while 7 run above the new limit of 4.
  CHECK(g.start(50).empty());
  for (int i = 1; i < 5; ++i) g.finish(t[i], false, 60);
  CHECK(g.running(call_kind::controller) == 3);
  CHECK(g.start(60).empty());  // the backoff has not ended
  CHECK(g.start(10 + overload_backoff_ms(1)) == std::vector<uint64_t>{t[0]});
  CHECK(g.next_wakeup() == std::nullopt);
}

TEST_CASE(
    "call_gate: the limit never drops below 1 and grows back by one per window of successes") {
  call_gate g(4, 4);
  int64_t now = 0;
  for (int round = 0; round < 5; ++round) {
    g.add(call_kind::node, "v", now);
    now += 10000;
    auto s = g.start(now);
    REQUIRE(s.size() == 1);
    g.finish(s[0], true, now);
  }
  CHECK(g.limit(call_kind::node) == 1);
  // The call that kept failing ended after max_overloaded retries; the
  // queue is empty again once its last retry finishes.
  std::vector<int> seen;
  for (int i = 0; i < 20; ++i) {
    g.add(call_kind::node, "w" + std::to_string(i), now);
    for (auto s : g.start(now)) g.finish(s, false, now);
    seen.push_back(g.limit(call_kind::node));
  }
  CHECK(seen.front() == 2);  // a window of 1 success at limit 1
  CHECK(seen.back() == 4);   // back at the configured limit, never above
  for (size_t i = 1; i < seen.size(); ++i) CHECK(seen[i] - seen[i - 1] <= 1);
}

TEST_CASE("call_gate: a call overloaded too often ends with the plugin's answer") {
  call_gate g(2, 2, 3);
  auto t = g.add(call_kind::controller, "v", 0);
  int64_t now = 0;
  int retries = 0;
  for (;;) {
    auto s = g.start(now);
    if (s.empty()) {
      now = *g.next_wakeup();
      continue;
    }
    REQUIRE(s == std::vector<uint64_t>{t});
    if (g.finish(t, true, now) == call_gate::verdict::done) break;
    ++retries;
  }
  CHECK(retries == 3);
  CHECK(g.queued() == 0);
}

TEST_CASE("call_gate: backoffs double from 100 ms and stop growing at 3.2 s") {
  CHECK(overload_backoff_ms(1) == 100);
  CHECK(overload_backoff_ms(2) == 200);
  CHECK(overload_backoff_ms(6) == 3200);
  CHECK(overload_backoff_ms(60) == 3200);
}

TEST_CASE("call_gate: random schedules keep every rule (many seeds)") {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    int maxc = 1 + static_cast<int>(rng() % 5), maxn = 1 + static_cast<int>(rng() % 5);
    call_gate g(maxc, maxn, 2);
    struct info {
      call_kind kind;
      std::string volume;
    };
    std::map<uint64_t, info> calls;
    std::map<std::string, std::vector<uint64_t>> added, started_order;
    std::set<uint64_t> running, ended;
    int64_t now = 0;
    int to_add = 200;
    while (to_add > 0 || calls.size() != ended.size()) {
      now += rng() % 50;
      if (to_add > 0 && rng() % 2 == 0) {
        auto kind = static_cast<call_kind>(rng() % 3);
        std::string v = kind == call_kind::identity ? "" : "v" + std::to_string(rng() % 6);
        auto t = g.add(kind, v, now);
        calls[t] = {kind, v};
        if (!v.empty()) added[v].push_back(t);
        --to_add;
      }
      std::set<call_kind> kinds_started;
      for (auto t : g.start(now)) {
        REQUIRE(running.insert(t).second);
        kinds_started.insert(calls[t].kind);
        const auto& v = calls[t].volume;
        if (!v.empty()) {
          // No other call of this volume runs.
          for (auto r : running)
            if (r != t) REQUIRE(calls[r].volume != v);
          auto& order = started_order[v];
          if (order.empty() || order.back() != t) order.push_back(t);
        }
      }
      if (running.empty() && g.queued() > 0) {
        // Something queued, nothing running, nothing started: only a
        // backoff can be what it waits for.
        auto w = g.next_wakeup();
        REQUIRE(w.has_value());
        now = std::max(now, *w);
        continue;
      }
      // A call starts only below its kind's limit (calls running when the
      // limit dropped go on: a call is never cut short).
      for (auto k : {call_kind::controller, call_kind::node})
        if (kinds_started.count(k)) CHECK(g.running(k) <= g.limit(k));
      CHECK(g.limit(call_kind::controller) <= maxc);
      CHECK(g.limit(call_kind::node) <= maxn);
      CHECK(g.limit(call_kind::controller) >= 1);
      if (!running.empty() && rng() % 3 != 0) {
        auto it = running.begin();
        std::advance(it, rng() % running.size());
        auto t = *it;
        running.erase(it);
        if (g.finish(t, rng() % 5 == 0, now) == call_gate::verdict::done) ended.insert(t);
      }
    }
    // Each volume's calls started in the order they were added.
    for (auto& [v, order] : started_order) CHECK(order == added[v]);
    CHECK(g.queued() == 0);
  }
}

TEST_CASE("call_gate: a call that could not start by its deadline expires without running") {
  call_gate g(1, 1);
  auto a = g.add(call_kind::controller, "v", 0, 30000);
  auto b = g.add(call_kind::controller, "v", 10, 30010);  // same volume: waits behind a
  auto c = g.add(call_kind::controller, "w", 20, 30020);  // limit 1: waits behind a
  auto d = g.add(call_kind::node, "x", 20);               // no deadline
  CHECK(g.start(20) == std::vector<uint64_t>{a, d});
  CHECK(g.expire(30000).empty());  // a deadline is inclusive
  // a hangs past the others' deadlines: they are expired, never started.
  REQUIRE(g.next_wakeup().has_value());
  CHECK(*g.next_wakeup() == 30011);  // b's deadline passed: the actor wakes then
  CHECK(g.expire(30015) == std::vector<uint64_t>{b});
  CHECK(g.expire(40000) == std::vector<uint64_t>{c});
  CHECK(g.finish(a, false, 40000) == call_gate::verdict::done);
  CHECK(g.start(40000).empty());
  CHECK(g.queued() == 0);
  // A running call is never expired (it is the plugin's now): only queued ones.
  auto e = g.add(call_kind::controller, "v", 50000, 50001);
  CHECK(g.start(50000) == std::vector<uint64_t>{e});
  CHECK(g.expire(90000).empty());
  CHECK(g.running(call_kind::controller) == 1);
}

TEST_CASE("call_gate: random schedules with deadlines: nothing starts after its deadline") {
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    call_gate g(1 + static_cast<int>(rng() % 3), 1 + static_cast<int>(rng() % 3), 2);
    std::map<uint64_t, int64_t> start_by;
    std::set<uint64_t> running, ended;
    int64_t now = 0;
    int to_add = 150;
    while (to_add > 0 || !running.empty() || g.queued() > 0) {
      now += rng() % 40;
      if (to_add > 0 && rng() % 2 == 0) {
        auto kind = static_cast<call_kind>(rng() % 2);
        int64_t by = rng() % 3 == 0 ? 0 : now + static_cast<int64_t>(rng() % 200);
        auto t = g.add(kind, "v" + std::to_string(rng() % 4), now, by);
        start_by[t] = by;
        --to_add;
      }
      for (auto t : g.expire(now)) {
        REQUIRE(start_by[t] > 0);
        REQUIRE(start_by[t] < now);
        REQUIRE(ended.insert(t).second);
      }
      for (auto t : g.start(now)) {
        REQUIRE((start_by[t] == 0 || start_by[t] >= now));
        REQUIRE(running.insert(t).second);
      }
      if (!running.empty() && rng() % 2 == 0) {
        auto t = *running.begin();
        running.erase(running.begin());
        if (g.finish(t, rng() % 6 == 0, now) == call_gate::verdict::done) ended.insert(t);
      } else if (running.empty() && g.queued() > 0) {
        auto w = g.next_wakeup();
        REQUIRE(w.has_value());
        now = std::max(now, *w);
      }
    }
    CHECK(ended.size() == start_by.size());  // every call ended: run, or expired
  }
}
