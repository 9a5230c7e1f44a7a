#include "actors/change_log.hpp"

#include <map>
#include <string>

#include "log/log.hpp"
#include "messages/model.hpp"

namespace berth {

namespace {

constexpr const char* component = "leader";

std::string str(std::string_view s) { return std::string(s); }

void log_volume(const v1::Volume* before, const v1::Volume& after, uint64_t index) {
  const auto& ns = after.namespace_();
  const auto& id = after.id();
  if (before == nullptr) {
    logging::info(component, "volume registered",
                  {{"namespace", ns}, {"volume", id}, {"plugin", after.plugin_id()},
                   {"external_id", after.external_id()}, {"index", index}});
    return;
  }
  std::map<std::string, const v1::Claim*> old;
  for (const auto& c : before->claims()) old[c.alloc_id()] = &c;
  bool claims_changed = false;
  for (const auto& c : after.claims()) {
    auto it = old.find(c.alloc_id());
    if (it == old.end()) {
      claims_changed = true;
      logging::info(component, "volume claimed",
                    {{"namespace", ns}, {"volume", id}, {"alloc", c.alloc_id()},
                     {"node", c.node_id()}, {"plugin", after.plugin_id()},
                     {"mode", str(name_of(c.mode()))},
                     {"access_mode", str(name_of(c.access_mode()))}, {"index", index}});
      continue;
    }
    const auto& was = *it->second;
    if (was.state() != c.state()) {
      claims_changed = true;
      logging::info(component, "volume claim release step",
                    {{"namespace", ns}, {"volume", id}, {"alloc", c.alloc_id()},
                     {"node", c.node_id()}, {"plugin", after.plugin_id()},
                     {"from", str(name_of(was.state()))}, {"to", str(name_of(c.state()))},
                     {"reason", c.release_reason()}, {"index", index}});
    }
    old.erase(it);
  }
  for (const auto& [alloc, c] : old) {
    claims_changed = true;
    logging::info(component, "volume released",
                  {{"namespace", ns}, {"volume", id}, {"alloc", alloc}, {"node", c->node_id()},
                   {"plugin", after.plugin_id()}, {"reason", c->release_reason()},
                   {"index", index}});
  }
  if (before->resource_exhausted_at_ms() != after.resource_exhausted_at_ms()) {
    claims_changed = true;
    if (after.resource_exhausted_at_ms() != 0)
      logging::warn(component, "volume refuses claims: the storage provider is out of resources",
                    {{"namespace", ns}, {"volume", id}, {"plugin", after.plugin_id()},
                     {"index", index}});
    else
      logging::info(component, "volume takes claims again",
                    {{"namespace", ns}, {"volume", id}, {"plugin", after.plugin_id()},
                     {"index", index}});
  }
  if (before->availability() != after.availability()) {
    claims_changed = true;
    logging::info(component, "volume availability changed",
                  {{"namespace", ns}, {"volume", id}, {"plugin", after.plugin_id()},
                   {"from", str(name_of(before->availability()))},
                   {"to", str(name_of(after.availability()))}, {"index", index}});
  }
  if (!claims_changed)
    logging::info(component, "volume updated",
                  {{"namespace", ns}, {"volume", id}, {"plugin", after.plugin_id()},
                   {"index", index}});
}

using instance_key = std::pair<std::string, std::string>;  // type, node

std::map<instance_key, const v1::PluginInstance*> instances(const v1::Plugin& p) {
  std::map<instance_key, const v1::PluginInstance*> out;
  for (const auto& i : p.controllers()) out[{"controller", i.node_id()}] = &i;
  for (const auto& i : p.nodes()) out[{"node", i.node_id()}] = &i;
  return out;
}

void log_plugin(const v1::Plugin* before, const v1::Plugin& after, uint64_t index) {
  if (before == nullptr)
    logging::info(component, "plugin registered",
                  {{"plugin", after.id()}, {"provider", after.provider()},
                   {"version", after.provider_version()}, {"index", index}});
  auto old = before ? instances(*before) : std::map<instance_key, const v1::PluginInstance*>{};
  for (const auto& [key, now] : instances(after)) {
    const auto& [type, node] = key;
    auto it = old.find(key);
    if (it == old.end()) {
      auto l = now->healthy() ? logging::level::info : logging::level::warn;
      logging::write(l, component, "plugin instance added",
                     {{"plugin", after.id()}, {"node", node}, {"type", type},
                      {"healthy", now->healthy() ? "true" : "false"},
                      {"health", now->health_description()}, {"index", index}});
      continue;
    }
    if (it->second->healthy() != now->healthy()) {
      if (now->healthy())
        logging::info(component, "plugin instance healthy",
                      {{"plugin", after.id()}, {"node", node}, {"type", type},
                       {"index", index}});
      else
        logging::warn(component, "plugin instance unhealthy",
                      {{"plugin", after.id()}, {"node", node}, {"type", type},
                       {"health", now->health_description()}, {"index", index}});
    }
    old.erase(it);
  }
  for (const auto& [key, gone] : old)
    logging::info(component, "plugin instance removed",
                  {{"plugin", after.id()}, {"node", key.second}, {"type", key.first},
                   {"index", index}});
}

void log_node(const v1::Node* before, const v1::Node& after, uint64_t index) {
  bool down = after.status() == v1::NODE_DOWN;
  if (before == nullptr) {
    logging::info(component, "node registered",
                  {{"node", after.id()}, {"status", str(name_of(after.status()))},
                   {"index", index}});
    return;
  }
  bool was_down = before->status() == v1::NODE_DOWN;
  if (down && !was_down)
    logging::warn(component, "node down: its client stopped heartbeating, its allocs are lost",
                  {{"node", after.id()}, {"index", index}});
  else if (!down && was_down)
    logging::info(component, "node back", {{"node", after.id()}, {"index", index}});
  else
    logging::debug(component, "node updated", {{"node", after.id()}, {"index", index}});
}

void log_alloc(const v1::Alloc* before, const v1::Alloc& after, uint64_t index) {
  auto l = after.state() == v1::ALLOC_FAILED || after.state() == v1::ALLOC_LOST
               ? logging::level::warn
               : logging::level::info;
  if (before == nullptr) {
    logging::write(l, component, "alloc created",
                   {{"namespace", after.namespace_()}, {"alloc", after.id()},
                    {"node", after.node_id()}, {"state", str(name_of(after.state()))},
                    {"why", after.message()}, {"index", index}});
    return;
  }
  if (before->state() == after.state()) {
    logging::debug(component, "alloc updated",
                   {{"namespace", after.namespace_()}, {"alloc", after.id()},
                    {"node", after.node_id()}, {"index", index}});
    return;
  }
  logging::write(l, component, "alloc state changed",
                 {{"namespace", after.namespace_()}, {"alloc", after.id()},
                  {"node", after.node_id()}, {"from", str(name_of(before->state()))},
                  {"to", str(name_of(after.state()))}, {"exit_code", after.exit_code()},
                  {"why", after.message()}, {"index", index}});
}

}  // namespace

void log_change(const applied_change& a, uint64_t index) {
  const auto& c = a.change;
  const auto& b = a.before;
  switch (c.change_case()) {
    case v1::Change::kVolumeUpsert:
      log_volume(b.has_volume_upsert() ? &b.volume_upsert() : nullptr, c.volume_upsert(), index);
      break;
    case v1::Change::kVolumeDelete:
      logging::info(component, "volume deregistered",
                    {{"namespace", c.volume_delete().namespace_()},
                     {"volume", c.volume_delete().id()}, {"index", index}});
      break;
    case v1::Change::kPluginUpsert:
      log_plugin(b.has_plugin_upsert() ? &b.plugin_upsert() : nullptr, c.plugin_upsert(), index);
      break;
    case v1::Change::kPluginDelete:
      logging::info(component, "plugin removed: no instance left",
                    {{"plugin", c.plugin_delete()}, {"index", index}});
      break;
    case v1::Change::kNodeUpsert:
      log_node(b.has_node_upsert() ? &b.node_upsert() : nullptr, c.node_upsert(), index);
      break;
    case v1::Change::kAllocUpsert:
      log_alloc(b.has_alloc_upsert() ? &b.alloc_upsert() : nullptr, c.alloc_upsert(), index);
      break;
    case v1::Change::kAllocDelete:
      logging::info(component, "alloc deleted", {{"alloc", c.alloc_delete()}, {"index", index}});
      break;
    case v1::Change::kNodeDelete:
      logging::info(component, "node removed", {{"node", c.node_delete()}, {"index", index}});
      break;
    case v1::Change::kRestoreState:
      logging::warn(component, "state restored from an operator's snapshot", {{"index", index}});
      break;
    // ACLs: names and accessor ids only, never a secret or its hash.
    case v1::Change::kAclPolicyUpsert:
      logging::info(component, b.has_acl_policy_upsert() ? "ACL policy updated" : "ACL policy created",
                    {{"policy", c.acl_policy_upsert().name()}, {"index", index}});
      break;
    case v1::Change::kAclPolicyDelete:
      logging::info(component, "ACL policy deleted",
                    {{"policy", c.acl_policy_delete()}, {"index", index}});
      break;
    case v1::Change::kAclBootstrap:
    case v1::Change::kAclTokenUpsert: {
      const auto& t = c.has_acl_bootstrap() ? c.acl_bootstrap() : c.acl_token_upsert();
      logging::info(component, c.has_acl_bootstrap() ? "ACL bootstrapped" : "ACL token created",
                    {{"accessor", t.accessor_id()}, {"name", t.name()}, {"type", t.type()},
                     {"index", index}});
      break;
    }
    case v1::Change::kAclTokenDelete:
      logging::info(component, "ACL token deleted",
                    {{"accessor", c.acl_token_delete()}, {"index", index}});
      break;
    default:
      break;
  }
}

}  // namespace berth
