// The control plane's pure rules (control/): the catalog's apply, the one
// entry builder, alloc lifecycle, node liveness, controller choice, the
// release steps and detach selection.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "control/allocs.hpp"
#include "control/catalog.hpp"
#include "control/drain.hpp"
#include "control/entries.hpp"
#include "control/filter.hpp"
#include "control/lease.hpp"
#include "control/nodes.hpp"
#include "control/placement.hpp"
#include "control/release.hpp"
#include "control/views.hpp"

using namespace berth;

namespace {

v1::Volume make_volume(const std::string& id, const std::string& plugin = "p") {
  v1::Volume v;
  v.set_id(id);
  v.set_namespace_("default");
  v.set_plugin_id(plugin);
  v.set_external_id("ext-" + id);
  auto* cap = v.add_capabilities();
  cap->set_access_mode(v1::SINGLE_NODE_WRITER);
  cap->set_attachment_mode(v1::FILE_SYSTEM);
  return v;
}

v1::Claim* add_claim(v1::Volume& v, const std::string& alloc, const std::string& node,
                     v1::ClaimState state = v1::CLAIM_TAKEN) {
  auto* c = v.add_claims();
  c->set_alloc_id(alloc);
  c->set_node_id(node);
  c->set_state(state);
  c->set_mode(v1::CLAIM_WRITE);
  c->set_access_mode(v1::SINGLE_NODE_WRITER);
  return c;
}

v1::Alloc make_alloc(const std::string& id, const std::string& node, v1::AllocState state,
                     std::vector<std::string> volumes = {}) {
  v1::Alloc a;
  a.set_id(id);
  a.set_namespace_("default");
  a.set_node_id(node);
  a.set_state(state);
  for (const auto& v : volumes) {
    auto* av = a.add_volumes();
    av->set_name(v);
    av->set_volume_id(v);
  }
  return a;
}

v1::Node make_node(const std::string& id, v1::NodeStatus status = v1::NODE_READY,
                   bool client = true) {
  v1::Node n;
  n.set_id(id);
  n.set_status(status);
  n.set_has_client(client);
  return n;
}

void commit(catalog& c, std::vector<v1::Change> changes) {
  apply(c, c.applied_index + 1, make_entry(std::move(changes)));
}

v1::Plugin controller_plugin(std::vector<std::pair<std::string, bool>> controllers) {
  v1::Plugin p;
  p.set_id("p");
  p.set_controller_required(true);
  for (const auto& [node, healthy] : controllers) {
    auto* c = p.add_controllers();
    c->set_node_id(node);
    c->set_healthy(healthy);
  }
  return p;
}

}  // namespace

// --- entries and the catalog ----------------------------------------------------

TEST_CASE("make_entry_keeps_changes_in_order_with_the_format_version") {
  auto e = make_entry(
      {upsert_change(make_volume("a")), alloc_delete_change("x"), plugin_delete_change("p")});
  CHECK(e.format_version() == entry_format_version);
  REQUIRE(e.changes_size() == 3);
  CHECK(e.changes(0).volume_upsert().id() == "a");
  CHECK(e.changes(1).alloc_delete() == "x");
  CHECK(e.changes(2).plugin_delete() == "p");
}

TEST_CASE("stamp_sets_create_index_once_and_modify_index_always") {
  auto c = upsert_change(make_volume("a"));
  stamp(c, 7);
  CHECK(c.volume_upsert().create_index() == 7);
  CHECK(c.volume_upsert().modify_index() == 7);
  stamp(c, 9);
  CHECK(c.volume_upsert().create_index() == 7);
  CHECK(c.volume_upsert().modify_index() == 9);
}

TEST_CASE("catalog_apply_stamps_and_reports_what_each_change_replaced") {
  catalog c;
  auto first = apply(c, 5,
                     make_entry({upsert_change(make_volume("a")),
                                 upsert_change(make_alloc("x", "n1", v1::ALLOC_RUNNING))}));
  REQUIRE(first.size() == 2);
  CHECK(first[0].before.change_case() == v1::Change::CHANGE_NOT_SET);
  CHECK(c.applied_index == 5);
  CHECK(volume_at(c, {"default", "a"}).create_index() == 5);
  auto v = make_volume("a");
  v.set_create_index(5);
  add_claim(v, "x", "n1");
  auto second = apply(c, 6, make_entry({upsert_change(v)}));
  REQUIRE(second.size() == 1);
  CHECK(second[0].before.volume_upsert().claims_size() == 0);
  CHECK(volume_at(c, {"default", "a"}).claims_size() == 1);
  CHECK(volume_at(c, {"default", "a"}).modify_index() == 6);
  auto third =
      apply(c, 7, make_entry({volume_delete_change("default", "a"), alloc_delete_change("x")}));
  REQUIRE(third.size() == 2);
  CHECK(third[0].before.volume_upsert().claims_size() == 1);
  CHECK(c.volumes.empty());
  CHECK(c.allocs.empty());
}

TEST_CASE("catalog_apply_skips_entries_at_or_below_the_applied_index") {
  catalog c;
  apply(c, 3, make_entry({upsert_change(make_volume("a"))}));
  CHECK(apply(c, 3, make_entry({upsert_change(make_volume("b"))})).empty());
  CHECK(apply(c, 2, make_entry({upsert_change(make_volume("c"))})).empty());
  CHECK(c.volumes.size() == 1);
  CHECK(c.applied_index == 3);
}

TEST_CASE("catalog_marks_a_restore_and_keeps_no_bytes") {
  catalog c;
  auto changes = apply(c, 1, make_entry({restore_change("SQLite format 3...")}));
  CHECK(c.restored);
  REQUIRE(changes.size() == 1);
  CHECK(changes[0].change.has_restore_state());
  CHECK(changes[0].change.restore_state().empty());
}

TEST_CASE("deleting_what_does_not_exist_changes_nothing_but_the_index") {
  catalog c;
  auto out = apply(c, 4, make_entry({alloc_delete_change("nope"), plugin_delete_change("q")}));
  CHECK(out.size() == 2);
  CHECK(out[0].before.change_case() == v1::Change::CHANGE_NOT_SET);
  CHECK(c.applied_index == 4);
}

// --- allocs -------------------------------------------------------------------------

TEST_CASE("alloc_lifecycle_edges") {
  CHECK(alloc_may_become(v1::ALLOC_PENDING, v1::ALLOC_RUNNING));
  CHECK(alloc_may_become(v1::ALLOC_PENDING, v1::ALLOC_FAILED));
  CHECK(alloc_may_become(v1::ALLOC_PENDING, v1::ALLOC_LOST));
  CHECK_FALSE(alloc_may_become(v1::ALLOC_PENDING, v1::ALLOC_COMPLETE));
  CHECK(alloc_may_become(v1::ALLOC_RUNNING, v1::ALLOC_COMPLETE));
  CHECK(alloc_may_become(v1::ALLOC_RUNNING, v1::ALLOC_LOST));
  CHECK_FALSE(alloc_may_become(v1::ALLOC_RUNNING, v1::ALLOC_PENDING));
  for (auto terminal : {v1::ALLOC_COMPLETE, v1::ALLOC_FAILED, v1::ALLOC_LOST})
    for (auto to : {v1::ALLOC_PENDING, v1::ALLOC_RUNNING, v1::ALLOC_COMPLETE, v1::ALLOC_FAILED,
                    v1::ALLOC_LOST})
      CHECK_FALSE(alloc_may_become(terminal, to));
}

TEST_CASE("admit_alloc_run_checks_in_order_and_names_the_fix") {
  catalog c;
  commit(c, {upsert_change(make_volume("db")), upsert_change(make_node("n1")),
             upsert_change(make_node("n2", v1::NODE_DOWN)),
             upsert_change(make_node("bare", v1::NODE_READY, false)),
             upsert_change(make_alloc("taken", "n1", v1::ALLOC_RUNNING))});
  v1::AllocRunRequest req;
  req.set_node_id("n1");
  auto* av = req.add_volumes();
  av->set_name("data");
  av->set_volume_id("db");
  auto a = pending_alloc(req, "a1", 1000);
  CHECK(a.state() == v1::ALLOC_PENDING);
  CHECK(a.namespace_() == "default");
  CHECK_FALSE(admit_alloc_run(c, a, true));

  auto not_connected = admit_alloc_run(c, a, false);
  REQUIRE(not_connected);
  CHECK(not_connected->code == errc::unavailable);
  CHECK(not_connected->retry);

  auto dup = a;
  dup.set_id("taken");
  CHECK(admit_alloc_run(c, dup, true)->code == errc::refused);

  auto down = a;
  down.set_node_id("n2");
  auto f = admit_alloc_run(c, down, true);
  REQUIRE(f);
  CHECK(f->code == errc::refused);
  CHECK(f->message.find("another node") != std::string::npos);

  auto bare = a;
  bare.set_node_id("bare");
  CHECK(admit_alloc_run(c, bare, true)->code == errc::not_found);

  auto missing = a;
  missing.mutable_volumes(0)->set_volume_id("nope");
  auto m = admit_alloc_run(c, missing, true);
  REQUIRE(m);
  CHECK(m->code == errc::not_found);
  CHECK(m->message.find("'nope'") != std::string::npos);

  auto bad = a;
  bad.set_id("-bad");
  CHECK(admit_alloc_run(c, bad, true)->code == errc::invalid);
}

TEST_CASE("an_entrys_alloc_upserts_reach_the_watcher_before_its_claims") {
  catalog c;
  auto v = make_volume("db");
  auto a = make_alloc("a1", "n1", v1::ALLOC_RUNNING);
  auto b = make_alloc("b1", "n1", v1::ALLOC_RUNNING);
  v1::LogEntry e;
  *e.add_changes() = upsert_change(v);
  *e.add_changes() = upsert_change(a);
  *e.add_changes() = volume_delete_change("default", "gone");
  *e.add_changes() = upsert_change(b);
  auto changes = apply(c, 1, e);
  REQUIRE(changes.size() == 4);
  alloc_upserts_first(changes);
  CHECK(changes[0].change.alloc_upsert().id() == "a1");
  CHECK(changes[1].change.alloc_upsert().id() == "b1");
  CHECK(changes[2].change.has_volume_upsert());
  CHECK(changes[3].change.has_volume_delete());
}

