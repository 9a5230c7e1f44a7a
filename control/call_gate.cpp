#include "control/call_gate.hpp"

#include <algorithm>

namespace berth {

int64_t overload_backoff_ms(int n) {
  int shift = std::clamp(n - 1, 0, 5);
  return int64_t{100} << shift;
}

call_gate::call_gate(int max_controller, int max_node, int max_overloaded)
    : controller_{std::max(1, max_controller), std::max(1, max_controller)},
      node_{std::max(1, max_node), std::max(1, max_node)},
      max_overloaded_(max_overloaded) {}

call_gate::lane& call_gate::lane_of(call_kind k) {
  return k == call_kind::controller ? controller_ : node_;
}

const call_gate::lane& call_gate::lane_of(call_kind k) const {
  return k == call_kind::controller ? controller_ : node_;
}

uint64_t call_gate::add(call_kind kind, std::string volume, int64_t now_ms,
                        int64_t start_by_ms) {
  auto t = next_ticket_++;
  queue_.push_back({t, kind, std::move(volume), now_ms, 0, start_by_ms});
  return t;
}

std::vector<uint64_t> call_gate::expire(int64_t now_ms) {
  std::vector<uint64_t> gone;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->start_by_ms > 0 && it->start_by_ms < now_ms) {
      gone.push_back(it->ticket);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return gone;
}

std::vector<uint64_t> call_gate::start(int64_t now_ms) {
  std::vector<uint64_t> started;
  // A volume with an earlier call still queued keeps its later calls
  // queued too: one volume's calls run in the order they came.
  std::set<std::string> held;
  for (auto it = queue_.begin(); it != queue_.end();) {
    const auto& v = it->volume;
    bool volume_free = v.empty() || (busy_volumes_.count(v) == 0 && held.count(v) == 0);
    bool due = it->not_before_ms <= now_ms;
    bool room =
        it->kind == call_kind::identity || lane_of(it->kind).running < lane_of(it->kind).limit;
    if (volume_free && due && room) {
      if (it->kind == call_kind::identity)
        ++identity_running_;
      else
        ++lane_of(it->kind).running;
      if (!v.empty()) busy_volumes_.insert(v);
      started.push_back(it->ticket);
      running_.emplace(it->ticket, std::move(*it));
      it = queue_.erase(it);
    } else {
      if (!v.empty()) held.insert(v);
      ++it;
    }
  }
  return started;
}

call_gate::verdict call_gate::finish(uint64_t ticket, bool overloaded, int64_t now_ms) {
  auto it = running_.find(ticket);
  if (it == running_.end()) return verdict::done;
  auto c = std::move(it->second);
  running_.erase(it);
  if (!c.volume.empty()) busy_volumes_.erase(c.volume);
  if (c.kind == call_kind::identity) {
    --identity_running_;
    return verdict::done;
  }
  auto& l = lane_of(c.kind);
  --l.running;
  if (!overloaded) {
    if (l.limit < l.max && ++l.successes >= l.limit) {
      ++l.limit;
      l.successes = 0;
    }
    return verdict::done;
  }
  l.limit = std::max(1, l.limit / 2);
  l.successes = 0;
  if (++c.overloaded > max_overloaded_) return verdict::done;
  c.not_before_ms = now_ms + overload_backoff_ms(c.overloaded);
  // Back in front of the later calls of its volume, keeping their order.
  auto pos = std::find_if(queue_.begin(), queue_.end(),
                          [&](const call& q) { return q.ticket > c.ticket; });
  queue_.insert(pos, std::move(c));
  return verdict::retry;
}

std::optional<int64_t> call_gate::next_wakeup() const {
  std::optional<int64_t> at;
  for (const auto& c : queue_) {
    if (c.not_before_ms > 0 && c.overloaded > 0 && (!at || c.not_before_ms < *at))
      at = c.not_before_ms;
    if (c.start_by_ms > 0 && (!at || c.start_by_ms + 1 < *at)) at = c.start_by_ms + 1;
  }
  return at;
}

int call_gate::limit(call_kind kind) const {
  return kind == call_kind::identity ? 0 : lane_of(kind).limit;
}

int call_gate::running(call_kind kind) const {
  return kind == call_kind::identity ? identity_running_ : lane_of(kind).running;
}

}  // namespace berth
