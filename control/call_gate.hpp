// Which CSI calls of one plugin connection may run now: at most a limit
// of controller calls and one of node calls in flight, never two calls for
// the same volume at once (the CSI spec's rule), and in arrival order
// otherwise.  A call the plugin answered with RESOURCE_EXHAUSTED or ABORTED
// (it is overloaded, or busy with that volume) goes back into the queue
// after a backoff, and the limit of its kind halves; every window of calls
// that succeed raises it by one again, up to the configured limit (AIMD, as
// TCP does).  After `max_overloaded` such answers for one call, it ends
// with the plugin's answer (the caller retries the step later).
//
// Pure: no clock (times are passed in), no I/O, no actor.  The plugin
// connection actor (actors/csi_plugin.cpp) owns one gate and runs what
// start() hands out.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace berth {

enum class call_kind {
  controller,  // controller service calls, and CreateVolume/DeleteVolume
  node,        // node service calls (stage, publish, and their undoing)
  identity,    // probes and capabilities: not limited, no volume
};

class call_gate {
 public:
  // `max_controller` and `max_node` >= 1.
  call_gate(int max_controller, int max_node, int max_overloaded = 4);

  // Queues a call; `volume` is the CSI volume id ("" for none).  A call
  // not started by `start_by_ms` (0: no such limit) is never started: its
  // caller has given up on it by then, and a call sent after that could
  // undo what the caller did next (a late ControllerUnpublishVolume after
  // the volume was published again).  Returns its ticket.
  uint64_t add(call_kind kind, std::string volume, int64_t now_ms, int64_t start_by_ms = 0);

  // Removes and returns the queued calls whose start_by passed (`now_ms`
  // past it), in arrival order: answer them without running them.
  std::vector<uint64_t> expire(int64_t now_ms);

  // The calls that start now (marked running), in arrival order.
  std::vector<uint64_t> start(int64_t now_ms);

  enum class verdict { done, retry };
  // A running call ended.  `overloaded`: the plugin answered
  // RESOURCE_EXHAUSTED or ABORTED.  retry: it is queued again (after a
  // backoff; see next_wakeup); done: hand its outcome to the caller.
  verdict finish(uint64_t ticket, bool overloaded, int64_t now_ms);

  // When a queued call becomes startable by time alone (a backoff ends),
  // or expires, if one waits for that; nullopt when none does.
  std::optional<int64_t> next_wakeup() const;

  // What is in effect, for metrics and tests.
  int limit(call_kind kind) const;
  int running(call_kind kind) const;
  size_t queued() const { return queue_.size(); }

 private:
  struct call {
    uint64_t ticket;
    call_kind kind;
    std::string volume;
    int64_t not_before_ms = 0;
    int overloaded = 0;
    int64_t start_by_ms = 0;  // 0: none
  };
  struct lane {
    int max;
    int limit;
    int running = 0;
    int successes = 0;  // since the limit last changed
  };
  lane& lane_of(call_kind k);
  const lane& lane_of(call_kind k) const;

  lane controller_;
  lane node_;
  int identity_running_ = 0;
  int max_overloaded_;
  uint64_t next_ticket_ = 1;
  std::deque<call> queue_;
  std::map<uint64_t, call> running_;
  std::set<std::string> busy_volumes_;
};

// The backoff before a call's n-th retry (n >= 1) after an overload:
// 100 ms doubling, at most 3.2 s.
int64_t overload_backoff_ms(int n);

}  // namespace berth
