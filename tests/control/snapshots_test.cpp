// Snapshots, clones and volume modify (control/snapshots): which plugins
// can do them, what a create spec may name as its content, the names the
// shell makes, the requests' problems, and what a modify commits.
#include "control/snapshots.hpp"

#include <doctest/doctest.h>

#include <cctype>
#include <map>
#include <set>

#include "control/catalog.hpp"
#include "control/entries.hpp"

using namespace berth;

namespace {

v1::PluginInstance controller(const std::string& node, bool healthy, bool snap, bool list,
                              bool clone, bool modify) {
  v1::PluginInstance i;
  i.set_node_id(node);
  i.set_healthy(healthy);
  i.set_create_delete_snapshot(snap);
  i.set_list_snapshots(list);
  i.set_clone_volume(clone);
  i.set_modify_volume(modify);
  return i;
}

v1::Plugin plugin(const std::string& id, std::vector<v1::PluginInstance> controllers) {
  v1::Plugin p;
  p.set_id(id);
  for (auto& c : controllers) *p.add_controllers() = std::move(c);
  return p;
}

v1::Volume volume(const std::string& id, const std::string& plugin_id, const std::string& ext,
                  const std::string& ns = "default") {
  v1::Volume v;
  v.set_id(id);
  v.set_namespace_(ns);
  v.set_plugin_id(plugin_id);
  v.set_external_id(ext);
  return v;
}

struct world {
  catalog c;
  void add(v1::Change ch) { apply(c, c.applied_index + 1, make_entry({std::move(ch)})); }
};

const controller_capability all_caps[] = {
    controller_capability::create_delete_snapshot, controller_capability::list_snapshots,
    controller_capability::clone_volume, controller_capability::modify_volume};

}  // namespace

TEST_CASE("capability_names_are_the_specs") {
  CHECK(capability_name(controller_capability::create_delete_snapshot) == "CREATE_DELETE_SNAPSHOT");
  CHECK(capability_name(controller_capability::list_snapshots) == "LIST_SNAPSHOTS");
  CHECK(capability_name(controller_capability::clone_volume) == "CLONE_VOLUME");
  CHECK(capability_name(controller_capability::modify_volume) == "MODIFY_VOLUME");
}

TEST_CASE("advertises_reads_each_capability_alone") {
  for (int bit = 0; bit < 4; ++bit) {
    auto i = controller("n1", true, bit == 0, bit == 1, bit == 2, bit == 3);
    for (int c = 0; c < 4; ++c) CHECK(advertises(i, all_caps[c]) == (c == bit));
  }
}

TEST_CASE("plugin_can_needs_a_healthy_controller_that_advertises") {
  auto cap = controller_capability::create_delete_snapshot;
  CHECK_FALSE(plugin_can(plugin("p", {}), cap));
  CHECK_FALSE(plugin_can(plugin("p", {controller("n1", false, true, true, true, true)}), cap));
  CHECK_FALSE(plugin_can(plugin("p", {controller("n1", true, false, true, true, true)}), cap));
  CHECK(plugin_can(plugin("p", {controller("n1", true, true, false, false, false)}), cap));
  // One healthy advertiser among others is enough.
  CHECK(plugin_can(plugin("p", {controller("n1", false, true, true, true, true),
                                controller("n2", true, false, false, false, false),
                                controller("n3", true, true, false, false, false)}),
                   cap));
}

TEST_CASE("capability_refusal_unknown_plugin_is_not_found") {
  auto f = capability_refusal(nullptr, "ghost", controller_capability::modify_volume,
                              "volume 'db' cannot be modified");
  REQUIRE(f);
  CHECK(f->code == errc::not_found);
  CHECK(f->message.find("plugin 'ghost' is not registered") != std::string::npos);
  CHECK(f->message.find("volume 'db' cannot be modified") == 0);
}