TEST_CASE("same_alloc_run_knows_a_request_sent_again") {
  v1::AllocRunRequest req;
  req.set_node_id("n1");
  req.add_command("sleep");
  req.add_command("60");
  auto* av = req.add_volumes();
  av->set_name("data");
  av->set_volume_id("db");
  av->set_read_only(true);
  auto requested = pending_alloc(req, "a1", 1000);
  // What the first request made of it by now: running, published, later.
  auto known = requested;
  known.set_state(v1::ALLOC_RUNNING);
  known.mutable_volumes(0)->set_published_path("/csi/per-alloc/a1/db");
  known.set_modified_at_ms(5000);
  known.set_modify_index(42);
  CHECK(same_alloc_run(known, requested));
  known.set_state(v1::ALLOC_FAILED);  // its outcome does not matter: it is the same request
  CHECK(same_alloc_run(known, requested));

  auto other = requested;
  other.set_node_id("n2");
  CHECK_FALSE(same_alloc_run(known, other));
  other = requested;
  other.set_namespace_("prod");
  CHECK_FALSE(same_alloc_run(known, other));
  other = requested;
  other.mutable_volumes(0)->set_read_only(false);
  CHECK_FALSE(same_alloc_run(known, other));
  other = requested;
  other.mutable_volumes(0)->add_mount_flags("noatime");
  CHECK_FALSE(same_alloc_run(known, other));
  other = requested;
  other.add_volumes()->set_volume_id("logs");
  CHECK_FALSE(same_alloc_run(known, other));
  other = requested;
  other.set_command(1, "61");
  CHECK_FALSE(same_alloc_run(known, other));
  other = requested;
  other.clear_command();
  CHECK_FALSE(same_alloc_run(known, other));
}

TEST_CASE("a_repeated_run_of_a_failed_alloc_answers_its_failure_not_success") {
  for (auto state : {v1::ALLOC_RUNNING, v1::ALLOC_COMPLETE, v1::ALLOC_LOST})
    CHECK_FALSE(repeated_run_failure(make_alloc("a", "n1", state)));
  auto failed = alloc_in_state(make_alloc("a", "n1", v1::ALLOC_PENDING), v1::ALLOC_FAILED,
                               "claim of volume 'sw' refused", 5);
  auto f = repeated_run_failure(failed);
  REQUIRE(f);
  CHECK(f->code == errc::refused);
  CHECK(f->message.find("claim of volume 'sw' refused") != std::string::npos);
  CHECK(f->message.find("berth alloc status a") != std::string::npos);
}

TEST_CASE("alloc_of_claim_creates_extends_or_refuses") {
  catalog c;
  commit(c, {upsert_change(make_alloc("done", "n1", v1::ALLOC_COMPLETE)),
             upsert_change(make_alloc("other", "n2", v1::ALLOC_RUNNING)),
             upsert_change(make_alloc("has", "n1", v1::ALLOC_RUNNING, {"db"}))});
  v1::ClaimRequest req;
  req.set_volume_id("db");
  req.set_node_id("n1");

  req.set_alloc_id("new");
  auto created = alloc_of_claim(c, req, 5);
  REQUIRE(created.upsert);
  CHECK(created.upsert->state() == v1::ALLOC_RUNNING);
  CHECK(created.upsert->volumes_size() == 1);
  CHECK(created.upsert->namespace_() == "default");

  req.set_alloc_id("done");
  CHECK(alloc_of_claim(c, req, 5).error->code == errc::refused);
  req.set_alloc_id("other");
  CHECK(alloc_of_claim(c, req, 5).error->message.find("runs on node 'n2'") != std::string::npos);
  req.set_alloc_id("has");
  auto same = alloc_of_claim(c, req, 5);
  CHECK_FALSE(same.error);
  // The record as it is, so that a repeat committed after the first
  // claim's free deleted it makes it again (alloc_after_claim).
  REQUIRE(same.upsert);
  CHECK(same.upsert->SerializeAsString() == find_alloc(c, "has")->SerializeAsString());
  req.set_volume_id("logs");
  auto extended = alloc_of_claim(c, req, 5);
  REQUIRE(extended.upsert);
  CHECK(extended.upsert->volumes_size() == 2);
  req.set_alloc_id("bad id!");
  auto bad = alloc_of_claim(c, req, 5);
  CHECK_FALSE(bad.error);
  CHECK_FALSE(bad.upsert);
}

TEST_CASE("an_empty_alloc_of_a_node_away_stays_for_the_node_to_unmount") {
  // Claim-only allocs of a node marked down: their claims were released
  // without the node; deleted, the node coming back would never be told to
  // unmount them (claim simulation, seed 827).
  catalog c;
  commit(c, {upsert_change(make_volume("db")), upsert_change(make_node("n1")),
             upsert_change(make_alloc("one", "n1", v1::ALLOC_RUNNING, {"db"}))});
  commit(c, mark_down(c, "n1", 21000, 500));
  auto kept = alloc_after_release(c, "one", {"default", "db"});
  REQUIRE(kept);
  REQUIRE(kept->has_alloc_upsert());
  CHECK(kept->alloc_upsert().volumes_size() == 0);
  CHECK(kept->alloc_upsert().state() == v1::ALLOC_LOST);
  // Back, unmounts not confirmed yet: still kept.
  commit(c, {upsert_change(*node_after_heartbeat(c, "n1", 900))});
  CHECK(alloc_after_release(c, "one", {"default", "db"})->has_alloc_upsert());
  // Confirmed: deleted as usual.
  commit(c, {upsert_change(*node_after_unmounts(c, "n1", 500))});
  CHECK(alloc_after_release(c, "one", {"default", "db"})->alloc_delete() == "one");
  CHECK(allocs_to_unmount_on_return(c, "n1").empty());
}

TEST_CASE("alloc_after_release_drops_the_volume_and_deletes_an_empty_alloc") {
  catalog c;
  auto held = make_volume("held");
  add_claim(held, "two", "n1");
  commit(c, {upsert_change(make_volume("db")), upsert_change(held),
             upsert_change(make_alloc("one", "n1", v1::ALLOC_RUNNING, {"db"})),
             upsert_change(make_alloc("two", "n1", v1::ALLOC_RUNNING, {"db", "held"}))});
  auto del = alloc_after_release(c, "one", {"default", "db"});
  REQUIRE(del);
  CHECK(del->alloc_delete() == "one");
  auto shrunk = alloc_after_release(c, "two", {"default", "db"});
  REQUIRE(shrunk);
  CHECK(shrunk->alloc_upsert().volumes_size() == 1);
  // still claimed: nothing changes
  CHECK_FALSE(alloc_after_release(c, "two", {"default", "held"}));
  // an alloc with a command keeps its volumes
  auto cmd = make_alloc("cmd", "n1", v1::ALLOC_RUNNING, {"db"});
  cmd.add_command("true");
  commit(c, {upsert_change(cmd)});
  CHECK_FALSE(alloc_after_release(c, "cmd", {"default", "db"}));
}

TEST_CASE("a_free_entry_resolves_its_alloc_record_at_apply_on_the_state_it_finds") {
  // The release's last entry: the volume with the claim gone, then the
  // alloc's volume_freed, resolved by apply on what the entry left.
  catalog c;
  auto db = make_volume("db");
  add_claim(db, "one", "n1");
  add_claim(db, "two", "n1");
  auto held = make_volume("held");
  add_claim(held, "two", "n1");
  auto cmd = make_alloc("cmd", "n1", v1::ALLOC_RUNNING, {"db"});
  cmd.add_command("true");
  commit(c, {upsert_change(db), upsert_change(held), upsert_change(make_node("n1")),
             upsert_change(make_alloc("one", "n1", v1::ALLOC_RUNNING, {"db"})),
             upsert_change(make_alloc("two", "n1", v1::ALLOC_RUNNING, {"db", "held"})), upsert_change(cmd)});
  auto freed = db;
  freed.clear_claims();
  auto index = c.applied_index + 1;
  auto applied = apply(c, index, make_entry({upsert_change(freed),
                                             alloc_volume_freed_change("one", "default", "db"),
                                             alloc_volume_freed_change("two", "default", "db"),
                                             alloc_volume_freed_change("cmd", "default", "db"),
                                             alloc_volume_freed_change("gone", "default", "db")}));
  // The volume, "one" deleted (nothing left), "two" shrunk; "cmd" (it has
  // a command) and "gone" (no record) change nothing and are left out.
  REQUIRE(applied.size() == 3);
  CHECK(applied[1].change.alloc_delete() == "one");
  CHECK(applied[1].before.alloc_upsert().id() == "one");
  REQUIRE(applied[2].change.has_alloc_upsert());
  CHECK(applied[2].change.alloc_upsert().volumes_size() == 1);
  CHECK(applied[2].change.alloc_upsert().modify_index() == index);
  CHECK(find_alloc(c, "one") == nullptr);
  CHECK(find_alloc(c, "two")->volumes(0).volume_id() == "held");
  CHECK(find_alloc(c, "cmd")->volumes_size() == 1);
  // In an entry where the claim is still there (no free before it): nothing.
  applied = apply(c, index + 1, make_entry({alloc_volume_freed_change("two", "default", "held")}));
  CHECK(applied.empty());
  CHECK(find_alloc(c, "two")->volumes_size() == 1);
  // Applied again at an old index: skipped, as every entry is.
  CHECK(apply(c, index, make_entry({alloc_volume_freed_change("two", "default", "held")})).empty());
}

TEST_CASE("alloc_after_update_only_moves_forward_on_its_own_node") {
  catalog c;
  commit(c, {upsert_change(make_alloc("r", "n1", v1::ALLOC_RUNNING)),
             upsert_change(make_alloc("t", "n1", v1::ALLOC_LOST))});
  v1::AllocUpdate u;
  u.set_id("r");
  u.set_node_id("n1");
  u.set_state(v1::ALLOC_COMPLETE);
  u.set_exit_code(0);
  auto ok = alloc_after_update(c, u, 9);
  REQUIRE(ok.upsert);
  CHECK(ok.upsert->state() == v1::ALLOC_COMPLETE);
  CHECK(ok.upsert->modified_at_ms() == 9);
  u.set_node_id("n2");
  CHECK_FALSE(alloc_after_update(c, u, 9).upsert);
  u.set_node_id("n1");
  u.set_id("t");
  CHECK_FALSE(alloc_after_update(c, u, 9).upsert);
  u.set_id("gone");
  CHECK(alloc_after_update(c, u, 9).error->code == errc::not_found);
}

TEST_CASE("claims_freed_and_interrupted_allocs") {
  catalog c;
  auto v = make_volume("db");
  add_claim(v, "a", "n1", v1::CLAIM_UNPUBLISHING);
  commit(c, {upsert_change(v), upsert_change(make_alloc("a", "n1", v1::ALLOC_PENDING, {"db"})),
             upsert_change(make_alloc("b", "n1", v1::ALLOC_RUNNING, {"db"}))});
  CHECK_FALSE(claims_freed(c, "a"));
  CHECK(claims_freed(c, "b"));
  CHECK(claims_freed(c, "nope"));
  CHECK(claimed_volumes(c, c.allocs.at("a")) == std::vector<std::string>{"db"});
  auto failed = fail_interrupted_allocs(c, 3);
  REQUIRE(failed.size() == 1);
  CHECK(failed[0].alloc_upsert().id() == "a");
  CHECK(failed[0].alloc_upsert().state() == v1::ALLOC_FAILED);
}

