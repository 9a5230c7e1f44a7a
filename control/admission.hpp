// Which of the leader's claims and releases go on to the volume actors now.
// Each lane (one plugin's claims, one plugin's releases) lets at most
// `window` of its operations run at once; the rest wait in arrival order.
// Lanes never wait for one another: an attach storm on one plugin queues
// behind its own window, while a claim on another plugin goes on at once
// (issue 28: without it, a storm's 1,000 claims were routed, committed and
// applied ahead of every other plugin's claim, in the leader's one FIFO
// mailbox).  A window of 0 admits everything at once.
//
// Pure: no clock, no I/O, no actor.  The leader actor (actors/leader.cpp,
// `admit`) owns one and runs what it hands out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

namespace berth {

// berthd --plugin-window's default.  A claim holds its place through all
// its CSI steps, so the window must cover the claims in ControllerPublish
// and those waiting for a node call (a client runs 16 at once): at 64,
// a 1,000-claim storm on a client with max_controller_calls=64 took 7.4-9.4 s
// against 6.2-7.7 s with no window; at 128, 5.9 s, with another plugin's
// claim p99 during it 541 ms against 761-1,280 ms (bench/README, run 20).
inline constexpr size_t default_plugin_window = 128;

class admission {
 public:
  explicit admission(size_t window = 0) : window_(window) {}

  struct admitted {
    uint64_t ticket;
    bool start;  // runs now; otherwise it is queued in its lane
  };
  // A new operation in `lane`.
  admitted add(const std::string& lane);

  // A running operation ended: the next operation of its lane that starts
  // now, if one waits.  An unknown ticket (ended twice) changes nothing.
  std::optional<uint64_t> finish(uint64_t ticket);

  // What is in effect, for metrics and tests.
  size_t window() const { return window_; }
  size_t running(const std::string& lane) const;
  size_t queued(const std::string& lane) const;
  size_t queued() const { return queued_; }

 private:
  struct lane_state {
    size_t running = 0;
    std::deque<uint64_t> queue;
  };
  size_t window_;
  uint64_t next_ticket_ = 1;
  size_t queued_ = 0;
  std::map<std::string, lane_state> lanes_;
  std::map<uint64_t, std::string> running_;  // ticket -> lane
};

// The lane of a plugin's claims and of its releases.
std::string claim_lane(const std::string& plugin_id);
std::string release_lane(const std::string& plugin_id);

}  // namespace berth
