// Volume health and usage (control/health, and claim admission's refusal
// of an abnormal volume in messages/model): which call the health check
// makes, which conditions changed and need an entry, how a node's usage
// report changes the node (only when a value changed; a late report is
// stale), what status and metrics show per node.
#include "control/health.hpp"

#include <doctest/doctest.h>

#include <random>

#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "messages/model.hpp"

using namespace berth;

namespace {

v1::PluginInstance controller(const std::string& node, bool list, bool get, bool condition,
                              bool healthy = true) {
  v1::PluginInstance i;
  i.set_node_id(node);
  i.set_healthy(healthy);
  i.set_list_volumes(list);
  i.set_get_volume(get);
  i.set_volume_condition(condition);
  return i;
}

v1::Plugin plugin_with(std::vector<v1::PluginInstance> controllers) {
  v1::Plugin p;
  p.set_id("hostpath");
  for (auto& i : controllers) {
    upsert_instance(p, v1::PLUGIN_CONTROLLER, i);
    v1::PluginInstance n;
    n.set_node_id(i.node_id());
    n.set_healthy(true);
    upsert_instance(p, v1::PLUGIN_NODE, n);
  }
  return p;
}

v1::Volume volume(const std::string& id, const std::string& external,
                  const std::string& plugin = "hostpath") {
  v1::Volume v;
  v.set_id(id);
  v.set_namespace_("default");
  v.set_plugin_id(plugin);
  v.set_external_id(external);
  auto* c = v.add_capabilities();
  c->set_access_mode(v1::SINGLE_NODE_WRITER);
  c->set_attachment_mode(v1::FILE_SYSTEM);
  return v;
}

void claim_on(v1::Volume& v, const std::string& alloc, const std::string& node) {
  auto* c = v.add_claims();
  c->set_alloc_id(alloc);
  c->set_node_id(node);
  c->set_mode(v1::CLAIM_WRITE);
  c->set_state(v1::CLAIM_TAKEN);
}

v1::Node node(const std::string& id) {
  v1::Node n;
  n.set_id(id);
  n.set_status(v1::NODE_READY);
  return n;
}

// A catalog through apply, as the leader has it.
catalog catalog_of(std::vector<v1::Volume> volumes, std::vector<v1::Node> nodes) {
  catalog c;
  v1::LogEntry e;
  for (auto& v : volumes) *e.add_changes() = upsert_change(v);
  for (auto& n : nodes) *e.add_changes() = upsert_change(n);
  apply(c, 1, e);
  return c;
}

v1::VolumeUsage usage(const std::string& vol, int64_t total, int64_t used, int64_t avail) {
  v1::VolumeUsage u;
  u.set_namespace_("default");
  u.set_volume_id(vol);
  u.set_capacity_bytes(total);
  u.set_used_bytes(used);
  u.set_available_bytes(avail);
  return u;
}

v1::VolumeStatsReport report(const std::string& node, int64_t at, std::vector<v1::VolumeUsage> us) {
  v1::VolumeStatsReport r;
  r.set_node_id(node);
  r.set_measured_at_ms(at);
  for (auto& u : us) *r.add_usage() = u;
  return r;
}

v1::VolumeHealthResult result(std::vector<std::tuple<std::string, bool, std::string>> cs) {
  v1::VolumeHealthResult r;
  for (auto& [id, abnormal, msg] : cs) {
    v1::VolumeCondition c;
    c.set_abnormal(abnormal);
    c.set_message(msg);
    (*r.mutable_conditions())[id] = c;
  }
  return r;
}

std::optional<v1::Node> changed_node(const catalog& c, const v1::VolumeStatsReport& r) {
  auto out = node_after_report(c, r);
  REQUIRE(std::holds_alternative<std::optional<v1::Node>>(out));
  return std::get<std::optional<v1::Node>>(out);
}

// Commits a node as the leader would.
void commit_node(catalog& c, const v1::Node& n) {
  v1::LogEntry e;
  *e.add_changes() = upsert_change(n);
  apply(c, c.applied_index + 1, e);
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("health_call_prefers_list_volumes_and_needs_volume_condition") {
  CHECK(health_call_of(controller("n1", true, true, true)) == health_call::list_volumes);
  CHECK(health_call_of(controller("n1", true, false, true)) == health_call::list_volumes);
  CHECK(health_call_of(controller("n1", false, true, true)) == health_call::get_volume);
  CHECK(health_call_of(controller("n1", true, true, false)) == health_call::none);
  CHECK(health_call_of(controller("n1", false, false, true)) == health_call::none);
  CHECK(health_call_of(controller("n1", false, false, false)) == health_call::none);
}

TEST_CASE("health_plan_takes_connected_healthy_capable_controllers_with_one_call") {
  auto p =
      plugin_with({controller("n1", true, true, true), controller("n2", false, true, true),
                   controller("n3", true, false, true, false), controller("n4", true, true, true)});
  auto plan = plan_health_check(p, {"n1", "n2", "n3", "n4"});
  CHECK(plan.call == health_call::list_volumes);
  CHECK(plan.controllers == std::vector<std::string>{"n1", "n4"});
  // Only n2 connected: ControllerGetVolume through it.
  plan = plan_health_check(p, {"n2"});
  CHECK(plan.call == health_call::get_volume);
  CHECK(plan.controllers == std::vector<std::string>{"n2"});
  // The unhealthy one is never asked.
  plan = plan_health_check(p, {"n3"});
  CHECK(plan.call == health_call::none);
  CHECK(plan.controllers.empty());
  // A plugin without VOLUME_CONDITION is not checked.
  CHECK(plan_health_check(plugin_with({controller("n1", true, true, false)}), {"n1"}).call ==
        health_call::none);
  CHECK(plan_health_check(p, {}).call == health_call::none);
}

TEST_CASE("health_due_every_interval_and_never") {
  CHECK(health_due(0, 1000, 60000));
  CHECK_FALSE(health_due(1000, 60999, 60000));
  CHECK(health_due(1000, 61000, 60000));
  CHECK_FALSE(health_due(0, 1000, -1));
  CHECK_FALSE(health_due(1000, 1'000'000'000, -1));
  CHECK(health_due(5, 5, 0));
}

TEST_CASE("health_request_names_the_plugins_volumes_for_get_volume_only") {
  auto c = catalog_of({volume("a", "ext-a"), volume("b", "ext-b"), volume("x", "ext-x", "other"),
                       volume("unset", "")},
                      {});
  auto get = health_request(c, "hostpath", health_call::get_volume);
  REQUIRE(get);
  CHECK_FALSE(get->use_list());
  CHECK(std::vector<std::string>(get->external_ids().begin(), get->external_ids().end()) ==
        std::vector<std::string>{"ext-a", "ext-b"});
  auto list = health_request(c, "hostpath", health_call::list_volumes);
  REQUIRE(list);
  CHECK(list->use_list());
  CHECK(list->external_ids().empty());
  CHECK(list->plugin_id() == "hostpath");
  CHECK_FALSE(health_request(c, "nothing", health_call::list_volumes));
  CHECK_FALSE(health_request(c, "hostpath", health_call::none));
}

TEST_CASE("condition_changes_only_what_differs") {
  auto sick = volume("b", "ext-b");
  sick.mutable_condition()->set_abnormal(true);
  sick.mutable_condition()->set_message("directory gone");
  sick.mutable_condition()->set_since_ms(5);
  auto c = catalog_of({volume("a", "ext-a"), sick, volume("x", "ext-x", "other")}, {});

  SUBCASE("nothing changed: no entry") {
    CHECK(condition_changes(c, "hostpath",
                            result({{"ext-a", false, ""}, {"ext-b", true, "directory gone"}}), 9)
              .empty());
  }
  SUBCASE("an ok volume's message is not a change") {
    CHECK(
        condition_changes(c, "hostpath", result({{"ext-a", false, "volume is fine"}}), 9).empty());
  }
  SUBCASE("turning abnormal carries the plugin's message and the time") {
    auto ch = condition_changes(c, "hostpath", result({{"ext-a", true, "vanished"}}), 9);
    REQUIRE(ch.size() == 1);
    CHECK(ch[0].key == volume_key{"default", "a"});
    CHECK(ch[0].abnormal_now);
    CHECK(ch[0].to.message() == "vanished");
    CHECK(ch[0].to.since_ms() == 9);
    CHECK(condition_log_line(ch[0]) == "volume turned abnormal");
  }
  SUBCASE("back to ok") {
    auto ch = condition_changes(c, "hostpath", result({{"ext-b", false, "fine"}}), 9);
    REQUIRE(ch.size() == 1);
    CHECK_FALSE(ch[0].abnormal_now);
    CHECK(ch[0].to.message().empty());
    CHECK(condition_log_line(ch[0]) == "volume is ok again");
  }
  SUBCASE("a new message while abnormal is a change") {
    auto ch = condition_changes(c, "hostpath", result({{"ext-b", true, "other reason"}}), 9);
    REQUIRE(ch.size() == 1);
    CHECK(ch[0].to.message() == "other reason");
  }
  SUBCASE("volumes the plugin did not report and other plugins' change nothing") {
    CHECK(condition_changes(c, "hostpath", result({{"ext-x", true, "no"}}), 9).empty());
    CHECK(condition_changes(c, "hostpath", result({}), 9).empty());
  }
}

TEST_CASE("abnormal_volume_refuses_new_claims_unless_allowed_and_keeps_existing") {
  auto p = plugin_with({controller("n1", true, true, true)});
  auto v = volume("db", "ext");
  v.mutable_condition()->set_abnormal(true);
  v.mutable_condition()->set_message("directory gone");
  claim_request r;
  r.alloc_id = "a1";
  r.node_id = "n1";
  r.write = true;
  r.now_ms = 1;
  auto refused = claim(v, r, &p);
  REQUIRE(refused);
  CHECK(refused->code == errc::refused);
  CHECK(contains(refused->message, "volume 'db' is abnormal"));
  CHECK(contains(refused->message, "directory gone"));
  CHECK(contains(refused->message, "--allow-abnormal"));
  CHECK(v.claims().empty());  // nothing changed
  CHECK(refuse_abnormal(v, false));
  CHECK_FALSE(refuse_abnormal(v, true));
  r.allow_abnormal = true;
  CHECK_FALSE(claim(v, r, &p));
  CHECK(v.claims_size() == 1);
  // The existing claim is kept: claiming again (a retry) succeeds without
  // --allow-abnormal.
  r.allow_abnormal = false;
  CHECK_FALSE(claim(v, r, &p));
  CHECK(v.claims_size() == 1);
  // An ok volume takes claims with or without the flag.
  auto ok = volume("ok", "ext2");
  CHECK_FALSE(refuse_abnormal(ok, false));
  CHECK_FALSE(refuse_abnormal(ok, true));
}

TEST_CASE("registration_never_sets_the_condition_and_reregistration_keeps_it") {
  auto v = volume("db", "ext");
  v.mutable_condition()->set_abnormal(true);
  *v.add_usage() = usage("db", 1, 1, 0);
  apply_defaults(v);
  CHECK_FALSE(v.has_condition());
  CHECK(v.usage().empty());
  auto current = volume("db", "ext");
  current.mutable_condition()->set_abnormal(true);
  current.mutable_condition()->set_message("gone");
  auto incoming = volume("db", "ext");
  CHECK_FALSE(reregister(current, incoming));
  CHECK(current.condition().abnormal());
  CHECK(current.condition().message() == "gone");
}

TEST_CASE("usage_report_commits_only_when_a_value_changed") {
  auto v = volume("db", "ext");
  claim_on(v, "a1", "n1");
  auto c = catalog_of({v}, {node("n1")});
  auto first = changed_node(c, report("n1", 100, {usage("db", 1000, 10, 990)}));
  REQUIRE(first);
  REQUIRE(first->volume_usage_size() == 1);
  CHECK(first->volume_usage(0).node_id() == "n1");
  CHECK(first->volume_usage(0).used_bytes() == 10);
  CHECK(first->volume_usage(0).updated_at_ms() == 100);
  commit_node(c, *first);
  // The same values later: nothing to commit.
  CHECK_FALSE(changed_node(c, report("n1", 200, {usage("db", 1000, 10, 990)})));
  // Used grows: one node upsert with the new value and time.
  auto grown = changed_node(c, report("n1", 300, {usage("db", 1000, 4096, 990 - 4086)}));
  REQUIRE(grown);
  CHECK(grown->volume_usage(0).used_bytes() == 4096);
  CHECK(grown->volume_usage(0).updated_at_ms() == 300);
  commit_node(c, *grown);
  // A report measured before the committed one arrived late: stale.
  CHECK(report_stale(c.nodes.at("n1"), 250));
  CHECK_FALSE(changed_node(c, report("n1", 250, {usage("db", 1000, 1, 999)})));
  // The node's condition is a value too.
  auto sick = usage("db", 1000, 4096, 990 - 4086);
  sick.set_condition_reported(true);
  sick.set_abnormal(true);
  sick.set_message("target gone");
  auto abnormal = changed_node(c, report("n1", 400, {sick}));
  REQUIRE(abnormal);
  CHECK(abnormal->volume_usage(0).abnormal());
  CHECK(abnormal->volume_usage(0).message() == "target gone");
}

TEST_CASE("usage_report_keeps_only_existing_volumes_claimed_on_the_node") {
  auto db = volume("db", "ext");
  claim_on(db, "a1", "n1");
  auto elsewhere = volume("logs", "ext2");
  claim_on(elsewhere, "a2", "n2");
  auto c = catalog_of({db, elsewhere}, {node("n1"), node("n2")});
  auto n = changed_node(
      c,
      report("n1", 100, {usage("db", 1, 1, 0), usage("logs", 2, 2, 0), usage("ghost", 3, 3, 0)}));
  REQUIRE(n);
  REQUIRE(n->volume_usage_size() == 1);
  CHECK(n->volume_usage(0).volume_id() == "db");
  commit_node(c, *n);
  // The volume is no longer reported (unpublished): its entry goes, once.
  auto gone = changed_node(c, report("n1", 200, {}));
  REQUIRE(gone);
  CHECK(gone->volume_usage().empty());
  commit_node(c, *gone);
  CHECK_FALSE(changed_node(c, report("n1", 300, {})));
  // An empty namespace is the default one.
  auto u = usage("db", 5, 5, 0);
  u.clear_namespace_();
  auto n2 = changed_node(c, report("n1", 400, {u}));
  REQUIRE(n2);
  CHECK(n2->volume_usage(0).namespace_() == "default");
}

TEST_CASE("usage_report_from_an_unknown_node_is_not_found") {
  auto c = catalog_of({}, {});
  auto out = node_after_report(c, report("nope", 1, {}));
  REQUIRE(std::holds_alternative<failure>(out));
  CHECK(std::get<failure>(out).code == errc::not_found);
  CHECK(contains(std::get<failure>(out).message, "'nope'"));
}

TEST_CASE("status_and_metrics_show_usage_per_claimed_node_and_the_controller_row") {
  auto db = volume("db", "ext");
  claim_on(db, "a1", "n1");
  claim_on(db, "a2", "n2");
  db.mutable_condition()->set_abnormal(true);
  auto c = catalog_of({db}, {node("n1"), node("n2"), node("n3")});
  commit_node(c, *changed_node(c, report("n1", 1, {usage("db", 100, 40, 60)})));
  commit_node(c, *changed_node(c, report("n2", 1, {usage("db", 100, 50, 50)})));
  auto u = usage_of(c, {"default", "db"});
  REQUIRE(u.size() == 2);
  CHECK(u[0].node_id() == "n1");
  CHECK(u[1].node_id() == "n2");
  auto s = series_of(c, {"default", "db"});
  REQUIRE(s.size() == 3);
  CHECK(s[0].node.empty());
  CHECK(s[0].abnormal);
  CHECK_FALSE(s[0].has_usage);
  CHECK(s[1].node == "n1");
  CHECK(s[1].used_bytes == 40);
  CHECK(s[2].capacity_bytes == 100);
  // A deleted volume has no series: they are removed.
  CHECK(series_of(c, {"default", "gone"}).empty());
  CHECK(usage_of(c, {"default", "gone"}).empty());
}

TEST_CASE("an_idle_healthy_volume_has_no_series_a_claimed_or_abnormal_one_has_the_controller_row") {
  auto idle = volume("idle", "e1");
  auto sick = volume("sick", "e2");
  sick.mutable_condition()->set_abnormal(true);
  auto used = volume("used", "e3");
  claim_on(used, "a1", "n1");
  auto c = catalog_of({idle, sick, used}, {node("n1")});
  CHECK(series_of(c, {"default", "idle"}).empty());
  auto s = series_of(c, {"default", "sick"});
  REQUIRE(s.size() == 1);
  CHECK(s[0].node.empty());
  CHECK(s[0].abnormal);
  s = series_of(c, {"default", "used"});
  REQUIRE(s.size() == 1);
  CHECK(s[0].node.empty());
  CHECK_FALSE(s[0].abnormal);
  // The catalog's index of abnormal volumes follows the committed condition.
  CHECK(c.abnormal == std::set<volume_key>{{"default", "sick"}});
  sick.mutable_condition()->set_abnormal(false);
  v1::LogEntry e;
  *e.add_changes() = upsert_change(sick);
  apply(c, c.applied_index + 1, e);
  CHECK(c.abnormal.empty());
  CHECK(series_of(c, {"default", "sick"}).empty());
}

TEST_CASE("random_reports_commit_exactly_when_the_committed_values_differ") {
  std::mt19937 rng(14);
  auto db = volume("db", "ext");
  claim_on(db, "a1", "n1");
  auto logs = volume("logs", "ext2");
  claim_on(logs, "a2", "n1");
  auto c = catalog_of({db, logs}, {node("n1")});
  int64_t at = 0;
  int commits = 0, skipped = 0;
  for (int i = 0; i < 500; ++i) {
    at += 1 + static_cast<int64_t>(rng() % 3);
    std::vector<v1::VolumeUsage> us;
    if (rng() % 4) us.push_back(usage("db", 100, static_cast<int64_t>(rng() % 3), 0));
    if (rng() % 4) us.push_back(usage("logs", 100, static_cast<int64_t>(rng() % 3), 0));
    auto before = c.nodes.at("n1");
    auto next = changed_node(c, report("n1", at, us));
    // What a report would commit, compared by hand with the node's values.
    bool differs = static_cast<int>(us.size()) != before.volume_usage_size();
    for (size_t k = 0; !differs && k < us.size(); ++k)
      differs = before.volume_usage(static_cast<int>(k)).used_bytes() != us[k].used_bytes() ||
                before.volume_usage(static_cast<int>(k)).volume_id() != us[k].volume_id();
    CHECK(differs == static_cast<bool>(next));
    if (next) {
      commit_node(c, *next);
      ++commits;
      CHECK(c.nodes.at("n1").volume_usage_size() == static_cast<int>(us.size()));
    } else {
      ++skipped;
    }
  }
  CHECK(commits > 50);
  CHECK(skipped > 20);
}