TEST_CASE("capability_refusal_plugin_without_capability_is_refused_naming_it") {
  for (auto cap : all_caps) {
    auto p = plugin("bare", {controller("n1", true, false, false, false, false)});
    auto f = capability_refusal(&p, "bare", cap, "X");
    REQUIRE(f);
    CHECK(f->code == errc::refused);
    CHECK(f->message.find("plugin 'bare' does not support it") != std::string::npos);
    CHECK(f->message.find(capability_name(cap)) != std::string::npos);
  }
}

TEST_CASE("capability_refusal_plugin_without_controller_service") {
  auto p = plugin("nodeonly", {});
  auto f = capability_refusal(&p, "nodeonly", controller_capability::list_snapshots, "X");
  REQUIRE(f);
  CHECK(f->code == errc::refused);
  CHECK(f->message.find("no controller service") != std::string::npos);
}

TEST_CASE("capability_refusal_only_unhealthy_advertisers_is_unavailable") {
  auto p = plugin("hp", {controller("n1", false, true, true, true, true),
                         controller("n2", true, false, false, false, false)});
  auto f = capability_refusal(&p, "hp", controller_capability::clone_volume, "X");
  REQUIRE(f);
  CHECK(f->code == errc::unavailable);  // retry once it is healthy again
  CHECK(f->message.find("no healthy controller") != std::string::npos);
}

TEST_CASE("capability_refusal_none_when_supported") {
  auto p = plugin("hp", {controller("n1", true, true, true, true, true)});
  for (auto cap : all_caps) CHECK_FALSE(capability_refusal(&p, "hp", cap, "X"));
}

TEST_CASE("capable_controllers_keeps_the_order_and_only_advertisers") {
  auto p = plugin("hp", {controller("a", true, true, false, false, false),
                         controller("b", true, false, false, false, false),
                         controller("c", true, true, false, false, false)});
  auto cap = controller_capability::create_delete_snapshot;
  CHECK(capable_controllers(p, {"c", "b", "a"}, cap) == std::vector<std::string>{"c", "a"});
  CHECK(capable_controllers(p, {}, cap).empty());
  CHECK(capable_controllers(p, {"zz"}, cap).empty());  // no instance on that node
  CHECK(capable_controllers(p, {"a", "b", "c"}, controller_capability::modify_volume).empty());
}

TEST_CASE("content_source_capability_by_field") {
  v1::Volume v;
  CHECK_FALSE(content_source_capability(v));
  v.set_snapshot_id("s1");
  CHECK(content_source_capability(v) == controller_capability::create_delete_snapshot);
  v.clear_snapshot_id();
  v.set_clone_id("db");
  CHECK(content_source_capability(v) == controller_capability::clone_volume);
}

TEST_CASE("content_source_problems_both_fields_named_together") {
  auto v = volume("new", "hp", "");
  v.set_snapshot_id("s1");
  v.set_clone_id("db");
  auto problems = content_source_problems(v, true);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].field == "snapshot_id, clone_id");
  CHECK(describe("volume 'new'", problems).find("snapshot_id, clone_id") != std::string::npos);
}

TEST_CASE("content_source_problems_one_source_or_none_is_fine_on_create") {
  auto v = volume("new", "hp", "");
  CHECK(content_source_problems(v, true).empty());
  v.set_snapshot_id("s1");
  CHECK(content_source_problems(v, true).empty());
  v.clear_snapshot_id();
  v.set_clone_id("db");
  CHECK(content_source_problems(v, true).empty());
}

TEST_CASE("content_source_problems_refused_on_register") {
  auto v = volume("db2", "hp", "ext");
  v.set_snapshot_id("s1");
  auto p = content_source_problems(v, false);
  REQUIRE(p.size() == 1);
  CHECK(p[0].field == "snapshot_id");
  v.clear_snapshot_id();
  v.set_clone_id("db");
  p = content_source_problems(v, false);
  REQUIRE(p.size() == 1);
  CHECK(p[0].field == "clone_id");
  v.clear_clone_id();
  CHECK(content_source_problems(v, false).empty());
}

