// Volume expansion (control/expansion): what berth volume expand and a
// re-registration with a larger capacity_min may ask, the order of the
// steps (ControllerExpandVolume, then NodeExpandVolume where the volume is
// published, online, or at its next stage, offline), and the catalog's
// index of the expansions in progress a new leader resumes.
#include "control/expansion.hpp"

#include <doctest/doctest.h>

#include <random>
#include <set>

#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "messages/model.hpp"

using namespace berth;

namespace {

constexpr int64_t MiB = 1 << 20;

struct plugin_caps {
  bool controller = true;
  bool node = true;
  bool online = true;
  bool offline = false;
  bool healthy = true;
};

plugin_caps caps_with(bool controller, bool node, bool online, bool offline, bool healthy = true) {
  plugin_caps c;
  c.controller = controller;
  c.node = node;
  c.online = online;
  c.offline = offline;
  c.healthy = healthy;
  return c;
}

v1::Plugin plugin(plugin_caps c = {}) {
  v1::Plugin p;
  p.set_id("hostpath");
  v1::PluginInstance ctl;
  ctl.set_node_id("n1");
  ctl.set_healthy(c.healthy);
  ctl.set_expand_volume(c.controller);
  ctl.set_expansion_online(c.online);
  ctl.set_expansion_offline(c.offline);
  *p.add_controllers() = ctl;
  v1::PluginInstance node;
  node.set_node_id("n1");
  node.set_healthy(true);
  node.set_node_expand_volume(c.node);
  node.set_expansion_online(c.online);
  node.set_expansion_offline(c.offline);
  *p.add_nodes() = node;
  return p;
}

v1::Volume volume(int64_t capacity_min = MiB, int64_t reported = MiB, int64_t max = 0) {
  v1::Volume v;
  v.set_id("db");
  v.set_namespace_("default");
  v.set_plugin_id("hostpath");
  v.set_external_id("hp-1");
  v.set_capacity_min(capacity_min);
  v.set_capacity_max(max);
  v.set_capacity_bytes(reported);
  return v;
}

void claim_on(v1::Volume& v, const std::string& alloc, const std::string& node,
              v1::ClaimState state = v1::CLAIM_TAKEN) {
  auto* c = v.add_claims();
  c->set_alloc_id(alloc);
  c->set_node_id(node);
  c->set_state(state);
  c->set_mode(v1::CLAIM_WRITE);
}

expand_decision decided(const v1::Volume& v, int64_t size, const v1::Plugin* p) {
  auto d = decide_expand(v, size, p, 1000);
  REQUIRE(std::holds_alternative<expand_decision>(d));
  return std::get<expand_decision>(d);
}

failure refusal(const v1::Volume& v, int64_t size, const v1::Plugin* p) {
  auto d = decide_expand(v, size, p, 1000);
  REQUIRE(std::holds_alternative<failure>(d));
  return std::get<failure>(d);
}

}  // namespace

TEST_CASE("expansion_support_reads_the_capabilities_of_healthy_controllers_and_nodes") {
  auto s = expansion_support_of(plugin());
  CHECK(s.controller);
  CHECK(s.node);
  CHECK(s.online);
  CHECK_FALSE(s.offline_only());
  // An unhealthy controller still has the capability: the step waits for
  // it, it is never skipped (found by the claim simulation).
  CHECK(expansion_support_of(plugin(caps_with(true, true, true, false, false))).controller);
  CHECK_FALSE(expansion_support_of(plugin(caps_with(false, true, true, false))).controller);
  CHECK(expansion_support_of(plugin(caps_with(true, true, false, true))).offline_only());
  CHECK_FALSE(expansion_support_of(plugin(caps_with(true, true, true, true))).offline_only());
  CHECK_FALSE(expansion_support_of(v1::Plugin{}).node);
}

