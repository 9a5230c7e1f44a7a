// memory_storage: what the core may read back from the shell's durable state.
#include <doctest/doctest.h>

#include "raft/storage.hpp"

using namespace berth::raft;

namespace {

pb::Entry entry(uint64_t index, uint64_t term) {
  pb::Entry e;
  e.set_index(index);
  e.set_term(term);
  return e;
}

// Entries 1..n, entry i at term t(i).
memory_storage with_entries(std::vector<uint64_t> terms) {
  memory_storage s;
  std::vector<pb::Entry> ents;
  for (size_t i = 0; i < terms.size(); ++i) ents.push_back(entry(i + 1, terms[i]));
  s.append(ents);
  return s;
}

}  // namespace

TEST_CASE("storage_term_reports_compacted_and_unavailable_indexes") {
  auto s = with_entries({1, 1, 2, 3});
  CHECK(s.term(0).value == 0);
  CHECK(s.term(3).value == 2);
  CHECK(s.term(5).error == storage_error::unavailable);
  REQUIRE(s.compact(2) == storage_error::none);
  CHECK(s.first_index() == 3);
  CHECK(s.term(1).error == storage_error::compacted);
  CHECK(s.term(2).value == 1);  // the compaction point keeps its term
  CHECK(s.entries(2, 4, 1000).error == storage_error::compacted);
}

TEST_CASE("storage_append_replaces_conflicting_suffix") {
  auto s = with_entries({1, 1, 1, 1});
  s.append({entry(3, 2)});
  CHECK(s.last_index() == 3);
  CHECK(s.term(3).value == 2);
  CHECK(s.term(2).value == 1);
}

TEST_CASE("storage_append_skips_compacted_entries") {
  auto s = with_entries({1, 1, 1, 1});
  s.compact(3);
  s.append({entry(2, 1), entry(3, 1), entry(4, 1), entry(5, 2)});
  CHECK(s.first_index() == 4);
  CHECK(s.last_index() == 5);
  CHECK(s.term(5).value == 2);
}

TEST_CASE("storage_entries_respect_size_limit_but_return_at_least_one") {
  auto s = with_entries({1, 1, 1, 1});
  auto one = entry(1, 1).ByteSizeLong();
  CHECK(s.entries(1, 5, 0).value.size() == 1);
  CHECK(s.entries(1, 5, 2 * one).value.size() == 2);
  CHECK(s.entries(1, 5, 1000).value.size() == 4);
}

TEST_CASE("storage_create_snapshot_refuses_older_than_current") {
  auto s = with_entries({1, 2, 2});
  pb::ConfState cs;
  cs.add_voters(1);
  REQUIRE(s.create_snapshot(2, cs, "state") == storage_error::none);
  CHECK(s.snapshot().metadata().index() == 2);
  CHECK(s.snapshot().metadata().term() == 2);
  CHECK(s.snapshot().metadata().conf_state().voters_size() == 1);
  CHECK(s.create_snapshot(2, cs, "again") == storage_error::out_of_date);
}

TEST_CASE("storage_apply_snapshot_replaces_log_and_commits_its_index") {
  auto s = with_entries({1, 1});
  pb::Snapshot snap;
  snap.mutable_metadata()->set_index(10);
  snap.mutable_metadata()->set_term(4);
  REQUIRE(s.apply_snapshot(snap) == storage_error::none);
  CHECK(s.first_index() == 11);
  CHECK(s.last_index() == 10);
  CHECK(s.term(10).value == 4);
  CHECK(s.hard_state().commit() == 10);
  CHECK(s.apply_snapshot(snap) == storage_error::out_of_date);
}
