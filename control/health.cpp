#include "control/health.hpp"
#include "messages/failure.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace berth {

health_call health_call_of(const v1::PluginInstance& controller) {
  if (!controller.volume_condition()) return health_call::none;
  if (controller.list_volumes()) return health_call::list_volumes;
  if (controller.get_volume()) return health_call::get_volume;
  return health_call::none;
}

health_plan plan_health_check(const v1::Plugin& p, const std::vector<std::string>& candidates) {
  health_plan plan;
  for (const auto& node : candidates)
    for (const auto& i : p.controllers()) {
      if (i.node_id() != node || !i.healthy()) continue;
      auto call = health_call_of(i);
      if (call == health_call::none) break;
      if (plan.call == health_call::none) plan.call = call;
      if (call == plan.call) plan.controllers.push_back(node);
      break;
    }
  return plan;
}

bool health_due(int64_t last_ms, int64_t now_ms, int64_t interval_ms) {
  if (interval_ms < 0) return false;
  if (last_ms == 0) return true;
  return now_ms - last_ms >= interval_ms;
}

std::optional<v1::VolumeHealthRequest> health_request(const catalog& c,
                                                      const std::string& plugin_id,
                                                      health_call call) {
  if (call == health_call::none) return std::nullopt;
  v1::VolumeHealthRequest r;
  r.set_plugin_id(plugin_id);
  r.set_use_list(call == health_call::list_volumes);
  std::set<std::string> ids;
  for (const auto& [key, row] : c.volumes) {
    auto [plugin, external] = row.plugin_and_external_id();
    if (plugin == plugin_id && !external.empty()) ids.insert(std::move(external));
  }
  if (ids.empty()) return std::nullopt;
  if (call == health_call::get_volume)
    for (const auto& id : ids) r.add_external_ids(id);
  return r;
}

bool condition_differs(const v1::VolumeCondition& a, const v1::VolumeCondition& b) {
  return a.abnormal() != b.abnormal() || a.message() != b.message();
}

std::vector<condition_change> condition_changes(const catalog& c, const std::string& plugin_id,
                                                const v1::VolumeHealthResult& r, int64_t now_ms) {
  std::vector<condition_change> out;
  for (const auto& [key, row] : c.volumes) {
    auto [plugin, external] = row.plugin_and_external_id();
    if (plugin != plugin_id || external.empty()) continue;
    auto it = r.conditions().find(external);
    if (it == r.conditions().end()) continue;
    auto v = row.get();
    v1::VolumeCondition to;
    to.set_abnormal(it->second.abnormal());
    // An ok volume keeps no message: a plugin that says "ok" or "" for a
    // healthy volume is not a change.
    if (to.abnormal()) to.set_message(it->second.message());
    if (!condition_differs(v.condition(), to)) continue;
    to.set_since_ms(now_ms);
    out.push_back({key, to, to.abnormal()});
  }
  return out;
}

std::string condition_log_line(const condition_change& ch) {
  return ch.abnormal_now ? "volume turned abnormal" : "volume is ok again";
}

bool report_stale(const v1::Node& node, int64_t measured_at_ms) {
  for (const auto& u : node.volume_usage())
    if (u.updated_at_ms() > measured_at_ms) return true;
  return false;
}

bool same_usage(const v1::VolumeUsage& a, const v1::VolumeUsage& b) {
  return a.namespace_() == b.namespace_() && a.volume_id() == b.volume_id() &&
         a.node_id() == b.node_id() && a.capacity_bytes() == b.capacity_bytes() &&
         a.used_bytes() == b.used_bytes() && a.available_bytes() == b.available_bytes() &&
         a.condition_reported() == b.condition_reported() && a.abnormal() == b.abnormal() &&
         a.message() == b.message();
}

std::variant<failure, std::optional<v1::Node>> node_after_report(const catalog& c,
                                                                 const v1::VolumeStatsReport& r) {
  const auto* node = find_node(c, r.node_id());
  if (node == nullptr)
    return failure{errc::not_found, "volume stats report from node " + quote_name(r.node_id()) +
                                        ", which is not registered; its client registers it "
                                        "on its next fingerprint"};
  if (report_stale(*node, r.measured_at_ms())) return std::optional<v1::Node>{};
  auto claimed = volumes_claimed_on(c, r.node_id());
  std::map<volume_key, v1::VolumeUsage> before, after;
  for (const auto& u : node->volume_usage()) before[{u.namespace_(), u.volume_id()}] = u;
  for (auto u : r.usage()) {
    volume_key key{ns_or_default(u.namespace_()), u.volume_id()};
    if (!claimed.count(key) || !has_volume(c, key)) continue;
    u.set_namespace_(key.first);
    u.set_node_id(r.node_id());
    if (!u.abnormal()) u.clear_message();
    auto was = before.find(key);
    u.set_updated_at_ms(was != before.end() && same_usage(was->second, u)
                            ? was->second.updated_at_ms()
                            : r.measured_at_ms());
    after[key] = u;
  }
  bool changed = before.size() != after.size();
  if (!changed)
    for (const auto& [key, u] : after) {
      auto was = before.find(key);
      if (was == before.end() || !same_usage(was->second, u)) {
        changed = true;
        break;
      }
    }
  if (!changed) return std::optional<v1::Node>{};
  v1::Node next = *node;
  next.clear_volume_usage();
  for (auto& [key, u] : after) *next.add_volume_usage() = u;
  return std::optional<v1::Node>{std::move(next)};
}

std::vector<v1::VolumeUsage> usage_of(const catalog& c, const volume_key& key) {
  std::vector<v1::VolumeUsage> out;
  auto v = find_volume(c, key);
  if (!v) return out;
  std::set<std::string> nodes;
  for (const auto& cl : v->claims()) nodes.insert(cl.node_id());
  for (const auto& n : nodes) {
    const auto* node = find_node(c, n);
    if (node == nullptr) continue;
    for (const auto& u : node->volume_usage())
      if (u.namespace_() == key.first && u.volume_id() == key.second) out.push_back(u);
  }
  return out;
}

std::vector<health_series> series_of(const catalog& c, const volume_key& key) {
  std::vector<health_series> out;
  auto v = find_volume(c, key);
  if (!v) return out;
  // The controller's series exists for a volume in use or abnormal: a
  // million idle volumes do not make a million series of zeros.
  if (v->claims_size() > 0 || v->condition().abnormal()) {
    health_series controller;
    controller.abnormal = v->condition().abnormal();
    out.push_back(controller);
  }
  for (const auto& u : usage_of(c, key)) {
    health_series s;
    s.node = u.node_id();
    s.has_usage = true;
    s.capacity_bytes = u.capacity_bytes();
    s.used_bytes = u.used_bytes();
    s.abnormal = u.abnormal();
    out.push_back(s);
  }
  return out;
}

}  // namespace berth