// --- nodes ----------------------------------------------------------------------------

TEST_CASE("heartbeat_makes_a_node_ready_with_a_client_once") {
  catalog c;
  auto first = node_after_heartbeat(c, "n1", 100);
  REQUIRE(first);
  CHECK(first->has_client());
  CHECK(first->status() == v1::NODE_READY);
  commit(c, {upsert_change(*first)});
  CHECK_FALSE(node_after_heartbeat(c, "n1", 200));
  auto down = make_node("n1", v1::NODE_DOWN);
  down.add_plugin_ids("p");
  commit(c, {upsert_change(down)});
  auto back = node_after_heartbeat(c, "n1", 300);
  REQUIRE(back);
  CHECK(back->status() == v1::NODE_READY);
  CHECK(back->plugin_ids_size() == 1);
}

TEST_CASE("silent_nodes_gives_a_new_leader_a_full_timeout") {
  catalog c;
  commit(c, {upsert_change(make_node("n1")), upsert_change(make_node("n2")),
             upsert_change(make_node("down", v1::NODE_DOWN)),
             upsert_change(make_node("bare", v1::NODE_READY, false))});
  std::map<std::string, int64_t> seen{{"n1", 0}};
  auto first = silent_nodes(c, seen, 1000, 500);
  REQUIRE(first.size() == 1);
  CHECK(first[0].id == "n1");
  CHECK(first[0].silent_ms == 1000);
  CHECK(seen.at("n2") == 1000);  // first sight: a full timeout from now
  CHECK_FALSE(seen.count("down"));
  CHECK_FALSE(seen.count("bare"));
  auto later = silent_nodes(c, seen, 1400, 500);
  CHECK(later.size() == 1);  // n2 not yet
  CHECK(silent_nodes(c, seen, 1600, 500).size() == 2);
}

TEST_CASE("mark_down_loses_live_allocs_in_one_entry") {
  catalog c;
  commit(c,
         {upsert_change(make_node("n1")), upsert_change(make_alloc("r", "n1", v1::ALLOC_RUNNING)),
          upsert_change(make_alloc("p", "n1", v1::ALLOC_PENDING)),
          upsert_change(make_alloc("done", "n1", v1::ALLOC_COMPLETE)),
          upsert_change(make_alloc("else", "n2", v1::ALLOC_RUNNING))});
  auto changes = mark_down(c, "n1", 21000, 5);
  REQUIRE(changes.size() == 3);
  CHECK(changes[0].node_upsert().status() == v1::NODE_DOWN);
  for (size_t i = 1; i < changes.size(); ++i) {
    CHECK(changes[i].alloc_upsert().state() == v1::ALLOC_LOST);
    CHECK(changes[i].alloc_upsert().message().find("21 s") != std::string::npos);
  }
  commit(c, changes);
  CHECK(mark_down(c, "n1", 1, 5).empty());  // down already
  CHECK(mark_down(c, "unknown", 1, 5).empty());
  CHECK(lost_allocs_of(c, "n1").size() == 2);
}

TEST_CASE("reconnect_stops_complete_allocs_that_still_hold_claims") {
  catalog c;
  auto v = make_volume("db");
  add_claim(v, "held", "n1", v1::CLAIM_TAKEN);
  commit(c, {upsert_change(v), upsert_change(make_alloc("held", "n1", v1::ALLOC_COMPLETE, {"db"})),
             upsert_change(make_alloc("freed", "n1", v1::ALLOC_COMPLETE, {"db"}))});
  CHECK(allocs_to_stop_on_reconnect(c, "n1") == std::vector<std::string>{"held"});
  CHECK(allocs_to_stop_on_reconnect(c, "n2").empty());
}

// Issue 59: a stop that failed is sent again with the next heartbeat, never
// while one is on its way, never once confirmed; and none is due for an
// alloc whose claims were freed meanwhile.
TEST_CASE("a_failed_stop_is_due_again_until_the_client_confirms_it") {
  catalog c;
  auto db = make_volume("db");
  add_claim(db, "a", "n1", v1::CLAIM_TAKEN);
  add_claim(db, "b", "n1", v1::CLAIM_TAKEN);
  add_claim(db, "other", "n2", v1::CLAIM_TAKEN);
  commit(c, {upsert_change(db), upsert_change(make_alloc("a", "n1", v1::ALLOC_COMPLETE, {"db"})),
             upsert_change(make_alloc("b", "n1", v1::ALLOC_COMPLETE, {"db"})),
             upsert_change(make_alloc("run", "n1", v1::ALLOC_RUNNING, {"db"})),
             upsert_change(make_alloc("other", "n2", v1::ALLOC_COMPLETE, {"db"}))});
  using ids = std::vector<std::string>;
  // At the reconnect: both of n1's, none of n2's, not the running one.
  CHECK(stops_due(c, "n1", {}, {}) == ids{"a", "b"});
  // On their way: nothing more on the next heartbeat.
  CHECK(stops_due(c, "n1", {}, {"a", "b"}).empty());
  // a confirmed, b failed (in neither set): b again, and only b.
  CHECK(stops_due(c, "n1", {"a"}, {}) == ids{"b"});
  // Every heartbeat until it is confirmed.
  CHECK(stops_due(c, "n1", {"a"}, {}) == ids{"b"});
  CHECK(stops_due(c, "n1", {"a", "b"}, {}).empty());
  // Another node's stops are its own.
  CHECK(stops_due(c, "n2", {"a", "b"}, {}) == ids{"other"});
  CHECK(stops_due(c, "n3", {}, {}).empty());
  // Claims freed meanwhile: no stop is due any more.
  auto freed = make_volume("db");
  add_claim(freed, "other", "n2", v1::CLAIM_TAKEN);
  commit(c, {upsert_change(freed)});
  CHECK(stops_due(c, "n1", {}, {}).empty());
}

TEST_CASE("a_node_back_from_down_unmounts_every_ended_alloc_until_it_confirms") {
  catalog c;
  commit(c, {upsert_change(make_node("n1")),
             upsert_change(make_alloc("ended-before", "n1", v1::ALLOC_COMPLETE)),
             upsert_change(make_alloc("failed-before", "n1", v1::ALLOC_FAILED)),
             upsert_change(make_alloc("running", "n1", v1::ALLOC_RUNNING)),
             upsert_change(make_alloc("elsewhere", "n2", v1::ALLOC_COMPLETE))});
  CHECK(allocs_to_unmount_on_return(c, "n1").empty());  // never down: nothing to undo
  commit(c, mark_down(c, "n1", 21000, 500));
  // Not only the lost alloc: the servers may have released the claims of
  // allocs that had ended before without the node as well.
  auto back = node_after_heartbeat(c, "n1", 900);
  REQUIRE(back);
  CHECK(back->down_at_ms() == 500);  // kept until the client confirms
  commit(c, {upsert_change(*back)});
  REQUIRE(unmounts_pending(*find_node(c, "n1")));
  CHECK(allocs_to_unmount_on_return(c, "n1") ==
        std::vector<std::string>{"ended-before", "failed-before", "running"});
  CHECK(allocs_to_unmount_on_return(c, "n2").empty());
  // Confirmed for another down: nothing changes (a later round asks again).
  CHECK_FALSE(node_after_unmounts(c, "n1", 400));
  auto done = node_after_unmounts(c, "n1", 500);
  REQUIRE(done);
  CHECK(done->down_at_ms() == 0);
  CHECK(done->status() == v1::NODE_READY);
  commit(c, {upsert_change(*done)});
  CHECK(allocs_to_unmount_on_return(c, "n1").empty());
  CHECK_FALSE(node_after_unmounts(c, "n1", 500));
  // Down again before the confirmation landed: not cleared.
  commit(c, mark_down(c, "n1", 21000, 700));
  CHECK_FALSE(node_after_unmounts(c, "n1", 700));  // not ready
}

TEST_CASE("fingerprints_are_validated_and_list_the_plugin_on_the_node") {
  v1::Fingerprint f;
  CHECK(validate_fingerprint(f).size() == 3);
  f.set_plugin_id("p");
  f.set_node_id("n1");
  f.set_type(v1::PLUGIN_NODE);
  f.mutable_instance()->set_healthy(true);
  CHECK(validate_fingerprint(f).empty());

  v1::Plugin p;
  p.set_id("p");
  CHECK(apply_fingerprint(p, f, 77));
  CHECK_FALSE(apply_fingerprint(p, f, 78));  // nothing new: nothing to write
  REQUIRE(p.nodes_size() == 1);
  CHECK(p.nodes(0).updated_at_ms() == 77);

  catalog c;
  commit(c, {upsert_change(make_node("n1"))});
  auto listed = node_after_fingerprint(c, f, p);
  REQUIRE(listed);
  CHECK(listed->plugin_ids_size() == 1);
  commit(c, {upsert_change(*listed)});
  CHECK_FALSE(node_after_fingerprint(c, f, p));
  f.set_remove(true);
  CHECK(apply_fingerprint(p, f, 79));
  auto unlisted = node_after_fingerprint(c, f, p);
  REQUIRE(unlisted);
  CHECK(unlisted->plugin_ids_size() == 0);
}

TEST_CASE("down_nodes_lose_their_instances_and_empty_plugins_are_collected") {
  catalog c;
  auto n = make_node("n1", v1::NODE_DOWN);
  n.add_plugin_ids("p");
  n.add_plugin_ids("gone");
  v1::Plugin empty;
  empty.set_id("empty");
  commit(c, {upsert_change(n), upsert_change(controller_plugin({{"n1", true}})),
             upsert_change(empty)});
  auto fps = instances_of_down_node(c, "n1");
  REQUIRE(fps.size() == 1);  // "gone" is not a plugin any more
  CHECK(fps[0].remove());
  CHECK(fps[0].type() == v1::PLUGIN_MONOLITH);
  CHECK(plugins_to_collect(c) == std::vector<std::string>{"empty"});
}

TEST_CASE("a_plugin_without_instances_that_a_volume_uses_is_kept") {
  // Claim simulation seeds 3028, 8066, 9427, 10561: every node of the
  // plugin went down, the plugin was collected and made again from a
  // node-only client that came back, and forgot that its volumes need
  // ControllerPublishVolume (a NodePublish with no attachment) and
  // ControllerExpandVolume (an expansion recorded as grown by a controller
  // that never ran).
  catalog c;
  v1::Plugin gone = controller_plugin({{"n1", true}});
  gone.set_controller_expands(true);
  gone.clear_controllers();
  v1::Plugin unused;
  unused.set_id("unused");
  commit(c, {upsert_change(gone), upsert_change(unused), upsert_change(make_volume("v", "p"))});
  CHECK(plugins_to_collect(c) == std::vector<std::string>{"unused"});
  // Its capabilities stay for the node that comes back.
  const auto* kept = find_plugin(c, "p");
  REQUIRE(kept != nullptr);
  CHECK(kept->controller_required());
  CHECK(kept->controller_expands());
  // Once no volume uses it, it goes.
  commit(c, {volume_delete_change("default", "v")});
  CHECK(plugins_to_collect(c) == std::vector<std::string>{"p", "unused"});
}

