// Volume availability (control/availability, and claim admission's
// refusal in messages/model): a paused or draining volume takes no new
// claim and keeps the ones it has; a drain's plan stops the allocs using
// the volume and releases the claims that volume claim made.
#include <doctest/doctest.h>

#include <random>
#include <set>

#include "control/availability.hpp"
#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "messages/model.hpp"

using namespace berth;

namespace {

const v1::VolumeAvailability all_availabilities[] = {v1::VOLUME_ACTIVE, v1::VOLUME_PAUSE,
                                                     v1::VOLUME_DRAIN};
const v1::AccessMode all_modes[] = {v1::SINGLE_NODE_READER_ONLY, v1::SINGLE_NODE_WRITER,
                                    v1::MULTI_NODE_READER_ONLY, v1::MULTI_NODE_SINGLE_WRITER,
                                    v1::MULTI_NODE_MULTI_WRITER};

v1::Plugin plugin_on(std::initializer_list<const char*> nodes) {
  v1::Plugin p;
  p.set_id("hostpath");
  for (auto n : nodes) {
    v1::PluginInstance i;
    i.set_node_id(n);
    i.set_healthy(true);
    upsert_instance(p, v1::PLUGIN_MONOLITH, i);
  }
  return p;
}

v1::Volume volume(v1::AccessMode mode, v1::VolumeAvailability a = v1::VOLUME_ACTIVE,
                  const std::string& ns = "default") {
  v1::Volume v;
  v.set_id("db");
  v.set_namespace_(ns);
  v.set_plugin_id("hostpath");
  v.set_external_id("vol-1");
  auto* c = v.add_capabilities();
  c->set_access_mode(mode);
  c->set_attachment_mode(v1::FILE_SYSTEM);
  v.set_availability(a);
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

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

struct world {
  catalog c;
  void add(v1::Change ch) { apply(c, c.applied_index + 1, make_entry({std::move(ch)})); }
  void alloc(const std::string& id, v1::AllocState s, bool command,
             const std::string& node = "n1") {
    v1::Alloc a;
    a.set_id(id);
    a.set_namespace_("default");
    a.set_node_id(node);
    a.set_state(s);
    if (command) a.add_command("sleep");
    add(upsert_change(a));
  }
  void volume(const std::string& id, v1::VolumeAvailability a,
              std::vector<std::pair<std::string, v1::ClaimState>> claims,
              const std::string& ns = "default") {
    v1::Volume v;
    v.set_id(id);
    v.set_namespace_(ns);
    v.set_plugin_id("p");
    v.set_availability(a);
    for (const auto& [alloc, state] : claims) {
      auto* cl = v.add_claims();
      cl->set_alloc_id(alloc);
      cl->set_node_id("n1");
      cl->set_state(state);
    }
    add(upsert_change(v));
  }
};

using ids = std::vector<std::string>;

}  // namespace

TEST_CASE("volume_availability_names_round_trip_and_unknown_words_are_refused") {
  for (auto a : all_availabilities) {
    auto parsed = parse_volume_availability(name_of(a));
    REQUIRE(parsed);
    CHECK(*parsed == a);
  }
  CHECK(name_of(v1::VOLUME_ACTIVE) == "active");
  CHECK(name_of(v1::VOLUME_PAUSE) == "pause");
  CHECK(name_of(v1::VOLUME_DRAIN) == "drain");
  for (const char* bad : {"", "Active", "paused", "draining", "inactive", "drain ", "1"})
    CHECK_FALSE(parse_volume_availability(bad));
  CHECK(volume_availability_names() == "active, pause, drain");
}

TEST_CASE("a_paused_or_draining_volume_refuses_new_claims_in_every_mode_naming_the_fix") {
  auto p = plugin_on({"n1", "n2"});
  for (auto mode : all_modes)
    for (auto a : all_availabilities)
      for (bool write : {false, true}) {
        if (write && (mode == v1::SINGLE_NODE_READER_ONLY || mode == v1::MULTI_NODE_READER_ONLY))
          continue;
        CAPTURE(name_of(mode));
        CAPTURE(name_of(a));
        CAPTURE(write);
        auto v = volume(mode, a);
        auto before = v.SerializeAsString();
        auto f = claim(v, req("a1", "n1", write), &p);
        if (a == v1::VOLUME_ACTIVE) {
          CHECK_FALSE(f);
          CHECK(v.claims_size() == 1);
          continue;
        }
        REQUIRE(f);
        CHECK(f->code == errc::refused);
        CHECK(contains(f->message, "volume 'db'"));
        CHECK(contains(f->message, "berth volume availability db active"));
        CHECK(contains(f->message, a == v1::VOLUME_PAUSE ? "paused" : "draining"));
        CHECK(v.SerializeAsString() == before);  // nothing changed
      }
}

TEST_CASE("pause_keeps_existing_claims_a_repeat_of_one_succeeds_and_a_new_one_is_refused") {
  auto p = plugin_on({"n1", "n2"});
  for (auto a : {v1::VOLUME_PAUSE, v1::VOLUME_DRAIN}) {
    auto v = volume(v1::MULTI_NODE_MULTI_WRITER);
    REQUIRE_FALSE(claim(v, req("a1", "n1", true), &p));
    REQUIRE_FALSE(claim(v, req("a2", "n2", false), &p));
    v.set_availability(a);
    // The claims stay as they were.
    REQUIRE(v.claims_size() == 2);
    CHECK(v.claims(0).state() == v1::CLAIM_TAKEN);
    // The same claim sent again (its answer was lost) is answered as before.
    auto before = v.SerializeAsString();
    CHECK_FALSE(claim(v, req("a1", "n1", true), &p));
    CHECK_FALSE(claim(v, req("a2", "n2", false), &p));
    CHECK(v.SerializeAsString() == before);
    // A new alloc, on a node used already or not, is refused.
    CHECK(claim(v, req("a3", "n1", true), &p));
    CHECK(claim(v, req("a4", "n2", false), &p));
    // The same alloc asking for another mode is refused as always.
    CHECK(claim(v, req("a2", "n2", true), &p));
    // Releasing goes on as usual.
    REQUIRE_FALSE(release(v, "a1", "alloc-stopped", 2000));
    REQUIRE_FALSE(advance_claim(v, "a1", v1::CLAIM_READY_TO_FREE));
    REQUIRE_FALSE(free_claim(v, "a1"));
    CHECK(v.claims_size() == 1);
    // active again: new claims are taken.
    v.set_availability(v1::VOLUME_ACTIVE);
    CHECK_FALSE(claim(v, req("a3", "n1", true), &p));
    CHECK(v.claims_size() == 2);
  }
}

TEST_CASE("the_availability_refusal_comes_before_plugin_health_and_resource_exhaustion") {
  auto v = volume(v1::SINGLE_NODE_WRITER, v1::VOLUME_PAUSE);
  v.set_resource_exhausted_at_ms(5);
  auto f = claim(v, req("a1", "n1", true), nullptr);  // plugin unknown too
  REQUIRE(f);
  CHECK(contains(f->message, "paused"));
  // Active: the other refusals speak again.
  v.set_availability(v1::VOLUME_ACTIVE);
  f = claim(v, req("a1", "n1", true), nullptr);
  REQUIRE(f);
  CHECK(contains(f->message, "resource-exhausted"));
  // Bad requests are still invalid, whatever the availability.
  v.set_availability(v1::VOLUME_DRAIN);
  f = claim(v, req("", "n1", true), nullptr);
  REQUIRE(f);
  CHECK(f->code == errc::invalid);
}

TEST_CASE("refuse_unavailable_names_the_namespace_in_the_fix_outside_default") {
  CHECK_FALSE(refuse_unavailable(volume(v1::SINGLE_NODE_WRITER)));
  auto f = refuse_unavailable(volume(v1::SINGLE_NODE_WRITER, v1::VOLUME_PAUSE, "prod"));
  REQUIRE(f);
  CHECK(contains(f->message, "berth --namespace prod volume availability db active"));
  f = refuse_unavailable(volume(v1::SINGLE_NODE_WRITER, v1::VOLUME_DRAIN, ""));
  REQUIRE(f);
  CHECK(contains(f->message, "berth volume availability db active"));
  CHECK(contains(f->message, "released"));
}

TEST_CASE("reregistration_keeps_the_availability_and_a_registration_cannot_set_it") {
  for (auto a : all_availabilities) {
    auto current = volume(v1::SINGLE_NODE_WRITER, a);
    auto incoming = volume(v1::SINGLE_NODE_WRITER);
    (*incoming.mutable_context())["k"] = "v";
    REQUIRE_FALSE(reregister(current, incoming));
    CHECK(current.availability() == a);
    CHECK(current.context().at("k") == "v");
  }
  auto v = volume(v1::SINGLE_NODE_WRITER, v1::VOLUME_PAUSE);
  auto problems = validate_volume(v);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].field == "availability");
  CHECK(validate_volume(volume(v1::SINGLE_NODE_WRITER)).empty());
}

