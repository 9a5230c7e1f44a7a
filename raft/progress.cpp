#include "raft/progress.hpp"

#include <algorithm>

namespace berth::raft {

const char* to_string(progress_state s) {
  switch (s) {
    case progress_state::probe:
      return "probe";
    case progress_state::replicate:
      return "replicate";
    case progress_state::snapshot:
      return "snapshot";
  }
  return "unknown";
}

void progress::reset_state(progress_state s) {
  state_ = s;
  probe_sent_ = false;
  pending_snapshot_ = 0;
  inflight_.clear();
}

void progress::become_probe() {
  // After a snapshot, resume right after it: the follower has it or will
  // reject, and the probe corrects next either way.
  if (state_ == progress_state::snapshot) {
    uint64_t pending = pending_snapshot_;
    reset_state(progress_state::probe);
    next_ = std::max(match_ + 1, pending + 1);
  } else {
    reset_state(progress_state::probe);
    next_ = match_ + 1;
  }
}

void progress::become_replicate() {
  reset_state(progress_state::replicate);
  next_ = match_ + 1;
}

void progress::become_snapshot(uint64_t snapshot_index) {
  reset_state(progress_state::snapshot);
  pending_snapshot_ = snapshot_index;
}

void progress::snapshot_reported(bool success) {
  if (!success) pending_snapshot_ = 0;
  become_probe();
  probe_sent_ = true;
}

bool progress::maybe_update(uint64_t n) {
  bool updated = false;
  if (match_ < n) {
    match_ = n;
    updated = true;
    probe_sent_ = false;
  }
  next_ = std::max(next_, n + 1);
  return updated;
}

void progress::sent_append(uint64_t last) {
  switch (state_) {
    case progress_state::replicate:
      // Optimistic: assume it will be accepted and keep streaming.
      if (last >= next_) {
        next_ = last + 1;
        inflight_.push_back(last);
      }
      break;
    case progress_state::probe:
      probe_sent_ = true;
      break;
    case progress_state::snapshot:
      break;
  }
}

bool progress::maybe_decrease_to(uint64_t rejected, uint64_t hint) {
  if (state_ == progress_state::replicate) {
    if (rejected <= match_) return false;  // stale: already acknowledged beyond it
    next_ = match_ + 1;
    return true;
  }
  // Probing sends one append at a time, so only the latest can be rejected.
  if (next_ - 1 != rejected) return false;
  next_ = std::max<uint64_t>(std::min(rejected, hint + 1), 1);
  probe_sent_ = false;
  return true;
}

void progress::free_inflight_to(uint64_t n) {
  while (!inflight_.empty() && inflight_.front() <= n) inflight_.pop_front();
}

void progress::free_first_inflight_if_full() {
  if (inflight_.size() >= max_inflight_) inflight_.pop_front();
}

bool progress::paused() const {
  switch (state_) {
    case progress_state::probe:
      return probe_sent_;
    case progress_state::replicate:
      return inflight_.size() >= max_inflight_;
    case progress_state::snapshot:
      return true;
  }
  return true;
}

}  // namespace berth::raft