TEST_CASE("expansion_support_keeps_the_controller_step_while_no_controller_is_there") {
  // The controller's node went down and its instance was withdrawn: the
  // expansion still has a ControllerExpandVolume step (found by the claim
  // simulation: it was skipped, and NodeExpandVolume ran on a volume the
  // controller never grew).
  auto p = plugin();
  upsert_instance(p, v1::PLUGIN_MONOLITH, p.controllers(0));
  CHECK(p.controller_expands());
  p.clear_controllers();
  auto s = expansion_support_of(p);
  CHECK(s.controller);
  auto v = decided(volume(), 2 * MiB, &p).next;
  CHECK_FALSE(v.expansion().controller_done());
  CHECK(next_expansion_step(v, s).action == expansion_action::controller_expand);
  // A node-only plugin never had one: the node step alone.
  auto node_only = plugin(caps_with(false, true, true, false));
  node_only.clear_controllers();
  CHECK_FALSE(expansion_support_of(node_only).controller);
}

TEST_CASE("current_capacity_is_what_the_plugin_reported_else_capacity_min") {
  CHECK(current_capacity(volume(MiB, 2 * MiB)) == 2 * MiB);
  CHECK(current_capacity(volume(MiB, 0)) == MiB);
  CHECK(current_capacity(volume(0, 0)) == 0);
}

TEST_CASE("expand_to_a_larger_size_records_the_expansion_and_the_new_capacity_min") {
  auto p = plugin();
  auto d = decided(volume(), 2 * MiB, &p);
  CHECK(d.start);
  CHECK(d.next.capacity_min() == 2 * MiB);
  CHECK(d.next.capacity_bytes() == MiB);  // what the plugin reported, until it reports more
  REQUIRE(expanding(d.next));
  CHECK(d.next.expansion().required_bytes() == 2 * MiB);
  CHECK_FALSE(d.next.expansion().controller_done());
  CHECK_FALSE(d.next.expansion().node_required());
  CHECK(d.next.expansion().requested_at_ms() == 1000);
  CHECK(d.message.find("2 MiB") != std::string::npos);
}

TEST_CASE("expand_limit_is_the_volume_capacity_max") {
  auto p = plugin();
  auto d = decided(volume(MiB, MiB, 8 * MiB), 4 * MiB, &p);
  CHECK(d.next.expansion().limit_bytes() == 8 * MiB);
}

TEST_CASE("expand_to_the_same_size_is_not_a_change") {
  auto p = plugin();
  auto d = decided(volume(), MiB, &p);
  CHECK_FALSE(d.start);
  CHECK(d.message.find("already") != std::string::npos);
  // The plugin gave more than asked: a size in between is already there.
  auto more = volume(MiB, 4 * MiB);
  CHECK_FALSE(decided(more, 3 * MiB, &p).start);
  CHECK_FALSE(decided(more, 4 * MiB, &p).start);
  CHECK(decided(more, 5 * MiB, &p).start);
}

TEST_CASE("expand_to_the_size_in_progress_is_not_a_change_and_a_larger_one_replaces_it") {
  auto p = plugin();
  auto v = decided(volume(), 4 * MiB, &p).next;
  v = after_controller_expand(v, 4 * MiB, true, expansion_support_of(p));
  auto again = decided(v, 4 * MiB, &p);
  CHECK_FALSE(again.start);
  CHECK(again.message.find("being expanded") != std::string::npos);
  auto larger = decided(v, 8 * MiB, &p);
  CHECK(larger.start);
  CHECK(larger.next.expansion().required_bytes() == 8 * MiB);
  CHECK_FALSE(larger.next.expansion().controller_done());  // its steps run again
}

TEST_CASE("expand_shrinking_is_refused_and_names_the_sizes") {
  auto p = plugin();
  auto f = refusal(volume(2 * MiB, 2 * MiB), MiB, &p);
  CHECK(f.code == errc::refused);
  CHECK(f.message.find("'db'") != std::string::npos);
  CHECK(f.message.find("2 MiB") != std::string::npos);
  CHECK(f.message.find("1 MiB") != std::string::npos);
  CHECK(f.message.find("only grow") != std::string::npos);
  // below an expansion in progress
  auto v = decided(volume(), 4 * MiB, &p).next;
  auto g = refusal(v, 3 * MiB, &p);
  CHECK(g.code == errc::refused);
  CHECK(g.message.find("being expanded to 4 MiB") != std::string::npos);
}

