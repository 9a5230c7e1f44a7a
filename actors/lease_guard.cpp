#include "actors/lease_guard.hpp"

#include <signal.h>

#include "actors/clock.hpp"
#include "control/lease.hpp"
#include "log/log.hpp"

namespace berth {

namespace {

// How often the guard looks at the lease: the longest a writer runs on
// after the lease's end, when the node actor is held up.
constexpr auto check_period = std::chrono::milliseconds(50);

}  // namespace

lease_guard::lease_guard(std::string node_id, std::chrono::milliseconds kill_timeout)
    : node_id_(std::move(node_id)), kill_timeout_ms_(kill_timeout.count()) {
  thread_ = std::thread([this] { run(); });
}

lease_guard::~lease_guard() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void lease_guard::set_lease(int64_t until_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (until_ms > steady_ms()) {
    for (auto& [id, w] : writers_) w.term_at_ms = w.kill_at_ms = 0;
    signalled_.clear();
  }
  until_ms_ = until_ms;
}

std::set<std::string> lease_guard::signalled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return signalled_;
}

void lease_guard::merge(const std::map<std::string, int64_t>& writers) {
  std::map<std::string, writer> next;
  for (const auto& [id, pid] : writers) {
    if (pid <= 0) continue;
    auto it = writers_.find(id);
    if (it != writers_.end() && it->second.pid == pid)
      next[id] = it->second;
    else
      next[id].pid = pid;
  }
  writers_ = std::move(next);
}

void lease_guard::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    auto now = steady_ms();
    for (auto& [id, w] : writers_) {
      switch (guard_step(now, until_ms_, kill_timeout_ms_, w.term_at_ms, w.kill_at_ms)) {
        case guard_signal::none:
          break;
        case guard_signal::term:
          kill(-static_cast<pid_t>(w.pid), SIGTERM);
          signalled_.insert(id);
          logging::warn("node", "lease ran out: SIGTERM to an alloc that writes a single-writer volume",
                        {{"node", node_id_}, {"alloc", id}});
          break;
        case guard_signal::kill:
          kill(-static_cast<pid_t>(w.pid), SIGKILL);
          break;
      }
    }
    wake_.wait_for(lock, check_period);
  }
}

}  // namespace berth
