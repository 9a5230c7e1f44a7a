// control/drain: node drain and eligibility: the requests and their
// refusals, what an ineligible or draining node takes, the drain's plan
// (allocs first, the plugins last), its deadline, forced drains, the node
// views, and random drains that always end.
#include "control/drain.hpp"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "control/allocs.hpp"
#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "control/lease.hpp"
#include "control/release.hpp"
#include "control/views.hpp"
#include "fixtures.hpp"

using namespace berth;
using namespace berth::test;

namespace {

v1::NodeDrainRequest drain_of(const std::string& node, int64_t deadline_ms = 60'000) {
  v1::NodeDrainRequest r;
  r.set_node_id(node);
  r.set_deadline_ms(deadline_ms);
  return r;
}

v1::NodeEligibilityRequest eligibility_of(const std::string& node, bool eligible) {
  v1::NodeEligibilityRequest r;
  r.set_node_id(node);
  r.set_eligible(eligible);
  return r;
}

void commit_update(catalog& c, const node_update& u) {
  REQUIRE_FALSE(u.error);
  if (u.upsert) commit(c, {upsert_change(*u.upsert)});
}

// n1 with allocs on two volumes (and one elsewhere), running the plugin.
catalog drain_catalog() {
  catalog c;
  auto n1 = make_node("n1");
  n1.add_plugin_ids("p");
  auto a = make_volume("a");
  add_claim(a, "web", "n1");
  auto b = make_volume("b");
  add_claim(b, "db", "n1");
  add_claim(b, "other", "n2");
  commit(c, {upsert_change(n1), upsert_change(make_node("n2")),
             upsert_change(controller_plugin({{"n1", true}})), upsert_change(a),
             upsert_change(b),
             upsert_change(make_alloc("web", "n1", v1::ALLOC_RUNNING, {"a"})),
             upsert_change(make_alloc("db", "n1", v1::ALLOC_RUNNING, {"b"})),
             upsert_change(make_alloc("starting", "n1", v1::ALLOC_PENDING)),
             upsert_change(make_alloc("old", "n1", v1::ALLOC_COMPLETE)),
             upsert_change(make_alloc("other", "n2", v1::ALLOC_RUNNING, {"b"}))});
  return c;
}

// Frees every claim on the node whose alloc is terminal (as the watcher's
// releases end).
void release_terminal_claims(catalog& c, const std::string& node) {
  std::vector<v1::Change> changes;
  for (const auto& [key, row] : c.volumes) {
    auto v = row.get();
    auto next = v;
    next.clear_claims();
    for (const auto& claim : v.claims()) {
      const auto* a = find_alloc(c, claim.alloc_id());
      if (claim.node_id() == node && (a == nullptr || alloc_terminal(a->state()))) continue;
      *next.add_claims() = claim;
    }
    if (next.claims_size() != v.claims_size()) changes.push_back(upsert_change(next));
  }
  if (!changes.empty()) commit(c, changes);
}

}  // namespace

TEST_CASE("drain_request_refuses_what_it_cannot_do_and_names_the_fix") {
  auto c = drain_catalog();
  auto unknown = drain_request(c, drain_of("nope"), 1000);
  REQUIRE(unknown.error);
  CHECK(unknown.error->code == errc::not_found);
  CHECK(unknown.error->message.find("berth node status") != std::string::npos);
  auto negative = drain_request(c, drain_of("n1", -1), 1000);
  REQUIRE(negative.error);
  CHECK(negative.error->code == errc::invalid);
  auto stray = drain_of("n1");
  stray.set_keep_ineligible(true);
  REQUIRE(drain_request(c, stray, 1000).error);
  CHECK(drain_request(c, stray, 1000).error->code == errc::invalid);
  auto cancel = drain_of("n1");
  cancel.set_disable(true);
  auto nothing = drain_request(c, cancel, 1000);
  CHECK_FALSE(nothing.error);
  CHECK_FALSE(nothing.upsert);  // not draining: nothing to cancel, and that is fine
  CHECK(nothing.message.find("not draining") != std::string::npos);
}