TEST_CASE("content_source_problems_clone_of_itself_and_server_field") {
  auto v = volume("db", "hp", "");
  v.set_clone_id("db");
  CHECK(content_source_problems(v, true).size() == 1);
  auto w = volume("x", "hp", "");
  w.set_clone_external_id("hp-1");
  auto p = content_source_problems(w, true);
  REQUIRE(p.size() == 1);
  CHECK(p[0].field == "clone_external_id");
}

TEST_CASE("clone_source_finds_the_volume_of_the_same_namespace_and_plugin") {
  world w;
  w.add(upsert_change(volume("db", "hp", "hp-db")));
  w.add(upsert_change(volume("db", "hp", "hp-other-ns", "team")));
  w.add(upsert_change(volume("foreign", "other", "o-1")));
  w.add(upsert_change(volume("noext", "hp", "")));
  auto spec = volume("copy", "hp", "");
  spec.set_clone_id("db");
  auto r = clone_source(w.c, spec);
  REQUIRE(std::holds_alternative<std::string>(r));
  CHECK(std::get<std::string>(r) == "hp-db");
  spec.set_namespace_("team");
  CHECK(std::get<std::string>(clone_source(w.c, spec)) == "hp-other-ns");
  spec.set_namespace_("");  // the default namespace
  CHECK(std::get<std::string>(clone_source(w.c, spec)) == "hp-db");

  spec.set_namespace_("elsewhere");
  auto missing = clone_source(w.c, spec);
  REQUIRE(std::holds_alternative<failure>(missing));
  CHECK(std::get<failure>(missing).code == errc::not_found);

  spec.set_namespace_("default");
  spec.set_clone_id("foreign");
  auto other = clone_source(w.c, spec);
  REQUIRE(std::holds_alternative<failure>(other));
  CHECK(std::get<failure>(other).code == errc::invalid);
  CHECK(std::get<failure>(other).message.find("plugin 'other'") != std::string::npos);

  spec.set_clone_id("noext");
  auto noext = clone_source(w.c, spec);
  REQUIRE(std::holds_alternative<failure>(noext));
  CHECK(std::get<failure>(noext).code == errc::refused);
}

TEST_CASE("generated_snapshot_name_is_deterministic_and_plugin_safe") {
  auto a = generated_snapshot_name("default", "db", 1700000000123);
  CHECK(a == "berth-default-db-1700000000123");
  CHECK(generated_snapshot_name("", "db", 1700000000123) == a);  // "" is the default namespace
  CHECK(generated_snapshot_name("default", "db", 1700000000124) != a);
  CHECK(generated_snapshot_name("Team_A", "My.Vol", 5) == "berth-team-a-my-vol-5");
  auto long_name =
      generated_snapshot_name(std::string(80, 'n'), std::string(80, 'v'), 1700000000123);
  CHECK(long_name.size() == 63);
  CHECK(long_name.substr(long_name.size() - 14) == "-1700000000123");  // the moment is kept
  CHECK(generated_snapshot_name("default", "db", -5) == "berth-default-db-0");
  for (char ch : long_name)
    CHECK((std::islower(static_cast<unsigned char>(ch)) ||
           std::isdigit(static_cast<unsigned char>(ch)) || ch == '-'));
}

TEST_CASE("snapshot_request_problems_per_command") {
  v1::SnapshotRequest r;
  auto create = snapshot_request_problems(r, v1::Request::kSnapshotCreate);
  CHECK(create.size() == 2);  // VOLUME and NAME
  r.set_volume_id("db");
  r.set_name("n");
  CHECK(snapshot_request_problems(r, v1::Request::kSnapshotCreate).empty());
  r.set_source_external_id("set-by-shell");
  CHECK(snapshot_request_problems(r, v1::Request::kSnapshotCreate).size() == 1);

  v1::SnapshotRequest d;
  CHECK(snapshot_request_problems(d, v1::Request::kSnapshotDelete).size() == 2);
  d.set_plugin_id("hp");
  d.set_snapshot_id("s1");
  CHECK(snapshot_request_problems(d, v1::Request::kSnapshotDelete).empty());
  (*d.mutable_secrets())[""] = "x";
  CHECK(snapshot_request_problems(d, v1::Request::kSnapshotDelete).size() == 1);

  v1::SnapshotRequest l;
  CHECK(snapshot_request_problems(l, v1::Request::kSnapshotList).empty());
  l.set_per_page(5);
  auto p = snapshot_request_problems(l, v1::Request::kSnapshotList);
  REQUIRE(p.size() == 1);
  CHECK(p[0].message.find("need --plugin") != std::string::npos);
  l.set_plugin_id("hp");
  CHECK(snapshot_request_problems(l, v1::Request::kSnapshotList).empty());
  CHECK(snapshot_request_problems(l, v1::Request::kVolumeClaim).size() == 1);
}

