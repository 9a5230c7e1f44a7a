// Unit tests of messages/model: the claim rules per access mode, plugin
// health arithmetic, re-registration and redaction, including Nomad's
// scenarios (notes/csi.md).
#include <doctest/doctest.h>

#include <algorithm>

#include <map>
#include <variant>

#include "messages/model.hpp"

using namespace berth;

namespace {

v1::PluginInstance instance(const std::string& node, bool healthy = true) {
  v1::PluginInstance i;
  i.set_node_id(node);
  i.set_healthy(healthy);
  i.set_provider("hostpath.berth");
  i.set_provider_version("1.0");
  return i;
}

v1::Plugin monolith_on(std::initializer_list<const char*> nodes) {
  v1::Plugin p;
  p.set_id("hostpath");
  for (auto n : nodes) upsert_instance(p, v1::PLUGIN_MONOLITH, instance(n));
  return p;
}

v1::Volume volume(v1::AccessMode mode) {
  v1::Volume v;
  v.set_id("db");
  v.set_namespace_("default");
  v.set_plugin_id("hostpath");
  v.set_external_id("vol-1");
  auto* c = v.add_capabilities();
  c->set_access_mode(mode);
  c->set_attachment_mode(v1::FILE_SYSTEM);
  return v;
}

claim_request req(const std::string& alloc, const std::string& node, bool write) {
  claim_request r;
  r.alloc_id = alloc;
  r.node_id = node;
  r.write = write;
  r.now_ms = 1000;
  return r;
}

// Releases and frees a claim the way the release workflow does.
void release_fully(v1::Volume& v, const std::string& alloc) {
  REQUIRE_FALSE(release(v, alloc, "alloc-stopped", 2000));
  REQUIRE_FALSE(advance_claim(v, alloc, v1::CLAIM_NODE_DETACHED));
  REQUIRE_FALSE(advance_claim(v, alloc, v1::CLAIM_READY_TO_FREE));
  REQUIRE_FALSE(free_claim(v, alloc));
}

}  // namespace

TEST_SUITE("names") {
  TEST_CASE("access_and_attachment_modes_round_trip_by_their_csi_md_names") {
    for (auto m : {v1::SINGLE_NODE_READER_ONLY, v1::SINGLE_NODE_WRITER, v1::MULTI_NODE_READER_ONLY,
                   v1::MULTI_NODE_SINGLE_WRITER, v1::MULTI_NODE_MULTI_WRITER})
      CHECK(parse_access_mode(name_of(m)) == m);
    CHECK(name_of(v1::SINGLE_NODE_WRITER) == "single-node-writer");
    CHECK(parse_attachment_mode("file-system") == v1::FILE_SYSTEM);
    CHECK(parse_attachment_mode("block-device") == v1::BLOCK_DEVICE);
    CHECK_FALSE(parse_access_mode("rw").has_value());
    CHECK(name_of(v1::CLAIM_NODE_DETACHED) == "node-detached");
    CHECK(name_of(v1::CLAIM_READY_TO_FREE) == "ready-to-free");
  }
}

TEST_SUITE("validation") {
  TEST_CASE("validation_reports_every_problem_at_once_naming_the_field") {
    v1::Volume v;
    v.add_capabilities();  // neither mode set
    v.set_capacity_min(10);
    v.set_capacity_max(5);
    auto problems = validate_volume(v);
    std::vector<std::string> fields;
    for (const auto& p : problems) fields.push_back(p.field);
    auto has = [&](const char* f) {
      return std::find(fields.begin(), fields.end(), f) != fields.end();
    };
    CHECK(has("id"));
    CHECK(has("namespace"));
    CHECK(has("plugin_id"));
    CHECK(has("external_id"));
    CHECK(has("capabilities[0].access_mode"));
    CHECK(has("capabilities[0].attachment_mode"));
    CHECK(has("capacity_max"));
  }

  TEST_CASE("a_complete_volume_validates_clean") {
    auto v = volume(v1::SINGLE_NODE_WRITER);
    CHECK(validate_volume(v).empty());
  }

  TEST_CASE("ids_with_spaces_or_slashes_are_invalid") {
    CHECK(valid_id("db-1.a_b"));
    CHECK_FALSE(valid_id("db 1"));
    CHECK_FALSE(valid_id("../etc"));
    CHECK_FALSE(valid_id(std::string(129, 'a')));
  }

  TEST_CASE("defaults_fill_namespace_and_name") {
    v1::Volume v;
    v.set_id("x");
    apply_defaults(v);
    CHECK(v.namespace_() == "default");
    CHECK(v.name() == "x");
  }

  TEST_CASE("secrets_over_the_csi_map_limit_are_refused") {
    auto v = volume(v1::SINGLE_NODE_WRITER);
    (*v.mutable_secrets())["k"] = std::string(5000, 'x');
    auto problems = validate_volume(v);
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].field == "secrets");
  }
}