TEST_CASE("drain_request_starts_updates_and_cancels_a_drain") {
  auto c = drain_catalog();
  auto started = drain_request(c, drain_of("n1", 60'000), 1000);
  REQUIRE(started.upsert);
  CHECK(started.upsert->ineligible());
  CHECK(started.upsert->drain().started_at_ms() == 1000);
  CHECK(started.upsert->drain().deadline_ms() == 61'000);
  CHECK_FALSE(started.upsert->drain().forced());
  CHECK(started.message.find("3 alloc(s) to stop, 2 claim(s) to release") != std::string::npos);
  commit_update(c, started);
  // Again, later: the deadline moves, the start stays.
  auto none = drain_of("n1", 0);
  none.set_no_deadline(true);
  none.set_keep_plugins(true);
  auto updated = drain_request(c, none, 5000);
  REQUIRE(updated.upsert);
  CHECK(updated.upsert->drain().started_at_ms() == 1000);
  CHECK(updated.upsert->drain().deadline_ms() == 0);
  CHECK(updated.upsert->drain().keep_plugins());
  CHECK(updated.message.find("drain updated") != std::string::npos);
  // Deadline 0 without --no-deadline: now.
  CHECK(drain_request(c, drain_of("n1", 0), 7000).upsert->drain().deadline_ms() == 7000);
  auto cancel = drain_of("n1");
  cancel.set_disable(true);
  auto eligible = drain_request(c, cancel, 8000);
  REQUIRE(eligible.upsert);
  CHECK_FALSE(eligible.upsert->has_drain());
  CHECK_FALSE(eligible.upsert->ineligible());
  cancel.set_keep_ineligible(true);
  auto kept = drain_request(c, cancel, 8000);
  REQUIRE(kept.upsert);
  CHECK_FALSE(kept.upsert->has_drain());
  CHECK(kept.upsert->ineligible());
  // A node with nothing on it is drained at once.
  commit(c, {upsert_change(make_node("n3"))});
  CHECK(drain_request(c, drain_of("n3"), 1).message.find("drained at once") != std::string::npos);
}

TEST_CASE("eligibility_request_toggles_but_never_enables_a_draining_node") {
  auto c = drain_catalog();
  auto same = eligibility_request(c, eligibility_of("n1", true));
  CHECK_FALSE(same.error);
  CHECK_FALSE(same.upsert);  // eligible already
  auto off = eligibility_request(c, eligibility_of("n1", false));
  REQUIRE(off.upsert);
  CHECK(off.upsert->ineligible());
  commit_update(c, off);
  CHECK_FALSE(eligibility_request(c, eligibility_of("n1", false)).upsert);
  CHECK(eligibility_request(c, eligibility_of("nope", true)).error->code == errc::not_found);
  commit_update(c, drain_request(c, drain_of("n1"), 1));
  auto refused = eligibility_request(c, eligibility_of("n1", true));
  REQUIRE(refused.error);
  CHECK(refused.error->code == errc::refused);
  CHECK(refused.error->message.find("berth node drain n1 --disable") != std::string::npos);
}

TEST_CASE("an_ineligible_node_takes_no_new_allocs_or_claims") {
  auto c = drain_catalog();
  v1::ClaimRequest claim;
  claim.set_volume_id("a");
  claim.set_alloc_id("new");
  claim.set_node_id("n1");
  CHECK_FALSE(alloc_of_claim(c, claim, 1).error);
  v1::AllocRunRequest req;
  req.set_node_id("n1");
  auto* av = req.add_volumes();
  av->set_name("data");
  av->set_volume_id("a");
  auto run = pending_alloc(req, "new", 1);
  CHECK_FALSE(admit_alloc_run(c, run, true));
  commit_update(c, eligibility_request(c, eligibility_of("n1", false)));
  auto by_claim = alloc_of_claim(c, claim, 1).error;
  REQUIRE(by_claim);
  CHECK(by_claim->code == errc::refused);
  CHECK(by_claim->message.find("berth node eligibility n1 --enable") != std::string::npos);
  auto by_run = admit_alloc_run(c, run, true);
  REQUIRE(by_run);
  CHECK(by_run->message.find("ineligible") != std::string::npos);
  // Claims of a running alloc on it are refused too: nothing new there.
  claim.set_alloc_id("web");
  claim.set_volume_id("b");
  CHECK(alloc_of_claim(c, claim, 1).error);
  commit_update(c, drain_request(c, drain_of("n1"), 1));
  CHECK(admit_alloc_run(c, run, true)->message.find("draining") != std::string::npos);
  // Other nodes are not affected.
  claim.set_alloc_id("elsewhere");
  claim.set_node_id("n2");
  CHECK_FALSE(alloc_of_claim(c, claim, 1).error);
}

TEST_CASE("plan_drain_stops_running_allocs_then_finishes_with_the_plugins_last") {
  auto c = drain_catalog();
  CHECK(plan_drain(c, "n1", 1).stop.empty());  // not draining
  commit_update(c, drain_request(c, drain_of("n1", 60'000), 1000));
  CHECK(draining_nodes(c) == std::vector<std::string>{"n1"});
  auto plan = plan_drain(c, "n1", 2000);
  CHECK(plan.stop == std::vector<std::string>{"db", "web"});  // running ones of n1 only
  CHECK_FALSE(plan.force);
  CHECK_FALSE(plan.done);
  auto p = drain_progress(c, "n1");
  CHECK(p.allocs_left() == 3);
  CHECK(p.claims_left() == 2);
  // The allocs stop, the pending one fails; the claims are still there.
  commit(c, {upsert_change(alloc_in_state(c.allocs.at("web"), v1::ALLOC_COMPLETE, "", 3000)),
             upsert_change(alloc_in_state(c.allocs.at("db"), v1::ALLOC_COMPLETE, "", 3000)),
             upsert_change(alloc_in_state(c.allocs.at("starting"), v1::ALLOC_FAILED, "", 3000))});
  plan = plan_drain(c, "n1", 4000);
  CHECK(plan.stop.empty());
  CHECK_FALSE(plan.done);  // claims left: the plugins must stay
  CHECK(finish_drain(c, "n1", 4000).empty());
  release_terminal_claims(c, "n1");
  CHECK(drain_progress(c, "n1").claims_left() == 0);
  plan = plan_drain(c, "n1", 5000);
  CHECK(plan.done);
  auto done = finish_drain(c, "n1", 5000);
  REQUIRE(done.size() == 1);
  const auto& n = done[0].node_upsert();
  CHECK_FALSE(n.has_drain());
  CHECK(n.ineligible());
  CHECK(n.drained_at_ms() == 5000);
  CHECK(n.plugins_withdrawn());
  CHECK(instances_to_withdraw(c, "n1").empty());  // not committed yet
  commit(c, done);
  auto withdraw = instances_to_withdraw(c, "n1");
  REQUIRE(withdraw.size() == 1);
  CHECK(withdraw[0].plugin_id() == "p");
  CHECK(withdraw[0].remove());
  CHECK(draining_nodes(c).empty());
  // Its client's fingerprints are held back until it is enabled.
  v1::Fingerprint f;
  f.set_plugin_id("p");
  f.set_node_id("n1");
  CHECK(fingerprint_withheld(c, f));
  f.set_node_id("n2");
  CHECK_FALSE(fingerprint_withheld(c, f));
  f.set_node_id("n1");
  auto enabled = eligibility_request(c, eligibility_of("n1", true));
  REQUIRE(enabled.upsert);
  CHECK(enabled.message.find("reported again") != std::string::npos);
  commit_update(c, enabled);
  CHECK_FALSE(fingerprint_withheld(c, f));
  CHECK_FALSE(c.nodes.at("n1").ineligible());
}

TEST_CASE("keep_plugins_keeps_the_instances_and_a_node_without_plugins_withdraws_nothing") {
  auto c = drain_catalog();
  auto r = drain_of("n1");
  r.set_keep_plugins(true);
  commit_update(c, drain_request(c, r, 1));
  commit(c, force_drain(c, "n1", 2));
  // The client stops what is left (plan_drain), then the claims go.
  for (const auto& id : plan_drain(c, "n1", 2).stop) {
    const auto& a = c.allocs.at(id);
    commit(c, {upsert_change(alloc_in_state(a, stopped_state(a.state()), "", 2))});
  }
  release_terminal_claims(c, "n1");
  auto done = finish_drain(c, "n1", 3);
  REQUIRE(done.size() == 1);
  CHECK_FALSE(done[0].node_upsert().plugins_withdrawn());
  commit_update(c, drain_request(c, drain_of("n2"), 1));
  auto bare = finish_drain(c, "n2", 3);  // n2 still has "other" running
  CHECK(bare.empty());
}

// Issue 59, item 1: the deadline stops what is left through the client;
// no claim on the node is freed before its writer stopped (the client
// confirmed the stop) or the node went down (its lease ran out).
TEST_CASE("the_deadline_stops_the_rest_through_the_client_and_frees_no_claim_before") {
  auto c = drain_catalog();
  commit_update(c, drain_request(c, drain_of("n1", 60'000), 1000));
  CHECK_FALSE(plan_drain(c, "n1", 60'999).force);
  CHECK(plan_drain(c, "n1", 60'999).stop == std::vector<std::string>{"db", "web"});
  CHECK(plan_drain(c, "n1", 61'000).force);
  auto a = volume_at(c, {"default", "a"});
  const auto* claim = find_claim(a, "web");
  REQUIRE(claim != nullptr);
  CHECK_FALSE(release_without_node(c, *claim, true, false));
  auto forced = force_drain(c, "n1", 61'000);
  // Only the drain is marked forced: n1 has a client, which may run the
  // allocs' commands; they end when it confirms their stops.
  REQUIRE(forced.size() == 1);
  CHECK(forced[0].node_upsert().drain().forced());
  commit(c, forced);
  CHECK(force_drain(c, "n1", 62'000).empty());  // once
  CHECK_FALSE(plan_drain(c, "n1", 62'000).force);
  CHECK(c.allocs.at("web").state() == v1::ALLOC_RUNNING);
  CHECK(c.allocs.at("starting").state() == v1::ALLOC_PENDING);
  // From now on every alloc left is stopped, the pending one too.
  CHECK(plan_drain(c, "n1", 62'000).stop == std::vector<std::string>{"db", "starting", "web"});
  CHECK(stopped_state(v1::ALLOC_RUNNING) == v1::ALLOC_COMPLETE);
  CHECK(stopped_state(v1::ALLOC_PENDING) == v1::ALLOC_FAILED);
  // Its claims wait for the node, connected or not (the writer may still
  // run: a client that is away is fenced only when its lease runs out).
  a = volume_at(c, {"default", "a"});
  claim = find_claim(a, "web");
  CHECK_FALSE(release_without_node(c, *claim, true, false));
  CHECK_FALSE(release_without_node(c, *claim, false, false));
  // The node went down (lease out, writers fenced): released without it,
  // unless it writes a single-writer volume and --keep-down-writers holds.
  auto down = c.nodes.at("n1");
  down.set_status(v1::NODE_DOWN);
  commit(c, {upsert_change(down)});
  CHECK(release_without_node(c, *claim, false, false));
  CHECK(release_without_node(c, *claim, false, false, true) ==
        !(claim->mode() == v1::CLAIM_WRITE &&
          fenced_publication(claim->access_mode(), false)));
  // The operator's detach still releases without the node.
  down.set_status(v1::NODE_READY);
  commit(c, {upsert_change(down)});
  CHECK(release_without_node(c, *claim, false, true));
  auto b = volume_at(c, {"default", "b"});
  const auto* other = find_claim(b, "other");
  CHECK_FALSE(release_without_node(c, *other, true, false));  // n2's claim is not touched
  // No deadline: never forced.
  auto c2 = drain_catalog();
  auto none = drain_of("n1", 0);
  none.set_no_deadline(true);
  commit_update(c2, drain_request(c2, none, 1000));
  CHECK_FALSE(plan_drain(c2, "n1", int64_t{1} << 50).force);
}

// A node without a berth client runs nothing: the forced drain ends its
// allocs in the same entry (running ones complete, pending ones failed).
TEST_CASE("a_forced_drain_of_a_node_without_a_client_ends_its_allocs_at_once") {
  catalog c;
  auto bare = make_node("n1", v1::NODE_READY, false);
  commit(c, {upsert_change(bare),
             upsert_change(make_alloc("web", "n1", v1::ALLOC_RUNNING)),
             upsert_change(make_alloc("starting", "n1", v1::ALLOC_PENDING)),
             upsert_change(make_alloc("old", "n1", v1::ALLOC_COMPLETE))});
  commit_update(c, drain_request(c, drain_of("n1", 10), 0));
  auto forced = force_drain(c, "n1", 20);
  REQUIRE(forced.size() == 3);  // the node, web and the pending one
  CHECK(forced[0].node_upsert().drain().forced());
  std::map<std::string, v1::AllocState> states;
  for (size_t i = 1; i < forced.size(); ++i)
    states[forced[i].alloc_upsert().id()] = forced[i].alloc_upsert().state();
  CHECK(states.at("web") == v1::ALLOC_COMPLETE);
  CHECK(states.at("starting") == v1::ALLOC_FAILED);
  CHECK(forced[1].alloc_upsert().message().find("at its deadline") != std::string::npos);
}

TEST_CASE("node_views_show_eligibility_and_drain_progress") {
  auto c = drain_catalog();
  commit_update(c, drain_request(c, drain_of("n1"), 1000));
  v1::Request read;
  read.set_node_status("n1");
  auto r = answer_read(c, read, [](const std::string&) { return int64_t{0}; });
  REQUIRE(r);
  REQUIRE(r->nodes_size() == 1);
  CHECK(r->nodes(0).ineligible());
  CHECK(r->nodes(0).drain_progress().allocs_left() == 3);
  CHECK(r->nodes(0).drain_progress().claims_left() == 2);
  v1::Request list;
  list.mutable_node_list()->set_filter("eligible == false");
  auto only = answer_read(c, list, [](const std::string&) { return int64_t{0}; });
  REQUIRE(only);
  REQUIRE(only->nodes_size() == 1);
  CHECK(only->nodes(0).id() == "n1");
}

// Random drains: allocs stop, fail or hang, claims release step by step,
// the deadline comes or not.  Whatever happens, the drain finishes only
// when nothing is left on the node, never touches another node, withdraws
// the plugins only when done, and always ends.
TEST_CASE("random_drains_end_and_withdraw_the_plugins_last") {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng{seed};
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    catalog c;
    auto n1 = make_node("n1");
    n1.add_plugin_ids("p");
    std::vector<v1::Change> setup{upsert_change(n1), upsert_change(make_node("n2"))};
    int allocs = pick(6);
    std::map<std::string, v1::Volume> volumes;
    for (int i = 0; i < allocs; ++i) {
      auto id = "a" + std::to_string(i);
      auto node = pick(3) == 0 ? "n2" : "n1";
      auto vol = "v" + std::to_string(pick(3));
      if (!volumes.count(vol)) volumes[vol] = make_volume(vol);
      add_claim(volumes[vol], id, node, pick(4) == 0 ? v1::CLAIM_UNPUBLISHING : v1::CLAIM_TAKEN);
      setup.push_back(upsert_change(make_alloc(
          id, node, pick(5) == 0 ? v1::ALLOC_PENDING : v1::ALLOC_RUNNING, {vol})));
    }
    for (auto& [id, v] : volumes) setup.push_back(upsert_change(v));
    commit(c, setup);
    auto before_n2 = c.allocs;
    bool deadline = pick(2) == 0;
    commit_update(c, drain_request(c, drain_of("n1", deadline ? 50 : 0), 0));
    if (!deadline) {
      auto none = drain_of("n1", 0);
      none.set_no_deadline(true);
      commit_update(c, drain_request(c, none, 0));
    }
    bool finished = false;
    for (int64_t now = 1; now < 200 && !finished; ++now) {
      auto plan = plan_drain(c, "n1", now);
      CHECK_FALSE((plan.force && plan.done));
      for (const auto& id : plan.stop) {
        const auto& a = c.allocs.at(id);
        CHECK(a.node_id() == "n1");
        // Running ones; once forced, pending ones too (issue 59).
        if (c.nodes.at("n1").drain().forced())
          CHECK_FALSE(alloc_terminal(a.state()));
        else
          CHECK(a.state() == v1::ALLOC_RUNNING);
        if (pick(3) != 0)  // some stops are slow or fail: asked again later
          commit(c, {upsert_change(alloc_in_state(a, stopped_state(a.state()), "", now))});
      }
      // A pending alloc settles sometimes.
      for (const auto& [id, a] : c.allocs)
        if (a.node_id() == "n1" && a.state() == v1::ALLOC_PENDING && pick(4) == 0) {
          commit(c, {upsert_change(alloc_in_state(a, v1::ALLOC_RUNNING, "", now))});
          break;
        }
      if (plan.force) {
        // Nothing ends by the deadline alone: n1 has a client.
        auto forced = force_drain(c, "n1", now);
        CHECK(forced.size() == 1);
        commit(c, forced);
      }
      if (pick(2) == 0) release_terminal_claims(c, "n1");
      if (plan.done) {
        auto p = drain_progress(c, "n1");
        CHECK(p.allocs_left() == 0);
        CHECK(p.claims_left() == 0);
        auto done = finish_drain(c, "n1", now);
        REQUIRE(done.size() == 1);
        CHECK(done[0].node_upsert().plugins_withdrawn());
        commit(c, done);
        finished = true;
      } else {
        CHECK(instances_to_withdraw(c, "n1").empty());
      }
    }
    // Stops that keep failing end only at a deadline; without one a drain
    // may wait (as asked).  Either way n2 is untouched.
    if (deadline) CHECK(finished);
    for (const auto& [id, a] : before_n2)
      if (a.node_id() == "n2") CHECK(c.allocs.at(id).state() == a.state());
  }
}