TEST_CASE("expand_refuses_bad_sizes_and_sizes_beyond_capacity_max") {
  auto p = plugin();
  CHECK(refusal(volume(), 0, &p).code == errc::invalid);
  CHECK(refusal(volume(), -5, &p).code == errc::invalid);
  auto f = refusal(volume(MiB, MiB, 2 * MiB), 3 * MiB, &p);
  CHECK(f.code == errc::refused);
  CHECK(f.message.find("capacity_max") != std::string::npos);
  CHECK(decided(volume(MiB, MiB, 2 * MiB), 2 * MiB, &p).start);
}

TEST_CASE("expand_needs_a_registered_plugin_that_advertises_expand_volume") {
  auto f = refusal(volume(), 2 * MiB, nullptr);
  CHECK(f.code == errc::not_found);
  CHECK(f.message.find("'hostpath'") != std::string::npos);
  auto none = plugin(caps_with(false, false, true, false));
  auto g = refusal(volume(), 2 * MiB, &none);
  CHECK(g.code == errc::refused);
  CHECK(g.message.find("EXPAND_VOLUME") != std::string::npos);
  // the same size is fine whatever the plugin can do (nothing is asked of it)
  CHECK_FALSE(decided(volume(), MiB, &none).start);
  CHECK_FALSE(decided(volume(), MiB, nullptr).start);
}

TEST_CASE("expand_with_a_node_only_plugin_skips_the_controller_step") {
  auto p = plugin(caps_with(false, true, true, false));
  auto v = decided(volume(), 2 * MiB, &p).next;
  CHECK(v.expansion().controller_done());
  CHECK(v.expansion().node_required());
  claim_on(v, "a1", "n1");
  auto step = next_expansion_step(v, expansion_support_of(p));
  CHECK(step.action == expansion_action::node_expand);
  CHECK(step.node_id == "n1");
}

TEST_CASE("steps_online_controller_then_every_published_node_then_finish") {
  auto p = plugin();
  auto s = expansion_support_of(p);
  auto v = volume();
  claim_on(v, "a1", "n2");
  claim_on(v, "a2", "n1");
  claim_on(v, "a3", "n2");
  claim_on(v, "a4", "n3", v1::CLAIM_UNPUBLISHING);  // being released: not published
  CHECK(next_expansion_step(v, s).action == expansion_action::none);
  v = decided(v, 2 * MiB, &p).next;
  CHECK(next_expansion_step(v, s).action == expansion_action::controller_expand);
  v = after_controller_expand(v, 2 * MiB, true, s);
  CHECK(v.capacity_bytes() == 2 * MiB);
  auto step = next_expansion_step(v, s);
  CHECK(step.action == expansion_action::node_expand);
  CHECK(step.node_id == "n1");
  v = after_node_expand(v, "n1", 2 * MiB);
  step = next_expansion_step(v, s);
  CHECK(step.action == expansion_action::node_expand);
  CHECK(step.node_id == "n2");
  v = after_node_expand(v, "n2", 2 * MiB);
  v = after_node_expand(v, "n2", 2 * MiB);  // a repeat is recorded once
  CHECK(v.expansion().nodes_done_size() == 2);
  CHECK(next_expansion_step(v, s).action == expansion_action::finish);
  v = expansion_finished(v);
  CHECK_FALSE(expanding(v));
  CHECK(v.capacity_bytes() == 2 * MiB);
  CHECK(next_expansion_step(v, s).action == expansion_action::none);
}

