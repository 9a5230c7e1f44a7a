#include "persistence/raft/compaction.hpp"

namespace berth::raft {

bool snapshot_due(const compaction_input& in) {
  if (in.applied < in.snapshot_index || in.applied - in.snapshot_index < in.threshold) return false;
  if (in.snapshot_bytes <= small_snapshot_bytes) return true;
  return in.bytes_since >= in.snapshot_bytes / 2;
}

}  // namespace berth::raft