TEST_SUITE("plugin health") {
  TEST_CASE("monolith_counts_as_controller_and_node_through_add_update_delete") {
    v1::Plugin p;
    p.set_id("hostpath");
    CHECK(upsert_instance(p, v1::PLUGIN_MONOLITH, instance("n1")));
    CHECK(upsert_instance(p, v1::PLUGIN_MONOLITH, instance("n2")));
    auto h = health_of(p);
    CHECK(h.controllers_healthy == 2);
    CHECK(h.controllers_expected == 2);
    CHECK(h.nodes_healthy == 2);
    CHECK(h.nodes_expected == 2);
    // Update: n1 turns unhealthy; re-reporting the same instance is no change.
    CHECK(upsert_instance(p, v1::PLUGIN_MONOLITH, instance("n1", false)));
    CHECK_FALSE(upsert_instance(p, v1::PLUGIN_MONOLITH, instance("n1", false)));
    h = health_of(p);
    CHECK(h.controllers_healthy == 1);
    CHECK(h.nodes_healthy == 1);
    CHECK(h.nodes_expected == 2);
    // Delete: removing n2 twice removes it once.
    CHECK(remove_instance(p, v1::PLUGIN_MONOLITH, "n2"));
    CHECK_FALSE(remove_instance(p, v1::PLUGIN_MONOLITH, "n2"));
    h = health_of(p);
    CHECK(h.controllers_expected == 1);
    CHECK(h.nodes_expected == 1);
    CHECK(h.nodes_healthy == 0);
    CHECK(remove_instance(p, v1::PLUGIN_MONOLITH, "n1"));
    CHECK(plugin_is_empty(p));
  }

  TEST_CASE("node_and_controller_plugins_count_separately") {
    v1::Plugin p;
    p.set_id("ebs");
    upsert_instance(p, v1::PLUGIN_CONTROLLER, instance("c1"));
    upsert_instance(p, v1::PLUGIN_NODE, instance("n1"));
    upsert_instance(p, v1::PLUGIN_NODE, instance("n2", false));
    auto h = health_of(p);
    CHECK(h.controllers_expected == 1);
    CHECK(h.controllers_healthy == 1);
    CHECK(h.nodes_expected == 2);
    CHECK(h.nodes_healthy == 1);
    // Removing a node instance leaves the controller alone.
    remove_instance(p, v1::PLUGIN_NODE, "c1");
    CHECK(health_of(p).controllers_expected == 1);
    remove_instance(p, v1::PLUGIN_CONTROLLER, "c1");
    h = health_of(p);
    CHECK(h.controllers_expected == 0);
    CHECK(h.nodes_expected == 2);
  }

  TEST_CASE("controller_required_is_sticky_once_a_controller_publishes") {
    v1::Plugin p;
    p.set_id("ebs");
    auto c = instance("c1");
    c.set_publish_unpublish(true);
    upsert_instance(p, v1::PLUGIN_CONTROLLER, c);
    upsert_instance(p, v1::PLUGIN_NODE, instance("n1"));
    CHECK(p.controller_required());
    CHECK_FALSE(plugin_unschedulable(p).has_value());
    remove_instance(p, v1::PLUGIN_CONTROLLER, "c1");
    CHECK(p.controller_required());
    auto why = plugin_unschedulable(p);
    REQUIRE(why.has_value());
    CHECK(why->find("requires a controller") != std::string::npos);
  }

  TEST_CASE("instances_stay_sorted_by_node_id") {
    v1::Plugin a, b;
    for (auto n : {"n3", "n1", "n2"}) upsert_instance(a, v1::PLUGIN_NODE, instance(n));
    for (auto n : {"n1", "n2", "n3"}) upsert_instance(b, v1::PLUGIN_NODE, instance(n));
    CHECK(a.SerializeAsString() == b.SerializeAsString());
    CHECK(a.nodes(0).node_id() == "n1");
    CHECK(a.nodes(2).node_id() == "n3");
  }
}

