#include "control/gc.hpp"

#include <algorithm>
#include <set>

#include "control/entries.hpp"
#include "control/nodes.hpp"
#include "messages/model.hpp"

namespace berth {

namespace {

// The wall time a node went down; nodes marked down before down_at_ms was
// recorded count from their last heartbeat.
int64_t down_since(const v1::Node& n) {
  return n.down_at_ms() != 0 ? n.down_at_ms() : n.last_heartbeat_ms();
}

bool old_enough(int64_t since_ms, int64_t threshold_ms, int64_t now_ms) {
  return threshold_ms >= 0 && now_ms - since_ms >= threshold_ms;
}

bool node_down(const catalog& c, const std::string& id) {
  const auto* n = find_node(c, id);
  return n != nullptr && n->status() == v1::NODE_DOWN;
}

bool has_instance(const catalog& c, const std::string& node_id) {
  for (const auto& [id, p] : c.plugins) {
    for (const auto& i : p.controllers())
      if (i.node_id() == node_id) return true;
    for (const auto& i : p.nodes())
      if (i.node_id() == node_id) return true;
  }
  return false;
}

}  // namespace

gc_plan plan_gc(const catalog& c, int64_t now_ms, const gc_thresholds& t,
                const std::set<std::string>& replacing) {
  gc_plan out;
  std::set<std::string> collected;
  for (const auto& [id, a] : c.allocs) {
    if (!alloc_terminal(a.state()) || !old_enough(a.modified_at_ms(), t.alloc_ms, now_ms))
      continue;
    if (replacing.count(id)) continue;
    if (a.state() == v1::ALLOC_LOST && node_down(c, a.node_id())) continue;
    // Its node is down or back without having confirmed its unmounts: the
    // servers may have released its claims without the node, which is
    // still to be told to unmount it (control/nodes).
    if (const auto* n = find_node(c, a.node_id()); n != nullptr && unmounts_pending(*n)) continue;
    collected.insert(id);
  }
  // Every claim, whatever the volume's namespace or the alloc's volume list
  // say, keeps its alloc and its node (scanned only when something may go).
  std::set<std::string> claim_nodes;
  if (!collected.empty() || std::any_of(c.nodes.begin(), c.nodes.end(), [](const auto& n) {
        return n.second.status() == v1::NODE_DOWN;
      }))
    for (const auto& key : claimed_volumes(c)) {
      const auto v = volume_at(c, key);
      for (const auto& cl : v.claims()) {
        collected.erase(cl.alloc_id());
        claim_nodes.insert(cl.node_id());
      }
    }
  out.allocs.assign(collected.begin(), collected.end());
  std::set<std::string> candidates;
  for (const auto& [id, n] : c.nodes)
    if (n.status() == v1::NODE_DOWN && !n.has_drain() &&
        old_enough(down_since(n), t.node_ms, now_ms) && !has_instance(c, id))
      candidates.insert(id);
  if (candidates.empty()) return out;
  for (const auto& id : claim_nodes) candidates.erase(id);
  for (const auto& [id, a] : c.allocs)
    if (collected.count(id) == 0) candidates.erase(a.node_id());
  out.nodes.assign(candidates.begin(), candidates.end());
  return out;
}

std::vector<v1::Change> gc_changes(const gc_plan& p) {
  std::vector<v1::Change> out;
  for (const auto& id : p.allocs) out.push_back(alloc_delete_change(id));
  for (const auto& id : p.nodes) out.push_back(node_delete_change(id));
  return out;
}

std::string gc_summary(const gc_plan& p) {
  if (p.empty()) return "nothing to collect";
  auto count = [](size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  return "collected " + count(p.allocs.size(), "alloc", "allocs") + " and " +
         count(p.nodes.size(), "node", "nodes");
}

}  // namespace berth