TEST_CASE("a_claim_on_a_node_whose_client_is_away_is_refused_to_retry") {
  // Claim simulation seed 284: recorded taken without a publication, the
  // claim kept an expansion of its volume waiting for ever.
  catalog c;
  commit(c, {upsert_change(make_node("n1")), upsert_change(make_node("down", v1::NODE_DOWN)),
             upsert_change(make_node("bare", v1::NODE_READY, false))});
  CHECK_FALSE(refuse_client_away(c, "n1", true));
  auto away = refuse_client_away(c, "n1", false);
  REQUIRE(away);
  CHECK(away->code == errc::unavailable);
  CHECK(away->retry);
  CHECK(away->message.find("'n1' is not connected") != std::string::npos);
  auto down = refuse_client_away(c, "down", false);
  REQUIRE(down);
  CHECK(down->message.find("the node is down") != std::string::npos);
  // No berth client there (hand-made fingerprints), or an unknown node:
  // the claim is recorded only, as before.
  CHECK_FALSE(refuse_client_away(c, "bare", false));
  CHECK_FALSE(refuse_client_away(c, "unknown", false));
}

TEST_CASE("a_claim_on_a_node_being_marked_down_is_refused_to_retry") {
  // Claim simulation seeds 33650 and 52520: the mark-down of a silent node
  // was still being written when its client heartbeated again; a claim there
  // was admitted and published after the mark-down committed, and its
  // release without the node freed it while it was published.
  catalog c;
  commit(c, {upsert_change(make_node("n1")),
             upsert_change(make_node("bare", v1::NODE_READY, false))});
  CHECK_FALSE(refuse_client_away(c, "n1", true, false));
  auto marking = refuse_client_away(c, "n1", true, true);
  REQUIRE(marking);
  CHECK(marking->code == errc::unavailable);
  CHECK(marking->retry);
  CHECK(marking->message.find("'n1' is being marked down") != std::string::npos);
  // No berth client there: recorded only, as before.
  CHECK_FALSE(refuse_client_away(c, "bare", false, true));
}

TEST_CASE("a_node_listing_a_plugin_without_its_instance_is_asked_to_report_again") {
  // Claim simulation seed 217: a client restarted while one leader was
  // deposed reported its plugin to it; the next leader saw the node ready
  // and never asked again, so its controller was gone for good.
  catalog c;
  auto n = make_node("n1");
  n.add_plugin_ids("p");
  commit(c, {upsert_change(n), upsert_change(make_node("n2")),
             upsert_change(controller_plugin({{"n1", true}}))});
  CHECK_FALSE(instances_missing(c, "n1"));
  CHECK_FALSE(instances_missing(c, "n2"));  // lists nothing
  CHECK_FALSE(instances_missing(c, "unknown"));
  commit(c, {upsert_change(controller_plugin({{"n2", true}}))});
  CHECK(instances_missing(c, "n1"));
  commit(c, {plugin_delete_change("p")});
  CHECK(instances_missing(c, "n1"));  // collected with its last instance
  // A drain withdrew them on purpose: not asked.
  n.set_plugins_withdrawn(true);
  commit(c, {upsert_change(n)});
  CHECK_FALSE(instances_missing(c, "n1"));
}

TEST_CASE("every_heartbeat_asks_a_node_missing_an_instance_to_report_again") {
  // Claim simulation seeds 13030 and 15824: the heartbeat that found the
  // controller's node down asked it to report again, the node was cut off
  // again before its report arrived, and no later heartbeat asked (the
  // client was not new to the leader): its controller instance stayed
  // missing and a release and an expansion waited for a controller for ever.
  catalog c;
  auto n = make_node("n1");
  n.add_plugin_ids("p");
  commit(c, {upsert_change(n), upsert_change(controller_plugin({{"n1", true}}))});
  CHECK_FALSE(report_plugins_again(c, "n1", false));
  CHECK(report_plugins_again(c, "n1", true));  // back from down: its instances were removed
  // Removed (it went down), and it is ready again: asked on every heartbeat
  // until its instance is back.
  v1::Plugin none = controller_plugin({});
  commit(c, {upsert_change(none)});
  CHECK(report_plugins_again(c, "n1", false));
  CHECK(report_plugins_again(c, "n1", false));
  commit(c, {upsert_change(controller_plugin({{"n1", true}}))});
  CHECK_FALSE(report_plugins_again(c, "n1", false));
  // A drain withdrew them on purpose: not asked.
  commit(c, {upsert_change(none)});
  n.set_plugins_withdrawn(true);
  commit(c, {upsert_change(n)});
  CHECK_FALSE(report_plugins_again(c, "n1", false));
}

// --- placement --------------------------------------------------------------------------

TEST_CASE("controller_choice_is_healthy_connected_and_round_robin") {
  auto p = controller_plugin({{"n1", true}, {"n2", false}, {"n3", true}, {"n4", true}});
  auto connected = [](const std::string& n) { return n != "n4"; };
  auto cands = controller_candidates(p, connected);
  CHECK(cands == std::vector<std::string>{"n1", "n3"});
  size_t turn = 0;
  CHECK(*next_in_turn(cands, turn) == "n1");
  CHECK(*next_in_turn(cands, turn) == "n3");
  CHECK(*next_in_turn(cands, turn) == "n1");
  CHECK_FALSE(next_in_turn({}, turn));
}

TEST_CASE("controller_call_limit_sums_the_healthy_controllers_limits") {
  CHECK(controller_call_limit(v1::Plugin{}) == 1);  // none: still one call may wait for one
  auto p = controller_plugin({{"n1", true}, {"n2", false}, {"n3", true}});
  CHECK(controller_call_limit(p) == 32);  // unreported: 16 each, the unhealthy one not counted
  p.mutable_controllers(0)->set_max_calls(1);
  CHECK(controller_call_limit(p) == 17);
  p.mutable_controllers(2)->set_max_calls(4);
  CHECK(controller_call_limit(p) == 5);
  p.mutable_controllers(1)->set_max_calls(100);
  CHECK(controller_call_limit(p) == 5);
}

TEST_CASE("controller_choice_respects_a_required_topology") {
  auto p = controller_plugin({{"n1", true}, {"n2", true}});
  for (auto [node, zone] : {std::pair{"n1", "a"}, std::pair{"n2", "b"}}) {
    auto* inst = p.add_nodes();
    inst->set_node_id(node);
    (*inst->mutable_accessible_topology()->mutable_segments())["zone"] = zone;
  }
  v1::TopologyRequest t;
  (*t.add_required()->mutable_segments())["zone"] = "b";
  auto all = [](const std::string&) { return true; };
  CHECK(controller_candidates(p, all, &t) == std::vector<std::string>{"n2"});
  v1::TopologyRequest none;
  CHECK(controller_candidates(p, all, &none).size() == 2);
  CHECK(in_required_topology(p, "n1", nullptr));
  CHECK_FALSE(in_required_topology(p, "n3", &t));
}

TEST_CASE("node_volume_count_counts_claimed_and_in_flight_once") {
  catalog c;
  auto a = make_volume("a");
  add_claim(a, "x", "n1");
  add_claim(a, "y", "n1", v1::CLAIM_NODE_DETACHED);
  auto b = make_volume("b");
  add_claim(b, "z", "n2");
  auto other = make_volume("o", "q");
  add_claim(other, "w", "n1");
  commit(c, {upsert_change(a), upsert_change(b), upsert_change(other)});
  CHECK(node_volume_count(c, "n1", "p", {"default", "new"}, {}) == 1);
  CHECK(node_volume_count(c, "n1", "p", {"default", "a"}, {}) == 0);
  CHECK(node_volume_count(c, "n1", "p", {"default", "new"}, {{"default", "c"}, {"default", "a"}}) ==
        2);
}

TEST_CASE("node_volume_count_equals_the_union_it_counts_over_random_sets") {
  // What it computed before by building the union (one set copy and k
  // inserts per claim).
  auto brute = [](const catalog& c, const std::string& node, const std::string& plugin,
                  const volume_key& except, const std::set<volume_key>& in_flight) {
    std::set<volume_key> seen;
    auto it = c.claimed_on.find({node, plugin});
    if (it != c.claimed_on.end()) seen = it->second;
    seen.insert(in_flight.begin(), in_flight.end());
    seen.erase(except);
    return static_cast<int64_t>(seen.size());
  };
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    catalog c;
    int volumes = 1 + pick(40);
    std::vector<v1::Change> changes;
    for (int i = 0; i < volumes; ++i) {
      auto v = make_volume("v" + std::to_string(i), pick(2) ? "p" : "q");
      for (int k = pick(3); k > 0; --k)
        add_claim(v, "a" + std::to_string(pick(9)), "n" + std::to_string(pick(3)));
      changes.push_back(upsert_change(v));
    }
    commit(c, changes);
    for (int q = 0; q < 20; ++q) {
      std::set<volume_key> in_flight;
      for (int k = pick(volumes + 1); k > 0; --k)
        in_flight.insert({"default", "v" + std::to_string(pick(volumes + 5))});
      volume_key except{"default", "v" + std::to_string(pick(volumes + 5))};
      auto node = "n" + std::to_string(pick(4));
      auto plugin = pick(2) ? "p" : "q";
      CHECK(node_volume_count(c, node, plugin, except, in_flight) ==
            brute(c, node, plugin, except, in_flight));
    }
  }
}

