#include "control/placement.hpp"

#include <algorithm>

#include "messages/model.hpp"

namespace berth {

bool in_required_topology(const v1::Plugin& p, const std::string& node_id,
                          const v1::TopologyRequest* topology) {
  if (topology == nullptr || topology->required().empty()) return true;
  const auto* inst = node_instance(p, node_id);
  if (inst == nullptr) return false;
  for (const auto& t : topology->required())
    if (topology_matches(inst->accessible_topology(), t)) return true;
  return false;
}

std::vector<std::string> controller_candidates(
    const v1::Plugin& p, const std::function<bool(const std::string&)>& connected,
    const v1::TopologyRequest* topology) {
  std::vector<std::string> out;
  for (const auto& c : p.controllers())
    if (c.healthy() && connected(c.node_id()) && in_required_topology(p, c.node_id(), topology))
      out.push_back(c.node_id());
  return out;
}

std::optional<std::string> next_in_turn(const std::vector<std::string>& candidates, size_t& turn) {
  if (candidates.empty()) return std::nullopt;
  return candidates[turn++ % candidates.size()];
}

int64_t node_volume_count(const catalog& c, const std::string& node, const std::string& plugin,
                          const volume_key& except, const std::set<volume_key>& in_flight) {
  // |claimed ∪ in_flight \ {except}| without building the union: an attach
  // storm of k claims on one node called this k times with both sets
  // growing to k (copying and inserting into a set each time: quadratic
  // allocations in the leader's one mailbox, ahead of every other plugin's
  // claims).  Lookups only, over the smaller set.
  static const std::set<volume_key> none;
  auto it = c.claimed_on.find({node, plugin});
  const auto& claimed = it == c.claimed_on.end() ? none : it->second;
  auto n = static_cast<int64_t>(claimed.size() + in_flight.size());
  const auto& small = claimed.size() <= in_flight.size() ? claimed : in_flight;
  const auto& large = &small == &claimed ? in_flight : claimed;
  for (const auto& k : small)
    if (large.count(k)) --n;
  if (claimed.count(except) || in_flight.count(except)) --n;
  return n;
}

int controller_call_limit(const v1::Plugin& p) {
  int sum = 0;
  for (const auto& c : p.controllers())
    if (c.healthy()) sum += c.max_calls() > 0 ? c.max_calls() : 16;
  return std::max(1, sum);
}

}  // namespace berth
