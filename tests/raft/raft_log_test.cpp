// raft_log and unstable: the log as the core sees it.
#include <doctest/doctest.h>

#include "raft/log.hpp"

using namespace berth::raft;

namespace {

pb::Entry entry(uint64_t index, uint64_t term) {
  pb::Entry e;
  e.set_index(index);
  e.set_term(term);
  return e;
}

std::vector<pb::Entry> entries(uint64_t first, std::vector<uint64_t> terms) {
  std::vector<pb::Entry> out;
  for (size_t i = 0; i < terms.size(); ++i) out.push_back(entry(first + i, terms[i]));
  return out;
}

}  // namespace

TEST_CASE("log_reads_stable_then_unstable_entries") {
  memory_storage s;
  s.append(entries(1, {1, 1}));
  raft_log log(s);
  log.append(entries(3, {2, 2}));
  CHECK(log.last_index() == 4);
  CHECK(log.unstable_entries().size() == 2);
  auto all = log.slice(1, 5, no_limit);
  REQUIRE(all.ok());
  CHECK(all.value.size() == 4);
  CHECK(all.value[2].term() == 2);
}

TEST_CASE("log_maybe_append_rejects_mismatched_previous_entry") {
  memory_storage s;
  s.append(entries(1, {1, 2}));
  raft_log log(s);
  CHECK_FALSE(log.maybe_append(2, 1, 0, entries(3, {3})));
  CHECK_FALSE(log.maybe_append(5, 2, 0, entries(6, {3})));
  auto last = log.maybe_append(2, 2, 3, entries(3, {3}));
  REQUIRE(last);
  CHECK(*last == 3);
  CHECK(log.committed() == 3);
}

TEST_CASE("log_maybe_append_truncates_conflicting_uncommitted_suffix") {
  memory_storage s;
  raft_log log(s);
  log.append(entries(1, {1, 1, 1, 1}));
  log.commit_to(2);
  auto last = log.maybe_append(2, 1, 2, entries(3, {2}));
  REQUIRE(last);
  CHECK(log.last_index() == 3);
  CHECK(log.term(3).value == 2);
}

TEST_CASE("log_maybe_append_keeps_entries_after_a_duplicate_append") {
  memory_storage s;
  raft_log log(s);
  log.append(entries(1, {1, 1, 1, 1}));
  // A delayed, shorter copy of an earlier append must not truncate.
  auto last = log.maybe_append(0, 0, 0, entries(1, {1, 1}));
  REQUIRE(last);
  CHECK(*last == 2);
  CHECK(log.last_index() == 4);
}

TEST_CASE("log_find_conflict_by_term_skips_higher_terms") {
  memory_storage s;
  raft_log log(s);
  log.append(entries(1, {1, 1, 2, 4, 4, 5}));
  CHECK(log.find_conflict_by_term(6, 3) == 3);
  CHECK(log.find_conflict_by_term(6, 4) == 5);
  CHECK(log.find_conflict_by_term(6, 0) == 0);
}

TEST_CASE("log_is_up_to_date_compares_last_term_then_index") {
  memory_storage s;
  raft_log log(s);
  log.append(entries(1, {1, 2, 2}));
  CHECK(log.is_up_to_date(1, 3));
  CHECK(log.is_up_to_date(3, 2));
  CHECK_FALSE(log.is_up_to_date(2, 2));
  CHECK_FALSE(log.is_up_to_date(9, 1));
}

TEST_CASE("log_commits_only_entries_of_the_given_term") {
  memory_storage s;
  raft_log log(s);
  log.append(entries(1, {1, 2}));
  CHECK_FALSE(log.maybe_commit(1, 2));
  CHECK(log.maybe_commit(2, 2));
  CHECK(log.committed() == 2);
}

TEST_CASE("log_hands_out_committed_entries_once_and_none_while_snapshot_pending") {
  memory_storage s;
  raft_log log(s);
  log.append(entries(1, {1, 1, 1}));
  log.commit_to(2);
  CHECK(log.next_committed_entries().size() == 2);
  log.applied_to(2);
  CHECK_FALSE(log.has_next_committed_entries());

  pb::Snapshot snap;
  snap.mutable_metadata()->set_index(10);
  snap.mutable_metadata()->set_term(3);
  log.restore(snap);
  CHECK(log.committed() == 10);
  CHECK(log.last_index() == 10);
  CHECK_FALSE(log.has_next_committed_entries());
  CHECK(log.unstable_snapshot());
}

TEST_CASE("log_stable_to_ignores_entries_replaced_since_the_ready") {
  memory_storage s;
  raft_log log(s);
  log.append(entries(1, {1, 1}));
  log.append(entries(2, {2}));  // replaced entry 2 after it was handed out at term 1
  log.stable_to(2, 1);
  CHECK(log.unstable_entries().size() == 2);
  log.stable_to(2, 2);
  CHECK(log.unstable_entries().empty());
}

TEST_CASE("log_slice_stops_at_size_limit_across_stable_and_unstable") {
  memory_storage s;
  s.append(entries(1, {1, 1}));
  raft_log log(s);
  log.append(entries(3, {1, 1}));
  auto one = entry(1, 1).ByteSizeLong();
  CHECK(log.slice(1, 5, 3 * one).value.size() == 3);
  CHECK(log.slice(2, 5, 0).value.size() == 1);
}

TEST_CASE("log_term_of_compacted_index_is_an_error") {
  memory_storage s;
  s.append(entries(1, {1, 1, 2}));
  s.compact(2);
  raft_log log(s);
  CHECK(log.first_index() == 3);
  CHECK(log.term(1).error == storage_error::compacted);
  CHECK(log.term(2).value == 1);
  CHECK(log.slice(1, 3, no_limit).error == storage_error::compacted);
}