TEST_CASE("availability_messages_say_what_changed_or_that_it_was_so_already") {
  for (auto from : all_availabilities)
    for (auto to : all_availabilities) {
      CAPTURE(name_of(from));
      CAPTURE(name_of(to));
      auto v = volume(v1::SINGLE_NODE_WRITER, from);
      auto m = availability_message(v, to);
      CHECK(contains(m, "volume 'db'"));
      CHECK(availability_changes(v, to) == (from != to));
      if (from == to) {
        CHECK(contains(m, "is already " + std::string(name_of(to))));
        CHECK(contains(m, "nothing to do"));
      } else {
        CHECK(contains(m, "set to " + std::string(name_of(to))));
        CHECK(contains(m, "(was " + std::string(name_of(from)) + ")"));
      }
      if (to == v1::VOLUME_ACTIVE) CHECK(contains(m, "takes new claims"));
      if (to == v1::VOLUME_PAUSE) CHECK(contains(m, "existing claims are kept"));
      if (to == v1::VOLUME_DRAIN) CHECK(contains(m, "stopped"));
    }
}

TEST_CASE("draining_volumes_lists_only_volumes_set_to_drain_in_key_order") {
  world w;
  w.volume("b", v1::VOLUME_DRAIN, {});
  w.volume("a", v1::VOLUME_PAUSE, {});
  w.volume("c", v1::VOLUME_ACTIVE, {});
  w.volume("a", v1::VOLUME_DRAIN, {}, "prod");
  w.volume("z", v1::VOLUME_DRAIN, {}, "dev");
  auto d = draining_volumes(w.c);
  REQUIRE(d.size() == 3);
  CHECK(d[0] == volume_key{"default", "b"});
  CHECK(d[1] == volume_key{"dev", "z"});
  CHECK(d[2] == volume_key{"prod", "a"});
}

