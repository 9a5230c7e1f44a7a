#include "messages/nomad.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "messages/codec.hpp"
#include "messages/model.hpp"

namespace berth {

using nlohmann::ordered_json;

namespace {

ordered_json topology(const v1::Topology& t) {
  ordered_json segs = ordered_json::object();
  for (const auto& [k, val] : t.segments()) segs[k] = val;
  return ordered_json{{"Segments", segs}};
}

ordered_json string_map(const google::protobuf::Map<std::string, std::string>& m) {
  ordered_json out = ordered_json::object();
  // Sorted: a protobuf map has no order of its own.
  std::vector<std::pair<std::string, std::string>> kv(m.begin(), m.end());
  std::sort(kv.begin(), kv.end());
  for (const auto& [k, val] : kv) out[k] = val;
  return out;
}

// The claims that hold the volume now (taken), by mode.
struct claim_counts {
  ordered_json read = ordered_json::object(), write = ordered_json::object();
  int readers = 0, writers = 0;
  v1::AttachmentMode attachment = v1::ATTACHMENT_MODE_UNKNOWN;
};

claim_counts claims_of(const v1::Volume& v) {
  claim_counts c;
  for (const auto& cl : v.claims()) {
    if (cl.state() != v1::CLAIM_TAKEN) continue;
    if (c.attachment == v1::ATTACHMENT_MODE_UNKNOWN) c.attachment = cl.attachment_mode();
    if (cl.mode() == v1::CLAIM_WRITE) {
      c.write[cl.alloc_id()] = nullptr;
      ++c.writers;
    } else {
      c.read[cl.alloc_id()] = nullptr;
      ++c.readers;
    }
  }
  return c;
}

// Nomad's Schedulable: a claim could be placed now (the plugin healthy);
// berth adds its availability (a paused or draining volume takes none).
bool schedulable(const v1::Volume& v, const v1::Plugin* plugin) {
  return plugin != nullptr && !volume_unhealthy(v, plugin) && v.availability() == v1::VOLUME_ACTIVE;
}

struct health_counts {
  bool controller_required = false;
  int controllers_healthy = 0, controllers_expected = 0, nodes_healthy = 0, nodes_expected = 0;
  std::string provider;
};

health_counts counts_of(const v1::Plugin* p) {
  health_counts out;
  if (p == nullptr) return out;
  auto h = health_of(*p);
  out.controller_required = p->controller_required();
  out.controllers_healthy = h.controllers_healthy;
  out.controllers_expected = h.controllers_expected;
  out.nodes_healthy = h.nodes_healthy;
  out.nodes_expected = h.nodes_expected;
  out.provider = p->provider();
  return out;
}

ordered_json topologies(const v1::Volume& v) {
  ordered_json out = ordered_json::array();
  for (const auto& t : v.accessible_topology()) out.push_back(topology(t));
  return out;
}

// A CSIInfo: one instance of the plugin on one node.
ordered_json info(const v1::Plugin& p, const v1::PluginInstance& i, bool controller) {
  ordered_json j{{"PluginID", p.id()},
                 {"AllocID", ""},
                 {"Healthy", i.healthy()},
                 {"HealthDescription", i.health_description()},
                 {"UpdateTime", nomad_time(i.updated_at_ms())},
                 {"Provider", i.provider().empty() ? p.provider() : i.provider()},
                 {"ProviderVersion",
                  i.provider_version().empty() ? p.provider_version() : i.provider_version()},
                 {"RequiresControllerPlugin", p.controller_required()},
                 {"RequiresTopologies", !i.accessible_topology().segments().empty()}};
  if (controller) {
    // Capabilities berth does not probe are false (docs/http-api.md).
    j["ControllerInfo"] = ordered_json{{"SupportsCreateDelete", false},
                                       {"SupportsAttachDetach", i.publish_unpublish()},
                                       {"SupportsListVolumes", i.list_volumes()},
                                       {"SupportsGetCapacity", false},
                                       {"SupportsCreateDeleteSnapshot", i.create_delete_snapshot()},
                                       {"SupportsListSnapshots", i.list_snapshots()},
                                       {"SupportsClone", i.clone_volume()},
                                       {"SupportsReadOnlyAttach", false},
                                       {"SupportsExpand", i.expand_volume()},
                                       {"SupportsListVolumesAttachedNodes", false},
                                       {"SupportsCondition", i.volume_condition()},
                                       {"SupportsGet", i.get_volume()}};
  } else {
    j["NodeInfo"] = ordered_json{{"ID", i.csi_node_id()},
                                 {"MaxVolumes", i.max_volumes()},
                                 {"AccessibleTopology", topology(i.accessible_topology())},
                                 {"RequiresNodeStageVolume", i.stage_unstage()},
                                 {"SupportsStats", i.get_volume_stats()},
                                 {"SupportsExpand", i.node_expand_volume()},
                                 {"SupportsCondition", i.volume_condition()}};
  }
  return j;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::string nomad_mode(v1::AccessMode m) {
  return m == v1::ACCESS_MODE_UNKNOWN ? std::string() : std::string(name_of(m));
}

std::string nomad_mode(v1::AttachmentMode m) {
  return m == v1::ATTACHMENT_MODE_UNKNOWN ? std::string() : std::string(name_of(m));
}

std::string nomad_time(int64_t unix_ms) {
  if (unix_ms <= 0) return "0001-01-01T00:00:00Z";
  std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(unix_ms % 1000));
  return buf;
}

nlohmann::ordered_json nomad_volume_stub(const v1::Volume& v, const v1::Plugin* plugin) {
  auto c = claims_of(v);
  auto h = counts_of(plugin);
  ordered_json j{{"ID", v.id()},
                 {"Namespace", v.namespace_()},
                 {"Name", v.name().empty() ? v.id() : v.name()},
                 {"ExternalID", v.external_id()},
                 {"Topologies", topologies(v)},
                 {"AccessMode", nomad_mode(mode_in_use(v))},
                 {"AttachmentMode", nomad_mode(c.attachment)},
                 {"CurrentReaders", c.readers},
                 {"CurrentWriters", c.writers},
                 {"Schedulable", schedulable(v, plugin)},
                 {"PluginID", v.plugin_id()},
                 {"Provider", h.provider},
                 {"ControllerRequired", h.controller_required},
                 {"ControllersHealthy", h.controllers_healthy},
                 {"ControllersExpected", h.controllers_expected},
                 {"NodesHealthy", h.nodes_healthy},
                 {"NodesExpected", h.nodes_expected},
                 {"ResourceExhausted", nomad_time(v.resource_exhausted_at_ms())},
                 {"CreateIndex", v.create_index()},
                 {"ModifyIndex", v.modify_index()}};
  return j;
}

nlohmann::ordered_json nomad_volume(const v1::Volume& raw, const v1::Plugin* plugin) {
  const v1::Volume v = redacted(raw);
  auto c = claims_of(v);
  auto h = counts_of(plugin);
  ordered_json required = ordered_json::array(), preferred = ordered_json::array();
  for (const auto& t : v.topology_request().required()) required.push_back(topology(t));
  for (const auto& t : v.topology_request().preferred()) preferred.push_back(topology(t));
  ordered_json caps = ordered_json::array();
  for (const auto& cap : v.capabilities())
    caps.push_back({{"AccessMode", nomad_mode(cap.access_mode())},
                    {"AttachmentMode", nomad_mode(cap.attachment_mode())}});
  ordered_json j{
      {"ID", v.id()},
      {"Name", v.name().empty() ? v.id() : v.name()},
      {"ExternalID", v.external_id()},
      {"Namespace", v.namespace_()},
      {"RequestedTopologies", required.empty() && preferred.empty()
                                  ? ordered_json(nullptr)
                                  : ordered_json{{"Required", required}, {"Preferred", preferred}}},
      {"Topologies", topologies(v)},
      {"AccessMode", nomad_mode(mode_in_use(v))},
      {"AttachmentMode", nomad_mode(c.attachment)},
      // Mount flags are never shown (they may carry credentials).
      {"MountOptions", {{"FSType", v.mount_options().fs_type()}, {"MountFlags", nullptr}}},
      {"Secrets", nullptr},
      {"Parameters", string_map(v.parameters())},
      {"Context", string_map(v.context())},
      {"Capacity", v.capacity_bytes()},
      {"RequestedCapacityMin", v.capacity_min()},
      {"RequestedCapacityMax", v.capacity_max()},
      {"RequestedCapabilities", caps},
      {"CloneID", v.clone_id()},
      {"SnapshotID", v.snapshot_id()},
      {"ReadAllocs", c.read},
      {"WriteAllocs", c.write},
      {"Schedulable", schedulable(v, plugin)},
      {"PluginID", v.plugin_id()},
      {"Provider", h.provider},
      {"ProviderVersion", plugin == nullptr ? std::string() : plugin->provider_version()},
      {"ControllerRequired", h.controller_required},
      {"ControllersHealthy", h.controllers_healthy},
      {"ControllersExpected", h.controllers_expected},
      {"NodesHealthy", h.nodes_healthy},
      {"NodesExpected", h.nodes_expected},
      {"ResourceExhausted", nomad_time(v.resource_exhausted_at_ms())},
      {"CreateIndex", v.create_index()},
      {"ModifyIndex", v.modify_index()}};
  return j;
}

nlohmann::ordered_json nomad_plugin_stub(const v1::Plugin& p) {
  auto h = health_of(p);
  ordered_json j{{"ID", p.id()},
                 {"Provider", p.provider()},
                 {"ControllerRequired", p.controller_required()},
                 {"ControllersHealthy", h.controllers_healthy},
                 {"ControllersExpected", h.controllers_expected},
                 {"NodesHealthy", h.nodes_healthy},
                 {"NodesExpected", h.nodes_expected},
                 {"CreateIndex", p.create_index()},
                 {"ModifyIndex", p.modify_index()}};
  return j;
}

nlohmann::ordered_json nomad_plugin(const v1::Plugin& p) {
  auto h = health_of(p);
  ordered_json controllers = ordered_json::object(), nodes = ordered_json::object();
  for (const auto& i : p.controllers()) controllers[i.node_id()] = info(p, i, true);
  for (const auto& i : p.nodes()) nodes[i.node_id()] = info(p, i, false);
  ordered_json j{{"ID", p.id()},
                 {"Provider", p.provider()},
                 {"Version", p.provider_version()},
                 {"ControllerRequired", p.controller_required()},
                 {"Controllers", controllers},
                 {"Nodes", nodes},
                 {"Allocations", ordered_json::array()},
                 {"ControllersHealthy", h.controllers_healthy},
                 {"ControllersExpected", h.controllers_expected},
                 {"NodesHealthy", h.nodes_healthy},
                 {"NodesExpected", h.nodes_expected},
                 {"CreateIndex", p.create_index()},
                 {"ModifyIndex", p.modify_index()}};
  return j;
}

nomad_query_result parse_nomad_volume_query(const std::map<std::string, std::string>& params) {
  nomad_query_result out;
  nomad_volume_query q;
  auto get = [&](const char* k) {
    auto it = params.find(k);
    return it == params.end() ? std::string() : it->second;
  };
  q.plugin_id = get("plugin_id");
  q.node_id = get("node_id");
  q.prefix = get("prefix");
  q.next_token = get("next_token");
  auto per_page = get("per_page");
  if (!per_page.empty()) {
    if (per_page.size() > 9 || per_page.find_first_not_of("0123456789") != std::string::npos) {
      out.error = "Expect a number for `per_page` query string parameter (got '" +
                  per_page.substr(0, 20) + "')";
      return out;
    }
    q.per_page = std::stoll(per_page);
  }
  if (!get("filter").empty()) {
    out.error =
        "the `filter` expression is not supported by berth; use plugin_id, node_id or prefix";
    return out;
  }
  out.query = std::move(q);
  return out;
}

nomad_volume_page nomad_volumes_page(const std::vector<const v1::Volume*>& volumes,
                                     const nomad_volume_query& q) {
  std::vector<const v1::Volume*> matching;
  for (const auto* v : volumes) {
    if (!starts_with(v->id(), q.prefix) || !starts_with(v->plugin_id(), q.plugin_id)) continue;
    if (!q.node_id.empty()) {
      bool on_node = false;
      for (const auto& c : v->claims())
        on_node |= c.state() == v1::CLAIM_TAKEN && starts_with(c.node_id(), q.node_id);
      if (!on_node) continue;
    }
    matching.push_back(v);
  }
  // Ordered by the token itself, so that a page starts where its token says.
  auto key = [](const v1::Volume* v) { return v->namespace_() + "." + v->id(); };
  std::sort(matching.begin(), matching.end(),
            [&](const v1::Volume* a, const v1::Volume* b) { return key(a) < key(b); });
  nomad_volume_page page;
  for (const auto* v : matching) {
    if (!q.next_token.empty() && key(v) < q.next_token) continue;
    if (q.per_page > 0 && static_cast<int64_t>(page.volumes.size()) == q.per_page) {
      page.next_token = key(v);
      break;
    }
    page.volumes.push_back(v);
  }
  return page;
}

nomad_blocking_result parse_nomad_blocking(const std::map<std::string, std::string>& params) {
  constexpr int64_t default_ms = 5 * 60'000, most_ms = 10 * 60'000;
  nomad_blocking_result out;
  nomad_blocking b;
  auto index = params.find("index");
  if (index != params.end() && !index->second.empty()) {
    const auto& text = index->second;
    if (text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) {
      out.error = "Invalid index: '" + text.substr(0, 20) + "' is not a log index (a number)";
      return out;
    }
    b.index = std::stoull(text);
  }
  auto wait = params.find("wait");
  if (wait != params.end() && !wait->second.empty()) {
    auto ms = parse_duration_ms(wait->second);
    if (!ms) {
      out.error = "Invalid wait time: '" + wait->second.substr(0, 20) +
                  "' is not a duration such as 30s or 5m";
      return out;
    }
    b.wait_ms = std::min(*ms, most_ms);
  } else {
    b.wait_ms = default_ms;
  }
  if (b.index == 0) b.wait_ms = 0;
  out.blocking = b;
  return out;
}

}  // namespace berth