TEST_SUITE("claims") {
  TEST_CASE("single_node_modes_take_one_claim_at_a_time") {
    // CSI: single-node volumes are published once at any given time.
    auto p = monolith_on({"n1", "n2"});
    auto v = volume(v1::SINGLE_NODE_WRITER);
    CHECK_FALSE(claim(v, req("a1", "n1", true), &p));
    auto second = claim(v, req("a2", "n1", true), &p);
    REQUIRE(second.has_value());
    CHECK(second->code == errc::refused);
    CHECK(second->message.find("already claimed by alloc 'a1' on node 'n1'") !=
          std::string::npos);
    CHECK(claim(v, req("a3", "n1", false), &p).has_value());  // not even a reader
    auto other_node = claim(v, req("a4", "n2", false), &p);
    REQUIRE(other_node.has_value());
    CHECK(other_node->message.find("single-node-writer") != std::string::npos);
    CHECK(v.claims_size() == 1);
    // A reader alone may hold it too.
    auto r = volume(v1::SINGLE_NODE_WRITER);
    CHECK_FALSE(claim(r, req("r1", "n2", false), &p));
    CHECK(claim(r, req("w1", "n2", true), &p).has_value());
  }

  TEST_CASE("multi_node_single_writer_allows_readers_anywhere_and_one_writer") {
    auto p = monolith_on({"n1", "n2", "n3"});
    auto v = volume(v1::MULTI_NODE_SINGLE_WRITER);
    CHECK_FALSE(claim(v, req("w1", "n1", true), &p));
    CHECK_FALSE(claim(v, req("r1", "n2", false), &p));
    CHECK_FALSE(claim(v, req("r2", "n3", false), &p));
    CHECK(claim(v, req("w2", "n3", true), &p).has_value());
  }

  TEST_CASE("multi_node_multi_writer_allows_many_writers") {
    auto p = monolith_on({"n1", "n2"});
    auto v = volume(v1::MULTI_NODE_MULTI_WRITER);
    for (int i = 0; i < 10; ++i)
      CHECK_FALSE(claim(v, req("w" + std::to_string(i), i % 2 ? "n1" : "n2", true), &p));
    CHECK(v.claims_size() == 10);
  }

  TEST_CASE("reader_only_modes_refuse_writers_and_take_readers") {
    auto p = monolith_on({"n1", "n2"});
    auto v = volume(v1::MULTI_NODE_READER_ONLY);
    auto w = claim(v, req("w1", "n1", true), &p);
    REQUIRE(w.has_value());
    CHECK(w->message.find("--read-only") != std::string::npos);
    CHECK_FALSE(claim(v, req("r1", "n1", false), &p));
    CHECK_FALSE(claim(v, req("r2", "n2", false), &p));

    auto s = volume(v1::SINGLE_NODE_READER_ONLY);
    CHECK_FALSE(claim(s, req("r1", "n1", false), &p));
    CHECK(claim(s, req("r2", "n1", false), &p).has_value());
    CHECK(claim(s, req("r3", "n2", false), &p).has_value());
    CHECK(claim(s, req("w1", "n1", true), &p).has_value());
  }

  TEST_CASE("claiming_twice_with_the_same_alloc_and_mode_is_idempotent") {
    auto p = monolith_on({"n1"});
    auto v = volume(v1::SINGLE_NODE_WRITER);
    CHECK_FALSE(claim(v, req("a1", "n1", true), &p));
    CHECK_FALSE(claim(v, req("a1", "n1", true), &p));
    CHECK(v.claims_size() == 1);
    CHECK(claim(v, req("a1", "n1", false), &p).has_value());  // mode change refused
  }

  TEST_CASE("a_claim_records_whether_the_plugin_required_controller_publish") {
    for (bool required : {false, true}) {
      auto p = monolith_on({"n1"});
      p.set_controller_required(required);
      auto v = volume(v1::SINGLE_NODE_WRITER);
      REQUIRE_FALSE(claim(v, req("a1", "n1", true), &p));
      CHECK(find_claim(v, "a1")->controller_required() == required);
    }
  }

  TEST_CASE("a_repeated_claim_without_the_plugin_is_unavailable_not_success") {
    // Issue 27: a repeat answered success before the plugin was checked, and
    // the volume actor then used a plugin it did not have.
    auto p = monolith_on({"n1"});
    auto v = volume(v1::SINGLE_NODE_WRITER);
    REQUIRE_FALSE(claim(v, req("a1", "n1", true), &p));
    auto f = claim(v, req("a1", "n1", true), nullptr);
    REQUIRE(f.has_value());
    CHECK(f->code == errc::unavailable);
    CHECK(f->retry);
    CHECK(f->message.find("retry") != std::string::npos);
    CHECK(v.claims_size() == 1);  // the claim is held as it was
    CHECK_FALSE(claim(v, req("a1", "n1", true), &p));  // with the plugin: idempotent
  }

  TEST_CASE("a_claim_records_the_plugins_csi_node_id_on_its_node") {
    auto p = monolith_on({"n1"});
    p.mutable_nodes(0)->set_csi_node_id("csi-n1");
    auto v = volume(v1::SINGLE_NODE_WRITER);
    REQUIRE_FALSE(claim(v, req("a1", "n1", true), &p));
    CHECK(find_claim(v, "a1")->csi_node_id() == "csi-n1");
  }

  TEST_CASE("release_keeps_the_mode_and_holds_the_writer_slot_until_freed") {
    auto p = monolith_on({"n1", "n2"});
    auto v = volume(v1::MULTI_NODE_SINGLE_WRITER);
    REQUIRE_FALSE(claim(v, req("a1", "n1", true), &p));
    REQUIRE_FALSE(release(v, "a1", "alloc-stopped", 2000));
    const auto* c = find_claim(v, "a1");
    REQUIRE(c != nullptr);
    CHECK(c->mode() == v1::CLAIM_WRITE);
    CHECK(c->state() == v1::CLAIM_UNPUBLISHING);
    CHECK(c->release_reason() == "alloc-stopped");
    // Still unpublishing: a second writer would be two writers at the plugin.
    auto refused = claim(v, req("a2", "n2", true), &p);
    REQUIRE(refused.has_value());
    CHECK(refused->message.find("release in progress") != std::string::npos);
    CHECK(refused->message.find("already claimed for writing") != std::string::npos);
    // Releasing again is a no-op; the claim moves forward only.
    CHECK_FALSE(release(v, "a1", "alloc-stopped", 3000));
    CHECK_FALSE(advance_claim(v, "a1", v1::CLAIM_CONTROLLER_DETACHED));
    CHECK(advance_claim(v, "a1", v1::CLAIM_NODE_DETACHED).has_value());
    CHECK(free_claim(v, "a1").has_value());  // not ready-to-free yet
    CHECK_FALSE(advance_claim(v, "a1", v1::CLAIM_READY_TO_FREE));
    CHECK_FALSE(free_claim(v, "a1"));
    CHECK_FALSE(free_claim(v, "a1"));  // already freed
    CHECK(v.claims().empty());
    // Release then re-claim.
    CHECK_FALSE(claim(v, req("a2", "n2", true), &p));
  }

  TEST_CASE("staging_stays_while_another_claim_on_the_node_is_published") {
    auto p = monolith_on({"n1", "n2"});
    auto v = volume(v1::MULTI_NODE_MULTI_WRITER);
    REQUIRE_FALSE(claim(v, req("a1", "n1", true), &p));
    REQUIRE_FALSE(claim(v, req("a2", "n1", false), &p));
    REQUIRE_FALSE(claim(v, req("a3", "n2", false), &p));
    CHECK(other_publications_on_node(v, "n1", "a1"));   // a2 still uses n1
    CHECK_FALSE(other_publications_on_node(v, "n2", "a3"));
    REQUIRE_FALSE(release(v, "a2", "alloc-stopped", 5));
    CHECK(other_publications_on_node(v, "n1", "a1"));   // a2 not yet unpublished
    REQUIRE_FALSE(advance_claim(v, "a2", v1::CLAIM_NODE_DETACHED));
    CHECK_FALSE(other_publications_on_node(v, "n1", "a1"));
  }

  TEST_CASE("freeing_one_claim_keeps_the_others_in_order") {
    auto p = monolith_on({"n1"});
    auto v = volume(v1::MULTI_NODE_MULTI_WRITER);
    for (auto a : {"a1", "a2", "a3"}) REQUIRE_FALSE(claim(v, req(a, "n1", true), &p));
    release_fully(v, "a2");
    REQUIRE(v.claims_size() == 2);
    CHECK(v.claims(0).alloc_id() == "a1");
    CHECK(v.claims(1).alloc_id() == "a3");
    release_fully(v, "a3");
    release_fully(v, "a1");
    CHECK(v.claims().empty());
  }

  TEST_CASE("releasing_an_unknown_alloc_is_not_found") {
    auto v = volume(v1::SINGLE_NODE_WRITER);
    auto r = release(v, "nope", "alloc-stopped", 1);
    REQUIRE(r.has_value());
    CHECK(r->code == errc::not_found);
  }

  TEST_CASE("a_released_alloc_cannot_claim_again_until_freed") {
    auto p = monolith_on({"n1"});
    auto v = volume(v1::SINGLE_NODE_WRITER);
    REQUIRE_FALSE(claim(v, req("a1", "n1", true), &p));
    REQUIRE_FALSE(release(v, "a1", "alloc-stopped", 2));
    auto r = claim(v, req("a1", "n1", true), &p);
    REQUIRE(r.has_value());
    CHECK(r->message.find("being released") != std::string::npos);
  }

  TEST_CASE("gc_release_releases_claims_of_vanished_allocs_only") {
    auto p = monolith_on({"n1"});
    auto v = volume(v1::MULTI_NODE_MULTI_WRITER);
    REQUIRE_FALSE(claim(v, req("live", "n1", true), &p));
    REQUIRE_FALSE(claim(v, req("gone", "n1", false), &p));
    auto released = gc_release(v, [](const std::string& id) { return id == "live"; }, 5);
    REQUIRE(released.size() == 1);
    CHECK(released[0] == "gone");
    CHECK(find_claim(v, "gone")->state() == v1::CLAIM_UNPUBLISHING);
    CHECK(find_claim(v, "gone")->mode() == v1::CLAIM_READ);
    CHECK(find_claim(v, "gone")->release_reason() == "gc");
    CHECK(find_claim(v, "live")->state() == v1::CLAIM_TAKEN);
  }

  TEST_CASE("unhealthy_or_missing_plugins_and_exhausted_volumes_refuse_claims") {
    auto v = volume(v1::SINGLE_NODE_WRITER);
    auto missing = claim(v, req("a1", "n1", true), nullptr);
    REQUIRE(missing.has_value());
    CHECK(missing->message.find("not registered") != std::string::npos);

    v1::Plugin sick;
    sick.set_id("hostpath");
    upsert_instance(sick, v1::PLUGIN_MONOLITH, instance("n1", false));
    auto r = claim(v, req("a1", "n1", true), &sick);
    REQUIRE(r.has_value());
    CHECK(r->message.find("no healthy node instance") != std::string::npos);

    auto p = monolith_on({"n1"});
    auto elsewhere = claim(v, req("a1", "n9", true), &p);
    REQUIRE(elsewhere.has_value());
    CHECK(elsewhere->message.find("no node instance on node 'n9'") != std::string::npos);

    v.set_resource_exhausted_at_ms(7);
    auto ex = claim(v, req("a1", "n1", false), &p);
    REQUIRE(ex.has_value());
    CHECK(ex->message.find("resource-exhausted") != std::string::npos);
    CHECK(v.claims().empty());
  }

  TEST_CASE("claims_outside_the_accessible_topology_are_refused") {
    v1::Plugin p;
    p.set_id("hostpath");
    auto a = instance("n1");
    (*a.mutable_accessible_topology()->mutable_segments())["zone"] = "a";
    auto b = instance("n2");
    (*b.mutable_accessible_topology()->mutable_segments())["zone"] = "b";
    upsert_instance(p, v1::PLUGIN_MONOLITH, a);
    upsert_instance(p, v1::PLUGIN_MONOLITH, b);
    auto v = volume(v1::MULTI_NODE_MULTI_WRITER);
    (*v.add_accessible_topology()->mutable_segments())["zone"] = "a";
    CHECK_FALSE(claim(v, req("a1", "n1", true), &p));
    auto r = claim(v, req("a2", "n2", true), &p);
    REQUIRE(r.has_value());
    CHECK(r->message.find("topology") != std::string::npos);
  }

  TEST_CASE("claims_up_to_the_limit_then_release_then_reclaim_per_mode") {
    // Nomad's scenario: fill every mode's writer limit, release, claim again.
    auto p = monolith_on({"n1"});
    struct row {
      v1::AccessMode mode;
      int writers;
    };
    for (auto [mode, limit] : {row{v1::SINGLE_NODE_WRITER, 1}, row{v1::MULTI_NODE_SINGLE_WRITER, 1},
                               row{v1::SINGLE_NODE_READER_ONLY, 0},
                               row{v1::MULTI_NODE_READER_ONLY, 0}}) {
      CAPTURE(name_of(mode));
      auto v = volume(mode);
      int taken = 0;
      for (int i = 0; i < 3; ++i)
        if (!claim(v, req("w" + std::to_string(i), "n1", true), &p)) ++taken;
      CHECK(taken == limit);
      if (limit > 0) {
        release_fully(v, "w0");
        CHECK_FALSE(claim(v, req("w9", "n1", true), &p));
      }
    }
  }

  TEST_CASE("a_requested_capability_must_be_registered") {
    auto p = monolith_on({"n1"});
    auto v = volume(v1::SINGLE_NODE_WRITER);
    auto r = req("a1", "n1", true);
    r.access_mode = v1::MULTI_NODE_MULTI_WRITER;
    auto f = claim(v, r, &p);
    REQUIRE(f.has_value());
    CHECK(f->message.find("has no capability multi-node-multi-writer") != std::string::npos);
  }

  TEST_CASE("all_claims_share_the_access_mode_in_use") {
    auto p = monolith_on({"n1", "n2"});
    auto v = volume(v1::SINGLE_NODE_WRITER);
    auto* c = v.add_capabilities();
    c->set_access_mode(v1::MULTI_NODE_READER_ONLY);
    c->set_attachment_mode(v1::FILE_SYSTEM);
    auto r = req("r1", "n1", false);
    r.access_mode = v1::MULTI_NODE_READER_ONLY;
    REQUIRE_FALSE(claim(v, r, &p));
    CHECK(mode_in_use(v) == v1::MULTI_NODE_READER_ONLY);
    // A writer would need single-node-writer, which is not the mode in use.
    CHECK(claim(v, req("w1", "n1", true), &p).has_value());
    CHECK_FALSE(claim(v, req("r2", "n2", false), &p));  // readers follow the mode in use
  }
}

