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
  std::set<volume_key> seen;
  auto claimed = c.claimed_on.find({node, plugin});
  if (claimed != c.claimed_on.end()) seen = claimed->second;
  seen.erase(except);
  for (const auto& k : in_flight)
    if (k != except) seen.insert(k);
  return static_cast<int64_t>(seen.size());
}

int controller_call_limit(const v1::Plugin& p) {
  int sum = 0;
  for (const auto& c : p.controllers())
    if (c.healthy()) sum += c.max_calls() > 0 ? c.max_calls() : 16;
  return std::max(1, sum);
}

}  // namespace berth
