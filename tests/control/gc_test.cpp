// Garbage collection (control/gc): which terminal allocs and down nodes
// may go, and that nothing with a claim, an alloc or a plugin instance
// left is ever collected.
#include <doctest/doctest.h>

#include <random>
#include <set>

#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "control/gc.hpp"
#include "messages/model.hpp"

using namespace berth;

namespace {

constexpr int64_t minute = 60'000;

struct world {
  catalog c;
  void add(v1::Change ch) { apply(c, c.applied_index + 1, make_entry({std::move(ch)})); }
  void alloc(const std::string& id, const std::string& node, v1::AllocState s, int64_t at_ms,
             std::vector<std::string> volumes = {}) {
    v1::Alloc a;
    a.set_id(id);
    a.set_namespace_("default");
    a.set_node_id(node);
    a.set_state(s);
    a.set_modified_at_ms(at_ms);
    for (const auto& v : volumes) a.add_volumes()->set_volume_id(v);
    add(upsert_change(a));
  }
  void node(const std::string& id, v1::NodeStatus s, int64_t down_at_ms = 0) {
    v1::Node n;
    n.set_id(id);
    n.set_status(s);
    n.set_has_client(true);
    n.set_down_at_ms(down_at_ms);
    add(upsert_change(n));
  }
  void volume(const std::string& id, std::vector<std::pair<std::string, std::string>> claims,
              v1::ClaimState state = v1::CLAIM_TAKEN) {
    v1::Volume v;
    v.set_id(id);
    v.set_namespace_("default");
    v.set_plugin_id("p");
    for (const auto& [alloc, node] : claims) {
      auto* cl = v.add_claims();
      cl->set_alloc_id(alloc);
      cl->set_node_id(node);
      cl->set_state(state);
    }
    add(upsert_change(v));
  }
};

using ids = std::vector<std::string>;

}  // namespace

