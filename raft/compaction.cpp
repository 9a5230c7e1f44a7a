#include "raft/compaction.hpp"

namespace berth::raft {

bool snapshot_due(const compaction_input& in) {
  if (in.applied < in.snapshot_index || in.applied - in.snapshot_index < in.threshold) return false;
  if (in.snapshot_bytes <= small_snapshot_bytes) return true;
  return in.bytes_since >= in.snapshot_bytes / 2;
}

}  // namespace berth::raft

namespace berth::raft {

piece_verdict judge_piece(const incoming_pieces& in, uint64_t from, uint64_t index, uint64_t term,
                          uint64_t offset) {
  if (offset == 0) return piece_verdict::start;
  if (in.complete || in.from != from || in.index != index || in.term != term ||
      in.offset != offset)
    return piece_verdict::refuse;
  return piece_verdict::next;
}

bool pieces_arrived(const incoming_pieces& in, uint64_t from, uint64_t index, uint64_t term) {
  return in.complete && in.from == from && in.index == index && in.term == term;
}

}  // namespace berth::raft
