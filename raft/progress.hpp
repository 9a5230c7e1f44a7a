// progress: the leader's view of one follower's log, and how fast it may
// send to it. Modelled on etcd's tracker.Progress and Inflights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

namespace berth::raft {

enum class progress_state {
  // Next index unknown: send one append at a time and wait for the answer.
  probe,
  // Follower is in sync: stream appends optimistically, bounded by inflights.
  replicate,
  // Follower needs a snapshot; nothing else is sent until it is reported.
  snapshot,
};

const char* to_string(progress_state s);

class progress {
 public:
  progress(uint64_t next, size_t max_inflight) : next_(next), max_inflight_(max_inflight) {}

  uint64_t match() const { return match_; }
  uint64_t next() const { return next_; }
  progress_state state() const { return state_; }
  uint64_t pending_snapshot() const { return pending_snapshot_; }
  size_t inflight() const { return inflight_.size(); }

  // Whether the follower answered since the last check-quorum round.
  bool recent_active = false;

  void become_probe();
  void become_replicate();
  void become_snapshot(uint64_t snapshot_index);
  // The shell reports whether the snapshot reached the follower. Either
  // way probing resumes, but only after the follower's next answer.
  void snapshot_reported(bool success);

  // The follower has acknowledged index n. False if that was stale news.
  bool maybe_update(uint64_t n);
  // An append of entries up to `last` was sent.
  void sent_append(uint64_t last);
  // The follower rejected an append at `rejected`; `hint` is where it
  // suggests to resume. False if the rejection was stale.
  bool maybe_decrease_to(uint64_t rejected, uint64_t hint);
  // A heartbeat response arrived: a probing leader may send again.
  void resume() { probe_sent_ = false; }
  // Frees the inflight slots of appends up to index n (acknowledged).
  void free_inflight_to(uint64_t n);
  void free_first_inflight_if_full();
  // Whether sending another append must wait.
  bool paused() const;

 private:
  void reset_state(progress_state s);

  uint64_t match_ = 0;
  uint64_t next_;
  progress_state state_ = progress_state::probe;
  uint64_t pending_snapshot_ = 0;
  bool probe_sent_ = false;
  // Last index of each unacknowledged append, oldest first (replicate only).
  std::deque<uint64_t> inflight_;
  size_t max_inflight_;
};

}  // namespace berth::raft
