#include "control/nodes.hpp"
#include "messages/failure.hpp"

#include <algorithm>
#include <set>

#include "control/allocs.hpp"
#include "control/entries.hpp"

namespace berth {

std::optional<v1::Node> node_after_heartbeat(const catalog& c, const std::string& node_id,
                                             int64_t now_ms) {
  const auto* known = find_node(c, node_id);
  if (known != nullptr && known->has_client() && known->status() == v1::NODE_READY)
    return std::nullopt;
  v1::Node next = known != nullptr ? *known : v1::Node{};
  next.set_id(node_id);
  next.set_has_client(true);
  next.set_status(v1::NODE_READY);
  next.set_last_heartbeat_ms(now_ms);
  return next;
}

std::vector<silent_node> silent_nodes(const catalog& c, std::map<std::string, int64_t>& last_seen,
                                      int64_t now_ms, int64_t timeout_ms) {
  std::vector<silent_node> out;
  for (const auto& [id, n] : c.nodes) {
    if (!n.has_client() || n.status() != v1::NODE_READY) continue;
    auto seen = last_seen.find(id);
    if (seen == last_seen.end()) {
      last_seen[id] = now_ms;
      continue;
    }
    if (now_ms - seen->second > timeout_ms) out.push_back({id, now_ms - seen->second});
  }
  return out;
}

std::vector<v1::Change> mark_down(const catalog& c, const std::string& node_id,
                                  int64_t silent_ms, int64_t now_ms) {
  std::vector<v1::Change> out;
  const auto* n = find_node(c, node_id);
  if (n == nullptr || n->status() == v1::NODE_DOWN) return out;
  auto down = *n;
  down.set_status(v1::NODE_DOWN);
  down.set_down_at_ms(now_ms);
  out.push_back(upsert_change(std::move(down)));
  auto why = "node " + quote_name(node_id) + " is down (no heartbeat for " +
             std::to_string(silent_ms / 1000) + " s)";
  for (const auto& [id, a] : c.allocs)
    if (a.node_id() == node_id && !alloc_terminal(a.state()))
      out.push_back(upsert_change(alloc_in_state(a, v1::ALLOC_LOST, why, now_ms)));
  return out;
}

std::vector<std::string> allocs_to_stop_on_reconnect(const catalog& c, const std::string& node_id) {
  std::vector<std::string> out;
  for (const auto& [id, a] : c.allocs)
    if (a.node_id() == node_id && stop_awaits_client(c, a)) out.push_back(id);
  return out;
}

bool stop_awaits_client(const catalog& c, const v1::Alloc& a) {
  return a.state() == v1::ALLOC_COMPLETE && !claimed_volumes(c, a).empty();
}

std::vector<std::string> stops_due(const catalog& c, const std::string& node_id,
                                   const std::set<std::string>& confirmed,
                                   const std::set<std::string>& in_flight) {
  std::vector<std::string> out;
  for (auto& id : allocs_to_stop_on_reconnect(c, node_id))
    if (!confirmed.count(id) && !in_flight.count(id)) out.push_back(std::move(id));
  return out;
}

std::vector<std::string> lost_allocs_of(const catalog& c, const std::string& node_id) {
  std::vector<std::string> out;
  for (const auto& [id, a] : c.allocs)
    if (a.node_id() == node_id && a.state() == v1::ALLOC_LOST) out.push_back(id);
  return out;
}

bool unmounts_pending(const v1::Node& n) { return n.has_client() && n.down_at_ms() != 0; }

bool unmounts_awaited(const v1::Node& n, bool connected) {
  return (n.status() == v1::NODE_READY || connected) && unmounts_pending(n);
}

std::vector<std::string> allocs_to_unmount_on_return(const catalog& c, const std::string& node_id) {
  std::vector<std::string> out;
  const auto* n = find_node(c, node_id);
  if (n == nullptr || !unmounts_pending(*n)) return out;
  for (const auto& [id, a] : c.allocs)
    if (a.node_id() == node_id && alloc_terminal(a.state())) out.push_back(id);
  return out;
}

std::optional<v1::Node> node_after_unmounts(const catalog& c, const std::string& node_id,
                                            int64_t down_at_ms) {
  const auto* n = find_node(c, node_id);
  if (n == nullptr || n->status() != v1::NODE_READY || n->down_at_ms() == 0 ||
      n->down_at_ms() != down_at_ms)
    return std::nullopt;
  auto next = *n;
  next.clear_down_at_ms();
  return next;
}

std::optional<failure> refuse_client_away(const catalog& c, const std::string& node_id,
                                          bool connected, bool marking_down) {
  const auto* n = find_node(c, node_id);
  if (n != nullptr && n->has_client() && marking_down) {
    failure f{errc::unavailable, "node " + quote_name(node_id) +
                                     " is being marked down (its client was silent for the "
                                     "node-down timeout), so the volume cannot be published "
                                     "there; retry once it is back"};
    f.retry = true;
    return f;
  }
  if (connected || n == nullptr || !n->has_client()) return std::nullopt;
  failure f{errc::unavailable, "the berth client of node " + quote_name(node_id) +
                                   " is not connected" +
                                   (n->status() == v1::NODE_DOWN ? " (the node is down)" : "") +
                                   ", so the volume cannot be published there; retry once it is"};
  f.retry = true;
  return f;
}

std::vector<problem> validate_fingerprint(const v1::Fingerprint& f) {
  std::vector<problem> problems;
  if (!valid_id(f.plugin_id())) problems.push_back({"plugin_id", "is missing or not a valid id"});
  if (!valid_id(f.node_id())) problems.push_back({"node_id", "is missing or not a valid id"});
  if (f.type() == v1::PLUGIN_TYPE_UNKNOWN)
    problems.push_back({"type", "is required (node, controller or monolith)"});
  return problems;
}

bool apply_fingerprint(v1::Plugin& p, const v1::Fingerprint& f, int64_t now_ms) {
  if (f.remove()) return remove_instance(p, f.type(), f.node_id());
  auto inst = f.instance();
  inst.set_node_id(f.node_id());
  if (!upsert_instance(p, f.type(), inst)) return false;
  for (auto* list : {p.mutable_controllers(), p.mutable_nodes()})
    for (auto& i : *list)
      if (i.node_id() == f.node_id()) i.set_updated_at_ms(now_ms);
  return true;
}

std::optional<v1::Node> node_after_fingerprint(const catalog& c, const v1::Fingerprint& f,
                                               const v1::Plugin& p) {
  v1::Node next;
  if (const auto* n = find_node(c, f.node_id())) next = *n;
  next.set_id(f.node_id());
  bool runs = node_instance(p, f.node_id()) != nullptr;
  for (const auto& ctrl : p.controllers()) runs |= ctrl.node_id() == f.node_id();
  auto* ids = next.mutable_plugin_ids();
  auto pos = std::find(ids->begin(), ids->end(), p.id());
  bool listed = pos != ids->end();
  bool changed = false;
  if (runs && !listed) {
    ids->Add(std::string(p.id()));
    std::sort(ids->begin(), ids->end());
    changed = true;
  } else if (!runs && listed) {
    ids->erase(pos);
    changed = true;
  }
  // A node only named by hand-made fingerprints (no client) is ready while
  // it reports plugins.
  if (!f.remove() && !next.has_client() && next.status() != v1::NODE_READY) {
    next.set_status(v1::NODE_READY);
    changed = true;
  }
  if (!changed) return std::nullopt;
  return next;
}

std::vector<v1::Fingerprint> instances_of_down_node(const catalog& c, const std::string& node_id) {
  std::vector<v1::Fingerprint> out;
  const auto* n = find_node(c, node_id);
  if (n == nullptr) return out;
  for (const auto& plugin_id : n->plugin_ids()) {
    if (find_plugin(c, plugin_id) == nullptr) continue;
    v1::Fingerprint f;
    f.set_plugin_id(plugin_id);
    f.set_node_id(node_id);
    f.set_type(v1::PLUGIN_MONOLITH);  // both its controller and node instance
    f.set_remove(true);
    out.push_back(std::move(f));
  }
  return out;
}

bool instances_missing(const catalog& c, const std::string& node_id) {
  const auto* n = find_node(c, node_id);
  if (n == nullptr || n->plugins_withdrawn()) return false;
  for (const auto& id : n->plugin_ids()) {
    const auto* p = find_plugin(c, id);
    if (p == nullptr) return true;
    bool runs = node_instance(*p, node_id) != nullptr;
    for (const auto& ctrl : p->controllers()) runs |= ctrl.node_id() == node_id;
    if (!runs) return true;
  }
  return false;
}

bool report_plugins_again(const catalog& c, const std::string& node_id, bool was_down) {
  return was_down || instances_missing(c, node_id);
}

std::vector<std::string> plugins_to_collect(const catalog& c) {
  std::set<std::string> empty;
  for (const auto& [id, p] : c.plugins)
    if (plugin_is_empty(p)) empty.insert(id);
  // Only when there is one: a scan of every volume's plugin id.
  for (auto it = c.volumes.begin(); it != c.volumes.end() && !empty.empty(); ++it)
    empty.erase(it->second.plugin_and_external_id().first);
  return {empty.begin(), empty.end()};
}

}  // namespace berth