TEST_CASE("the_claimed_on_index_matches_a_scan_after_random_changes_and_a_reload") {
  // What node_volume_count used to compute by scanning every volume.
  auto scan = [](const catalog& c) {
    std::map<std::pair<std::string, std::string>, std::set<volume_key>> out;
    for (const auto& [key, row] : c.volumes) {
      auto v = row.get();
      for (const auto& cl : v.claims()) out[{cl.node_id(), v.plugin_id()}].insert(key);
    }
    return out;
  };
  for (uint32_t seed = 1; seed <= 200; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    catalog c;
    for (int step = 0; step < 60; ++step) {
      auto id = "v" + std::to_string(pick(8));
      if (pick(6) == 0) {
        commit(c, {volume_delete_change("default", id)});
      } else {
        auto v = make_volume(id, pick(2) ? "p" : "q");
        for (int k = pick(3); k > 0; --k)
          add_claim(v, "a" + std::to_string(pick(5)), "n" + std::to_string(pick(3)));
        v.set_availability(static_cast<v1::VolumeAvailability>(pick(3)));
        if (pick(3) == 0) v.mutable_condition()->set_abnormal(true);
        commit(c, {upsert_change(v)});
        // The row holds exactly the committed volume, stamped.
        auto held = volume_at(c, {"default", id});
        REQUIRE(held.claims_size() == v.claims_size());
        REQUIRE(held.modify_index() == c.applied_index);
        REQUIRE(held.condition().abnormal() == v.condition().abnormal());
      }
      REQUIRE(c.claimed_on == scan(c));
      std::set<volume_key> draining, abnormal, claimed;  // what the tick used to scan for
      for (const auto& [key, row] : c.volumes) {
        auto v = row.get();
        if (v.availability() == v1::VOLUME_DRAIN) draining.insert(key);
        if (v.condition().abnormal()) abnormal.insert(key);
        if (v.claims_size() > 0) claimed.insert(key);
      }
      REQUIRE(c.draining == draining);
      REQUIRE(c.abnormal == abnormal);
      REQUIRE(claimed_volumes(c) == claimed);
    }
    catalog loaded;
    for (const auto& [key, row] : c.volumes) add_volume(loaded, row.get());
    CHECK(loaded.claimed_on == c.claimed_on);
    CHECK(loaded.draining == c.draining);
    CHECK(loaded.abnormal == c.abnormal);
    // A copy (what a new leader starts from) shares every row; a change
    // applied to the copy replaces its row and leaves the original's.
    auto copy = c;
    for (const auto& [key, row] : c.volumes) REQUIRE(copy.volumes.at(key).same(row));
    if (!c.volumes.empty()) {
      auto key = c.volumes.begin()->first;
      auto v = volume_at(c, key);
      v.set_capacity_bytes(v.capacity_bytes() + 1);
      commit(copy, {upsert_change(v)});
      CHECK_FALSE(copy.volumes.at(key).same(c.volumes.at(key)));
      CHECK(volume_at(copy, key).capacity_bytes() == volume_at(c, key).capacity_bytes() + 1);
    }
  }
}

TEST_CASE("a_rows_plugin_and_external_id_read_alone_match_the_decoded_volume") {
  std::mt19937 rng(12);
  auto text = [&](int n) {
    std::string out;
    for (int i = static_cast<int>(rng() % static_cast<uint32_t>(n)); i > 0; --i)
      out += static_cast<char>('a' + rng() % 26);
    return out;
  };
  for (int i = 0; i < 2000; ++i) {
    CAPTURE(i);
    v1::Volume v;
    v.set_id(text(20));
    v.set_namespace_(text(8));
    if (rng() % 4) v.set_plugin_id(text(30));
    if (rng() % 4) v.set_external_id(text(300));  // long enough for a two-byte length
    v.set_capacity_bytes(static_cast<int64_t>(rng()));
    for (int k = static_cast<int>(rng() % 3); k > 0; --k) add_claim(v, text(10), text(10));
    (*v.mutable_parameters())[text(5)] = text(40);
    if (rng() % 2) v.mutable_condition()->set_abnormal(true);
    v.set_clone_external_id(text(10));
    volume_row row(v);
    auto [plugin, external] = row.plugin_and_external_id();
    CHECK(plugin == v.plugin_id());
    CHECK(external == v.external_id());
    CHECK(row.get().SerializeAsString() == v.SerializeAsString());
  }
  CHECK(volume_row().plugin_and_external_id() == std::pair<std::string, std::string>{});
}

TEST_CASE("two_catalogs_with_a_row_exchange_share_every_row_whatever_the_order_they_apply_in") {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    // The committed entries: upserts (some of one volume twice in an
    // entry) and deletes.
    std::vector<v1::LogEntry> entries;
    for (int i = 0; i < 80; ++i) {
      std::vector<v1::Change> changes;
      for (int k = 1 + pick(3); k > 0; --k) {
        auto id = "v" + std::to_string(pick(10));
        if (pick(5) == 0) {
          changes.push_back(volume_delete_change("default", id));
        } else {
          auto v = make_volume(id, pick(2) ? "p" : "q");
          v.set_capacity_bytes(pick(1000));
          if (pick(2)) add_claim(v, "a" + std::to_string(pick(4)), "n1");
          changes.push_back(upsert_change(v));
        }
      }
      entries.push_back(make_entry(changes));
    }
    auto rows = std::make_shared<row_exchange>();
    catalog machine;
    machine.rows = rows;
    rows->attach(row_exchange::machine);
    // The machine applies a prefix alone; the leader starts from a copy of
    // it, later (entries applied meanwhile are in neither's exchange).
    size_t m = 0, l = 0;
    size_t start = static_cast<size_t>(pick(20));
    for (; m < start; ++m) apply(machine, m + 1, entries[m]);
    catalog plain;  // the same entries, no exchange: what each must hold
    for (size_t i = 0; i < entries.size(); ++i) apply(plain, i + 1, entries[i]);
    catalog leader = machine;
    l = m;
    for (size_t extra = static_cast<size_t>(pick(5)); extra > 0 && m < entries.size(); --extra, ++m)
      apply(machine, m + 1, entries[m]);
    leader.party = row_exchange::leader;
    rows->attach(row_exchange::leader);
    // Then both apply the rest, interleaved at random: either may be ahead.
    while (m < entries.size() || l < entries.size()) {
      bool machine_next = l == entries.size() || (m < entries.size() && pick(2) == 0);
      if (machine_next) {
        apply(machine, m + 1, entries[m]);
        ++m;
      } else {
        apply(leader, l + 1, entries[l]);
        ++l;
      }
    }
    REQUIRE(machine.volumes.size() == plain.volumes.size());
    REQUIRE(leader.volumes.size() == plain.volumes.size());
    for (const auto& [key, row] : plain.volumes) {
      REQUIRE(machine.volumes.at(key).get().SerializeAsString() == row.get().SerializeAsString());
      REQUIRE(leader.volumes.at(key).get().SerializeAsString() == row.get().SerializeAsString());
      // One block for both catalogs: the row of a volume's last upsert was
      // built once (unless it was written before the leader attached).
      if (volume_at(plain, key).modify_index() > start + 5)
        CHECK(leader.volumes.at(key).same(machine.volumes.at(key)));
    }
    // Both applied everything: nothing is left waiting.
    CHECK(rows->waiting() == 0);
    rows->detach(row_exchange::leader);
    CHECK(rows->waiting() == 0);
  }
}

// --- the release steps -------------------------------------------------------------------

TEST_CASE("release_steps_follow_the_specs_order") {
  auto v = make_volume("db");
  add_claim(v, "a", "n1");
  release_facts f;
  f.node_connected = true;
  f.controller_required = true;
  f.controller_available = true;
  auto s = next_release_step(v, "a", f);
  CHECK(s.action == release_action::commit);
  CHECK(s.to == v1::CLAIM_UNPUBLISHING);
  v.mutable_claims(0)->set_state(v1::CLAIM_UNPUBLISHING);
  s = next_release_step(v, "a", f);
  CHECK(s.action == release_action::node_unpublish);
  CHECK(s.unstage);
  CHECK(s.to == v1::CLAIM_NODE_DETACHED);
  v.mutable_claims(0)->set_state(v1::CLAIM_NODE_DETACHED);
  s = next_release_step(v, "a", f);
  CHECK(s.action == release_action::controller_unpublish);
  v.mutable_claims(0)->set_state(v1::CLAIM_CONTROLLER_DETACHED);
  s = next_release_step(v, "a", f);
  CHECK(s.action == release_action::commit);
  CHECK(s.to == v1::CLAIM_READY_TO_FREE);
  CHECK(next_release_step(v, "nobody", f).action == release_action::done);
}

TEST_CASE("release_commits_its_intent_and_its_end_and_keeps_the_steps_between") {
  // Every path through the release's states, counted in entries: a
  // release from taken commits 2 (unpublishing, the free), whatever calls
  // it needed between them.
  CHECK(commit_before_next_step(v1::CLAIM_UNPUBLISHING));
  CHECK(commit_before_next_step(v1::CLAIM_READY_TO_FREE));
  CHECK_FALSE(commit_before_next_step(v1::CLAIM_NODE_DETACHED));
  CHECK_FALSE(commit_before_next_step(v1::CLAIM_CONTROLLER_DETACHED));
  for (bool connected : {true, false})
    for (bool controller : {true, false}) {
      auto v = make_volume("db");
      add_claim(v, "a", "n1");
      release_facts f;
      f.node_connected = connected;
      f.node_detached = !connected;
      f.controller_required = controller;
      f.controller_available = true;
      int commits = 0, steps = 0;
      for (auto s = next_release_step(v, "a", f); s.action != release_action::done;
           s = next_release_step(v, "a", f)) {
        REQUIRE(++steps < 10);
        REQUIRE(s.to != v1::CLAIM_STATE_UNKNOWN);
        if (s.to == v1::CLAIM_READY_TO_FREE) {
          v.clear_claims();
        } else {
          v.mutable_claims(0)->set_state(s.to);
        }
        if (commit_before_next_step(s.to)) ++commits;
      }
      CAPTURE(connected);
      CAPTURE(controller);
      CHECK(commits == 2);
    }
}

TEST_CASE("release_keeps_staging_and_attachment_while_another_claim_is_on_the_node") {
  auto v = make_volume("db");
  add_claim(v, "a", "n1", v1::CLAIM_UNPUBLISHING);
  add_claim(v, "b", "n1", v1::CLAIM_TAKEN);
  release_facts f;
  f.node_connected = true;
  f.controller_required = true;
  f.controller_available = true;
  auto s = next_release_step(v, "a", f);
  CHECK(s.action == release_action::node_unpublish);
  CHECK_FALSE(s.unstage);
  v.mutable_claims(0)->set_state(v1::CLAIM_NODE_DETACHED);
  s = next_release_step(v, "a", f);
  CHECK(s.action == release_action::commit);  // no ControllerUnpublish: b is still there
  CHECK(s.to == v1::CLAIM_CONTROLLER_DETACHED);
  // A claim on another node does not hold this node's staging.
  v.mutable_claims(1)->set_node_id("n2");
  v.mutable_claims(0)->set_state(v1::CLAIM_UNPUBLISHING);
  CHECK(next_release_step(v, "a", f).unstage);
}

