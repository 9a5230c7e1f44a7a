#include "control/snapshots.hpp"
#include "messages/failure.hpp"

#include <cctype>
#include <map>
#include <set>

namespace berth {

std::string capability_name(controller_capability c) {
  switch (c) {
    case controller_capability::create_delete_snapshot:
      return "CREATE_DELETE_SNAPSHOT";
    case controller_capability::list_snapshots:
      return "LIST_SNAPSHOTS";
    case controller_capability::clone_volume:
      return "CLONE_VOLUME";
    case controller_capability::modify_volume:
      return "MODIFY_VOLUME";
    case controller_capability::expand_volume:
      return "EXPAND_VOLUME";
    case controller_capability::group_snapshot:
      return "CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT";
    case controller_capability::list_volumes:
      return "LIST_VOLUMES";
  }
  return "?";
}

bool advertises(const v1::PluginInstance& controller, controller_capability c) {
  switch (c) {
    case controller_capability::create_delete_snapshot:
      return controller.create_delete_snapshot();
    case controller_capability::list_snapshots:
      return controller.list_snapshots();
    case controller_capability::clone_volume:
      return controller.clone_volume();
    case controller_capability::modify_volume:
      return controller.modify_volume();
    case controller_capability::expand_volume:
      return controller.expand_volume();
    case controller_capability::group_snapshot:
      return controller.group_snapshot();
    case controller_capability::list_volumes:
      return controller.list_volumes();
  }
  return false;
}

bool plugin_can(const v1::Plugin& p, controller_capability c) {
  for (const auto& i : p.controllers())
    if (i.healthy() && advertises(i, c)) return true;
  return false;
}

std::vector<std::string> capable_controllers(const v1::Plugin& p,
                                             const std::vector<std::string>& candidates,
                                             controller_capability c) {
  std::vector<std::string> out;
  for (const auto& node : candidates)
    for (const auto& i : p.controllers())
      if (i.node_id() == node && advertises(i, c)) {
        out.push_back(node);
        break;
      }
  return out;
}

std::optional<failure> capability_refusal(const v1::Plugin* p, const std::string& plugin_id,
                                          controller_capability c, const std::string& what) {
  if (p == nullptr)
    return failure{errc::not_found, what + ": plugin " + quote_name(plugin_id) +
                                        " is not registered by any node (see berth plugin status)"};
  if (plugin_can(*p, c)) return std::nullopt;
  bool any = false, healthy = false;
  for (const auto& i : p->controllers()) {
    any |= advertises(i, c);
    healthy |= i.healthy();
  }
  if (any)  // advertised, but only by unhealthy controllers
    return failure{errc::unavailable, what + ": no healthy controller of plugin " +
                                          quote_name(plugin_id) + " advertises " + capability_name(c) +
                                          " right now; retry once one is "
                                          "healthy (see berth plugin status " +
                                          plugin_id + ")"};
  return failure{errc::refused,
                 what + ": plugin " + quote_name(plugin_id) + " does not support it (its " +
                     (p->controllers().empty()
                          ? std::string("plugin has no controller service")
                          : std::string("controllers do not advertise ") + capability_name(c)) +
                     (healthy || p->controllers().empty() ? "" : "; none is healthy") +
                     "); use a plugin that does"};
}

std::optional<controller_capability> content_source_capability(const v1::Volume& spec) {
  if (!spec.snapshot_id().empty()) return controller_capability::create_delete_snapshot;
  if (!spec.clone_id().empty()) return controller_capability::clone_volume;
  return std::nullopt;
}

std::vector<problem> content_source_problems(const v1::Volume& spec, bool creating) {
  std::vector<problem> out;
  bool snap = !spec.snapshot_id().empty(), clone = !spec.clone_id().empty();
  if (snap && clone)
    out.push_back(
        {"snapshot_id, clone_id",
         "are exclusive: name one content source (a snapshot or a volume to clone), not both"});
  if (!creating) {
    if (snap) out.push_back({"snapshot_id", "only volume create restores a snapshot"});
    if (clone) out.push_back({"clone_id", "only volume create clones a volume"});
  }
  if (clone && spec.clone_id() == spec.id())
    out.push_back({"clone_id", "names the volume being created"});
  if (!spec.clone_external_id().empty())
    out.push_back({"clone_external_id", "is set by the server from clone_id; remove it"});
  return out;
}

std::variant<failure, std::string> clone_source(const catalog& c, const v1::Volume& spec) {
  auto ns = ns_or_default(spec.namespace_());
  auto src = find_volume(c, {ns, spec.clone_id()});
  if (!src)
    return failure{errc::not_found, "volume " + quote_name(spec.id()) + ": clone_id " +
                                        quote_name(spec.clone_id()) + " is not a volume of namespace " +
                                        quote_name(ns) + " (see berth volume status)"};
  if (src->plugin_id() != spec.plugin_id())
    return failure{errc::invalid,
                   "volume " + quote_name(spec.id()) + ": clone_id " + quote_name(spec.clone_id()) +
                       " is a volume of plugin " + quote_name(src->plugin_id()) + ", not of " +
                       quote_name(spec.plugin_id()) + "; a plugin clones only its own volumes"};
  if (src->external_id().empty())
    return failure{errc::refused, "volume " + quote_name(spec.id()) + ": clone_id " +
                                      quote_name(spec.clone_id()) + " has no external id to clone"};
  return src->external_id();
}

std::string generated_snapshot_name(const std::string& ns, const std::string& volume_id,
                                    int64_t now_ms) {
  std::string base = "berth-" + ns_or_default(ns) + "-" + volume_id;
  std::string clean;
  for (char ch : base) {
    auto u = static_cast<unsigned char>(ch);
    clean += std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '-';
  }
  auto stamp = "-" + std::to_string(now_ms < 0 ? 0 : now_ms);
  // Long ids are cut, never the moment: it is what makes names differ.
  if (clean.size() + stamp.size() > 63) clean.resize(63 - stamp.size());
  return clean + stamp;
}

std::vector<problem> snapshot_request_problems(const v1::SnapshotRequest& r,
                                               v1::Request::CommandCase which) {
  std::vector<problem> out;
  switch (which) {
    case v1::Request::kSnapshotCreate: {
      bool group = !r.volume_ids().empty();
      if (group && !r.volume_id().empty())
        out.push_back(
            {"VOLUME, --group", "a group snapshot names its volumes in volume_ids, not volume_id"});
      if (!group && r.volume_id().empty()) out.push_back({"VOLUME", "is required"});
      if (r.name().empty())
        out.push_back({group ? "--group" : "NAME", "is required (the shell makes one)"});
      if (!r.snapshot_id().empty()) out.push_back({"snapshot_id", "is chosen by the plugin"});
      std::set<std::string> seen;
      for (const auto& v : r.volume_ids()) {
        if (v.empty())
          out.push_back({"VOLUME", "a volume id must not be empty"});
        else if (!seen.insert(v).second)
          out.push_back({"VOLUME", quote_name(v) + " is named twice; name each volume once"});
      }
      if (!r.source_external_ids().empty())
        out.push_back({"source_external_ids", "are set by the server"});
      break;
    }
    case v1::Request::kSnapshotDelete: {
      bool group = !r.group_snapshot_id().empty();
      if (r.plugin_id().empty()) out.push_back({"PLUGIN", "is required"});
      if (group && !r.snapshot_id().empty())
        out.push_back(
            {"SNAPSHOT_ID, --group", "name a snapshot or a group snapshot to delete, not both"});
      if (!group && r.snapshot_id().empty()) out.push_back({"SNAPSHOT_ID", "is required"});
      if (!group && !r.snapshot_ids().empty())
        out.push_back({"--member", "names a group snapshot's members; it needs --group"});
      for (const auto& m : r.snapshot_ids())
        if (m.empty()) out.push_back({"--member", "a snapshot id must not be empty"});
      break;
    }
    case v1::Request::kSnapshotList:
      if (r.plugin_id().empty() && (r.per_page() != 0 || !r.page_token().empty()))
        out.push_back({"--per-page, --page-token",
                       "need --plugin: a page token belongs to one plugin's listing"});
      break;
    default:
      out.push_back({"(request)", "is not a snapshot request"});
  }
  for (const auto& [k, v] : r.parameters())
    if (k.empty()) out.push_back({"--parameter", "a key must not be empty"});
  for (const auto& [k, v] : r.secrets())
    if (k.empty()) out.push_back({"--secret", "a key must not be empty"});
  if (!r.source_external_id().empty())
    out.push_back({"source_external_id", "is set by the server"});
  return out;
}

std::variant<failure, group_snapshot_plan> plan_group_snapshot(const catalog& c,
                                                               const v1::SnapshotRequest& r) {
  auto ns = ns_or_default(r.namespace_());
  auto object = "group snapshot " + quote_name(r.name());
  std::vector<std::string> missing, no_external;
  std::map<std::string, std::vector<std::string>> by_plugin;  // plugin: its volumes
  std::vector<v1::Volume> members;
  for (const auto& id : r.volume_ids()) {
    auto v = find_volume(c, {ns, id});
    if (!v) {
      missing.push_back(quote_name(id));
      continue;
    }
    by_plugin[v->plugin_id()].push_back(quote_name(id));
    if (v->external_id().empty()) no_external.push_back(quote_name(id));
    members.push_back(std::move(*v));
  }
  auto join = [](const std::vector<std::string>& xs) {
    std::string out;
    for (const auto& x : xs) out += (out.empty() ? "" : ", ") + x;
    return out;
  };
  if (!missing.empty())
    return failure{errc::not_found,
                   object + ": " + join(missing) +
                       (missing.size() == 1 ? " is not a volume" : " are not volumes") +
                       " of namespace " + quote_name(ns) +
                       " (see berth volume status); nothing was taken"};
  if (by_plugin.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [plugin, vols] : by_plugin)
      parts.push_back(join(vols) + " of plugin " + quote_name(plugin));
    return failure{errc::invalid, object + ": the volumes are of more than one plugin (" +
                                      join(parts) +
                                      "); a group snapshot is taken by one plugin, so name "
                                      "volumes of one plugin"};
  }
  if (!no_external.empty())
    return failure{errc::refused, object + ": " + join(no_external) +
                                      (no_external.size() == 1 ? " is" : " are") +
                                      " not created by its plugin yet (no external id); retry "
                                      "once berth volume status shows it created"};
  group_snapshot_plan plan;
  plan.plugin_id = by_plugin.begin()->first;
  for (size_t i = 0; i < members.size(); ++i) {
    auto secrets = call_secrets(members[i], r.secrets());
    if (i == 0) {
      plan.secrets = std::move(secrets);
    } else if (std::map<std::string, std::string>(secrets.begin(), secrets.end()) !=
               std::map<std::string, std::string>(plan.secrets.begin(), plan.secrets.end())) {
      return failure{errc::invalid,
                     object + ": volumes " + quote_name(members[0].id()) + " and " +
                         quote_name(members[i].id()) +
                         " have different secrets, and CreateVolumeGroupSnapshot carries one "
                         "set; give the keys that differ with --secret K=V (a value given is "
                         "sent for every volume)"};
    }
    plan.external_ids.push_back(members[i].external_id());
  }
  return plan;
}