TEST_CASE("steps_finish_after_the_controller_when_the_node_is_not_required") {
  auto p = plugin();
  auto s = expansion_support_of(p);
  auto v = volume();
  claim_on(v, "a1", "n1");
  v = decided(v, 2 * MiB, &p).next;
  v = after_controller_expand(v, 2 * MiB, false, s);
  CHECK(next_expansion_step(v, s).action == expansion_action::finish);
  // nor when the nodes cannot expand (nothing the node could do)
  auto no_node = expansion_support_of(plugin(caps_with(true, false, true, false)));
  auto w = decided(volume(), 2 * MiB, &p).next;
  w = after_controller_expand(w, 2 * MiB, true, no_node);
  CHECK(next_expansion_step(w, no_node).action == expansion_action::finish);
}

TEST_CASE("steps_online_volume_published_nowhere_waits_for_its_next_stage") {
  auto p = plugin();
  auto s = expansion_support_of(p);
  auto v = decided(volume(), 2 * MiB, &p).next;
  v = after_controller_expand(v, 2 * MiB, true, s);
  CHECK(next_expansion_step(v, s).action == expansion_action::wait_for_stage);
  CHECK(publish_expands(v, s));
  auto f = expansion_waits(v, next_expansion_step(v, s));
  CHECK(f.code == errc::unavailable);
  CHECK(f.message.find("next staged") != std::string::npos);
  // staged on n1 at a claim: that node is done, and so is the expansion
  claim_on(v, "a1", "n1");
  v = after_node_expand(v, "n1", 2 * MiB);
  CHECK(next_expansion_step(v, s).action == expansion_action::finish);
}

TEST_CASE("steps_offline_only_controller_waits_until_no_claim_is_published") {
  auto p = plugin(caps_with(true, true, false, true));
  auto s = expansion_support_of(p);
  auto v = volume();
  claim_on(v, "a1", "n1");
  v = decided(v, 2 * MiB, &p).next;
  auto step = next_expansion_step(v, s);
  CHECK(step.action == expansion_action::wait_for_unpublish);
  CHECK(expansion_waits(v, step).message.find("offline only") != std::string::npos);
  CHECK_FALSE(publish_expands(v, s));  // the controller step comes first
  v.clear_claims();
  CHECK(next_expansion_step(v, s).action == expansion_action::controller_expand);
  v = after_controller_expand(v, 2 * MiB, true, s);
  // offline: NodeExpandVolume only at the next stage, even once published
  CHECK(next_expansion_step(v, s).action == expansion_action::wait_for_stage);
  CHECK(publish_expands(v, s));
  claim_on(v, "a2", "n1");
  CHECK(next_expansion_step(v, s).action == expansion_action::wait_for_stage);
  v = after_node_expand(v, "n1", 2 * MiB);
  CHECK(next_expansion_step(v, s).action == expansion_action::finish);
}

TEST_CASE("expansion_finished_keeps_at_least_the_size_asked") {
  auto p = plugin();
  auto v = decided(volume(MiB, 0), 2 * MiB, &p).next;
  v = after_controller_expand(v, 0, false, expansion_support_of(p));  // no capacity reported
  CHECK(v.capacity_bytes() == 0);
  v = expansion_finished(v);
  CHECK(v.capacity_bytes() == 2 * MiB);
  auto w = decided(volume(), 2 * MiB, &p).next;
  w = after_controller_expand(w, 3 * MiB, false, expansion_support_of(p));
  CHECK(expansion_finished(w).capacity_bytes() == 3 * MiB);  // more than asked is kept
}

TEST_CASE("steps_after_a_step_without_expansion_change_nothing") {
  auto v = volume();
  auto s = expansion_support_of(plugin());
  CHECK(after_controller_expand(v, 5 * MiB, true, s).SerializeAsString() == v.SerializeAsString());
  CHECK(after_node_expand(v, "n1", 5 * MiB).SerializeAsString() == v.SerializeAsString());
  CHECK(expansion_finished(v).SerializeAsString() == v.SerializeAsString());
  CHECK_FALSE(publish_expands(v, s));
}

