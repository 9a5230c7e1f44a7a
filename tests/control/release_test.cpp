// control/release: the release steps in the spec's order, their intent and
// end entries, what waits for a node or a controller, joining releases,
// detach and --keep-down-writers, the refusals under a running writer and of
// deregister --force; the publication plan and the node requests (their
// volume fields and secrets); the claims that wait for ended holders.
#include "control/release.hpp"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "fixtures.hpp"

using namespace berth;
using namespace berth::test;

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

TEST_CASE("an_operators_release_of_a_claim_whose_alloc_still_runs_its_command_is_refused") {
  // Issue 59: `volume release` of such a claim put it in release, the node
  // refused its NodeUnpublish while the command ran, and deregister --force
  // then dropped the claim while the writer still ran.
  catalog c;
  auto v = make_volume("db");
  for (const char* id :
       {"runs", "pending", "claim-only", "complete", "failed", "lost", "vanished", "in-release"})
    add_claim(v, id, "n1",
              std::string(id) == "in-release" ? v1::CLAIM_UNPUBLISHING : v1::CLAIM_TAKEN);
  auto with_command = [](v1::Alloc a) {
    a.add_command("/bin/sh");
    return a;
  };
  commit(c, {upsert_change(make_node("n1")), upsert_change(v),
             upsert_change(with_command(make_alloc("runs", "n1", v1::ALLOC_RUNNING))),
             upsert_change(with_command(make_alloc("pending", "n1", v1::ALLOC_PENDING))),
             upsert_change(make_alloc("claim-only", "n1", v1::ALLOC_RUNNING)),
             upsert_change(with_command(make_alloc("complete", "n1", v1::ALLOC_COMPLETE))),
             upsert_change(with_command(make_alloc("failed", "n1", v1::ALLOC_FAILED))),
             upsert_change(with_command(make_alloc("lost", "n1", v1::ALLOC_LOST))),
             upsert_change(with_command(make_alloc("in-release", "n1", v1::ALLOC_RUNNING)))});
  const auto& db = volume_at(c, {"default", "db"});
  for (const char* id : {"runs", "pending", "in-release"}) {
    CAPTURE(id);
    auto f = refuse_release_under_writer(c, db, id);
    REQUIRE(f);
    CHECK(f->code == errc::refused);
    CHECK(f->message.find("alloc '" + std::string(id) + "' still runs its command on node 'n1'") ==
          0);
    CHECK(f->message.find("volume 'db'") != std::string::npos);
    CHECK(f->message.find("berth alloc stop " + std::string(id)) != std::string::npos);
  }
  // Nothing of berth's runs (no command), it ended, it is unknown, or the
  // volume has no claim of it: the release goes on.
  for (const char* id : {"claim-only", "complete", "failed", "lost", "vanished", "never"}) {
    CAPTURE(id);
    CHECK_FALSE(refuse_release_under_writer(c, db, id));
  }
}

// --- deregister, the publication plan and the node requests -------------------

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
