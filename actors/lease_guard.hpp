// The lease guard: the kill half of a client's self-fence (control/lease.hpp)
// on a thread of its own.  The moment the lease runs out it SIGTERMs every
// alloc that writes a single-writer volume on this node, and SIGKILLs it
// after the kill timeout (control/lease: guard_step), even while the node
// actor is held up: a slow client.db fsync, a scheduler busy elsewhere.
// The node actor keeps it current (the lease after each renewal, the
// writers after each start and exit) and still does the rest of the fence:
// recording it, unmounting, reporting.  Not an actor: the point is that it
// shares no mailbox and no scheduler thread with the node actor.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace berth {

class lease_guard {
 public:
  lease_guard(std::string node_id, std::chrono::milliseconds kill_timeout);
  ~lease_guard();  // stops the thread (within a check period)
  lease_guard(const lease_guard&) = delete;
  lease_guard& operator=(const lease_guard&) = delete;

  // The lease now runs until this steady-clock time (0: none was granted,
  // nothing is ever signalled).  A renewal forgets what was sent, so a
  // later lapse gives every writer its full SIGTERM grace again.
  void set_lease(int64_t until_ms);

  // Replaces the writers (alloc id -> pid, the leader of its process
  // group) by what `reap` returns; `reap` runs under the guard's lock, so
  // no signal goes to a pid it reaped (which the kernel may reuse).  Call
  // every alloc exit check (waitpid) through here.
  template <class Reap>
  void update(Reap&& reap) {
    std::lock_guard<std::mutex> lock(mutex_);
    merge(reap());
  }

  // The allocs the guard sent SIGTERM since the lease last held: the node
  // fences them too (records the fence, unmounts, reports the exit as the
  // fence's) even when their exit was reaped before it saw the lapse.
  std::set<std::string> signalled() const;

 private:
  struct writer {
    int64_t pid = 0;
    int64_t term_at_ms = 0;
    int64_t kill_at_ms = 0;
  };
  void merge(const std::map<std::string, int64_t>& writers);
  void run();

  std::string node_id_;
  int64_t kill_timeout_ms_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  int64_t until_ms_ = 0;
  std::map<std::string, writer> writers_;
  std::set<std::string> signalled_;
  std::thread thread_;
};

}  // namespace berth
