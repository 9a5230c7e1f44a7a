// When a server takes a snapshot of its state (and compacts its log): a
// pure rule, so that its cost per entry stays bounded as the state grows.
#pragma once

#include <cstdint>

namespace berth::raft {

struct compaction_input {
  uint64_t applied = 0;             // applied index
  uint64_t snapshot_index = 0;      // index of the last snapshot
  uint64_t threshold = 8192;        // --snapshot-threshold: entries at the least
  uint64_t bytes_since = 0;         // bytes of the entries applied since that snapshot
  uint64_t snapshot_bytes = 0;      // size of that snapshot (0: none, or unknown)
};

// Snapshots up to this size are taken every `threshold` entries: they cost
// little (tens of milliseconds).
constexpr uint64_t small_snapshot_bytes = 4ULL << 20;

// A snapshot is due once `threshold` entries were applied since the last
// one and, when the last snapshot was larger than small_snapshot_bytes,
// once the entries applied since then add up to half its size: a snapshot
// costs time in proportion to the state, so taking one only after the log
// grew by half the state bounds that cost to about twice the bytes the log
// itself wrote (as etcd's snapshot-count and hashicorp/raft's threshold
// keep snapshots rare when the state is large).
bool snapshot_due(const compaction_input& in);

}  // namespace berth::raft
