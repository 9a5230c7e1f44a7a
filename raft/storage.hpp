// memory_storage: the Raft core's view of what the shell has made durable.
//
// The shell owns one memory_storage per node. It fills it from disk on
// start, and after persisting each Ready it appends the same entries, hard
// state and snapshot here, so the core only ever reads stable data from it.
// Modelled on etcd's MemoryStorage. Not thread-safe: the shell serializes
// access with the core (one actor owns both).
#pragma once

#include <cstdint>
#include <vector>

#include "messages/raft.pb.h"

namespace berth::raft {

namespace pb = berth::raft::v1;

enum class storage_error {
  none,
  compacted,    // the index is at or below the last snapshot
  unavailable,  // the index is beyond the last entry
  out_of_date,  // a snapshot older than the one held
};

const char* to_string(storage_error e);

template <class T>
struct storage_result {
  T value{};
  storage_error error = storage_error::none;
  bool ok() const { return error == storage_error::none; }
};

class memory_storage {
 public:
  memory_storage();

  const pb::HardState& hard_state() const { return hard_state_; }
  void set_hard_state(const pb::HardState& hs) { hard_state_ = hs; }

  // Entries in [lo, hi), at most max_size bytes but always at least one.
  storage_result<std::vector<pb::Entry>> entries(uint64_t lo, uint64_t hi, uint64_t max_size) const;
  // Term of entry i; the snapshot's index and term are kept, so i may be it.
  storage_result<uint64_t> term(uint64_t i) const;
  uint64_t first_index() const { return offset() + 1; }
  uint64_t last_index() const { return offset() + ents_.size() - 1; }
  const pb::Snapshot& snapshot() const { return snapshot_; }

  // Replaces everything with a snapshot received from the leader.
  storage_error apply_snapshot(const pb::Snapshot& snap);
  // Records a snapshot of the state machine at applied index i (the shell's
  // own compaction); entries are kept until compact().
  storage_error create_snapshot(uint64_t i, const pb::ConfState& cs, std::string data);
  // Discards entries up to and including i; i must not exceed applied.
  storage_error compact(uint64_t i);
  // Appends entries, replacing any conflicting suffix. Entries must be
  // contiguous; those already compacted are skipped.
  void append(const std::vector<pb::Entry>& entries);

 private:
  uint64_t offset() const { return ents_.front().index(); }

  pb::HardState hard_state_;
  pb::Snapshot snapshot_;
  // ents_[0] is a dummy holding the index and term of the last compaction.
  std::vector<pb::Entry> ents_;
};

}  // namespace berth::raft
