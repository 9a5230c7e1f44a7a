#include "messages/codec.hpp"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>

namespace berth {

std::optional<int64_t> parse_size(std::string_view text) {
  std::string s(text);
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0 || i > 18) return std::nullopt;
  int64_t n = std::stoll(s.substr(0, i));
  std::string unit = s.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  static const std::pair<const char*, int64_t> units[] = {
      {"", 1},
      {"B", 1},
      {"KB", 1000},
      {"MB", 1000'000},
      {"GB", 1000'000'000},
      {"TB", 1000'000'000'000},
      {"KiB", 1LL << 10},
      {"MiB", 1LL << 20},
      {"GiB", 1LL << 30},
      {"TiB", 1LL << 40},
  };
  for (const auto& [name, mult] : units)
    if (unit == name) {
      if (n > INT64_MAX / mult) return std::nullopt;
      return n * mult;
    }
  return std::nullopt;
}

using nlohmann::json;

namespace {

// A spec is small; YAML aliases can make a short text expand without bound
// ("billion laughs"), so the conversion stops after this many values.
constexpr size_t max_yaml_values = 100000;
struct yaml_too_large {};

// YAML scalars stay strings; the field readers below accept numeric
// strings where a number is expected, so YAML and JSON specs read alike.
json yaml_to_json(const YAML::Node& n, size_t& budget) {
  if (budget == 0) throw yaml_too_large{};
  --budget;
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : n) out[kv.first.as<std::string>()] = yaml_to_json(kv.second, budget);
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : n) out.push_back(yaml_to_json(item, budget));
      return out;
    }
    case YAML::NodeType::Scalar:
      return n.Scalar();
    default:
      return nullptr;
  }
}

// The offset of the first byte that is not part of valid UTF-8 (no
// overlongs, no surrogates, at most U+10FFFF), or npos.  Protobuf string
// fields and the JSON views hold UTF-8 only.
size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return i;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += n;
  }
  return std::string_view::npos;
}

// Reads the fields of one JSON object, recording every problem.
class reader {
 public:
  reader(const json& obj, std::string path, std::vector<problem>& problems)
      : obj_(obj), path_(std::move(path)), problems_(problems) {}

  // Reports every key that no field read.  Call after reading all fields.
  void reject_unknown() {
    if (!obj_.is_object()) return;
    for (const auto& [k, _] : obj_.items())
      if (!known_.count(k)) add(k, "is not a known key");
  }

  bool ok_object() {
    if (obj_.is_object()) return true;
    problems_.push_back({path_.empty() ? "(spec)" : path_, "must be an object"});
    return false;
  }