std::variant<failure, std::vector<std::string>> plugins_to_list(const catalog& c,
                                                                const v1::SnapshotRequest& r) {
  std::vector<std::string> out;
  if (!r.plugin_id().empty()) {
    if (auto f =
            capability_refusal(find_plugin(c, r.plugin_id()), r.plugin_id(),
                               controller_capability::list_snapshots, "snapshots cannot be listed"))
      return *f;
    out.push_back(r.plugin_id());
    return out;
  }
  for (const auto& [id, p] : c.plugins)
    if (plugin_can(p, controller_capability::list_snapshots)) out.push_back(id);
  return out;
}

std::vector<problem> modify_problems(const v1::VolumeModifyRequest& r) {
  std::vector<problem> out;
  if (r.volume_id().empty()) out.push_back({"VOLUME", "is required"});
  if (r.parameters().empty())
    out.push_back({"--parameter", "name at least one mutable parameter K=V to set"});
  for (const auto& [k, v] : r.parameters())
    if (k.empty()) out.push_back({"--parameter", "a key must not be empty"});
  for (const auto& [k, v] : r.secrets())
    if (k.empty()) out.push_back({"--secret", "a key must not be empty"});
  return out;
}

v1::Volume modified(v1::Volume v, const v1::VolumeModifyRequest& r) {
  for (const auto& [k, val] : r.parameters()) (*v.mutable_modified_parameters())[k] = val;
  return v;
}

google::protobuf::Map<std::string, std::string> call_secrets(
    const v1::Volume& v, const google::protobuf::Map<std::string, std::string>& given) {
  auto out = v.secrets();
  for (const auto& [k, val] : given) out[k] = val;
  return out;
}

void add_sources(const catalog& c, google::protobuf::RepeatedPtrField<v1::Snapshot>& snapshots) {
  if (snapshots.empty()) return;
  std::map<std::pair<std::string, std::string>, const volume_key*>
      by_external;  // plugin, external id
  for (const auto& s : snapshots)
    by_external.emplace(std::make_pair(s.plugin_id(), s.source_external_id()), nullptr);
  for (const auto& [key, row] : c.volumes) {
    auto it = by_external.find(row.plugin_and_external_id());
    if (it != by_external.end() && it->second == nullptr) it->second = &key;
  }
  for (auto& s : snapshots) {
    const auto* key = by_external[{s.plugin_id(), s.source_external_id()}];
    if (key == nullptr || s.source_external_id().empty()) continue;
    s.set_namespace_(key->first);
    s.set_source_volume_id(key->second);
  }
}

}  // namespace berth
