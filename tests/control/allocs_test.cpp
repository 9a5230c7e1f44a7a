// control/allocs: the alloc lifecycle, alloc run's admission and repeats, the
// alloc a claim creates or extends, an alloc's updates from its node, and the
// claims an ended alloc frees.
#include "control/allocs.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "fixtures.hpp"

using namespace berth;
using namespace berth::test;

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