TEST_CASE("plugins_to_list_named_or_every_capable_one") {
  world w;
  w.add(upsert_change(plugin("a", {controller("n1", true, true, true, false, false)})));
  w.add(upsert_change(plugin("b", {controller("n1", true, true, false, false, false)})));
  w.add(upsert_change(plugin("c", {controller("n1", false, true, true, false, false)})));
  w.add(upsert_change(plugin("d", {controller("n2", true, false, true, false, false)})));
  v1::SnapshotRequest r;
  auto all = plugins_to_list(w.c, r);
  REQUIRE(std::holds_alternative<std::vector<std::string>>(all));
  CHECK(std::get<std::vector<std::string>>(all) == std::vector<std::string>{"a", "d"});
  r.set_plugin_id("a");
  CHECK(std::get<std::vector<std::string>>(plugins_to_list(w.c, r)) ==
        std::vector<std::string>{"a"});
  r.set_plugin_id("b");
  auto refused = plugins_to_list(w.c, r);
  REQUIRE(std::holds_alternative<failure>(refused));
  CHECK(std::get<failure>(refused).code == errc::refused);
  r.set_plugin_id("zz");
  CHECK(std::get<failure>(plugins_to_list(w.c, r)).code == errc::not_found);
}

TEST_CASE("modify_problems_need_parameters_and_keys") {
  v1::VolumeModifyRequest r;
  CHECK(modify_problems(r).size() == 2);
  r.set_volume_id("db");
  auto p = modify_problems(r);
  REQUIRE(p.size() == 1);
  CHECK(p[0].field == "--parameter");
  (*r.mutable_parameters())["iops"] = "100";
  CHECK(modify_problems(r).empty());
  (*r.mutable_parameters())[""] = "1";
  CHECK(modify_problems(r).size() == 1);
}

TEST_CASE("modified_merges_and_keeps_the_rest") {
  auto v = volume("db", "hp", "e");
  (*v.mutable_modified_parameters())["iops"] = "100";
  (*v.mutable_modified_parameters())["tier"] = "gold";
  (*v.mutable_parameters())["size"] = "1G";
  v1::VolumeModifyRequest r;
  (*r.mutable_parameters())["iops"] = "200";
  (*r.mutable_parameters())["burst"] = "yes";
  auto m = modified(v, r);
  CHECK(m.modified_parameters().at("iops") == "200");
  CHECK(m.modified_parameters().at("tier") == "gold");
  CHECK(m.modified_parameters().at("burst") == "yes");
  CHECK(m.parameters().at("size") == "1G");  // the immutable ones are untouched
  CHECK(m.parameters().size() == 1);
  // A repeat changes nothing more.
  auto again = modified(m, r).modified_parameters();
  CHECK(std::map<std::string, std::string>(again.begin(), again.end()) ==
        std::map<std::string, std::string>(m.modified_parameters().begin(),
                                           m.modified_parameters().end()));
}

TEST_CASE("call_secrets_given_over_the_volumes") {
  auto v = volume("db", "hp", "e");
  (*v.mutable_secrets())["token"] = "vol";
  (*v.mutable_secrets())["user"] = "u";
  google::protobuf::Map<std::string, std::string> given;
  CHECK(call_secrets(v, given).size() == 2);
  given["token"] = "cli";
  given["extra"] = "x";
  auto s = call_secrets(v, given);
  CHECK(s.size() == 3);
  CHECK(s.at("token") == "cli");
  CHECK(s.at("user") == "u");
}

