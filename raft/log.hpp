// raft_log: the log as the core sees it, stable entries (in memory_storage,
// already durable) followed by unstable ones (appended by the core, handed
// to the shell in the next Ready, dropped here once the shell persisted
// them). Modelled on etcd's raftLog and unstable.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "raft/storage.hpp"

namespace berth::raft {

constexpr uint64_t no_limit = std::numeric_limits<uint64_t>::max();

// Entries and a snapshot not yet persisted. Entries start at `offset`.
struct unstable {
  std::optional<pb::Snapshot> snapshot;
  std::vector<pb::Entry> entries;
  uint64_t offset = 0;

  std::optional<uint64_t> maybe_first_index() const;
  std::optional<uint64_t> maybe_last_index() const;
  std::optional<uint64_t> maybe_term(uint64_t i) const;
  void stable_to(uint64_t i, uint64_t t);
  void stable_snap_to(uint64_t i);
  void restore(const pb::Snapshot& snap);
  void truncate_and_append(const std::vector<pb::Entry>& ents);
};

class raft_log {
 public:
  explicit raft_log(const memory_storage& storage);

  uint64_t first_index() const;
  uint64_t last_index() const;
  uint64_t last_term() const { return zero_on_error(term(last_index())); }
  storage_result<uint64_t> term(uint64_t i) const;
  // Term of i, or 0 when compacted or unavailable (never a valid term).
  static uint64_t zero_on_error(storage_result<uint64_t> r) { return r.ok() ? r.value : 0; }
  bool match_term(uint64_t i, uint64_t t) const { return zero_on_error(term(i)) == t; }
  bool is_up_to_date(uint64_t last_index, uint64_t term) const;

  uint64_t committed() const { return committed_; }
  uint64_t applied() const { return applied_; }

  // The follower's side of MsgApp: if our entry at `index` has `log_term`,
  // appends `ents` (dropping a conflicting suffix), commits up to
  // min(committed, last new index) and returns the last new index.
  std::optional<uint64_t> maybe_append(uint64_t index, uint64_t log_term, uint64_t committed,
                                       const std::vector<pb::Entry>& ents);
  uint64_t append(const std::vector<pb::Entry>& ents);
  // Largest index <= `index` whose term is <= `term`: where a rejected
  // probe can resume, skipping a whole term per round trip.
  uint64_t find_conflict_by_term(uint64_t index, uint64_t term) const;

  // Entries from i on, at most max_size bytes (at least one).
  storage_result<std::vector<pb::Entry>> entries(uint64_t i, uint64_t max_size) const;
  storage_result<std::vector<pb::Entry>> slice(uint64_t lo, uint64_t hi, uint64_t max_size) const;
  const std::vector<pb::Entry>& unstable_entries() const { return unstable_.entries; }
  const std::optional<pb::Snapshot>& unstable_snapshot() const { return unstable_.snapshot; }
  // The newest snapshot, unstable or stored.
  const pb::Snapshot& snapshot() const;

  // Committed entries not yet handed out to apply. None while a received
  // snapshot is pending: it must be applied first.
  std::vector<pb::Entry> next_committed_entries() const;
  bool has_next_committed_entries() const;

  bool maybe_commit(uint64_t max_index, uint64_t term);
  void commit_to(uint64_t index);
  void applied_to(uint64_t index);
  void stable_to(uint64_t i, uint64_t t) { unstable_.stable_to(i, t); }
  void stable_snap_to(uint64_t i) { unstable_.stable_snap_to(i); }
  void restore(const pb::Snapshot& snap);

 private:
  uint64_t find_conflict(const std::vector<pb::Entry>& ents) const;

  const memory_storage& storage_;
  unstable unstable_;
  uint64_t committed_;
  uint64_t applied_;
};

}  // namespace berth::raft
