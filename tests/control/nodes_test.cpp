// control/nodes: node liveness (heartbeats, silent nodes, mark-down, a node
// back from down and its unmounts), the stops due on reconnect, fingerprints
// and plugin instances, and the claims refused on a node away.
#include "control/nodes.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "control/allocs.hpp"
#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "fixtures.hpp"

using namespace berth;
using namespace berth::test;

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