TEST_CASE("add_sources_names_the_berth_volume_of_the_same_plugin") {
  world w;
  w.add(upsert_change(volume("db", "hp", "hp-1")));
  w.add(upsert_change(volume("other", "x", "hp-1", "team")));  // same external id, other plugin
  google::protobuf::RepeatedPtrField<v1::Snapshot> snaps;
  auto add = [&](const std::string& plugin, const std::string& ext) {
    auto* s = snaps.Add();
    s->set_id("s" + std::to_string(snaps.size()));
    s->set_plugin_id(plugin);
    s->set_source_external_id(ext);
  };
  add("hp", "hp-1");
  add("x", "hp-1");
  add("hp", "gone");
  add("hp", "");
  add_sources(w.c, snaps);
  CHECK(snaps[0].source_volume_id() == "db");
  CHECK(snaps[0].namespace_() == "default");
  CHECK(snaps[1].source_volume_id() == "other");
  CHECK(snaps[1].namespace_() == "team");
  CHECK(snaps[2].source_volume_id().empty());
  CHECK(snaps[3].source_volume_id().empty());
}

TEST_CASE("group_snapshot_capability_is_the_group_controllers") {
  CHECK(capability_name(controller_capability::group_snapshot) ==
        "CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT");
  auto i = controller("n1", true, true, true, true, true);
  CHECK_FALSE(advertises(i, controller_capability::group_snapshot));  // not implied by the others
  i.set_group_snapshot(true);
  CHECK(advertises(i, controller_capability::group_snapshot));
  auto only = controller("n1", true, false, false, false, false);
  only.set_group_snapshot(true);
  for (auto c : all_caps) CHECK_FALSE(advertises(only, c));
  CHECK(plugin_can(plugin("p", {only}), controller_capability::group_snapshot));
  only.set_healthy(false);
  auto unhealthy = plugin("p", {only});
  auto refusal = capability_refusal(&unhealthy, "p", controller_capability::group_snapshot,
                                    "group snapshot 'g'");
  REQUIRE(refusal);
  CHECK(refusal->code == errc::unavailable);
}

TEST_CASE("snapshot_request_problems_of_group_requests") {
  v1::SnapshotRequest r;
  r.add_volume_ids("a");
  r.add_volume_ids("b");
  auto p = snapshot_request_problems(r, v1::Request::kSnapshotCreate);
  REQUIRE(p.size() == 1);  // the group's name only: no VOLUME needed
  CHECK(p[0].field == "--group");
  r.set_name("g");
  CHECK(snapshot_request_problems(r, v1::Request::kSnapshotCreate).empty());
  r.add_volume_ids("a");
  p = snapshot_request_problems(r, v1::Request::kSnapshotCreate);
  REQUIRE(p.size() == 1);
  CHECK(p[0].message.find("'a' is named twice") != std::string::npos);
  r.mutable_volume_ids()->RemoveLast();
  r.add_volume_ids("");
  CHECK(snapshot_request_problems(r, v1::Request::kSnapshotCreate).size() == 1);
  r.mutable_volume_ids()->RemoveLast();
  r.set_volume_id("a");  // both forms at once
  CHECK(snapshot_request_problems(r, v1::Request::kSnapshotCreate).size() == 1);
  r.clear_volume_id();
  r.add_source_external_ids("hp-a");  // the server's to set
  CHECK(snapshot_request_problems(r, v1::Request::kSnapshotCreate).size() == 1);

  v1::SnapshotRequest d;
  d.set_plugin_id("hp");
  d.set_group_snapshot_id("grp-1");
  CHECK(snapshot_request_problems(d, v1::Request::kSnapshotDelete).empty());  // no SNAPSHOT_ID
  d.add_snapshot_ids("s1");
  CHECK(snapshot_request_problems(d, v1::Request::kSnapshotDelete).empty());
  d.set_snapshot_id("s1");  // a snapshot and a group at once
  CHECK(snapshot_request_problems(d, v1::Request::kSnapshotDelete).size() == 1);
  d.clear_group_snapshot_id();  // --member without --group
  p = snapshot_request_problems(d, v1::Request::kSnapshotDelete);
  REQUIRE(p.size() == 1);
  CHECK(p[0].field == "--member");
  d.set_group_snapshot_id("grp-1");
  d.clear_snapshot_id();
  d.add_snapshot_ids("");
  CHECK(snapshot_request_problems(d, v1::Request::kSnapshotDelete).size() == 1);
}