TEST_SUITE("registration") {
  TEST_CASE("reregistration_refuses_immutable_fields_and_accepts_context") {
    auto p = monolith_on({"n1"});
    auto current = volume(v1::SINGLE_NODE_WRITER);
    (*current.mutable_parameters())["size"] = "1G";
    current.set_create_index(3);
    REQUIRE_FALSE(claim(current, req("a1", "n1", true), &p));

    auto changed = current;
    changed.clear_claims();
    changed.set_plugin_id("other");
    changed.set_external_id("vol-2");
    (*changed.mutable_parameters())["size"] = "2G";
    changed.mutable_mount_options()->set_fs_type("xfs");
    auto r = reregister(current, changed);
    REQUIRE(r.has_value());
    CHECK(r->message.find("plugin_id") != std::string::npos);
    CHECK(r->message.find("external_id") != std::string::npos);
    CHECK(r->message.find("parameters") != std::string::npos);
    CHECK(r->message.find("mount_options") != std::string::npos);
    CHECK(current.plugin_id() == "hostpath");  // untouched

    auto ok = current;
    ok.clear_claims();
    (*ok.mutable_context())["owner"] = "team-a";
    (*ok.mutable_secrets())["token"] = "new";
    REQUIRE_FALSE(reregister(current, ok));
    CHECK(current.context().at("owner") == "team-a");
    CHECK(current.claims_size() == 1);  // claims kept
    CHECK(current.create_index() == 3);
  }

  TEST_CASE("reregistration_keeps_the_content_source_and_the_modified_parameters") {
    auto current = volume(v1::SINGLE_NODE_WRITER);
    current.set_snapshot_id("snap-1");
    current.set_clone_id("db0");
    current.set_clone_external_id("hp-db0");
    (*current.mutable_modified_parameters())["iops"] = "200";
    auto again = current;  // as a spec file: none of the four
    again.clear_snapshot_id();
    again.clear_clone_id();
    again.clear_clone_external_id();
    again.clear_modified_parameters();
    (*again.mutable_context())["owner"] = "team-a";
    REQUIRE_FALSE(reregister(current, again));
    CHECK(current.context().at("owner") == "team-a");
    CHECK(current.snapshot_id() == "snap-1");
    CHECK(current.clone_id() == "db0");
    CHECK(current.clone_external_id() == "hp-db0");
    CHECK(current.modified_parameters().at("iops") == "200");
  }

  TEST_CASE("deregister_is_refused_while_claimed_and_allowed_after_release") {
    auto p = monolith_on({"n1"});
    auto v = volume(v1::SINGLE_NODE_WRITER);
    CHECK_FALSE(can_deregister(v));
    REQUIRE_FALSE(claim(v, req("a1", "n1", true), &p));
    auto r = can_deregister(v);
    REQUIRE(r.has_value());
    CHECK(r->message.find("alloc 'a1'") != std::string::npos);
    REQUIRE_FALSE(release(v, "a1", "alloc-stopped", 2));
    CHECK(can_deregister(v).has_value());  // release still in flight
    REQUIRE_FALSE(advance_claim(v, "a1", v1::CLAIM_READY_TO_FREE));
    REQUIRE_FALSE(free_claim(v, "a1"));
    CHECK_FALSE(can_deregister(v));
  }
}