TEST_CASE("terminal_allocs_go_after_the_threshold_and_running_ones_never") {
  world w;
  w.node("n1", v1::NODE_READY);
  w.alloc("done-old", "n1", v1::ALLOC_COMPLETE, 0);
  w.alloc("failed-old", "n1", v1::ALLOC_FAILED, 0);
  w.alloc("lost-old", "n1", v1::ALLOC_LOST, 0);
  w.alloc("done-new", "n1", v1::ALLOC_COMPLETE, 9 * minute);
  w.alloc("running", "n1", v1::ALLOC_RUNNING, 0);
  w.alloc("pending", "n1", v1::ALLOC_PENDING, 0);
  gc_thresholds t{5 * minute, 60 * minute};
  auto p = plan_gc(w.c, 10 * minute, t);
  CHECK(p.allocs == ids{"done-old", "failed-old", "lost-old"});
  CHECK(p.nodes.empty());
  // Exactly at the threshold counts as old enough.
  CHECK(plan_gc(w.c, 14 * minute, t).allocs == ids{"done-new", "done-old", "failed-old", "lost-old"});
  // Threshold 0 (berth system gc): every terminal alloc at once.
  CHECK(plan_gc(w.c, 9 * minute, {0, 0}).allocs.size() == 4);
  // A negative threshold never collects.
  CHECK(plan_gc(w.c, 1'000 * minute, {-1, -1}).empty());
  // A lost member the leader may still replace stays (its replacement names it).
  CHECK(plan_gc(w.c, 10 * minute, t, {"lost-old"}).allocs == ids{"done-old", "failed-old"});
}

TEST_CASE("a_node_keeps_a_lost_member_being_replaced_and_so_is_kept") {
  world w;
  w.node("n1", v1::NODE_DOWN);
  w.alloc("m", "n1", v1::ALLOC_FAILED, 0);
  CHECK(plan_gc(w.c, 100 * minute, {0, 0}).nodes == ids{"n1"});
  auto kept = plan_gc(w.c, 100 * minute, {0, 0}, {"m"});
  CHECK(kept.allocs.empty());
  CHECK(kept.nodes.empty());
}

TEST_CASE("an_alloc_that_holds_a_claim_stays_whatever_the_claims_state") {
  for (auto state : {v1::CLAIM_TAKEN, v1::CLAIM_UNPUBLISHING, v1::CLAIM_NODE_DETACHED,
                     v1::CLAIM_CONTROLLER_DETACHED, v1::CLAIM_READY_TO_FREE}) {
    CAPTURE(state);
    world w;
    w.node("n1", v1::NODE_READY);
    w.volume("db", {{"a1", "n1"}}, state);
    w.volume("free", {});
    w.alloc("a1", "n1", v1::ALLOC_COMPLETE, 0, {"db"});
    w.alloc("a2", "n1", v1::ALLOC_COMPLETE, 0, {"free"});
    CHECK(plan_gc(w.c, 100 * minute, {0, 0}).allocs == ids{"a2"});
  }
}

TEST_CASE("a_lost_alloc_of_a_node_still_down_stays_until_the_node_is_back") {
  world w;
  w.node("gone", v1::NODE_DOWN, 1);
  w.node("back", v1::NODE_READY);
  w.alloc("l1", "gone", v1::ALLOC_LOST, 0);
  w.alloc("l2", "back", v1::ALLOC_LOST, 0);
  w.alloc("c1", "gone", v1::ALLOC_COMPLETE, 0);
  auto p = plan_gc(w.c, 100 * minute, {0, 0});
  // c1 stays too: its claims may have been released without the node.
  CHECK(p.allocs == ids{"l2"});
  // The node keeps its lost alloc, so it is not collected either.
  CHECK(p.nodes.empty());
}

TEST_CASE("ended_allocs_of_a_node_back_from_down_stay_until_it_confirmed_its_unmounts") {
  // Collected while the node was away, an ended alloc was never unmounted
  // there (claim simulation, seed 827).
  world w;
  w.node("back", v1::NODE_READY, 1 * minute);  // back, not confirmed yet
  w.node("done", v1::NODE_READY);
  w.alloc("c1", "back", v1::ALLOC_COMPLETE, 0);
  w.alloc("f1", "back", v1::ALLOC_FAILED, 0);
  w.alloc("c2", "done", v1::ALLOC_COMPLETE, 0);
  CHECK(plan_gc(w.c, 100 * minute, {0, 0}).allocs == ids{"c2"});
  auto n = *find_node(w.c, "back");
  n.clear_down_at_ms();  // confirmed
  w.add(upsert_change(n));
  CHECK(plan_gc(w.c, 100 * minute, {0, 0}).allocs == ids{"c1", "c2", "f1"});
}

TEST_CASE("a_down_node_goes_after_its_threshold_when_nothing_is_left_on_it") {
  world w;
  w.node("up", v1::NODE_READY);
  w.node("old", v1::NODE_DOWN, 1 * minute);
  w.node("recent", v1::NODE_DOWN, 50 * minute);
  w.node("with-alloc", v1::NODE_DOWN, 1 * minute);
  w.node("with-done", v1::NODE_DOWN, 1 * minute);
  w.node("with-claim", v1::NODE_DOWN, 1 * minute);
  w.node("with-instance", v1::NODE_DOWN, 1 * minute);
  w.node("draining", v1::NODE_DOWN, 1 * minute);
  w.alloc("r", "with-alloc", v1::ALLOC_RUNNING, 0);
  w.alloc("d", "with-done", v1::ALLOC_COMPLETE, 0);
  w.volume("db", {{"x", "with-claim"}}, v1::CLAIM_NODE_DETACHED);
  v1::Plugin p;
  p.set_id("p");
  p.add_nodes()->set_node_id("with-instance");
  w.add(upsert_change(p));
  auto n = *find_node(w.c, "draining");
  n.mutable_drain()->set_deadline_ms(1);
  w.add(upsert_change(n));
  auto plan = plan_gc(w.c, 60 * minute, {5 * minute, 30 * minute});
  // with-done's alloc stays for the node to unmount when it comes back, so
  // the node stays too.
  CHECK(plan.allocs.empty());
  CHECK(plan.nodes == ids{"old"});
  CHECK(plan_gc(w.c, 60 * minute, {-1, 30 * minute}).nodes == ids{"old"});
  CHECK(plan_gc(w.c, 60 * minute, {5 * minute, -1}).nodes.empty());
}

TEST_CASE("a_node_marked_down_before_down_at_was_kept_counts_from_its_last_heartbeat") {
  world w;
  v1::Node n;
  n.set_id("legacy");
  n.set_status(v1::NODE_DOWN);
  n.set_last_heartbeat_ms(10 * minute);
  w.add(upsert_change(n));
  CHECK(plan_gc(w.c, 20 * minute, {0, 15 * minute}).nodes.empty());
  CHECK(plan_gc(w.c, 25 * minute, {0, 15 * minute}).nodes == ids{"legacy"});
}

TEST_CASE("gc_changes_delete_allocs_then_nodes_and_the_summary_counts_them") {
  world w;
  w.node("n1", v1::NODE_DOWN);  // marked down before down_at_ms was kept
  w.alloc("a1", "n1", v1::ALLOC_FAILED, 0);
  w.alloc("a2", "n1", v1::ALLOC_COMPLETE, 0);
  auto plan = plan_gc(w.c, minute, {0, 0});
  CHECK(gc_summary(plan) == "collected 2 allocs and 1 node");
  auto changes = gc_changes(plan);
  REQUIRE(changes.size() == 3);
  CHECK(changes[0].alloc_delete() == "a1");
  CHECK(changes[2].node_delete() == "n1");
  apply(w.c, w.c.applied_index + 1, make_entry(changes));
  CHECK(w.c.allocs.empty());
  CHECK(w.c.nodes.empty());
  CHECK(gc_summary(plan_gc(w.c, minute, {0, 0})) == "nothing to collect");
  gc_plan one;
  one.allocs = {"x"};
  CHECK(gc_summary(one) == "collected 1 alloc and 0 nodes");
}

TEST_CASE("random_catalogs_never_lose_an_object_something_still_needs") {
  const v1::AllocState states[] = {v1::ALLOC_PENDING, v1::ALLOC_RUNNING, v1::ALLOC_COMPLETE,
                                   v1::ALLOC_FAILED, v1::ALLOC_LOST};
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    world w;
    for (int i = 0; i < 4; ++i)
      w.node("n" + std::to_string(i), pick(2) ? v1::NODE_DOWN : v1::NODE_READY, pick(100) * minute);
    for (int i = 0; i < 12; ++i)
      w.alloc("a" + std::to_string(i), "n" + std::to_string(pick(4)), states[pick(5)],
              pick(100) * minute, {"v" + std::to_string(pick(5))});
    for (int v = 0; v < 5; ++v) {
      std::vector<std::pair<std::string, std::string>> claims;
      for (int k = pick(3); k > 0; --k) {
        auto a = "a" + std::to_string(pick(12));
        claims.emplace_back(a, find_alloc(w.c, a)->node_id());
      }
      w.volume("v" + std::to_string(v), claims);
    }
    gc_thresholds t{pick(60) * minute, pick(60) * minute};
    int64_t now = 100 * minute;
    auto plan = plan_gc(w.c, now, t);
    std::set<std::string> claimed_by, claim_nodes;
    for (const auto& [k, row] : w.c.volumes) {
      const auto v = row.get();
      for (const auto& cl : v.claims()) {
        claimed_by.insert(cl.alloc_id());
        claim_nodes.insert(cl.node_id());
      }
    }
    for (const auto& id : plan.allocs) {
      const auto* a = find_alloc(w.c, id);
      REQUIRE(a != nullptr);
      CHECK(alloc_terminal(a->state()));
      CHECK(claimed_by.count(id) == 0);
      CHECK(now - a->modified_at_ms() >= t.alloc_ms);
    }
    for (const auto& id : plan.nodes) {
      CHECK(find_node(w.c, id)->status() == v1::NODE_DOWN);
      CHECK(claim_nodes.count(id) == 0);
    }
    // Everything collected at a threshold is collected at 0 too.
    auto all = plan_gc(w.c, now, {0, 0});
    for (const auto& id : plan.allocs)
      CHECK(std::find(all.allocs.begin(), all.allocs.end(), id) != all.allocs.end());
    // After the plan commits, no alloc is left on a collected node, and
    // planning again at the same time finds nothing more.
    apply(w.c, w.c.applied_index + 1, make_entry(gc_changes(plan)));
    for (const auto& [id, a] : w.c.allocs)
      CHECK(std::find(plan.nodes.begin(), plan.nodes.end(), a.node_id()) == plan.nodes.end());
    CHECK(plan_gc(w.c, now, t).empty());
  }
}