TEST_CASE("reregistration_with_a_larger_capacity_min_asks_for_an_expansion") {
  auto p = plugin();
  auto before = volume();
  auto next = before;
  next.clear_capacity_bytes();  // a spec does not carry it
  next.set_capacity_min(4 * MiB);
  REQUIRE_FALSE(reregistration_expansion(before, next, &p, 7));
  REQUIRE(expanding(next));
  CHECK(next.expansion().required_bytes() == 4 * MiB);
  CHECK(next.expansion().requested_at_ms() == 7);
  CHECK(next.capacity_bytes() == MiB);  // kept from before
}

TEST_CASE("reregistration_with_the_same_capacity_keeps_an_expansion_in_progress") {
  auto p = plugin();
  auto before = decided(volume(), 4 * MiB, &p).next;
  before = after_controller_expand(before, 4 * MiB, true, expansion_support_of(p));
  auto next = before;
  next.clear_expansion();
  next.clear_capacity_bytes();
  REQUIRE_FALSE(reregistration_expansion(before, next, &p, 9));
  CHECK(next.expansion().SerializeAsString() == before.expansion().SerializeAsString());
  CHECK(next.capacity_bytes() == 4 * MiB);
}

TEST_CASE("reregistration_with_a_smaller_capacity_min_is_refused") {
  auto p = plugin();
  auto before = volume(2 * MiB, 2 * MiB);
  auto next = before;
  next.set_capacity_min(MiB);
  auto f = reregistration_expansion(before, next, &p, 1);
  REQUIRE(f);
  CHECK(f->code == errc::refused);
  CHECK(f->message.find("re-registration") != std::string::npos);
  // within what the plugin gave (capacity_min unchanged or between): fine
  auto gave_more = volume(MiB, 4 * MiB);
  auto same = gave_more;
  CHECK_FALSE(reregistration_expansion(gave_more, same, &p, 1));
  CHECK_FALSE(expanding(same));
  auto between = gave_more;
  between.set_capacity_min(3 * MiB);
  CHECK_FALSE(reregistration_expansion(gave_more, between, &p, 1));
  CHECK_FALSE(expanding(between));
}

TEST_CASE("reregistration_expansion_with_a_plugin_that_cannot_expand_is_refused") {
  auto p = plugin(caps_with(false, false, true, false));
  auto before = volume();
  auto next = before;
  next.set_capacity_min(2 * MiB);
  auto f = reregistration_expansion(before, next, &p, 1);
  REQUIRE(f);
  CHECK(f->message.find("EXPAND_VOLUME") != std::string::npos);
  // its new capacity_max is what the size is checked against
  auto q = plugin();
  auto capped = before;
  capped.set_capacity_min(8 * MiB);
  capped.set_capacity_max(4 * MiB);
  CHECK(reregistration_expansion(before, capped, &q, 1));
  capped.set_capacity_max(16 * MiB);
  CHECK_FALSE(reregistration_expansion(before, capped, &q, 1));
  CHECK(capped.expansion().limit_bytes() == 16 * MiB);
}

TEST_CASE("catalog_indexes_the_volumes_with_an_expansion_in_progress") {
  auto p = plugin();
  catalog c;
  auto v = volume();
  add_volume(c, v);
  CHECK(c.expanding.empty());
  auto grown = decided(v, 2 * MiB, &p).next;
  v1::LogEntry e;
  *e.add_changes() = upsert_change(grown);
  apply(c, 1, e);
  CHECK(c.expanding.count({"default", "db"}) == 1);
  v1::LogEntry done;
  *done.add_changes() = upsert_change(expansion_finished(grown));
  apply(c, 2, done);
  CHECK(c.expanding.empty());
  // loaded from the state tables (a new leader): found again
  catalog d;
  add_volume(d, grown);
  CHECK(d.expanding.count({"default", "db"}) == 1);
  v1::LogEntry gone;
  *gone.add_changes() = volume_delete_change("default", "db");
  apply(d, 3, gone);
  CHECK(d.expanding.empty());
}

