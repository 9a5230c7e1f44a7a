#include "messages/nomad.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <set>

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

std::string nomad_client_status(v1::AllocState s);

// The stubs of the allocs of the volume's taken claims, writers first.
ordered_json alloc_stubs(const v1::Volume& v, const std::vector<v1::Alloc>& allocs) {
  ordered_json out = ordered_json::array();
  for (bool writers : {true, false})
    for (const auto& cl : v.claims()) {
      if (cl.state() != v1::CLAIM_TAKEN || (cl.mode() == v1::CLAIM_WRITE) != writers) continue;
      auto it = std::find_if(allocs.begin(), allocs.end(),
                             [&](const v1::Alloc& a) { return a.id() == cl.alloc_id(); });
      if (it != allocs.end()) {
        out.push_back(nomad_alloc_stub(*it));
        continue;
      }
      v1::Alloc bare;
      bare.set_id(cl.alloc_id());
      bare.set_namespace_(v.namespace_());
      bare.set_node_id(cl.node_id());
      bare.set_state(v1::ALLOC_RUNNING);
      out.push_back(nomad_alloc_stub(bare));
    }
  return out;
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

nlohmann::ordered_json nomad_volume(const v1::Volume& raw, const v1::Plugin* plugin,
                                    const std::vector<v1::Alloc>& allocs) {
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
      {"Allocations", alloc_stubs(v, allocs)},
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

nlohmann::ordered_json nomad_alloc_stub(const v1::Alloc& a) {
  bool live = a.state() == v1::ALLOC_PENDING || a.state() == v1::ALLOC_RUNNING ||
              a.state() == v1::ALLOC_STATE_UNKNOWN;
  return ordered_json{{"ID", a.id()},
                      {"EvalID", ""},
                      {"Name", a.id()},
                      {"Namespace", a.namespace_()},
                      {"NodeID", a.node_id()},
                      {"NodeName", a.node_id()},
                      {"JobID", ""},
                      {"JobType", ""},
                      {"JobVersion", 0},
                      {"TaskGroup", a.group()},
                      {"DesiredStatus", live ? "run" : "stop"},
                      {"DesiredDescription", ""},
                      {"ClientStatus", nomad_client_status(a.state())},
                      {"ClientDescription", a.message()},
                      {"TaskStates", ordered_json::object()},
                      {"DeploymentStatus", nullptr},
                      {"FollowupEvalID", ""},
                      {"RescheduleTracker", nullptr},
                      {"PreemptedAllocations", nullptr},
                      {"PreemptedByAllocation", ""},
                      {"CreateIndex", a.create_index()},
                      {"ModifyIndex", a.modify_index()},
                      {"CreateTime", a.created_at_ms() * 1000000},
                      {"ModifyTime", a.modified_at_ms() * 1000000}};
}

nlohmann::ordered_json nomad_external_volume(const v1::ExternalVolume& v) {
  ordered_json nodes = ordered_json::array();
  for (const auto& n : v.published_node_ids()) nodes.push_back(n);
  return ordered_json{{"ExternalID", v.external_id()},
                      {"CapacityBytes", v.capacity_bytes()},
                      {"VolumeContext", string_map(v.context())},
                      {"CloneID", v.source_volume_id()},
                      {"SnapshotID", v.source_snapshot_id()},
                      {"PublishedExternalNodeIDs", nodes},
                      {"IsAbnormal", v.abnormal()},
                      {"Status", v.condition_message()}};
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
  q.filter = get("filter");
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

namespace {

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// An object's members by their lower-case names (Go's decoder matches
// field names without regard to case); two spellings of one field are a
// problem.
std::map<std::string, std::pair<std::string, const nlohmann::json*>> members(
    const nlohmann::json& o, const std::string& where, std::vector<problem>& problems) {
  std::map<std::string, std::pair<std::string, const nlohmann::json*>> out;
  for (const auto& [k, v] : o.items())
    if (!out.emplace(lower(k), std::make_pair(k, &v)).second)
      problems.push_back({where + k, "is given twice (field names are matched without case)"});
  return out;
}

}  // namespace

std::variant<v1::Volume, std::vector<problem>> volume_of_nomad(const nlohmann::json& in,
                                                               bool create) {
  using nlohmann::json;
  std::vector<problem> problems;
  if (!in.is_object()) return std::vector<problem>{{"Volumes[]", "must be an object"}};
  // Nomad's field (lower case) -> berth's spec key.
  static const std::map<std::string, std::string> plain = {{"id", "id"},
                                                           {"name", "name"},
                                                           {"namespace", "namespace"},
                                                           {"externalid", "external_id"},
                                                           {"pluginid", "plugin_id"},
                                                           {"secrets", "secrets"},
                                                           {"parameters", "parameters"},
                                                           {"context", "context"},
                                                           {"requestedcapacitymin", "capacity_min"},
                                                           {"requestedcapacitymax", "capacity_max"},
                                                           {"snapshotid", "snapshot_id"},
                                                           {"cloneid", "clone_id"}};
  // Set by Nomad (or by berth): read, never taken from a caller.
  static const std::set<std::string> ignored = {
      "topologies",          "schedulable",        "provider",
      "providerversion",     "controllerrequired", "controllershealthy",
      "controllersexpected", "nodeshealthy",       "nodesexpected",
      "resourceexhausted",   "createindex",        "modifyindex",
      "createtime",          "modifytime",         "readallocs",
      "writeallocs",         "allocations",        "capacity",
      "currentreaders",      "currentwriters",     "pastclaims",
      "readclaims",          "writeclaims"};
  json spec = json::object();
  std::string legacy_access, legacy_attachment;
  for (const auto& [key, kv] : members(in, "", problems)) {
    const auto& [name, value] = kv;
    if (auto p = plain.find(key); p != plain.end()) {
      // Go's client sends every field, "" when not set: not given (a
      // Namespace "" is the request's, not "default").
      if (!value->is_null() && *value != "") spec[p->second] = *value;
    } else if (key == "requestedcapabilities") {
      if (value->is_null()) continue;
      if (!value->is_array()) {
        problems.push_back({name, "must be a list of {AccessMode, AttachmentMode}"});
        continue;
      }
      json caps = json::array();
      for (size_t i = 0; i < value->size(); ++i) {
        auto at = name + "[" + std::to_string(i) + "].";
        const auto& c = (*value)[i];
        if (!c.is_object()) {
          problems.push_back({name + "[" + std::to_string(i) + "]", "must be an object"});
          continue;
        }
        json cap = json::object();
        for (const auto& [ck, cv] : members(c, at, problems)) {
          if (ck == "accessmode")
            cap["access_mode"] = *cv.second;
          else if (ck == "attachmentmode")
            cap["attachment_mode"] = *cv.second;
          else
            problems.push_back({at + cv.first,
                                "is not a field of a capability (AccessMode, "
                                "AttachmentMode)"});
        }
        caps.push_back(cap);
      }
      spec["capabilities"] = caps;
    } else if (key == "accessmode" || key == "attachmentmode") {
      // Nomad's single capability of before 1.1; taken when no list is given.
      if (value->is_string()) (key == "accessmode" ? legacy_access : legacy_attachment) = *value;
    } else if (key == "mountoptions") {
      if (value->is_null()) continue;
      if (!value->is_object()) {
        problems.push_back({name, "must be an object {FSType, MountFlags}"});
        continue;
      }
      json mo = json::object();
      for (const auto& [mk, mv] : members(*value, name + ".", problems)) {
        if (mk == "fstype")
          mo["fs_type"] = *mv.second;
        else if (mk == "mountflags") {
          if (!mv.second->is_null()) mo["mount_flags"] = *mv.second;
        } else
          problems.push_back({name + "." + mv.first, "is not a mount option (FSType, MountFlags)"});
      }
      spec["mount_options"] = mo;
    } else if (key == "requestedtopologies") {
      if (value->is_null()) continue;
      if (!value->is_object()) {
        problems.push_back({name, "must be an object {Required, Preferred}"});
        continue;
      }
      json tr = json::object();
      for (const auto& [tk, tv] : members(*value, name + ".", problems)) {
        if (tk != "required" && tk != "preferred") {
          problems.push_back({name + "." + tv.first, "is not a field (Required, Preferred)"});
          continue;
        }
        if (tv.second->is_null()) continue;
        if (!tv.second->is_array()) {
          problems.push_back({name + "." + tv.first, "must be a list of {Segments: {K: V}}"});
          continue;
        }
        json list = json::array();
        for (const auto& t : *tv.second) {
          json segs = json::object();
          if (t.is_object())
            for (const auto& [sk, sv] : members(t, name + "." + tv.first + "[].", problems)) {
              if (sk == "segments")
                segs = *sv.second;
              else
                problems.push_back({name + "." + tv.first + "[]." + sv.first,
                                    "is not a field of a topology (Segments)"});
            }
          list.push_back({{"segments", segs}});
        }
        tr[tk] = list;
      }
      spec["topology_request"] = tr;
    } else if (ignored.count(key) == 0) {
      problems.push_back({name, "is not a field of a Nomad CSI volume berth takes"});
    }
  }
  if (!spec.contains("capabilities") && (!legacy_access.empty() || !legacy_attachment.empty()))
    spec["capabilities"] =
        json::array({{{"access_mode", legacy_access}, {"attachment_mode", legacy_attachment}}});
  if (!problems.empty()) return problems;
  auto parsed = parse_volume_spec(spec.dump(), create ? spec_use::create : spec_use::registration);
  if (auto* v = std::get_if<v1::Volume>(&parsed)) return std::move(*v);
  // berth's field names back in Nomad's, so the caller can find them.
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"capabilities", "RequestedCapabilities"},
      {"access_mode", "AccessMode"},
      {"attachment_mode", "AttachmentMode"},
      {"mount_options", "MountOptions"},
      {"fs_type", "FSType"},
      {"mount_flags", "MountFlags"},
      {"topology_request", "RequestedTopologies"},
      {"required", "Required"},
      {"preferred", "Preferred"},
      {"segments", "Segments"},
      {"capacity_min", "RequestedCapacityMin"},
      {"capacity_max", "RequestedCapacityMax"},
      {"external_id", "ExternalID"},
      {"plugin_id", "PluginID"},
      {"snapshot_id", "SnapshotID"},
      {"clone_id", "CloneID"},
      {"namespace", "Namespace"},
      {"secrets", "Secrets"},
      {"parameters", "Parameters"},
      {"context", "Context"},
      {"name", "Name"},
      {"id", "ID"}};
  auto out = std::get<std::vector<problem>>(std::move(parsed));
  for (auto& p : out) {
    std::string renamed;
    size_t i = 0;
    while (i < p.field.size()) {
      size_t end = p.field.find_first_of(".[, ", i);
      auto word = p.field.substr(i, end == std::string::npos ? std::string::npos : end - i);
      auto hit =
          std::find_if(names.begin(), names.end(), [&](const auto& n) { return n.first == word; });
      renamed += hit == names.end() ? word : hit->second;
      if (end == std::string::npos) break;
      auto next = p.field.find_first_not_of(".[, ]0123456789", end);
      renamed += p.field.substr(end, (next == std::string::npos ? p.field.size() : next) - end);
      i = next == std::string::npos ? p.field.size() : next;
    }
    p.field = renamed;
  }
  return out;
}

nlohmann::ordered_json nomad_snapshot(const v1::Snapshot& s) {
  return ordered_json{{"ID", s.id()},
                      {"ExternalSourceVolumeID", s.source_external_id()},
                      {"SizeBytes", s.size_bytes()},
                      {"CreateTime", s.created_at_ms() / 1000},
                      {"IsReady", s.ready_to_use()},
                      {"SourceVolumeID", s.source_volume_id()},
                      {"PluginID", s.plugin_id()},
                      {"Name", s.name()},
                      {"Secrets", nullptr},
                      {"Parameters", ordered_json::object()}};
}

std::variant<std::map<std::string, std::string>, std::string> parse_csi_secrets(
    const std::string& header) {
  std::map<std::string, std::string> out;
  if (header.empty()) return out;
  size_t start = 0, n = 0;
  while (start <= header.size()) {
    auto comma = header.find(',', start);
    auto pair =
        header.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    ++n;
    auto eq = pair.find('=');
    if (eq == std::string::npos || eq == 0)
      return "X-Nomad-CSI-Secrets: pair " + std::to_string(n) +
             " is not KEY=VALUE (pairs are separated by commas)";
    out[pair.substr(0, eq)] = pair.substr(eq + 1);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string nomad_region_problem(const std::string& region) {
  if (region.empty() || region == "global") return "";
  return "region '" + region.substr(0, 64) +
         "': berth is one region, global (Nomad's default); leave the region out "
         "(NOMAD_REGION, -region) or give global";
}

bool is_nomad_write_field(const std::string& lower_name) {
  return lower_name == "region" || lower_name == "namespace" || lower_name == "secretid" ||
         lower_name == "idempotencytoken";
}

nomad_write_result parse_nomad_write(const std::map<std::string, std::string>& query,
                                     const nlohmann::json& body) {
  auto get = [&](const char* k) {
    auto it = query.find(k);
    return it == query.end() ? std::string() : it->second;
  };
  // The query's, then the body's: a value in both must be the same.
  std::map<std::string, std::string> given{{"region", get("region")},
                                           {"namespace", get("namespace")},
                                           {"secretid", ""},
                                           {"idempotencytoken", get("idempotency_token")}};
  static const std::map<std::string, std::string> query_name{
      {"region", "region"}, {"namespace", "namespace"}, {"idempotencytoken", "idempotency_token"}};
  if (body.is_object())
    for (const auto& [k, v] : body.items()) {
      auto key = lower(k);
      if (!is_nomad_write_field(key) || v.is_null()) continue;
      if (!v.is_string()) return {std::nullopt, "field '" + k + "' must be a string"};
      auto value = v.get<std::string>();
      if (value.empty()) continue;
      auto& slot = given[key];
      if (!slot.empty() && slot != value) {
        // The token is never repeated: it may be a secret.
        return {std::nullopt, key == "idempotencytoken"
                                  ? "field '" + k + "' differs from the query's idempotency_token"
                                  : "field '" + k + "' ('" + value.substr(0, 64) +
                                        "') differs from the query's " + query_name.at(key) +
                                        " ('" + slot.substr(0, 64) + "'): give one"};
      }
      slot = value;
    }
  if (auto e = nomad_region_problem(given["region"]); !e.empty()) return {std::nullopt, e};
  return {nomad_write{given["namespace"], given["secretid"], given["idempotencytoken"]}, ""};
}

std::string nomad_read_problem(const std::map<std::string, std::string>& query) {
  if (auto it = query.find("region"); it != query.end())
    if (auto e = nomad_region_problem(it->second); !e.empty()) return e;
  if (auto it = query.find("stale"); it != query.end()) {
    static const std::set<std::string> bools{"",  "1", "t", "T",     "TRUE",  "true", "True",
                                             "0", "f", "F", "FALSE", "false", "False"};
    if (bools.count(it->second) == 0)
      return "Expect `true` or `false` for `stale` query string parameter (got '" +
             it->second.substr(0, 20) + "')";
  }
  return "";
}

uint64_t nomad_index(uint64_t index) {
  return index == 0 ? 1 : index;
}

}  // namespace berth

namespace berth {

namespace {

// Nomad's topics (nomad/structs/event.go) and berth's events of each.
struct nomad_topic_map {
  const char* name;
  std::vector<v1::EventTopic> berth;  // empty: berth has no such events
};
const std::vector<nomad_topic_map>& nomad_topics() {
  static const std::vector<nomad_topic_map> topics{
      {"CSIVolume", {v1::EVENT_VOLUME, v1::EVENT_CLAIM}},
      {"CSIPlugin", {v1::EVENT_PLUGIN}},
      {"Node", {v1::EVENT_NODE}},
      {"Allocation", {v1::EVENT_ALLOC}},
      {"Operator", {v1::EVENT_STATE}},
      {"ACLToken", {}},
      {"ACLPolicy", {}},
      {"ACLRole", {}},
      {"ACLAuthMethod", {}},
      {"ACLBindingRule", {}},
      {"Deployment", {}},
      {"Evaluation", {}},
      {"Job", {}},
      {"NodePool", {}},
      {"Service", {}},
      {"HostVolume", {}},
      {"Variable", {}}};
  return topics;
}

const nomad_topic_map* nomad_topic(const std::string& name) {
  for (const auto& t : nomad_topics())
    if (name == t.name) return &t;
  return nullptr;
}

std::string nomad_topic_of(v1::EventTopic t) {
  switch (t) {
    case v1::EVENT_VOLUME:
    case v1::EVENT_CLAIM:
      return "CSIVolume";
    case v1::EVENT_PLUGIN:
      return "CSIPlugin";
    case v1::EVENT_NODE:
      return "Node";
    case v1::EVENT_ALLOC:
      return "Allocation";
    default:
      return "Operator";
  }
}

// Nomad's type where Nomad has one for the same change, else berth's.
std::string nomad_type_of(const v1::Event& e) {
  static const std::map<std::string, std::string> types{
      {"VolumeRegistered", "CSIVolumeRegistered"},
      {"VolumeUpdated", "CSIVolumeRegistered"},
      {"VolumeDeregistered", "CSIVolumeDeregistered"},
      {"NodeRegistered", "NodeRegistration"},
      {"NodeDeregistered", "NodeDeregistration"},
      {"NodeUpdated", "NodeStreamEvent"},
      {"NodeReady", "NodeStreamEvent"},
      {"NodeDown", "NodeStreamEvent"},
      {"AllocCreated", "AllocationCreated"},
      {"AllocUpdated", "AllocationUpdated"},
      {"AllocDeleted", "AllocationDeleted"}};
  if (e.topic() == v1::EVENT_CLAIM) return "CSIVolumeClaim";
  auto it = types.find(e.type());
  return it == types.end() ? e.type() : it->second;
}

std::string nomad_node_status(v1::NodeStatus s) {
  return s == v1::NODE_READY ? "ready" : s == v1::NODE_DOWN ? "down" : "initializing";
}

std::string nomad_client_status(v1::AllocState s) {
  switch (s) {
    case v1::ALLOC_RUNNING:
      return "running";
    case v1::ALLOC_COMPLETE:
      return "complete";
    case v1::ALLOC_FAILED:
      return "failed";
    case v1::ALLOC_LOST:
      return "lost";
    default:
      return "pending";
  }
}

}  // namespace

bool nomad_event_topic_spelling(const std::string& topic) {
  auto name = topic.substr(0, topic.find(':'));
  return topic.find(':') != std::string::npos || name == "*" || nomad_topic(name) != nullptr;
}

nomad_event_query_result parse_nomad_event_topics(const std::string& topics) {
  nomad_event_query q;
  std::set<v1::EventTopic> wanted;
  bool every = false;
  size_t start = 0;
  while (start <= topics.size()) {
    auto comma = topics.find(',', start);
    auto t = topics.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? topics.size() + 1 : comma + 1;
    if (t.empty()) continue;
    nomad_event_topic topic;
    auto colon = t.find(':');
    topic.topic = t.substr(0, colon);
    if (colon != std::string::npos) topic.key = t.substr(colon + 1);
    if (topic.key.empty()) topic.key = "*";
    if (topic.topic == "*") {
      every = true;
    } else if (const auto* m = nomad_topic(topic.topic)) {
      wanted.insert(m->berth.begin(), m->berth.end());
    } else {
      std::string names;
      for (const auto& n : nomad_topics()) names += std::string(names.empty() ? "" : ", ") + n.name;
      return {std::nullopt, "topic '" + topic.topic +
                                "' is not one of Nomad's event topics; give Topic or Topic:key "
                                "with Topic one of *, " +
                                names};
    }
    q.topics.push_back(std::move(topic));
  }
  if (q.topics.empty()) {
    q.topics.push_back({"*", "*"});
    every = true;
  }
  if (!every) {
    q.berth_topics.assign(wanted.begin(), wanted.end());
    q.nothing = wanted.empty();
  }
  return {std::move(q), ""};
}

nlohmann::ordered_json nomad_event(const v1::Event& e) {
  ordered_json filter_keys = ordered_json::array();
  ordered_json payload = ordered_json::object();
  std::string key = e.key();
  switch (e.object_case()) {
    case v1::Event::kVolume: {
      auto v = nomad_volume(e.volume(), nullptr);
      // The plugin's side is not in the event (GET /v1/plugin/csi/:id).
      for (const char* f :
           {"Schedulable", "Provider", "ProviderVersion", "ControllerRequired",
            "ControllersHealthy", "ControllersExpected", "NodesHealthy", "NodesExpected"})
        v.erase(f);
      filter_keys.push_back(e.volume().plugin_id());
      payload["Volume"] = std::move(v);
      break;
    }
    case v1::Event::kClaim: {
      const auto& c = e.claim();
      key = e.volume_id();
      filter_keys.push_back(c.alloc_id());
      filter_keys.push_back(c.node_id());
      payload["Volume"] = ordered_json{{"ID", e.volume_id()}, {"Namespace", e.namespace_()}};
      payload["Claim"] =
          ordered_json{{"AllocationID", c.alloc_id()},
                       {"NodeID", c.node_id()},
                       {"Mode", c.mode() == v1::CLAIM_WRITE ? "write" : "read"},
                       {"AccessMode", nomad_mode(c.access_mode())},
                       {"AttachmentMode", nomad_mode(c.attachment_mode())},
                       // berth's step: taken, unpublishing, ..., ready-to-free; a claim
                       // gone from the volume is "freed" (berth's type ClaimFreed).
                       {"State", e.type() == "ClaimFreed" ? std::string("freed")
                                                          : std::string(name_of(c.state()))}};
      break;
    }
    case v1::Event::kPlugin:
      payload["Plugin"] = nomad_plugin(e.plugin());
      break;
    case v1::Event::kNode: {
      const auto& n = e.node();
      payload["Node"] =
          ordered_json{{"ID", n.id()},
                       {"Name", n.id()},
                       {"Status", nomad_node_status(n.status())},
                       {"SchedulingEligibility", n.ineligible() ? "ineligible" : "eligible"},
                       {"Drain", n.has_drain()},
                       {"CreateIndex", n.create_index()},
                       {"ModifyIndex", n.modify_index()}};
      break;
    }
    case v1::Event::kAlloc: {
      const auto& a = e.alloc();
      if (!a.group().empty()) filter_keys.push_back(a.group());
      filter_keys.push_back(a.node_id());
      payload["Allocation"] = ordered_json{{"ID", a.id()},
                                           {"Name", a.id()},
                                           {"Namespace", a.namespace_()},
                                           {"NodeID", a.node_id()},
                                           {"TaskGroup", a.group()},
                                           {"ClientStatus", nomad_client_status(a.state())},
                                           {"ClientDescription", a.message()},
                                           {"CreateIndex", a.create_index()},
                                           {"ModifyIndex", a.modify_index()},
                                           {"CreateTime", a.created_at_ms() * 1000000},
                                           {"ModifyTime", a.modified_at_ms() * 1000000}};
      break;
    }
    case v1::Event::OBJECT_NOT_SET:
      break;
  }
  return ordered_json{{"Topic", nomad_topic_of(e.topic())},
                      {"Type", nomad_type_of(e)},
                      {"Key", key},
                      {"Namespace", e.namespace_()},
                      {"FilterKeys", filter_keys},
                      {"Index", e.index()},
                      {"Payload", payload}};
}

bool nomad_event_matches(const nomad_event_query& q, const nlohmann::ordered_json& event) {
  const auto topic = event.value("Topic", std::string());
  for (const auto& t : q.topics) {
    if (t.topic != "*" && t.topic != topic) continue;
    if (t.key == "*" || event.value("Key", std::string()) == t.key) return true;
    for (const auto& k : event.value("FilterKeys", ordered_json::array()))
      if (k.is_string() && k.get<std::string>() == t.key) return true;
  }
  return false;
}

std::vector<nlohmann::ordered_json> nomad_event_frames(const std::vector<v1::Event>& events,
                                                       const nomad_event_query& q) {
  std::vector<ordered_json> frames;
  for (const auto& e : events) {
    auto event = nomad_event(e);
    if (!nomad_event_matches(q, event)) continue;
    if (frames.empty() || frames.back()["Index"].get<uint64_t>() != e.index())
      frames.push_back(ordered_json{{"Index", e.index()}, {"Events", ordered_json::array()}});
    frames.back()["Events"].push_back(std::move(event));
  }
  return frames;
}

}  // namespace berth
