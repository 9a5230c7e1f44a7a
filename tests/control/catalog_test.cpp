// control/catalog: apply (stamps, skips what is applied, restores, deletes),
// the alloc records an entry's apply resolves, the indexes kept beside the
// rows (claimed_on, draining, abnormal), a volume row's cheap reads and the
// row exchange two catalogs share.
#include "control/catalog.hpp"

#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "control/entries.hpp"
#include "control/nodes.hpp"
#include "fixtures.hpp"

using namespace berth;
using namespace berth::test;

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