TEST_CASE("expansion_retry_delay_grows_and_is_capped") {
  CHECK(expansion_retry_delay_ms(1, 0) == 500);
  CHECK(expansion_retry_delay_ms(1, 0.999) < 1000);
  CHECK(expansion_retry_delay_ms(2, 0) == 1000);
  CHECK(expansion_retry_delay_ms(30, 0.999) < 60000);
  CHECK(expansion_retry_delay_ms(30, 0) == 30000);
}

TEST_CASE("steps_random_schedules_reach_finish_and_never_shrink") {
  // Random claims, releases and step results: the next step is always one
  // the volume's state allows, every path ends in finish once the nodes
  // that hold it are done, and the capacity reported never goes down.
  std::mt19937 rng(14);
  for (int round = 0; round < 300; ++round) {
    plugin_caps caps;
    caps.controller = rng() % 4 != 0;
    caps.node = rng() % 4 != 0;
    if (!caps.controller && !caps.node) caps.node = true;
    caps.online = rng() % 3 != 0;
    caps.offline = !caps.online || rng() % 2 == 0;
    auto p = plugin(caps);
    auto s = expansion_support_of(p);
    auto v = volume();
    v = decided(v, 2 * MiB + static_cast<int64_t>(rng() % 8) * MiB, &p).next;
    int64_t last = v.capacity_bytes();
    bool finished = false;
    for (int i = 0; i < 60 && !finished; ++i) {
      if (rng() % 3 == 0) {
        if (v.claims_size() > 0 && rng() % 2 == 0)
          v.mutable_claims()->RemoveLast();
        else
          claim_on(v, "a" + std::to_string(i), "n" + std::to_string(rng() % 3));
        // a stage at the new claim (what publish_steps does)
        if (v.claims_size() > 0 && publish_expands(v, s))
          v = after_node_expand(v, v.claims(v.claims_size() - 1).node_id(),
                                v.expansion().required_bytes());
      }
      auto step = next_expansion_step(v, s);
      switch (step.action) {
        case expansion_action::none:
          FAIL("an expansion in progress has a step");
          break;
        case expansion_action::controller_expand:
          CHECK_FALSE(v.expansion().controller_done());
          if (s.offline_only()) CHECK(published_nodes(v).empty());
          v = after_controller_expand(v, v.expansion().required_bytes(), rng() % 2 == 0, s);
          break;
        case expansion_action::node_expand: {
          auto nodes = published_nodes(v);
          CHECK(std::count(nodes.begin(), nodes.end(), step.node_id) == 1);
          CHECK_FALSE(s.offline_only());
          v = after_node_expand(v, step.node_id, v.expansion().required_bytes());
          break;
        }
        case expansion_action::wait_for_unpublish:
          CHECK(s.offline_only());
          v.clear_claims();
          break;
        case expansion_action::wait_for_stage:
          CHECK(v.expansion().controller_done());
          claim_on(v, "s" + std::to_string(i), "n0");
          v = after_node_expand(v, "n0", v.expansion().required_bytes());
          break;
        case expansion_action::finish: {
          auto required = v.expansion().required_bytes();
          v = expansion_finished(v);
          CHECK(v.capacity_bytes() >= required);
          finished = true;
          break;
        }
      }
      CHECK(v.capacity_bytes() >= last);
      last = v.capacity_bytes();
    }
    CHECK(finished);
  }
}

TEST_CASE("size_text_says_whole_units_else_bytes") {
  CHECK(size_text(2 * MiB) == "2 MiB");
  CHECK(size_text(1536) == "1536 bytes");
  CHECK(size_text(3LL << 30) == "3 GiB");
  CHECK(size_text(1024) == "1 KiB");
  CHECK(size_text(0) == "0 bytes");
}