TEST_CASE("release_waits_for_a_missing_node_or_controller_unless_detached") {
  auto v = make_volume("db");
  add_claim(v, "a", "n1", v1::CLAIM_UNPUBLISHING);
  release_facts f;
  CHECK(next_release_step(v, "a", f).action == release_action::wait_for_node);
  f.node_detached = true;
  auto s = next_release_step(v, "a", f);
  CHECK(s.action == release_action::commit);
  CHECK(s.to == v1::CLAIM_NODE_DETACHED);
  v.mutable_claims(0)->set_state(v1::CLAIM_NODE_DETACHED);
  f.controller_required = true;
  CHECK(next_release_step(v, "a", f).action == release_action::wait_for_controller);
  f.controller_required = false;
  CHECK(next_release_step(v, "a", f).action == release_action::commit);
}

TEST_CASE("a claim taken while the plugin required a controller is controller-unpublished "
          "even when the plugin no longer says so") {
  // The plugin was deleted and registered again by a node instance alone:
  // its controller_required flag is back to false, but the volume is
  // still attached to the node (seed 49 of the claim simulation).
  auto v = make_volume("db");
  add_claim(v, "a", "n1", v1::CLAIM_NODE_DETACHED);
  v.mutable_claims(0)->set_controller_required(true);
  for (bool connected : {true, false})
    for (bool available : {true, false}) {
      release_facts f;
      f.node_connected = connected;
      f.controller_required = false;
      f.controller_available = available;
      auto s = next_release_step(v, "a", f);
      CHECK(s.action == (available ? release_action::controller_unpublish
                                   : release_action::wait_for_controller));
    }
  // Another claim still published on the node keeps the attachment.
  add_claim(v, "b", "n1", v1::CLAIM_TAKEN);
  release_facts f;
  f.controller_available = true;
  CHECK(next_release_step(v, "a", f).action == release_action::commit);
}

TEST_CASE("release_without_node_when_down_unknown_clientless_or_detached") {
  catalog c;
  commit(c, {upsert_change(make_node("up")), upsert_change(make_node("down", v1::NODE_DOWN)),
             upsert_change(make_node("bare", v1::NODE_READY, false))});
  v1::Claim claim;
  for (auto [node, connected, detach, expect] :
       std::vector<std::tuple<std::string, bool, bool, bool>>{{"up", true, false, false},
                                                              {"up", true, true, false},
                                                              {"up", false, false, false},
                                                              {"up", false, true, true},
                                                              {"down", false, false, true},
                                                              {"bare", false, false, true},
                                                              {"unknown", false, false, true}}) {
    claim.set_node_id(node);
    CAPTURE(node);
    CHECK(release_without_node(c, claim, connected, detach) == expect);
  }
}

TEST_CASE("controller_unpublish_waits_for_a_returned_nodes_unmounts") {
  // Claim simulation seed 49999: a node back from down still had a record of
  // an ended alloc (its unmount on return had failed after unstaging), so its
  // client kept the staging of the next claim released there, and the
  // servers, seeing no other claim on the node, sent ControllerUnpublish.
  auto v = make_volume("db");
  add_claim(v, "a", "n1", v1::CLAIM_NODE_DETACHED);
  release_facts f;
  f.controller_required = true;
  f.controller_available = true;
  f.node_connected = true;
  f.node_unmounts_pending = true;
  CHECK(next_release_step(v, "a", f).action == release_action::wait_for_unmounts);
  f.node_unmounts_pending = false;
  CHECK(next_release_step(v, "a", f).action == release_action::controller_unpublish);
  // Without ControllerUnpublish to send, nothing waits.
  f.node_unmounts_pending = true;
  f.controller_required = false;
  CHECK(next_release_step(v, "a", f).action == release_action::commit);
  // NodeUnpublish does not wait either.
  v.mutable_claims(0)->set_state(v1::CLAIM_UNPUBLISHING);
  CHECK(next_release_step(v, "a", f).action == release_action::node_unpublish);
}

TEST_CASE("only_a_node_back_from_down_is_waited_for_its_unmounts") {
  // A node still down never confirms: waiting for it kept a down node's
  // claims for ever (integration.partition and integration.lifecycle).
  v1::Node n;
  n.set_id("n1");
  n.set_has_client(true);  // a berth client runs there
  n.set_status(v1::NODE_DOWN);
  n.set_down_at_ms(1000);
  CHECK(unmounts_pending(n));
  CHECK_FALSE(unmounts_awaited(n, false));  // down and away: released without it
  // Claim simulation seed 507047: its client connected again, its heartbeat
  // not yet committed it ready; a claim there was published and released
  // through it while the record of an ended alloc kept the staging, and
  // ControllerUnpublish ran on a staged volume.
  CHECK(unmounts_awaited(n, true));
  n.set_status(v1::NODE_READY);
  CHECK(unmounts_awaited(n, false));  // back, not confirmed yet
  CHECK(unmounts_awaited(n, true));
  n.set_down_at_ms(0);
  CHECK_FALSE(unmounts_awaited(n, true));  // confirmed
  v1::Node plain;
  plain.set_status(v1::NODE_READY);
  plain.set_down_at_ms(1000);
  CHECK_FALSE(unmounts_awaited(plain, true));  // no berth client: nothing to confirm
}

TEST_CASE("a_release_asked_while_one_of_the_same_claim_runs_joins_it_unless_it_asks_for_more") {
  CHECK(joins_running_release(false, false));       // the watcher behind a plain release
  CHECK(joins_running_release(true, false));        // a plain release behind a detach
  CHECK(joins_running_release(true, true));         // a detach retried
  CHECK_FALSE(joins_running_release(false, true));  // a detach runs: it counts an away node as gone
}

TEST_CASE("a_watcher_release_leaves_a_claim_taken_after_the_one_it_judged") {
  v1::Claim now;
  now.set_claimed_at_ms(2000);
  CHECK_FALSE(release_judged_another(0, now));     // not the watcher's: any claim
  CHECK_FALSE(release_judged_another(2000, now));  // the claim it judged
  CHECK(release_judged_another(1000, now));        // freed since, and claimed again
  now.set_claimed_at_ms(0);
  CHECK(release_judged_another(1000, now));
}

TEST_CASE("a_release_decided_without_the_node_goes_through_it_once_published_there_since") {
  // Claim simulation seed 16517: a release decided while the claim's node
  // was down waited 75 s in the volume actor's mailbox behind a CSI step;
  // the node came back and the claim was published there again for the
  // volume's expansion, then the release skipped NodeUnpublishVolume and
  // freed a published claim.
  CHECK_FALSE(still_detached(false, 0, 0));
  CHECK_FALSE(still_detached(false, 1000, 0));
  CHECK(still_detached(true, 1000, 0));     // never published there by this actor
  CHECK(still_detached(true, 1000, 999));   // published before the node went away
  CHECK_FALSE(still_detached(true, 1000, 1000));  // the same moment: not known which came first
  CHECK_FALSE(still_detached(true, 1000, 5000));  // published since: through the node
  CHECK(still_detached(true, 0, 5000));     // no time given: as decided
  // Not detached, the release waits for the node's client; the watcher asks again.
  auto v = make_volume("db");
  add_claim(v, "a", "n1", v1::CLAIM_UNPUBLISHING);
  release_facts f;
  f.node_detached = still_detached(true, 1000, 5000);
  CHECK(next_release_step(v, "a", f).action == release_action::wait_for_node);
}

TEST_CASE("keep_down_writers_holds_a_down_nodes_single_writer_claims_until_node_or_detach") {
  catalog c;
  commit(c, {upsert_change(make_node("down", v1::NODE_DOWN)),
             upsert_change(make_node("bare", v1::NODE_READY, false))});
  v1::Claim claim;
  claim.set_node_id("down");
  struct row {
    v1::ClaimMode mode;
    v1::AccessMode access;
    bool detach, keep, expect;
  };
  for (auto r : std::vector<row>{
           {v1::CLAIM_WRITE, v1::SINGLE_NODE_WRITER, false, true, false},
           {v1::CLAIM_WRITE, v1::MULTI_NODE_SINGLE_WRITER, false, true, false},
           {v1::CLAIM_WRITE, v1::SINGLE_NODE_WRITER, true, true, true},    // the operator's detach
           {v1::CLAIM_WRITE, v1::SINGLE_NODE_WRITER, false, false, true},  // default: released
           {v1::CLAIM_WRITE, v1::MULTI_NODE_MULTI_WRITER, false, true, true},
           {v1::CLAIM_READ, v1::MULTI_NODE_SINGLE_WRITER, false, true, true},  // readers go
       }) {
    claim.set_mode(r.mode);
    claim.set_access_mode(r.access);
    CAPTURE(r.access);
    CAPTURE(r.mode);
    CHECK(release_without_node(c, claim, false, r.detach, r.keep) == r.expect);
  }
  // A node without a client had nothing published: released whatever the option.
  claim.set_node_id("bare");
  claim.set_mode(v1::CLAIM_WRITE);
  claim.set_access_mode(v1::SINGLE_NODE_WRITER);
  CHECK(release_without_node(c, claim, false, false, true));
}

TEST_CASE("detach_releases_claims_of_ended_allocs_and_keeps_running_ones") {
  catalog c;
  auto v = make_volume("db");
  add_claim(v, "running", "n1");
  add_claim(v, "ended", "n1");
  add_claim(v, "vanished", "n1");
  add_claim(v, "releasing", "n1", v1::CLAIM_NODE_DETACHED);
  add_claim(v, "elsewhere", "n2");
  commit(c, {upsert_change(make_node("n1")), upsert_change(v),
             upsert_change(make_alloc("running", "n1", v1::ALLOC_RUNNING)),
             upsert_change(make_alloc("releasing", "n1", v1::ALLOC_RUNNING)),
             upsert_change(make_alloc("ended", "n1", v1::ALLOC_COMPLETE))});
  auto plan = plan_detach(c, volume_at(c, {"default", "db"}), "n1");
  CHECK(plan.kept == std::vector<std::string>{"running"});
  CHECK(plan.release == std::vector<std::string>{"ended", "vanished", "releasing"});
  commit(c, {upsert_change(make_node("n1", v1::NODE_DOWN))});
  auto down = plan_detach(c, volume_at(c, {"default", "db"}), "n1");
  CHECK(down.kept.empty());
  CHECK(down.release.size() == 4);
}

// --- views ---------------------------------------------------------------------------------

TEST_CASE("views_redact_secrets_and_name_the_fix_for_unknown_objects") {
  catalog c;
  auto v = make_volume("db");
  (*v.mutable_secrets())["token"] = "s3cr3t";
  commit(c, {upsert_change(v), upsert_change(controller_plugin({{"n1", true}}))});
  v1::Request req;
  req.mutable_volume_status()->set_id("db");
  auto none = [](const std::string&) -> int64_t { return 0; };
  auto r = answer_read(c, req, none);
  REQUIRE(r);
  REQUIRE(r->volumes_size() == 1);
  CHECK(r->volumes(0).secrets().empty());
  CHECK(r->DebugString().find("s3cr3t") == std::string::npos);
  CHECK(r->plugins_size() == 1);
  req.mutable_volume_status()->set_id("nope");
  auto missing = answer_read(c, req, none);
  CHECK(missing->error().code() == v1::NOT_FOUND);
  CHECK(missing->error().message().find("berth volume status") != std::string::npos);
  req.mutable_alloc_stop()->assign("x");
  CHECK_FALSE(answer_read(c, req, none));
}

