#include "control/admission.hpp"

namespace berth {

admission::admitted admission::add(const std::string& lane) {
  auto ticket = next_ticket_++;
  auto& l = lanes_[lane];
  if (window_ == 0 || l.running < window_) {
    ++l.running;
    running_.emplace(ticket, lane);
    return {ticket, true};
  }
  l.queue.push_back(ticket);
  ++queued_;
  return {ticket, false};
}

std::optional<uint64_t> admission::finish(uint64_t ticket) {
  auto it = running_.find(ticket);
  if (it == running_.end()) return std::nullopt;
  auto lane_it = lanes_.find(it->second);
  auto lane = std::move(it->second);
  running_.erase(it);
  auto& l = lane_it->second;
  --l.running;
  if (!l.queue.empty()) {
    auto next = l.queue.front();
    l.queue.pop_front();
    --queued_;
    ++l.running;
    running_.emplace(next, std::move(lane));
    return next;
  }
  if (l.running == 0) lanes_.erase(lane_it);  // an idle lane costs nothing
  return std::nullopt;
}

size_t admission::running(const std::string& lane) const {
  auto it = lanes_.find(lane);
  return it == lanes_.end() ? 0 : it->second.running;
}

size_t admission::queued(const std::string& lane) const {
  auto it = lanes_.find(lane);
  return it == lanes_.end() ? 0 : it->second.queue.size();
}

std::string claim_lane(const std::string& plugin_id) {
  return "claim/" + plugin_id;
}

std::string release_lane(const std::string& plugin_id) {
  return "release/" + plugin_id;
}

}  // namespace berth