TEST_SUITE("redaction") {
  TEST_CASE("redacted_volumes_carry_no_secrets_or_mount_flags") {
    auto v = volume(v1::SINGLE_NODE_WRITER);
    (*v.mutable_secrets())["password"] = "hunter2";
    v.mutable_mount_options()->add_mount_flags("password=hunter2");
    v.mutable_mount_options()->set_fs_type("ext4");
    auto r = redacted(v);
    CHECK(r.secrets().empty());
    CHECK(r.mount_options().mount_flags().empty());
    CHECK(r.mount_options().fs_type() == "ext4");
    CHECK(r.SerializeAsString().find("hunter2") == std::string::npos);
    CHECK(v.secrets().size() == 1);  // the original is untouched
  }
}

TEST_SUITE("allocs and the volume watcher") {
  TEST_CASE("volume_env_name_upper_cases_and_replaces_other_characters") {
    CHECK(volume_env_name("data") == "BERTH_VOLUME_DATA");
    CHECK(volume_env_name("my-db.2") == "BERTH_VOLUME_MY_DB_2");
  }

  TEST_CASE("parse_alloc_volume_reads_name_volume_ro_and_mount_flags") {
    auto v = std::get<v1::AllocVolume>(parse_alloc_volume("data=db"));
    CHECK(v.name() == "data");
    CHECK(v.volume_id() == "db");
    CHECK_FALSE(v.read_only());
    v = std::get<v1::AllocVolume>(parse_alloc_volume("logs=vol-1:ro,mount_flag=noatime,mount_flag=ro"));
    CHECK(v.volume_id() == "vol-1");
    CHECK(v.read_only());
    REQUIRE(v.mount_flags_size() == 2);
    CHECK(v.mount_flags(0) == "noatime");
    CHECK(v.mount_flags(1) == "ro");
    for (const char* bad : {"db", "=db", "data=", "data=db,flag=x", "data=db,mount_flag="}) {
      auto r = parse_alloc_volume(bad);
      REQUIRE(std::holds_alternative<std::string>(r));
      CHECK(std::get<std::string>(r).find("NAME=VOLUME") != std::string::npos);
    }
  }

  TEST_CASE("validate_alloc_reports_every_problem_at_once") {
    v1::Alloc a;
    a.set_namespace_("default");
    CHECK(describe("alloc", validate_alloc(a)).find("node") != std::string::npos);
    a.set_node_id("n1");
    auto* v1_ = a.add_volumes();
    v1_->set_name("data");
    v1_->set_volume_id("db");
    CHECK(validate_alloc(a).empty());
    auto* v2 = a.add_volumes();
    v2->set_name("DATA");  // the same variable as "data"
    v2->set_volume_id("db");
    auto problems = validate_alloc(a);
    CHECK(problems.size() == 2);
    a.clear_volumes();
    CHECK_FALSE(validate_alloc(a).empty());  // neither volumes nor a command
    a.add_command("true");
    CHECK(validate_alloc(a).empty());
  }

  TEST_CASE("claims_to_release_picks_terminal_vanished_and_half_released_claims") {
    auto v = volume(v1::MULTI_NODE_MULTI_WRITER);
    auto p = monolith_on({"n1", "n2"});
    for (auto alloc : {"running", "done", "lost", "gone", "half"})
      REQUIRE_FALSE(claim(v, req(alloc, "n1", true), &p));
    REQUIRE_FALSE(release(v, "half", "alloc-stopped", 2000));
    std::map<std::string, v1::AllocState> allocs{{"running", v1::ALLOC_RUNNING},
                                                 {"done", v1::ALLOC_COMPLETE},
                                                 {"lost", v1::ALLOC_LOST},
                                                 {"half", v1::ALLOC_RUNNING}};
    auto ids = claims_to_release(v, [&](const std::string& id) -> std::optional<v1::AllocState> {
      auto it = allocs.find(id);
      if (it == allocs.end()) return std::nullopt;
      return it->second;
    });
    CHECK(ids == std::vector<std::string>{"done", "lost", "gone", "half"});
    // What the leader checks again when the watcher asks: the complement,
    // on the leader's own (newer) view of the allocs.
    auto state_of = [&](const std::string& id) -> std::optional<v1::AllocState> {
      auto it = allocs.find(id);
      if (it == allocs.end()) return std::nullopt;
      return it->second;
    };
    for (auto alloc : {"running", "done", "lost", "gone", "half", "no-claim"}) {
      bool picked = std::find(ids.begin(), ids.end(), alloc) != ids.end();
      bool has_claim = std::string(alloc) != "no-claim";
      CHECK(claim_alloc_is_live(v, alloc, state_of) == (has_claim && !picked));
    }
    // The watcher had not heard of "gone" yet, the leader has: kept.
    allocs["gone"] = v1::ALLOC_RUNNING;
    CHECK(claim_alloc_is_live(v, "gone", state_of));
  }

  TEST_CASE("retry_delay_grows_exponentially_with_jitter_and_a_cap") {
    CHECK(retry_delay_ms(1, 0.0) == 250);
    CHECK(retry_delay_ms(1, 0.999) < 500);
    CHECK(retry_delay_ms(2, 0.0) == 500);
    CHECK(retry_delay_ms(3, 0.0) == 1000);
    CHECK(retry_delay_ms(40, 0.0) == 15000);
    CHECK(retry_delay_ms(40, 0.999) < 30000);
    CHECK(retry_delay_ms(40, 0.999) >= 29000);
  }

  TEST_CASE("a_node_refuses_csi_requests_of_a_deposed_leader") {
    CHECK(fence(0, 0) == fence_verdict::accept);
    CHECK(fence(7, 0) == fence_verdict::accept);  // unfenced
    CHECK(fence(0, 3) == fence_verdict::accept_newer);
    CHECK(fence(3, 3) == fence_verdict::accept);
    CHECK(fence(3, 4) == fence_verdict::accept_newer);
    CHECK(fence(4, 3) == fence_verdict::refuse);
    CHECK(fence(4, 1) == fence_verdict::refuse);
  }

  TEST_CASE("a_heartbeat_answer_raises_the_fence_and_never_lowers_it") {
    // The node raises its fence to a newer term a server reports...
    CHECK(fence(3, 5) == fence_verdict::accept_newer);
    // ...and a server behind the others (an older term) changes nothing.
    CHECK(fence(5, 3) == fence_verdict::refuse);
    CHECK(fence(5, 5) == fence_verdict::accept);
    CHECK(fence(5, 0) == fence_verdict::accept);  // a server that knows no leader yet
  }

  TEST_CASE("a_server_reports_only_terms_in_which_a_leader_is_known") {
    CHECK(newest_leader_term(0, 3, true) == 3);
    CHECK(newest_leader_term(3, 4, false) == 3);  // a candidate's term: maybe no leader
    CHECK(newest_leader_term(3, 5, true) == 5);
    CHECK(newest_leader_term(5, 4, true) == 5);   // an older leader heard late
    CHECK(newest_leader_term(5, 5, true) == 5);
    CHECK(newest_leader_term(0, 0, false) == 0);
  }

  TEST_CASE("max_volumes_per_node_from_node_get_info_is_enforced") {
    auto v = volume(v1::SINGLE_NODE_WRITER);
    auto p = monolith_on({"n1"});
    auto inst = instance("n1");
    inst.set_max_volumes(2);
    upsert_instance(p, v1::PLUGIN_MONOLITH, inst);
    auto r = req("a1", "n1", true);
    r.node_volume_count = 2;
    auto f = claim(v, r, &p);
    REQUIRE(f);
    CHECK(f->code == errc::refused);
    CHECK(f->message.find("max_volumes_per_node 2") != std::string::npos);
    r.node_volume_count = 1;
    CHECK_FALSE(claim(v, r, &p));
  }
}