TEST_CASE("a_drain_stops_running_allocs_with_a_command_and_releases_command_less_claims") {
  world w;
  w.alloc("run-cmd", v1::ALLOC_RUNNING, true);
  w.alloc("run-claim", v1::ALLOC_RUNNING, false);  // berth volume claim
  w.alloc("pending-cmd", v1::ALLOC_PENDING, true);
  w.alloc("done", v1::ALLOC_COMPLETE, true);
  w.alloc("failed", v1::ALLOC_FAILED, false);
  w.alloc("lost", v1::ALLOC_LOST, true);
  w.alloc("releasing", v1::ALLOC_RUNNING, true);
  w.alloc("releasing-claim", v1::ALLOC_RUNNING, false);
  w.volume("db", v1::VOLUME_DRAIN,
           {{"run-cmd", v1::CLAIM_TAKEN},
            {"run-claim", v1::CLAIM_TAKEN},
            {"pending-cmd", v1::CLAIM_TAKEN},
            {"done", v1::CLAIM_TAKEN},
            {"failed", v1::CLAIM_TAKEN},
            {"lost", v1::CLAIM_TAKEN},
            {"vanished", v1::CLAIM_TAKEN},
            {"releasing", v1::CLAIM_UNPUBLISHING},
            {"releasing-claim", v1::CLAIM_NODE_DETACHED}});
  auto p = plan_volume_drain(w.c, {"default", "db"});
  CHECK(p.stop == ids{"run-cmd"});
  CHECK(p.release == ids{"run-claim"});
  CHECK(p.claims_left == 9);
}