TEST_CASE("list_reads_carry_their_tables_index_even_empty_and_a_volume_its_claims_allocs") {
  catalog c;
  auto none = [](const std::string&) -> int64_t { return 0; };
  v1::Request list;
  list.mutable_volume_list();
  v1::Request plugins;
  plugins.mutable_plugin_list();
  CHECK(answer_read(c, list, none)->index() == 0);
  auto v = make_volume("db");
  auto* claim = v.add_claims();
  claim->set_alloc_id("a1");
  claim->set_node_id("n1");
  claim->set_state(v1::CLAIM_TAKEN);
  v1::Alloc a;
  a.set_id("a1");
  a.set_node_id("n1");
  commit(c, {upsert_change(v), upsert_change(a)});                // index 1
  commit(c, {upsert_change(controller_plugin({{"n1", true}}))});  // 2
  commit(c, {upsert_change(make_node("n1"))});                    // 3: neither table
  CHECK(answer_read(c, list, none)->index() == 1);
  CHECK(answer_read(c, plugins, none)->index() == 2);
  v1::Request status;
  status.mutable_volume_status()->set_id("db");
  auto r = answer_read(c, status, none);
  REQUIRE(r->allocs_size() == 1);
  CHECK(r->allocs(0).id() == "a1");
  // The last volume gone: an empty list at the deregistration's index.
  commit(c, {volume_delete_change("default", "db")});  // 4
  auto empty = answer_read(c, list, none);
  CHECK(empty->volumes_size() == 0);
  CHECK(empty->index() == 4);
  commit(c, {plugin_delete_change("p")});  // 5
  CHECK(answer_read(c, plugins, none)->index() == 5);
}

TEST_CASE("force_deregister_drops_stuck_releases_never_a_taken_claim") {
  auto v = make_volume("db");
  CHECK_FALSE(can_force_deregister(v));
  add_claim(v, "stuck", "n1", v1::CLAIM_NODE_DETACHED);
  CHECK_FALSE(can_force_deregister(v));
  CHECK(can_deregister(v));  // without --force, any claim refuses
  add_claim(v, "live", "n1", v1::CLAIM_TAKEN);
  auto f = can_force_deregister(v);
  REQUIRE(f);
  CHECK(f->code == errc::refused);
  CHECK(f->message.find("live") != std::string::npos);
}

TEST_CASE("publish_plan_attaches_read_only_exactly_when_no_writer_is_allowed") {
  auto v = make_volume("db");
  v.mutable_mount_options()->add_mount_flags("noatime");
  auto* c = add_claim(v, "a", "n1");
  c->set_mode(v1::CLAIM_READ);
  auto p = controller_plugin({{"n1", true}});
  auto* inst = p.add_nodes();
  inst->set_node_id("n1");
  inst->set_csi_node_id("csi-n1");
  auto plan = plan_publish(v, *c, p, {});
  CHECK(plan.controller_publish);
  CHECK(plan.publish.read_only());
  CHECK_FALSE(plan.attach.read_only());  // single-node-writer allows a writer
  CHECK(plan.publish.csi_node_id() == "csi-n1");
  CHECK(plan.publish.volume().mount_options().mount_flags(0) == "noatime");
  c->set_access_mode(v1::MULTI_NODE_READER_ONLY);
  CHECK(plan_publish(v, *c, p, {}).attach.read_only());
  auto flagged = plan_publish(v, *c, p, {"ro", "sync"});
  CHECK(flagged.publish.volume().mount_options().mount_flags_size() == 2);
  p.set_controller_required(false);
  CHECK_FALSE(plan_publish(v, *c, p, {}).controller_publish);
  c->set_node_id("n9");  // no instance there: the node id is the CSI node id
  CHECK(plan_publish(v, *c, p, {}).publish.csi_node_id() == "n9");
}

TEST_CASE("a_down_nodes_claim_is_controller_unpublished_from_the_csi_node_it_was_published_to") {
  // Found with integration.partition: a down node's plugin instance is gone,
  // and ControllerUnpublishVolume went to the berth node id instead of the
  // plugin's, so the plugin kept the volume attached to the old node and
  // refused it everywhere else.
  auto v = make_volume("db");
  auto* c = add_claim(v, "a", "n1");
  c->set_csi_node_id("csi-n1");
  auto p = controller_plugin({{"n1", true}});
  p.clear_nodes();  // the node went down: its instance removed
  CHECK(node_request(v, *c, p).csi_node_id() == "csi-n1");
  // The instance's id when the claim recorded none (a claim from before).
  c->clear_csi_node_id();
  auto* inst = p.add_nodes();
  inst->set_node_id("n1");
  inst->set_csi_node_id("csi-n1-now");
  CHECK(node_request(v, *c, p).csi_node_id() == "csi-n1-now");
}

TEST_CASE("a_node_request_carries_only_the_volume_fields_a_client_reads") {
  auto v = make_volume("db");
  v.set_namespace_("team");
  v.set_external_id("ext-db");
  v.set_modify_index(42);
  v.mutable_mount_options()->set_fs_type("ext4");
  v.mutable_mount_options()->add_mount_flags("noatime");
  (*v.mutable_context())["share"] = "s1";
  (*v.mutable_secrets())["password"] = "hunter2";
  (*v.mutable_parameters())["tier"] = "gold";
  v.set_capacity_min(1 << 20);
  v.set_capacity_bytes(1 << 21);
  v.add_accessible_topology();
  add_claim(v, "other", "n2");
  auto* c = add_claim(v, "a", "n1");
  auto p = controller_plugin({{"n1", true}});
  auto r = node_request(v, *c, p);
  v1::Volume expected;
  expected.set_id("db");
  expected.set_namespace_("team");
  expected.set_external_id("ext-db");
  expected.set_modify_index(42);
  *expected.mutable_mount_options() = v.mount_options();
  *expected.mutable_context() = v.context();
  *expected.mutable_secrets() = v.secrets();
  CHECK(r.volume().SerializeAsString() == expected.SerializeAsString());
  CHECK(node_view(v).SerializeAsString() == expected.SerializeAsString());
  CHECK(r.volume().claims_size() == 0);
  CHECK(r.volume().parameters().empty());
  CHECK(r.plugin_id() == v.plugin_id());  // the request's own fields are kept
  CHECK(r.alloc_id() == "a");
  CHECK(r.access_mode() == c->access_mode());
  // Smaller on the wire than the volume it came from.
  CHECK(r.volume().ByteSizeLong() < v.ByteSizeLong());
}

TEST_CASE("a_node_request_carries_the_secrets_only_for_a_call_that_sends_them") {
  auto v = make_volume("db");
  (*v.mutable_secrets())["password"] = "hunter2";
  auto* c = add_claim(v, "a", "n1");
  auto p = controller_plugin({{"n1", true}});
  auto plan = plan_publish(v, *c, p, {});
  // Publication: ControllerPublish and NodeStage/NodePublish use them.
  CHECK(request_for(plan.attach, node_step::controller_publish).volume().secrets().at("password") ==
        "hunter2");
  CHECK(request_for(plan.publish, node_step::stage_publish).volume().secrets().size() == 1);
  CHECK(request_for(plan.attach, node_step::controller_unpublish).volume().secrets().size() == 1);
  CHECK(request_for(plan.attach, node_step::controller_expand).volume().secrets().size() == 1);
  // NodeUnpublish/NodeUnstage and NodeExpandVolume send none: the node gets none.
  auto unpublish = request_for(node_request(v, *c, p), node_step::unpublish_unstage);
  CHECK(unpublish.volume().secrets().empty());
  CHECK(unpublish.volume().id() == "db");  // the rest of the request is kept
  CHECK(unpublish.alloc_id() == "a");
  CHECK(request_for(plan.publish, node_step::node_expand).volume().secrets().empty());
  CHECK_FALSE(step_uses_secrets(node_step::unpublish_unstage));
  CHECK_FALSE(step_uses_secrets(node_step::node_expand));
}

// --- filters and pages of the list commands --------------------------------------

namespace {

bool matches(const std::string& expr, const nlohmann::json& obj) {
  auto f = parse_filter(expr);
  if (auto* e = std::get_if<failure>(&f)) FAIL(e->message);
  return std::get<filter>(f).matches(obj);
}

}  // namespace

TEST_CASE("filter_matches_fields_arrays_and_combinations") {
  auto vol = nlohmann::json::parse(R"({"id":"db","plugin_id":"hostpath","capacity_min":1048576,
      "claims":[{"alloc_id":"a1","node_id":"n1","state":"taken"},
                {"alloc_id":"a2","node_id":"n2","state":"unpublishing"}],
      "parameters":{"tier":"gold"},"command":[],"external_id":""})");
  CHECK(matches("", vol));
  CHECK(matches("   ", vol));
  CHECK(matches("plugin_id == \"hostpath\"", vol));
  CHECK(matches("plugin_id == hostpath", vol));
  CHECK_FALSE(matches("plugin_id != hostpath", vol));
  CHECK(matches("capacity_min == 1048576", vol));
  CHECK(matches("claims.node_id == \"n2\"", vol));        // any claim
  CHECK_FALSE(matches("claims.node_id == \"n3\"", vol));
  CHECK(matches("\"n1\" in claims.node_id", vol));
  CHECK(matches("\"n3\" not in claims.node_id", vol));
  CHECK(matches("id contains d", vol));
  CHECK(matches("id not contains x", vol));
  CHECK(matches("parameters contains tier", vol));       // a key of an object
  CHECK(matches("parameters.tier == gold", vol));
  CHECK(matches("command is empty", vol));
  CHECK(matches("external_id is empty", vol));
  CHECK(matches("missing is empty", vol));
  CHECK(matches("claims is not empty", vol));
  CHECK(matches("plugin_id == hostpath and (claims.state == taken or id == x)", vol));
  CHECK_FALSE(matches("plugin_id == hostpath and not claims is not empty", vol));
  CHECK(matches("id == x or id == y or id == db", vol));
  CHECK(matches("not (id == x)", vol));
  CHECK(matches("name == \"a \\\"quoted\\\" word\" or id == db", vol));
}