  const json* get(const std::string& key) {
    known_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  void string(const std::string& key, std::string* out) {
    if (auto* v = get(key)) {
      if (v->is_string())
        *out = v->get<std::string>();
      else
        add(key, "must be a string");
    }
  }

  void integer(const std::string& key, int64_t* out) {
    auto* v = get(key);
    if (v == nullptr) return;
    if (v->is_number_integer()) {
      *out = v->get<int64_t>();
      return;
    }
    if (v->is_string()) {
      if (auto n = parse_size(v->get<std::string>())) {
        *out = *n;
        return;
      }
    }
    add(key, "must be a whole number of bytes (e.g. 1073741824 or \"1GiB\")");
  }

  void string_map(const std::string& key, google::protobuf::Map<std::string, std::string>* out) {
    auto* v = get(key);
    if (v == nullptr) return;
    if (!v->is_object()) {
      add(key, "must be a map of strings");
      return;
    }
    for (const auto& [k, val] : v->items()) {
      if (val.is_string())
        (*out)[k] = val.get<std::string>();
      else if (val.is_number() || val.is_boolean())
        (*out)[k] = val.dump();
      else
        add(key + "." + k, "must be a string");
    }
  }

  void add(const std::string& key, std::string msg) {
    problems_.push_back({field(key), std::move(msg)});
  }

  std::string field(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  std::vector<problem>& problems() { return problems_; }

 private:
  const json& obj_;
  std::string path_;
  std::vector<problem>& problems_;
  std::set<std::string> known_;
};

void read_topology_list(reader& r, const std::string& key,
                        google::protobuf::RepeatedPtrField<v1::Topology>* out) {
  auto* v = r.get(key);
  if (v == nullptr) return;
  if (!v->is_array()) {
    r.add(key, "must be a list of {segments: {KEY: VALUE}}");
    return;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    reader t((*v)[i], r.field(key) + "[" + std::to_string(i) + "]", r.problems());
    if (!t.ok_object()) continue;
    auto* topo = out->Add();
    t.string_map("segments", topo->mutable_segments());
    t.reject_unknown();
  }
}

}  // namespace

std::variant<v1::Volume, std::vector<problem>> parse_volume_spec(std::string_view text,
                                                                 spec_use use) {
  std::vector<problem> problems;
  json doc;
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return std::vector<problem>{{"(spec)", "is empty"}};
  if (auto bad = invalid_utf8_at(text); bad != std::string_view::npos)
    return std::vector<problem>{{"(spec)", "is not UTF-8 text (byte " + std::to_string(bad) +
                                               " is not part of a UTF-8 character); save the "
                                               "file as UTF-8"}};
  if (text[first] == '{') {
    try {
      doc = json::parse(text);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for huge numbers
      return std::vector<problem>{{"(spec)", std::string("is not valid JSON: ") + e.what()}};
    }
  } else {
    try {
      size_t budget = max_yaml_values;
      doc = yaml_to_json(YAML::Load(std::string(text)), budget);
    } catch (const yaml_too_large&) {
      return std::vector<problem>{{"(spec)", "is too large: more than " +
                                                 std::to_string(max_yaml_values) +
                                                 " values (after expanding YAML aliases)"}};
    } catch (const YAML::Exception& e) {
      return std::vector<problem>{{"(spec)", std::string("is not valid YAML: ") + e.what()}};
    }
  }
  v1::Volume v;
  reader r(doc, "", problems);
  if (!r.ok_object()) return problems;
  r.string("id", v.mutable_id());
  r.string("name", v.mutable_name());
  r.string("namespace", v.mutable_namespace_());
  r.string("plugin_id", v.mutable_plugin_id());
  r.string("external_id", v.mutable_external_id());
  if (auto* caps = r.get("capabilities")) {
    if (!caps->is_array()) {
      r.add("capabilities", "must be a list of {access_mode, attachment_mode}");
    } else {
      for (size_t i = 0; i < caps->size(); ++i) {
        reader c((*caps)[i], "capabilities[" + std::to_string(i) + "]", problems);
        if (!c.ok_object()) continue;
        auto* cap = v.add_capabilities();
        std::string access, attachment;
        c.string("access_mode", &access);
        c.string("attachment_mode", &attachment);
        if (!access.empty()) {
          if (auto m = parse_access_mode(access))
            cap->set_access_mode(*m);
          else
            c.add("access_mode",
                  "'" + access + "' is not an access mode (one of " + access_mode_names() + ")");
        }
        if (!attachment.empty()) {
          if (auto m = parse_attachment_mode(attachment))
            cap->set_attachment_mode(*m);
          else
            c.add("attachment_mode", "'" + attachment + "' is not an attachment mode (one of " +
                                         attachment_mode_names() + ")");
        }
        c.reject_unknown();
      }
    }
  }
  if (auto* mo = r.get("mount_options")) {
    reader m(*mo, "mount_options", problems);
    if (m.ok_object()) {
      m.string("fs_type", v.mutable_mount_options()->mutable_fs_type());
      if (auto* flags = m.get("mount_flags")) {
        if (!flags->is_array()) {
          m.add("mount_flags", "must be a list of strings");
        } else {
          for (const auto& f : *flags) {
            if (f.is_string())
              v.mutable_mount_options()->add_mount_flags(f.get<std::string>());
            else
              m.add("mount_flags", "must be a list of strings");
          }
        }
      }
      m.reject_unknown();
    }
  }
  r.string_map("secrets", v.mutable_secrets());
  r.string_map("parameters", v.mutable_parameters());
  r.string_map("context", v.mutable_context());
  if (auto* tr = r.get("topology_request")) {
    reader t(*tr, "topology_request", problems);
    if (t.ok_object()) {
      read_topology_list(t, "required", v.mutable_topology_request()->mutable_required());
      read_topology_list(t, "preferred", v.mutable_topology_request()->mutable_preferred());
      t.reject_unknown();
    }
  }
  r.string("snapshot_id", v.mutable_snapshot_id());
  r.string("clone_id", v.mutable_clone_id());
  r.string("group", v.mutable_group());
  int64_t cmin = 0, cmax = 0;
  r.integer("capacity_min", &cmin);
  r.integer("capacity_max", &cmax);
  v.set_capacity_min(cmin);
  v.set_capacity_max(cmax);
  r.reject_unknown();
  apply_defaults(v);
  // Report what validation finds too, except for fields already reported
  // as malformed, so one run of the shell shows every problem.
  bool create = use == spec_use::create;
  if (create && !v.external_id().empty())
    problems.push_back({"external_id", "is chosen by the plugin on create; use volume register "
                                       "for a volume that exists"});
  if (!create) {
    if (!v.snapshot_id().empty())
      problems.push_back({"snapshot_id", "only volume create restores a snapshot"});
    if (!v.clone_id().empty())
      problems.push_back({"clone_id", "only volume create clones a volume"});
  }
  if (!v.snapshot_id().empty() && !v.clone_id().empty())
    problems.push_back({"snapshot_id, clone_id",
                        "are exclusive: name one content source (a snapshot or a volume to "
                        "clone), not both"});
  if (create) v.set_external_id("(created)");
  auto invalid = validate_volume(v);
  if (create) v.clear_external_id();
  for (auto& p : invalid) {
    bool reported = false;
    for (const auto& q : problems) reported |= p.field.rfind(q.field, 0) == 0;
    if (!reported) problems.push_back(std::move(p));
  }
  if (!problems.empty()) return problems;
  return v;
}

namespace {

json topology_json(const v1::Topology& t) {
  json segs = json::object();
  for (const auto& [k, val] : t.segments()) segs[k] = val;
  return json{{"segments", segs}};
}

json map_json(const google::protobuf::Map<std::string, std::string>& m) {
  json out = json::object();
  for (const auto& [k, val] : m) out[k] = val;
  return out;
}

json instance_json(const v1::PluginInstance& i) {
  return json{{"node_id", i.node_id()},
              {"healthy", i.healthy()},
              {"health_description", i.health_description()},
              {"provider", i.provider()},
              {"provider_version", i.provider_version()},
              {"csi_node_id", i.csi_node_id()},
              {"max_volumes", i.max_volumes()},
              {"accessible_topology", topology_json(i.accessible_topology())},
              {"publish_unpublish", i.publish_unpublish()},
              {"stage_unstage", i.stage_unstage()},
              {"create_delete_snapshot", i.create_delete_snapshot()},
              {"list_snapshots", i.list_snapshots()},
              {"clone_volume", i.clone_volume()},
              {"modify_volume", i.modify_volume()},
              {"group_snapshot", i.group_snapshot()},
              {"list_volumes", i.list_volumes()},
              {"get_volume", i.get_volume()},
              {"volume_condition", i.volume_condition()},
              {"get_volume_stats", i.get_volume_stats()},
              {"updated_at_ms", i.updated_at_ms()}};
}

}  // namespace

json claim_json(const v1::Claim& c) {
  return json{{"alloc_id", c.alloc_id()},
              {"node_id", c.node_id()},
              {"mode", name_of(c.mode())},
              {"state", name_of(c.state())},
              {"access_mode", name_of(c.access_mode())},
              {"attachment_mode", name_of(c.attachment_mode())},
              {"claimed_at_ms", c.claimed_at_ms()},
              {"released_at_ms", c.released_at_ms()},
              {"release_reason", c.release_reason()},
              {"release_attempts", c.release_attempts()},
              {"release_error", c.release_error()},
              {"release_next_retry_ms", c.release_next_retry_ms()}};
}

json alloc_json(const v1::Alloc& a) {
  json volumes = json::array();
  for (const auto& v : a.volumes())
    volumes.push_back({{"name", v.name()},
                       {"volume_id", v.volume_id()},
                       {"read_only", v.read_only()},
                       {"published_path", v.published_path()},
                       {"env", volume_env_name(v.name())}});
  json command = json::array();
  for (const auto& c : a.command()) command.push_back(c);
  return json{{"id", a.id()},
              {"namespace", a.namespace_()},
              {"node_id", a.node_id()},
              {"group", a.group()},
              {"replaces", a.replaces()},
              {"placed", a.placed()},
              {"no_replace", a.no_replace()},
              {"state", name_of(a.state())},
              {"message", a.message()},
              {"exit_code", a.exit_code()},
              {"command", command},
              {"volumes", volumes},
              {"created_at_ms", a.created_at_ms()},
              {"modified_at_ms", a.modified_at_ms()},
              {"create_index", a.create_index()},
              {"modify_index", a.modify_index()}};
}

namespace {

// An expansion in progress (null: none).
json expansion_json(const v1::Volume& v) {
  if (!v.has_expansion() || v.expansion().required_bytes() <= 0) return nullptr;
  const auto& e = v.expansion();
  return json{
      {"required_bytes", e.required_bytes()},
      {"limit_bytes", e.limit_bytes()},
      {"controller_done", e.controller_done()},
      {"node_required", e.node_required()},
      {"nodes_done", json(std::vector<std::string>(e.nodes_done().begin(), e.nodes_done().end()))},
      {"requested_at_ms", e.requested_at_ms()}};
}

// One volume's usage on one node (NodeGetVolumeStats): in a volume's
// `usage` and in a node's `volume_usage`.
json usage_json(const v1::VolumeUsage& u) {
  return json{{"namespace", u.namespace_()},
              {"volume_id", u.volume_id()},
              {"node_id", u.node_id()},
              {"capacity_bytes", u.capacity_bytes()},
              {"used_bytes", u.used_bytes()},
              {"available_bytes", u.available_bytes()},
              {"condition", !u.condition_reported() ? ""
                            : u.abnormal()          ? "abnormal"
                                                    : "ok"},
              {"condition_message", u.message()},
              {"updated_at_ms", u.updated_at_ms()}};
}

}  // namespace

json volume_json(const v1::Volume& raw, const v1::Plugin* plugin) {
  // Render from a redacted copy so that no code path below can reach a
  // secret or a mount flag.
  const v1::Volume v = redacted(raw);
  json caps = json::array();
  for (const auto& c : v.capabilities())
    caps.push_back({{"access_mode", name_of(c.access_mode())},
                    {"attachment_mode", name_of(c.attachment_mode())}});
  json claims = json::array();
  int readers = 0, writers = 0;
  for (const auto& c : v.claims()) {
    claims.push_back(claim_json(c));
    if (c.state() == v1::CLAIM_TAKEN) (c.mode() == v1::CLAIM_WRITE ? writers : readers)++;
  }
  json required = json::array(), preferred = json::array(), accessible = json::array();
  for (const auto& t : v.topology_request().required()) required.push_back(topology_json(t));
  for (const auto& t : v.topology_request().preferred()) preferred.push_back(topology_json(t));
  for (const auto& t : v.accessible_topology()) accessible.push_back(topology_json(t));
  auto unhealthy = volume_unhealthy(v, plugin);
  json usage = json::array();
  for (const auto& u : v.usage()) usage.push_back(usage_json(u));
  return json{{"id", v.id()},
              {"name", v.name()},
              {"namespace", v.namespace_()},
              {"plugin_id", v.plugin_id()},
              {"external_id", v.external_id()},
              {"group", v.group()},
              {"capabilities", caps},
              {"access_mode", name_of(mode_in_use(v))},
              {"mount_options", {{"fs_type", v.mount_options().fs_type()}}},
              {"parameters", map_json(v.parameters())},
              {"context", map_json(v.context())},
              {"topology_request", {{"required", required}, {"preferred", preferred}}},
              {"accessible_topology", accessible},
              {"capacity_min", v.capacity_min()},
              {"capacity_max", v.capacity_max()},
              {"capacity_bytes", v.capacity_bytes()},
              {"expansion", expansion_json(v)},
              {"snapshot_id", v.snapshot_id()},
              {"clone_id", v.clone_id()},
              {"mutable_parameters", map_json(v.modified_parameters())},
              {"healthy", !unhealthy.has_value()},
              {"health_description", unhealthy.value_or("")},
              {"resource_exhausted", v.resource_exhausted_at_ms() != 0},
              {"availability", name_of(v.availability())},
              {"condition", v.condition().abnormal() ? "abnormal" : "ok"},
              {"condition_message", v.condition().message()},
              {"condition_since_ms", v.condition().since_ms()},
              {"usage", usage},
              {"read_claims", readers},
              {"write_claims", writers},
              {"claims", claims},
              {"create_index", v.create_index()},
              {"modify_index", v.modify_index()}};
}

json snapshot_json(const v1::Snapshot& s) {
  return json{{"id", s.id()},
              {"plugin_id", s.plugin_id()},
              {"source_volume_id", s.source_volume_id()},
              {"namespace", s.namespace_()},
              {"source_external_id", s.source_external_id()},
              {"size_bytes", s.size_bytes()},
              {"created_at_ms", s.created_at_ms()},
              {"ready_to_use", s.ready_to_use()},
              {"name", s.name()},
              {"group_snapshot_id", s.group_snapshot_id()}};
}

json plugin_json(const v1::Plugin& p) {
  auto h = health_of(p);
  json controllers = json::array(), nodes = json::array();
  for (const auto& c : p.controllers()) controllers.push_back(instance_json(c));
  for (const auto& n : p.nodes()) nodes.push_back(instance_json(n));
  return json{{"id", p.id()},
              {"provider", p.provider()},
              {"provider_version", p.provider_version()},
              {"controller_required", p.controller_required()},
              {"controllers_healthy", h.controllers_healthy},
              {"controllers_expected", h.controllers_expected},
              {"nodes_healthy", h.nodes_healthy},
              {"nodes_expected", h.nodes_expected},
              {"controllers", controllers},
              {"nodes", nodes},
              {"create_index", p.create_index()},
              {"modify_index", p.modify_index()}};
}

json node_json(const v1::Node& n) {
  json plugins = json::array();
  for (const auto& p : n.plugin_ids()) plugins.push_back(p);
  json drain = nullptr;
  if (n.has_drain())
    drain = json{{"started_at_ms", n.drain().started_at_ms()},
                 {"deadline_ms", n.drain().deadline_ms()},
                 {"keep_plugins", n.drain().keep_plugins()},
                 {"forced", n.drain().forced()},
                 {"allocs_left", n.drain_progress().allocs_left()},
                 {"claims_left", n.drain_progress().claims_left()}};
  json usage = json::array();
  for (const auto& u : n.volume_usage()) usage.push_back(usage_json(u));
  return json{{"id", n.id()},
              {"status", name_of(n.status())},
              {"address", n.address()},
              {"last_heartbeat_ms", n.last_heartbeat_ms()},
              {"last_seen_ms", n.last_seen_ms()},
              {"has_client", n.has_client()},
              {"plugin_ids", plugins},
              {"eligible", !n.ineligible()},
              {"drain", drain},
              {"drained_at_ms", n.drained_at_ms()},
              {"plugins_withdrawn", n.plugins_withdrawn()},
              {"volume_usage", usage},
              {"create_index", n.create_index()},
              {"modify_index", n.modify_index()}};
}

// applied_index is left out: the leader does not track it yet (always 0).
json agent_json(const v1::AgentStatus& a) {
  return json{{"node_name", a.node_name()},
              {"leader", a.leader()},
              {"leader_address", a.leader_address()},
              {"version", a.version()}};
}

json raft_json(const v1::RaftStatus& s) {
  return json{{"id", s.server().name()},
              {"raft_id", s.server().raft_id()},
              {"address", s.server().raft_address()},
              {"api_address", s.server().api_address()},
              {"role", s.role()},
              {"leader", s.role() == "leader"},
              {"term", s.term()},
              {"commit_index", s.commit_index()},
              {"last_index", s.last_index()},
              {"applied_index", s.applied_index()},
              {"error", s.error()}};
}

const v1::Plugin* plugin_in(const v1::Response& r, const std::string& id) {
  for (const auto& p : r.plugins())
    if (p.id() == id) return &p;
  return nullptr;
}

json volumes_json(const v1::Response& r) {
  json out = json::array();
  for (const auto& v : r.volumes()) out.push_back(volume_json(v, plugin_in(r, v.plugin_id())));
  return out;
}

json single_volume_json(const v1::Response& r) {
  if (r.volumes().empty()) return json();
  const auto& v = r.volumes(0);
  return volume_json(v, plugin_in(r, v.plugin_id()));
}

json alloc_with_claims_json(const v1::Response& r, const std::string& id) {
  auto j = alloc_json(r.allocs(0));
  j["claims"] = json::array();
  for (const auto& v : r.volumes())
    for (const auto& c : v.claims())
      if (c.alloc_id() == id) {
        auto cj = claim_json(c);
        cj["volume_id"] = v.id();
        j["claims"].push_back(cj);
      }
  return j;
}

json node_with_volumes_json(const v1::Response& r) {
  auto j = node_json(r.nodes(0));
  j["volumes"] = volumes_json(r);
  j["allocs"] = json::array();
  for (const auto& a : r.allocs()) j["allocs"].push_back(alloc_json(a));
  return j;
}

json node_message_json(const v1::Response& r) {
  json j = r.nodes().empty() ? json::object() : node_json(r.nodes(0));
  j["message"] = r.message();
  return j;
}

std::string_view name_of(v1::EventTopic t) {
  switch (t) {
    case v1::EVENT_VOLUME: return "volume";
    case v1::EVENT_CLAIM: return "claim";
    case v1::EVENT_ALLOC: return "alloc";
    case v1::EVENT_NODE: return "node";
    case v1::EVENT_PLUGIN: return "plugin";
    case v1::EVENT_STATE: return "state";
    default: return "unknown";
  }
}

std::optional<v1::EventTopic> parse_event_topic(std::string_view name) {
  for (auto t : {v1::EVENT_VOLUME, v1::EVENT_CLAIM, v1::EVENT_ALLOC, v1::EVENT_NODE,
                 v1::EVENT_PLUGIN, v1::EVENT_STATE})
    if (name_of(t) == name) return t;
  return std::nullopt;
}

std::optional<int64_t> parse_duration_ms(std::string_view text) {
  constexpr int64_t year_ms = 366LL * 24 * 3600 * 1000;
  if (text.empty()) return std::nullopt;
  int64_t total = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t digits = i;
    int64_t n = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      n = n * 10 + (text[i] - '0');
      if (n > year_ms) return std::nullopt;
      ++i;
    }
    if (i == digits) return std::nullopt;  // a unit without a number
    size_t unit = i;
    while (i < text.size() && (text[i] < '0' || text[i] > '9')) ++i;
    auto u = text.substr(unit, i - unit);
    int64_t scale = u == "ms" ? 1 : u == "s" ? 1000 : u == "m" ? 60'000 : u == "h" ? 3'600'000 : 0;
    if (scale == 0) return std::nullopt;  // no unit, or an unknown one
    total += n * scale;
    if (total > year_ms) return std::nullopt;
  }
  return total;
}