TEST_CASE("a_volume_not_draining_or_unknown_or_without_claims_needs_nothing") {
  world w;
  w.alloc("run-cmd", v1::ALLOC_RUNNING, true);
  w.alloc("run-claim", v1::ALLOC_RUNNING, false);
  for (auto a : {v1::VOLUME_ACTIVE, v1::VOLUME_PAUSE}) {
    w.volume("db", a, {{"run-cmd", v1::CLAIM_TAKEN}, {"run-claim", v1::CLAIM_TAKEN}});
    auto p = plan_volume_drain(w.c, {"default", "db"});
    CHECK(p.stop.empty());
    CHECK(p.release.empty());
    CHECK(p.claims_left == 0);
  }
  CHECK(plan_volume_drain(w.c, {"default", "nope"}).stop.empty());
  CHECK(plan_volume_drain(w.c, {"prod", "db"}).stop.empty());  // another namespace
  w.volume("empty", v1::VOLUME_DRAIN, {});
  auto p = plan_volume_drain(w.c, {"default", "empty"});
  CHECK(p.stop.empty());
  CHECK(p.release.empty());
  CHECK(p.claims_left == 0);
}

TEST_CASE("a_drain_progresses_to_no_claims_as_stops_commit_and_the_watcher_frees") {
  world w;
  w.alloc("job", v1::ALLOC_RUNNING, true);
  w.alloc("manual", v1::ALLOC_RUNNING, false);
  w.volume("db", v1::VOLUME_DRAIN, {{"job", v1::CLAIM_TAKEN}, {"manual", v1::CLAIM_TAKEN}});
  volume_key key{"default", "db"};
  auto p = plan_volume_drain(w.c, key);
  CHECK(p.stop == ids{"job"});
  CHECK(p.release == ids{"manual"});
  // The stop committed complete: the job is the watcher's now.
  w.alloc("job", v1::ALLOC_COMPLETE, true);
  p = plan_volume_drain(w.c, key);
  CHECK(p.stop.empty());
  CHECK(p.release == ids{"manual"});
  // The manual claim moved into release: nothing left to start.
  w.volume("db", v1::VOLUME_DRAIN,
           {{"job", v1::CLAIM_UNPUBLISHING}, {"manual", v1::CLAIM_UNPUBLISHING}});
  p = plan_volume_drain(w.c, key);
  CHECK(p.stop.empty());
  CHECK(p.release.empty());
  CHECK(p.claims_left == 2);
  w.volume("db", v1::VOLUME_DRAIN, {});
  CHECK(plan_volume_drain(w.c, key).claims_left == 0);
}

TEST_CASE("random_drain_plans_cover_every_taken_claim_of_a_running_alloc_exactly_once") {
  std::mt19937 rng(14);
  const v1::AllocState states[] = {v1::ALLOC_PENDING, v1::ALLOC_RUNNING, v1::ALLOC_COMPLETE,
                                   v1::ALLOC_FAILED, v1::ALLOC_LOST};
  const v1::ClaimState claim_states[] = {v1::CLAIM_TAKEN, v1::CLAIM_UNPUBLISHING,
                                         v1::CLAIM_NODE_DETACHED, v1::CLAIM_CONTROLLER_DETACHED};
  for (int round = 0; round < 300; ++round) {
    CAPTURE(round);
    world w;
    std::vector<std::pair<std::string, v1::ClaimState>> claims;
    int n = static_cast<int>(rng() % 8);
    for (int i = 0; i < n; ++i) {
      auto id = "a" + std::to_string(i);
      if (rng() % 5 != 0)  // else: vanished
        w.alloc(id, states[rng() % 5], rng() % 2 == 0);
      claims.push_back({id, claim_states[rng() % 4]});
    }
    auto a = all_availabilities[rng() % 3];
    w.volume("db", a, claims);
    auto p = plan_volume_drain(w.c, {"default", "db"});
    if (a != v1::VOLUME_DRAIN) {
      CHECK(p.stop.empty());
      CHECK(p.release.empty());
      continue;
    }
    CHECK(p.claims_left == n);
    std::set<std::string> stop(p.stop.begin(), p.stop.end()),
        rel(p.release.begin(), p.release.end());
    for (const auto& [id, state] : claims) {
      const auto* alloc = find_alloc(w.c, id);
      bool due = state == v1::CLAIM_TAKEN && alloc != nullptr &&
                 alloc->state() == v1::ALLOC_RUNNING;
      CHECK(static_cast<int>(stop.count(id) + rel.count(id)) == (due ? 1 : 0));
      if (due) CHECK(stop.count(id) == (alloc->command().empty() ? 0u : 1u));
    }
  }
}