TEST_CASE("filter_refuses_bad_expressions_naming_where") {
  for (const auto& bad : {"plugin_id", "plugin_id ==", "== hostpath", "(id == x", "id == x)",
                          "id == x and", "id is full", "\"open", "id = x", "and == x",
                          "a..b == x"}) {
    CAPTURE(bad);
    auto f = parse_filter(bad);
    REQUIRE(std::holds_alternative<failure>(f));
    CHECK(std::get<failure>(f).code == errc::invalid);
    CHECK(std::get<failure>(f).message.find("--filter") != std::string::npos);
    CHECK(std::get<failure>(f).message.find("column") != std::string::npos);
  }
}

TEST_CASE("lists_are_paged_in_key_order_with_filters_and_namespaces") {
  catalog c;
  std::vector<v1::Change> changes;
  for (int i = 0; i < 25; ++i) {
    auto v = make_volume("v" + std::string(i < 10 ? "0" : "") + std::to_string(i));
    v.set_plugin_id(i % 2 == 0 ? "even" : "odd");
    changes.push_back(upsert_change(v));
  }
  auto other = make_volume("zz");
  other.set_namespace_("prod");
  changes.push_back(upsert_change(other));
  commit(c, changes);
  auto list = [&](const std::string& ns, const std::string& flt, uint32_t per_page,
                  const std::string& token) {
    v1::Request req;
    auto* q = req.mutable_volume_list();
    q->set_namespace_(ns);
    q->set_filter(flt);
    q->set_per_page(per_page);
    q->set_page_token(token);
    return *answer_read(c, req, [](const std::string&) { return int64_t{0}; });
  };
  // Every page in order, no duplicate, no gap, across pages of 4.
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    auto r = list("default", "", 4, token);
    REQUIRE(r.error().code() == v1::OK);
    for (const auto& v : r.volumes()) seen.push_back(v.id());
    token = r.next_page_token();
    ++pages;
  } while (!token.empty());
  CHECK(pages == 7);
  REQUIRE(seen.size() == 25);
  for (size_t i = 1; i < seen.size(); ++i) CHECK(seen[i - 1] < seen[i]);
  // The last full page names no next page when nothing follows.
  CHECK(list("default", "", 25, "").next_page_token().empty());
  CHECK(list("default", "", 24, "").next_page_token() == "default/v23");
  // Filters count toward the page, not the objects skipped.
  auto odd = list("default", "plugin_id == odd", 5, "");
  REQUIRE(odd.volumes_size() == 5);
  CHECK(odd.volumes(4).id() == "v09");
  auto rest = list("default", "plugin_id == odd", 0, odd.next_page_token());
  CHECK(rest.volumes_size() == 7);
  // Namespaces: one, or every one ("").
  CHECK(list("prod", "", 0, "").volumes_size() == 1);
  CHECK(list("", "", 0, "").volumes_size() == 26);
  CHECK(list("prod", "", 0, "default/v03").volumes_size() == 1);  // a token of another namespace
  CHECK(list("default", "", 0, "prod/zz").volumes_size() == 0);
  // A bad filter is an error naming it.
  CHECK(list("default", "plugin_id ==", 0, "").error().code() == v1::INVALID);
}

// --- node drain and eligibility ----------------------------------------------------

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

// --- a claim right after its holder ended (issue 59, item 7) ------------------

namespace {

v1::Plugin node_plugin(std::vector<std::string> nodes) {
  v1::Plugin p;
  p.set_id("p");
  for (const auto& n : nodes) {
    auto* i = p.add_nodes();
    i->set_node_id(n);
    i->set_healthy(true);
  }
  return p;
}

v1::Volume volume_with_mode(const std::string& id, v1::AccessMode mode) {
  auto v = make_volume(id);
  v.mutable_capabilities(0)->set_access_mode(mode);
  return v;
}

claim_request claim_of(const std::string& alloc, const std::string& node, bool write = true) {
  claim_request r;
  r.alloc_id = alloc;
  r.node_id = node;
  r.write = write;
  r.now_ms = 1;
  return r;
}

}  // namespace

TEST_CASE("a_claim_waits_only_for_the_releases_of_ended_allocs_that_stand_in_its_way") {
  catalog c;
  commit(c, {upsert_change(make_node("n1")), upsert_change(make_node("n2")),
             upsert_change(make_alloc("done", "n1", v1::ALLOC_COMPLETE)),
             upsert_change(make_alloc("failed", "n1", v1::ALLOC_FAILED)),
             upsert_change(make_alloc("lost", "n2", v1::ALLOC_LOST)),
             upsert_change(make_alloc("live", "n1", v1::ALLOC_RUNNING))});
  auto plugin = node_plugin({"n1", "n2"});
  using ids = std::vector<std::string>;
  // The holder completed: its claim is still taken (the watcher frees it
  // next), so the claim waits for it.
  auto v = make_volume("v");
  add_claim(v, "done", "n1");
  CHECK(releases_awaited(c, v, claim_of("new", "n1"), &plugin) == ids{"done"});
  CHECK(releases_awaited(c, v, claim_of("new", "n2"), &plugin) == ids{"done"});
  CHECK(releases_awaited(c, v, claim_of("new", "n1", false), &plugin) == ids{"done"});
  // Failed, lost, vanished, or a release already running: the same.
  for (auto holder : {"failed", "lost", "vanished"}) {
    CAPTURE(holder);
    auto w = make_volume("w");
    add_claim(w, holder, "n1");
    CHECK(releases_awaited(c, w, claim_of("new", "n1"), &plugin) == ids{holder});
  }
  auto releasing = make_volume("w");
  add_claim(releasing, "live", "n1", v1::CLAIM_UNPUBLISHING);
  CHECK(releases_awaited(c, releasing, claim_of("new", "n1"), &plugin) == ids{"live"});
  // A live holder refuses at once: nothing to wait for.
  auto held = make_volume("w");
  add_claim(held, "live", "n1");
  CHECK(releases_awaited(c, held, claim_of("new", "n1"), &plugin).empty());
  // A live holder and an ended one: still refused without the ended one.
  auto both = volume_with_mode("m", v1::MULTI_NODE_SINGLE_WRITER);
  add_claim(both, "live", "n1")->set_access_mode(v1::MULTI_NODE_SINGLE_WRITER);
  add_claim(both, "done", "n2")->set_access_mode(v1::MULTI_NODE_SINGLE_WRITER);
  CHECK(releases_awaited(c, both, claim_of("new", "n2"), &plugin).empty());
  // A reader fits next to the live writer now: nothing to wait for.
  CHECK(releases_awaited(c, both, claim_of("new", "n2", false), &plugin).empty());
  // A multi-node single-writer volume whose ended holder wrote: a new
  // writer waits for it, a reader does not (taken now).
  auto readers = volume_with_mode("r", v1::MULTI_NODE_SINGLE_WRITER);
  add_claim(readers, "done", "n1")->set_access_mode(v1::MULTI_NODE_SINGLE_WRITER);
  CHECK(releases_awaited(c, readers, claim_of("new", "n2"), &plugin) == ids{"done"});
  CHECK(releases_awaited(c, readers, claim_of("new", "n2", false), &plugin).empty());
  // Refused for another reason too (no plugin instance on n3, no plugin):
  // judged now.
  CHECK(releases_awaited(c, v, claim_of("new", "n3"), &plugin).empty());
  CHECK(releases_awaited(c, v, claim_of("new", "n1"), nullptr).empty());
  // The ended holder claiming again is not waiting for itself.
  CHECK(releases_awaited(c, v, claim_of("done", "n1"), &plugin).empty());
  // A free volume: taken now.
  CHECK(releases_awaited(c, make_volume("free"), claim_of("new", "n1"), &plugin).empty());
}

// Random volumes, holders and claims: whenever a claim waits, it is refused
// now, taken once the awaited claims are gone, and every awaited claim is
// one the watcher releases (its alloc ended or vanished, or it is in release).
TEST_CASE("random_claims_wait_exactly_when_only_ended_holders_refuse_them") {
  const std::vector<v1::AccessMode> modes{v1::SINGLE_NODE_WRITER, v1::SINGLE_NODE_READER_ONLY,
                                          v1::MULTI_NODE_READER_ONLY,
                                          v1::MULTI_NODE_SINGLE_WRITER,
                                          v1::MULTI_NODE_MULTI_WRITER};
  const std::vector<v1::AllocState> states{v1::ALLOC_PENDING, v1::ALLOC_RUNNING,
                                           v1::ALLOC_COMPLETE, v1::ALLOC_FAILED,
                                           v1::ALLOC_LOST};
  int waited = 0;
  int judged = 0;
  for (uint32_t seed = 1; seed <= 2000; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng{seed};
    auto pick = [&](size_t n) { return rng() % n; };
    catalog c;
    std::vector<v1::Change> setup{upsert_change(make_node("n1")),
                                  upsert_change(make_node("n2"))};
    auto mode = modes[pick(modes.size())];
    auto v = volume_with_mode("v", mode);
    int holders = static_cast<int>(pick(4));
    for (int i = 0; i < holders; ++i) {
      auto id = "h" + std::to_string(i);
      auto node = pick(2) ? "n1" : "n2";
      auto* claim = add_claim(v, id, node, pick(4) == 0 ? v1::CLAIM_UNPUBLISHING : v1::CLAIM_TAKEN);
      claim->set_access_mode(mode);
      claim->set_mode(pick(2) ? v1::CLAIM_WRITE : v1::CLAIM_READ);
      if (pick(6) != 0)
        setup.push_back(upsert_change(make_alloc(id, node, states[pick(states.size())])));
    }
    commit(c, setup);
    auto plugin = node_plugin(pick(5) == 0 ? std::vector<std::string>{"n1"}
                                           : std::vector<std::string>{"n1", "n2"});
    auto req = claim_of(pick(5) == 0 && holders > 0 ? "h0" : "new", pick(2) ? "n1" : "n2",
                        pick(2) == 0);
    auto awaited = releases_awaited(c, v, req, &plugin);
    auto now = v;
    bool taken_now = !claim(now, req, &plugin);
    if (awaited.empty()) {
      ++judged;
      continue;
    }
    ++waited;
    CHECK_FALSE(taken_now);
    auto without = v;
    auto* claims = without.mutable_claims();
    for (auto it = claims->begin(); it != claims->end();)
      it = std::count(awaited.begin(), awaited.end(), it->alloc_id()) ? claims->erase(it)
                                                                       : std::next(it);
    CHECK_FALSE(claim(without, req, &plugin));
    for (const auto& id : awaited) {
      CHECK(id != req.alloc_id);
      const auto* claim_of_id = find_claim(v, id);
      REQUIRE(claim_of_id != nullptr);
      const auto* a = find_alloc(c, id);
      CHECK((claim_of_id->state() != v1::CLAIM_TAKEN || a == nullptr ||
             alloc_terminal(a->state())));
    }
  }
  // Both outcomes came up often.
  CHECK(waited > 100);
  CHECK(judged > 100);
}
