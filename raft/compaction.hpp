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

namespace berth::raft {

// A leader's snapshot file arriving in pieces (actors/raft_log_snapshots.cpp):
// from whom, the snapshot's index and term, the bytes so far; complete once
// the last piece arrived and the file checked out.
struct incoming_pieces {
  uint64_t from = 0, index = 0, term = 0, offset = 0;
  bool complete = false;
};

enum class piece_verdict {
  start,   // offset 0: a transfer (again) from its start; what came before is dropped
  next,    // the next piece of the transfer under way
  refuse,  // out of order, another transfer's, or after the last: the sender starts again
};

// What to do with a piece at `offset` of the snapshot (index, term) that
// server `from` sends.
piece_verdict judge_piece(const incoming_pieces& in, uint64_t from, uint64_t index, uint64_t term,
                          uint64_t offset);

// Whether a MSG_SNAP from `from` for the snapshot (index, term) may reach
// the core: only after its file arrived whole from that server.
bool pieces_arrived(const incoming_pieces& in, uint64_t from, uint64_t index, uint64_t term);

}  // namespace berth::raft