nlohmann::json event_json(const v1::Event& e) {
  json object;
  switch (e.object_case()) {
    case v1::Event::kVolume:
      object = volume_json(e.volume(), nullptr);
      object.erase("healthy");
      object.erase("health_description");
      break;
    case v1::Event::kClaim:
      object = claim_json(e.claim());
      object["volume_id"] = e.volume_id();
      object["namespace"] = e.namespace_();
      break;
    case v1::Event::kAlloc: object = alloc_json(e.alloc()); break;
    case v1::Event::kNode: object = node_json(e.node()); break;
    case v1::Event::kPlugin: object = plugin_json(e.plugin()); break;
    case v1::Event::OBJECT_NOT_SET: break;
  }
  return json{{"index", e.index()},          {"seq", e.seq()},
              {"topic", name_of(e.topic())}, {"type", e.type()},
              {"namespace", e.namespace_()}, {"key", e.key()},
              {"object", object}};
}

json snapshots_json(const v1::Response& r) {
  json out = json::array();
  for (const auto& s : r.snapshots()) out.push_back(snapshot_json(s));
  return out;
}

json placement_json(const v1::Response& r) {
  json nodes = json::array();
  json chosen = nullptr;
  for (const auto& v : r.placement()) {
    nodes.push_back({{"node_id", v.node_id()},
                     {"fits", v.reason().empty()},
                     {"allocs", v.allocs()},
                     {"reason", v.reason()},
                     {"chosen", v.chosen()}});
    if (v.chosen()) chosen = v.node_id();
  }
  return json{{"chosen", chosen}, {"nodes", nodes}};
}

json token_json(const v1::AclToken& t, const std::string& secret) {
  json j{{"accessor_id", t.accessor_id()},
         {"name", t.name()},
         {"type", t.type()},
         {"policies", json(std::vector<std::string>(t.policies().begin(), t.policies().end()))},
         {"create_index", t.create_index()},
         {"create_time_ms", t.create_time_ms()}};
  if (!secret.empty()) j["secret_id"] = secret;
  return j;
}

json policy_json(const v1::AclPolicy& p, bool rules) {
  json j{{"name", p.name()},
         {"description", p.description()},
         {"create_index", p.create_index()},
         {"modify_index", p.modify_index()}};
  if (rules) j["rules"] = p.rules();
  return j;
}

std::string base64(std::string_view bytes) {
  static constexpr char digits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16 | static_cast<uint8_t>(bytes[i + 1]) << 8 |
                 static_cast<uint8_t>(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += digits[(n >> shift) & 63];
  }
  if (i < bytes.size()) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += digits[(n >> 18) & 63];
    out += digits[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? digits[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace berth