TEST_CASE("plan_group_snapshot_takes_one_plugins_created_volumes_with_one_set_of_secrets") {
  world w;
  auto a = volume("a", "hp", "hp-a"), b = volume("b", "hp", "hp-b");
  (*a.mutable_secrets())["token"] = "t1";
  (*b.mutable_secrets())["token"] = "t1";
  w.add(upsert_change(a));
  w.add(upsert_change(b));
  w.add(upsert_change(volume("c", "hp", "hp-c", "team")));
  w.add(upsert_change(volume("foreign", "other", "o-1")));
  w.add(upsert_change(volume("noext", "hp", "")));
  auto other_secret = volume("s", "hp", "hp-s");
  (*other_secret.mutable_secrets())["token"] = "t2-secret-value";
  w.add(upsert_change(other_secret));

  v1::SnapshotRequest r;
  r.set_name("g");
  r.add_volume_ids("b");
  r.add_volume_ids("a");
  auto ok = plan_group_snapshot(w.c, r);
  REQUIRE(std::holds_alternative<group_snapshot_plan>(ok));
  const auto& plan = std::get<group_snapshot_plan>(ok);
  CHECK(plan.plugin_id == "hp");
  CHECK(plan.external_ids == std::vector<std::string>{"hp-b", "hp-a"});  // the order given
  CHECK(plan.secrets.at("token") == "t1");

  auto fails = [&](std::vector<std::string> ids, const std::string& ns = "") {
    v1::SnapshotRequest q;
    q.set_name("g");
    q.set_namespace_(ns);
    for (auto& id : ids) q.add_volume_ids(id);
    auto res = plan_group_snapshot(w.c, q);
    REQUIRE(std::holds_alternative<failure>(res));
    return std::get<failure>(res);
  };
  auto missing = fails({"a", "zz", "yy"});
  CHECK(missing.code == errc::not_found);
  CHECK(missing.message.find("'zz', 'yy' are not volumes of namespace 'default'") !=
        std::string::npos);
  CHECK(fails({"c"}).code == errc::not_found);  // of namespace team, not default
  auto team = plan_group_snapshot(w.c, [] {
    v1::SnapshotRequest q;
    q.set_name("g");
    q.set_namespace_("team");
    q.add_volume_ids("c");
    return q;
  }());
  CHECK(std::holds_alternative<group_snapshot_plan>(team));
  auto mixed = fails({"a", "foreign"});
  CHECK(mixed.code == errc::invalid);
  CHECK(mixed.message.find("'foreign' of plugin 'other'") != std::string::npos);
  auto noext = fails({"a", "noext"});
  CHECK(noext.code == errc::refused);
  CHECK(noext.message.find("'noext' is not created") != std::string::npos);
  auto secrets = fails({"a", "s"});
  CHECK(secrets.code == errc::invalid);
  CHECK(secrets.message.find("'a' and 's' have different secrets") != std::string::npos);
  CHECK(secrets.message.find("t2-secret-value") == std::string::npos);  // never shown

  // Given secrets are sent for every volume, so they make the sets agree.
  v1::SnapshotRequest given;
  given.set_name("g");
  given.add_volume_ids("a");
  given.add_volume_ids("s");
  (*given.mutable_secrets())["token"] = "op";
  auto agreed = plan_group_snapshot(w.c, given);
  REQUIRE(std::holds_alternative<group_snapshot_plan>(agreed));
  CHECK(std::get<group_snapshot_plan>(agreed).secrets.at("token") == "op");
}
