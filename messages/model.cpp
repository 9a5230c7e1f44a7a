#include "messages/model.hpp"
#include "messages/failure.hpp"

#include <algorithm>

namespace berth {

namespace {

template <class Enum>
struct named {
  Enum value;
  std::string_view name;
};

constexpr named<v1::AccessMode> access_modes[] = {
    {v1::SINGLE_NODE_READER_ONLY, "single-node-reader-only"},
    {v1::SINGLE_NODE_WRITER, "single-node-writer"},
    {v1::MULTI_NODE_READER_ONLY, "multi-node-reader-only"},
    {v1::MULTI_NODE_SINGLE_WRITER, "multi-node-single-writer"},
    {v1::MULTI_NODE_MULTI_WRITER, "multi-node-multi-writer"},
};

constexpr named<v1::AttachmentMode> attachment_modes[] = {
    {v1::BLOCK_DEVICE, "block-device"},
    {v1::FILE_SYSTEM, "file-system"},
};

constexpr named<v1::ClaimState> claim_states[] = {
    {v1::CLAIM_TAKEN, "taken"},
    {v1::CLAIM_UNPUBLISHING, "unpublishing"},
    {v1::CLAIM_NODE_DETACHED, "node-detached"},
    {v1::CLAIM_CONTROLLER_DETACHED, "controller-detached"},
    {v1::CLAIM_READY_TO_FREE, "ready-to-free"},
};

constexpr named<v1::PluginType> plugin_types[] = {
    {v1::PLUGIN_NODE, "node"},
    {v1::PLUGIN_CONTROLLER, "controller"},
    {v1::PLUGIN_MONOLITH, "monolith"},
};

constexpr named<v1::VolumeAvailability> volume_availabilities[] = {
    {v1::VOLUME_ACTIVE, "active"},
    {v1::VOLUME_PAUSE, "pause"},
    {v1::VOLUME_DRAIN, "drain"},
};

template <class Enum, size_t N>
std::string_view lookup_name(const named<Enum> (&table)[N], Enum x) {
  for (const auto& e : table)
    if (e.value == x) return e.name;
  return "unknown";
}

template <class Enum, size_t N>
std::optional<Enum> lookup_value(const named<Enum> (&table)[N], std::string_view s) {
  for (const auto& e : table)
    if (e.name == s) return e.value;
  return std::nullopt;
}

template <class Enum, size_t N>
std::string all_names(const named<Enum> (&table)[N]) {
  std::string out;
  for (const auto& e : table) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

}  // namespace

// --- names ---------------------------------------------------------------

std::string_view name_of(v1::AccessMode x) { return lookup_name(access_modes, x); }
std::string_view name_of(v1::AttachmentMode x) { return lookup_name(attachment_modes, x); }
std::string_view name_of(v1::ClaimState x) { return lookup_name(claim_states, x); }
std::string_view name_of(v1::PluginType x) { return lookup_name(plugin_types, x); }
std::string_view name_of(v1::VolumeAvailability x) {
  return lookup_name(volume_availabilities, x);
}
std::optional<v1::VolumeAvailability> parse_volume_availability(std::string_view s) {
  return lookup_value(volume_availabilities, s);
}
std::string volume_availability_names() { return all_names(volume_availabilities); }

std::string_view name_of(v1::ClaimMode x) {
  switch (x) {
    case v1::CLAIM_READ: return "read";
    case v1::CLAIM_WRITE: return "write";
    default: return "unknown";
  }
}

std::string_view name_of(v1::NodeStatus x) {
  switch (x) {
    case v1::NODE_READY: return "ready";
    case v1::NODE_DOWN: return "down";
    default: return "unknown";
  }
}

std::string_view name_of(v1::AllocState x) {
  switch (x) {
    case v1::ALLOC_PENDING: return "pending";
    case v1::ALLOC_RUNNING: return "running";
    case v1::ALLOC_COMPLETE: return "complete";
    case v1::ALLOC_FAILED: return "failed";
    case v1::ALLOC_LOST: return "lost";
    default: return "unknown";
  }
}

std::optional<v1::AccessMode> parse_access_mode(std::string_view s) {
  return lookup_value(access_modes, s);
}
std::optional<v1::AttachmentMode> parse_attachment_mode(std::string_view s) {
  return lookup_value(attachment_modes, s);
}
std::optional<v1::PluginType> parse_plugin_type(std::string_view s) {
  return lookup_value(plugin_types, s);
}

std::string access_mode_names() { return all_names(access_modes); }
std::string attachment_mode_names() { return all_names(attachment_modes); }

bool allows_writers(v1::AccessMode m) {
  return m == v1::SINGLE_NODE_WRITER || m == v1::MULTI_NODE_SINGLE_WRITER ||
         m == v1::MULTI_NODE_MULTI_WRITER;
}

bool single_node(v1::AccessMode m) {
  return m == v1::SINGLE_NODE_READER_ONLY || m == v1::SINGLE_NODE_WRITER;
}

// --- validation ------------------------------------------------------------

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > 128 || id[0] == '.' || id[0] == '-') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '.' || c == '-';
  });
}

bool valid_member_id(std::string_view id) {
  if (valid_id(id)) return true;
  auto open = id.rfind('[');
  if (open == std::string_view::npos || id.size() > 128 || id.back() != ']') return false;
  auto digits = id.substr(open + 1, id.size() - open - 2);
  if (digits.empty() || digits.size() > 5 || (digits.size() > 1 && digits[0] == '0')) return false;
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  return valid_id(id.substr(0, open));
}

std::string member_id(const std::string& base, int index) {
  return base + "[" + std::to_string(index) + "]";
}

namespace {

// The K of a replacement's ".K" (1..99999, no leading zeros), or 0.
int replacement_number(std::string_view suffix) {
  if (suffix.empty() || suffix.size() > 5 || suffix[0] == '0') return 0;
  int k = 0;
  for (char c : suffix) {
    if (c < '0' || c > '9') return 0;
    k = k * 10 + (c - '0');
  }
  return k;
}

}  // namespace

bool valid_alloc_id(std::string_view id) {
  if (valid_member_id(id)) return true;
  auto close = id.rfind("].");
  if (close == std::string_view::npos || replacement_number(id.substr(close + 2)) == 0)
    return false;
  auto member = id.substr(0, close + 1);
  return !valid_id(member) && valid_member_id(member);
}

std::string replacement_id(const std::string& id) {
  if (auto close = id.rfind("]."); close != std::string::npos)
    if (int k = replacement_number(std::string_view(id).substr(close + 2)); k > 0)
      return id.substr(0, close + 2) + std::to_string(k + 1);
  return id + ".1";
}

void apply_defaults(v1::Volume& v) {
  if (v.namespace_().empty()) v.set_namespace_("default");
  // The plugin's, never the spec's: set by the health check, shown by
  // volume status (a status piped back in registers without them).
  v.clear_condition();
  v.clear_usage();
  if (v.name().empty()) v.set_name(v.id());
}

std::vector<problem> validate_volume(const v1::Volume& v) {
  std::vector<problem> out;
  auto add = [&](std::string field, std::string msg) {
    out.push_back({std::move(field), std::move(msg)});
  };
  auto check_id = [&](const char* field, const std::string& value) {
    if (value.empty())
      add(field, "is required");
    else if (!valid_id(value))
      add(field, quote_name(value) +
                     " is not a valid id (1-128 of A-Z a-z 0-9 _ . -, not starting with . or -)");
  };
  if (!valid_member_id(v.id()))  // a member of volume create --count: db[0]
    check_id("id", v.id());
  check_id("namespace", v.namespace_());
  check_id("plugin_id", v.plugin_id());
  if (!v.group().empty() && !valid_id(v.group()))
    add("group", quote_name(v.group()) +
                     " is not a valid volume group name (1-128 of A-Z a-z 0-9 _ . -, not "
                     "starting with . or -)");
  if (v.external_id().empty())
    add("external_id", "is required (the storage provider's id of the volume)");
  else if (v.external_id().size() > 128)
    add("external_id", "is longer than CSI's limit of 128 bytes");
  if (v.capabilities().empty())
    add("capabilities", "at least one {access_mode, attachment_mode} is required");
  for (int i = 0; i < v.capabilities_size(); ++i) {
    const auto& c = v.capabilities(i);
    auto at = "capabilities[" + std::to_string(i) + "]";
    if (c.access_mode() == v1::ACCESS_MODE_UNKNOWN)
      add(at + ".access_mode", "is required (one of " + access_mode_names() + ")");
    if (c.attachment_mode() == v1::ATTACHMENT_MODE_UNKNOWN)
      add(at + ".attachment_mode", "is required (one of " + attachment_mode_names() + ")");
    if (c.attachment_mode() == v1::BLOCK_DEVICE && !v.mount_options().fs_type().empty())
      add(at + ".attachment_mode", "block-device volumes take no mount_options.fs_type");
  }
  if (v.capacity_min() < 0) add("capacity_min", "must not be negative");
  if (v.capacity_max() < 0) add("capacity_max", "must not be negative");
  if (v.capacity_max() > 0 && v.capacity_min() > v.capacity_max())
    add("capacity_max", "is smaller than capacity_min");
  auto check_map = [&](const char* field, const google::protobuf::Map<std::string, std::string>& m) {
    size_t bytes = 0;
    for (const auto& [k, val] : m) {
      bytes += k.size() + val.size();
      if (k.empty()) add(field, "has an empty key");
    }
    if (bytes > 4096) add(field, "is larger than CSI's limit of 4 KiB");
  };
  check_map("secrets", v.secrets());
  check_map("parameters", v.parameters());
  check_map("context", v.context());
  if (!v.claims().empty()) add("claims", "cannot be set in a registration");
  if (v.availability() != v1::VOLUME_ACTIVE)
    add("availability", "cannot be set in a registration (berth volume availability)");
  return out;
}

std::string describe(std::string_view object, const std::vector<problem>& problems) {
  std::string out(object);
  out += ": ";
  for (size_t i = 0; i < problems.size(); ++i) {
    if (i) out += "; ";
    out += problems[i].field + " " + problems[i].message;
  }
  return out;
}

// --- plugin health ------------------------------------------------------------

plugin_health health_of(const v1::Plugin& p) {
  plugin_health h;
  h.controllers_expected = p.controllers_size();
  h.nodes_expected = p.nodes_size();
  for (const auto& c : p.controllers()) h.controllers_healthy += c.healthy() ? 1 : 0;
  for (const auto& n : p.nodes()) h.nodes_healthy += n.healthy() ? 1 : 0;
  return h;
}

namespace {

using instances = google::protobuf::RepeatedPtrField<v1::PluginInstance>;

bool same_instance(const v1::PluginInstance& a, const v1::PluginInstance& b) {
  // updated_at_ms alone changing is not a change of the instance.
  v1::PluginInstance x = a;
  v1::PluginInstance y = b;
  x.set_updated_at_ms(0);
  y.set_updated_at_ms(0);
  return x.SerializeAsString() == y.SerializeAsString();
}

// Keeps `list` sorted by node id, so equal plugins serialize equally.
bool upsert_into(instances& list, const v1::PluginInstance& inst) {
  auto it = std::lower_bound(list.begin(), list.end(), inst.node_id(),
                             [](const v1::PluginInstance& x, const std::string& id) {
                               return x.node_id() < id;
                             });
  if (it != list.end() && it->node_id() == inst.node_id()) {
    if (same_instance(*it, inst)) return false;
    *it = inst;
    return true;
  }
  auto pos = it - list.begin();
  list.Add()->CopyFrom(inst);
  for (auto i = list.size() - 1; i > pos; --i) list.SwapElements(i, i - 1);
  return true;
}

bool remove_from(instances& list, const std::string& node_id) {
  for (int i = 0; i < list.size(); ++i) {
    if (list.Get(i).node_id() == node_id) {
      list.erase(list.begin() + i);
      return true;
    }
  }
  return false;
}

}  // namespace

bool upsert_instance(v1::Plugin& p, v1::PluginType type, const v1::PluginInstance& inst) {
  bool changed = false;
  if (type == v1::PLUGIN_CONTROLLER || type == v1::PLUGIN_MONOLITH) {
    changed |= upsert_into(*p.mutable_controllers(), inst);
    if (inst.publish_unpublish() && !p.controller_required()) {
      p.set_controller_required(true);
      changed = true;
    }
    if (inst.expand_volume() && !p.controller_expands()) {
      p.set_controller_expands(true);
      changed = true;
    }
  }
  if (type == v1::PLUGIN_NODE || type == v1::PLUGIN_MONOLITH)
    changed |= upsert_into(*p.mutable_nodes(), inst);
  if (!inst.provider().empty() &&
      (p.provider() != inst.provider() || p.provider_version() != inst.provider_version())) {
    p.set_provider(inst.provider());
    p.set_provider_version(inst.provider_version());
    changed = true;
  }
  return changed;
}

bool remove_instance(v1::Plugin& p, v1::PluginType type, const std::string& node_id) {
  bool changed = false;
  if (type == v1::PLUGIN_CONTROLLER || type == v1::PLUGIN_MONOLITH)
    changed |= remove_from(*p.mutable_controllers(), node_id);
  if (type == v1::PLUGIN_NODE || type == v1::PLUGIN_MONOLITH)
    changed |= remove_from(*p.mutable_nodes(), node_id);
  return changed;
}

bool plugin_is_empty(const v1::Plugin& p) { return p.controllers().empty() && p.nodes().empty(); }

const v1::PluginInstance* node_instance(const v1::Plugin& p, const std::string& node_id) {
  for (const auto& n : p.nodes())
    if (n.node_id() == node_id) return &n;
  return nullptr;
}

std::optional<std::string> plugin_unschedulable(const v1::Plugin& p) {
  auto h = health_of(p);
  if (h.nodes_healthy == 0)
    return "plugin " + quote_name(p.id()) + " has no healthy node instance (" +
           std::to_string(h.nodes_healthy) + "/" + std::to_string(h.nodes_expected) + " healthy)";
  if (p.controller_required() && h.controllers_healthy == 0)
    return "plugin " + quote_name(p.id()) + " requires a controller and has no healthy one (" +
           std::to_string(h.controllers_healthy) + "/" + std::to_string(h.controllers_expected) +
           " healthy)";
  return std::nullopt;
}

std::optional<std::string> volume_unhealthy(const v1::Volume& v, const v1::Plugin* plugin) {
  if (plugin == nullptr)
    return "plugin " + quote_name(v.plugin_id()) + " is not registered by any node";
  return plugin_unschedulable(*plugin);
}

// --- claims -----------------------------------------------------------------

bool holds_volume(const v1::Claim& c) { return c.state() != v1::CLAIM_STATE_UNKNOWN; }

v1::AccessMode mode_in_use(const v1::Volume& v) {
  for (const auto& c : v.claims())
    if (holds_volume(c)) return c.access_mode();
  return v1::ACCESS_MODE_UNKNOWN;
}

const v1::Claim* find_claim(const v1::Volume& v, const std::string& alloc_id) {
  for (const auto& c : v.claims())
    if (c.alloc_id() == alloc_id) return &c;
  return nullptr;
}

bool other_publications_on_node(const v1::Volume& v, const std::string& node_id,
                                const std::string& alloc_id) {
  for (const auto& c : v.claims())
    if (c.alloc_id() != alloc_id && c.node_id() == node_id &&
        (c.state() == v1::CLAIM_TAKEN || c.state() == v1::CLAIM_UNPUBLISHING))
      return true;
  return false;
}

namespace {

v1::Claim* find_claim_mut(v1::Volume& v, const std::string& alloc_id) {
  for (auto& c : *v.mutable_claims())
    if (c.alloc_id() == alloc_id) return &c;
  return nullptr;
}

std::string volume_name(const v1::Volume& v) { return "volume " + quote_name(v.id()); }

std::string holder(const v1::Claim& c) {
  std::string s = "alloc " + quote_name(c.alloc_id()) + " on node " + quote_name(c.node_id());
  if (c.state() != v1::CLAIM_TAKEN)
    s += " (release in progress: " + std::string(name_of(c.state())) + ")";
  return s;
}

failure refused(std::string msg) { return {errc::refused, std::move(msg)}; }

// Picks the capability the claim uses: the one requested, else the mode in
// use, else the first capability that allows the claim.
std::optional<v1::VolumeCapability> pick_capability(const v1::Volume& v,
                                                     const claim_request& req,
                                                     std::string& why) {
  auto in_use = mode_in_use(v);
  for (const auto& cap : v.capabilities()) {
    if (req.access_mode != v1::ACCESS_MODE_UNKNOWN && cap.access_mode() != req.access_mode)
      continue;
    if (req.attachment_mode != v1::ATTACHMENT_MODE_UNKNOWN &&
        cap.attachment_mode() != req.attachment_mode)
      continue;
    if (in_use != v1::ACCESS_MODE_UNKNOWN && cap.access_mode() != in_use) continue;
    if (req.write && !allows_writers(cap.access_mode())) continue;
    return cap;
  }
  if (req.access_mode != v1::ACCESS_MODE_UNKNOWN || req.attachment_mode != v1::ATTACHMENT_MODE_UNKNOWN) {
    bool listed = false;
    for (const auto& cap : v.capabilities())
      listed |= (req.access_mode == v1::ACCESS_MODE_UNKNOWN ||
                 cap.access_mode() == req.access_mode) &&
                (req.attachment_mode == v1::ATTACHMENT_MODE_UNKNOWN ||
                 cap.attachment_mode() == req.attachment_mode);
    if (!listed) {
      why = volume_name(v) + " has no capability " +
            std::string(name_of(req.access_mode)) + "/" + std::string(name_of(req.attachment_mode)) +
            "; register it with that capability or claim with one it has";
      return std::nullopt;
    }
  }
  if (in_use != v1::ACCESS_MODE_UNKNOWN && (!req.write || allows_writers(in_use))) {
    why = volume_name(v) + " is in use as " + std::string(name_of(in_use)) +
          "; claims with another access mode are refused until its claims are released";
    return std::nullopt;
  }
  if (req.write)
    why = volume_name(v) + " has no capability that allows writers (" +
          (in_use != v1::ACCESS_MODE_UNKNOWN ? "in use as " + std::string(name_of(in_use))
                                             : std::string("registered read-only")) +
          "); claim it with --read-only";
  else
    why = volume_name(v) + " has no capability that fits the claim";
  return std::nullopt;
}


}  // namespace

std::optional<failure> refuse_unavailable(const v1::Volume& v) {
  auto fix = "; to take claims again: berth " +
             (v.namespace_().empty() || v.namespace_() == "default"
                  ? std::string()
                  : "--namespace " + v.namespace_() + " ") +
             "volume availability " + v.id() + " active";
  switch (v.availability()) {
    case v1::VOLUME_PAUSE:
      return refused(volume_name(v) +
                     " is paused (availability pause): it keeps its claims and takes no new "
                     "one" + fix);
    case v1::VOLUME_DRAIN:
      return refused(volume_name(v) +
                     " is draining (availability drain): its allocs are stopped, its claims "
                     "released, and it takes no new claim" + fix);
    default:
      return std::nullopt;
  }
}

std::optional<failure> refuse_abnormal(const v1::Volume& v, bool allow_abnormal) {
  if (!v.condition().abnormal() || allow_abnormal) return std::nullopt;
  return refused(
      volume_name(v) + " is abnormal (plugin " + quote_name(v.plugin_id()) + ": " +
      (v.condition().message().empty() ? std::string("no message") : v.condition().message()) +
      "): it takes no new claim, its existing claims are kept; claim it anyway with "
      "--allow-abnormal");
}

std::optional<failure> refuse_inaccessible(const v1::Volume& v, const v1::Plugin* plugin,
                                           const std::string& node_id) {
  if (auto why = volume_unhealthy(v, plugin)) return refused(volume_name(v) + ": " + *why);
  const auto* inst = node_instance(*plugin, node_id);
  if (inst == nullptr)
    return refused(volume_name(v) + ": plugin " + quote_name(v.plugin_id()) +
                   " has no node instance on node " + quote_name(node_id) +
                   "; run the plugin on that node or claim on another");
  if (!inst->healthy())
    return refused(volume_name(v) + ": plugin " + quote_name(v.plugin_id()) + " on node " +
                   quote_name(node_id) + " is unhealthy" +
                   (inst->health_description().empty() ? "" : " (" + inst->health_description() + ")"));
  if (!v.accessible_topology().empty()) {
    bool ok = std::any_of(v.accessible_topology().begin(), v.accessible_topology().end(),
                          [&](const v1::Topology& t) {
                            return topology_matches(inst->accessible_topology(), t);
                          });
    if (!ok)
      return refused(volume_name(v) + " is not accessible from node " + quote_name(node_id) +
                     " (outside the volume's accessible topology)");
  }
  return std::nullopt;
}

std::optional<failure> claim(v1::Volume& v, const claim_request& req, const v1::Plugin* plugin) {
  if (req.alloc_id.empty()) return failure{errc::invalid, "claim needs an alloc id (--alloc)"};
  if (req.node_id.empty()) return failure{errc::invalid, "claim needs a node id (--node)"};
  auto want = req.write ? v1::CLAIM_WRITE : v1::CLAIM_READ;
  if (auto* existing = find_claim(v, req.alloc_id)) {
    if (existing->state() != v1::CLAIM_TAKEN)
      return refused(volume_name(v) + ": the claim of alloc " + quote_name(req.alloc_id) +
                     " is being released (" + std::string(name_of(existing->state())) +
                     "); claim again with a new alloc once it is freed");
    if (existing->node_id() != req.node_id)
      return refused(volume_name(v) + " is already claimed by alloc " + quote_name(req.alloc_id) +
                     " on node " + quote_name(existing->node_id()));
    if (existing->mode() == want) {
      // Idempotent, but a repeat publishes again, which needs the plugin
      // (issue 27: an empty plugin here crashed the leader's volume actor).
      if (plugin == nullptr)
        return failure{errc::unavailable,
                       volume_name(v) + ": plugin " + quote_name(v.plugin_id()) +
                           " is not known to the leader right now; the claim of alloc " +
                           quote_name(req.alloc_id) + " is held; retry",
                       true};
      return std::nullopt;
    }
    return refused(volume_name(v) + " is already claimed for " +
                   std::string(name_of(existing->mode())) + " by alloc " +
                   quote_name(req.alloc_id) + "; release it before claiming for " +
                   std::string(name_of(want)));
  }
  if (auto f = refuse_unavailable(v)) return f;
  if (auto f = refuse_abnormal(v, req.allow_abnormal)) return f;
  if (v.resource_exhausted_at_ms() != 0)
    return refused(volume_name(v) +
                   " is resource-exhausted (the storage provider refused more attachments); "
                   "release claims or retry later");
  if (auto f = refuse_inaccessible(v, plugin, req.node_id)) return f;
  const auto* inst = node_instance(*plugin, req.node_id);
  bool on_node_already = std::any_of(v.claims().begin(), v.claims().end(),
                                     [&](const v1::Claim& c) { return c.node_id() == req.node_id; });
  if (inst->max_volumes() > 0 && req.node_volume_count >= inst->max_volumes() && !on_node_already)
    return refused(volume_name(v) + ": node " + quote_name(req.node_id) + " already has " +
                   std::to_string(req.node_volume_count) + " volumes of plugin " +
                   quote_name(v.plugin_id()) + " published, its limit (max_volumes_per_node " +
                   std::to_string(inst->max_volumes()) +
                   " from NodeGetInfo); release one there or claim on another node");
  std::string why;
  auto cap = pick_capability(v, req, why);
  if (!cap) return refused(why);
  auto mode = cap->access_mode();
  for (const auto& c : v.claims()) {
    if (!holds_volume(c)) continue;
    // CSI: a single-node volume "can only be published once ... at any
    // given time", so it takes one claim, reader or writer.
    if (single_node(mode))
      return refused(volume_name(v) + " is " + std::string(name_of(mode)) +
                     " and is already claimed by " + holder(c) +
                     "; a single-node volume takes one claim at a time (release it first: "
                     "berth volume release " + v.id() + " --alloc " + c.alloc_id() + ")");
    if (req.write && c.mode() == v1::CLAIM_WRITE && mode != v1::MULTI_NODE_MULTI_WRITER)
      return refused(volume_name(v) + " is " + std::string(name_of(mode)) +
                     " and is already claimed for writing by " + holder(c) +
                     "; release that claim first (berth volume release " + v.id() +
                     " --alloc " + c.alloc_id() + ")");
  }
  auto* c = v.add_claims();
  c->set_alloc_id(req.alloc_id);
  c->set_node_id(req.node_id);
  c->set_mode(want);
  c->set_state(v1::CLAIM_TAKEN);
  c->set_access_mode(mode);
  c->set_attachment_mode(cap->attachment_mode());
  c->set_claimed_at_ms(req.now_ms);
  c->set_controller_required(plugin->controller_required());
  c->set_csi_node_id(inst->csi_node_id());
  return std::nullopt;
}

std::optional<failure> release(v1::Volume& v, const std::string& alloc_id,
                               std::string_view reason, int64_t now_ms) {
  auto* c = find_claim_mut(v, alloc_id);
  if (c == nullptr)
    return failure{errc::not_found,
                   volume_name(v) + " has no claim of alloc " + quote_name(alloc_id)};
  if (c->state() != v1::CLAIM_TAKEN) return std::nullopt;  // already in release
  c->set_state(v1::CLAIM_UNPUBLISHING);
  c->set_released_at_ms(now_ms);
  c->set_release_reason(std::string(reason));
  return std::nullopt;
}

std::optional<failure> advance_claim(v1::Volume& v, const std::string& alloc_id,
                                     v1::ClaimState to) {
  auto* c = find_claim_mut(v, alloc_id);
  if (c == nullptr)
    return failure{errc::not_found,
                   volume_name(v) + " has no claim of alloc " + quote_name(alloc_id)};
  if (c->state() == v1::CLAIM_TAKEN)
    return refused(volume_name(v) + ": the claim of alloc " + quote_name(alloc_id) +
                   " is not being released");
  if (to < c->state() || to == v1::CLAIM_TAKEN)
    return refused(volume_name(v) + ": the claim of alloc " + quote_name(alloc_id) + " is " +
                   std::string(name_of(c->state())) + " and cannot go back to " +
                   std::string(name_of(to)));
  c->set_state(to);
  return std::nullopt;
}

std::optional<failure> free_claim(v1::Volume& v, const std::string& alloc_id) {
  auto* claims = v.mutable_claims();
  for (int i = 0; i < claims->size(); ++i) {
    const auto& c = claims->Get(i);
    if (c.alloc_id() != alloc_id) continue;
    if (c.state() != v1::CLAIM_READY_TO_FREE)
      return refused(volume_name(v) + ": the claim of alloc " + quote_name(alloc_id) + " is " +
                     std::string(name_of(c.state())) + ", not ready-to-free");
    claims->DeleteSubrange(i, 1);
    return std::nullopt;
  }
  return std::nullopt;  // already freed
}

// --- registration ------------------------------------------------------------

namespace {

template <class Map>
bool same_map(const Map& a, const Map& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, val] : a) {
    auto it = b.find(k);
    if (it == b.end() || it->second != val) return false;
  }
  return true;
}

}  // namespace

std::optional<failure> reregister(v1::Volume& current, const v1::Volume& incoming) {
  std::vector<problem> problems;
  auto immutable = [&](const char* field, bool same) {
    if (!same) problems.push_back({field, "cannot change after registration"});
  };
  immutable("plugin_id", current.plugin_id() == incoming.plugin_id());
  immutable("external_id", current.external_id() == incoming.external_id());
  immutable("parameters", same_map(current.parameters(), incoming.parameters()));
  if (!current.claims().empty()) {
    auto in_use = mode_in_use(current);
    bool still_offered = in_use == v1::ACCESS_MODE_UNKNOWN;
    for (const auto& cap : incoming.capabilities())
      still_offered |= cap.access_mode() == in_use;
    if (!still_offered)
      problems.push_back({"capabilities", "must keep " + std::string(name_of(in_use)) +
                                              " while the volume is claimed"});
    if (current.mount_options().SerializeAsString() !=
        incoming.mount_options().SerializeAsString())
      problems.push_back({"mount_options", "cannot change while the volume is claimed"});
  }
  if (!problems.empty())
    return failure{errc::refused,
                   describe("volume " + quote_name(current.id()) + " re-registration", problems) +
                       " (deregister and register it again to change them)"};
  v1::Volume next = incoming;
  *next.mutable_claims() = current.claims();
  next.set_create_index(current.create_index());
  next.set_modify_index(current.modify_index());
  next.set_resource_exhausted_at_ms(current.resource_exhausted_at_ms());
  // Where its content came from, and what volume modify set, are kept.
  next.set_snapshot_id(current.snapshot_id());
  next.set_clone_id(current.clone_id());
  next.set_clone_external_id(current.clone_external_id());
  *next.mutable_modified_parameters() = current.modified_parameters();
  next.set_availability(current.availability());  // berth volume availability changes it
  *next.mutable_condition() = current.condition();  // the health check changes it
  next.clear_usage();
  if (next.accessible_topology().empty())
    *next.mutable_accessible_topology() = current.accessible_topology();
  current = std::move(next);
  return std::nullopt;
}

std::optional<failure> can_deregister(const v1::Volume& v) {
  if (v.claims().empty()) return std::nullopt;
  std::string who;
  for (const auto& c : v.claims()) {
    if (!who.empty()) who += ", ";
    who += holder(c);
  }
  return refused(volume_name(v) + " is claimed by " + who +
                 "; release the claims first (berth volume release " + v.id() +
                 " --alloc ALLOC) or deregister with --force to release them");
}

std::optional<failure> can_force_deregister(const v1::Volume& v) {
  for (const auto& c : v.claims())
    if (c.state() == v1::CLAIM_TAKEN)
      return refused(volume_name(v) + " is still claimed by " + holder(c) +
                     "; release it first");
  return std::nullopt;
}

// --- redaction ----------------------------------------------------------------

v1::Volume redacted(const v1::Volume& v) {
  v1::Volume out = v;
  out.clear_secrets();
  out.mutable_mount_options()->clear_mount_flags();
  return out;
}

}  // namespace berth

namespace berth {

bool alloc_terminal(v1::AllocState s) {
  return s == v1::ALLOC_COMPLETE || s == v1::ALLOC_FAILED || s == v1::ALLOC_LOST;
}

std::vector<problem> validate_alloc(const v1::Alloc& a) {
  std::vector<problem> out;
  if (!a.id().empty() && !valid_alloc_id(a.id()))
    out.push_back({"id", quote_name(a.id()) + " is not a valid id ([A-Za-z0-9_.-], at most 128, "
                                         "or a group member such as web[0])"});
  if (!a.group().empty() && !valid_id(a.group()))
    out.push_back({"group", quote_name(a.group()) + " is not a valid group name ([A-Za-z0-9_.-])"});
  if (!valid_id(a.namespace_())) out.push_back({"namespace", "is missing or not a valid id"});
  if (a.node_id().empty())
    out.push_back({"node", "is required (--node NODE)"});
  else if (!valid_id(a.node_id()))
    out.push_back({"node", quote_name(a.node_id()) + " is not a valid node id"});
  std::vector<std::string> names, envs;
  for (int i = 0; i < a.volumes_size(); ++i) {
    const auto& v = a.volumes(i);
    auto field = "volumes[" + std::to_string(i) + "]";
    if (!valid_id(v.name()))
      out.push_back({field + ".name", quote_name(v.name()) + " is not a valid name"});
    if (!valid_member_id(v.volume_id()))
      out.push_back({field + ".volume", quote_name(v.volume_id()) + " is not a valid volume id"});
    auto env = volume_env_name(v.name());
    if (std::find(envs.begin(), envs.end(), env) != envs.end())
      out.push_back({field + ".name", quote_name(v.name()) + " is used twice (both would be " + env + ")"});
    envs.push_back(env);
    if (std::find(names.begin(), names.end(), v.volume_id()) != names.end())
      out.push_back({field + ".volume", "volume " + quote_name(v.volume_id()) +
                                            " is named twice; an alloc claims a volume once"});
    names.push_back(v.volume_id());
    for (const auto& f : v.mount_flags())
      if (f.empty() || f.find_first_of(",\n") != std::string::npos)
        out.push_back({field + ".mount_flag", quote_name(f) + " is not a mount flag"});
  }
  if (a.volumes().empty() && a.command().empty())
    out.push_back({"volumes", "an alloc needs a volume (--volume NAME=VOLUME) or a command"});
  if (!a.command().empty() && a.command(0).empty())
    out.push_back({"command", "the command's program is empty"});
  return out;
}

std::string volume_env_name(std::string_view name) {
  std::string out = "BERTH_VOLUME_";
  for (char c : name) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    out += ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) ? c : '_';
  }
  return out;
}

std::variant<v1::AllocVolume, std::string> parse_alloc_volume(std::string_view arg) {
  auto bad = [&](const std::string& why) {
    return "--volume " + quote_name(std::string(arg)) + ": " + why +
           " (expected NAME=VOLUME[:ro][,mount_flag=FLAG]...)";
  };
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    auto comma = arg.find(',', start);
    parts.push_back(arg.substr(start, comma == std::string_view::npos ? arg.npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  v1::AllocVolume v;
  auto head = parts[0];
  auto eq = head.find('=');
  if (eq == std::string_view::npos) return bad("no '='");
  v.set_name(std::string(head.substr(0, eq)));
  auto vol = head.substr(eq + 1);
  if (vol.size() > 3 && vol.substr(vol.size() - 3) == ":ro") {
    v.set_read_only(true);
    vol.remove_suffix(3);
  } else if (vol.size() > 3 && vol.substr(vol.size() - 3) == ":rw") {
    vol.remove_suffix(3);
  }
  v.set_volume_id(std::string(vol));
  if (v.name().empty()) return bad("the name is empty");
  if (v.volume_id().empty()) return bad("the volume is empty");
  constexpr std::string_view key = "mount_flag=";
  for (size_t i = 1; i < parts.size(); ++i) {
    auto opt = parts[i];
    if (opt.substr(0, key.size()) != key || opt.size() == key.size())
      return bad("unknown option " + quote_name(std::string(opt)));
    v.add_mount_flags(std::string(opt.substr(key.size())));
  }
  return v;
}

fence_verdict fence(uint64_t seen, uint64_t term) {
  if (term == 0 || term == seen) return fence_verdict::accept;
  return term > seen ? fence_verdict::accept_newer : fence_verdict::refuse;
}

uint64_t newest_leader_term(uint64_t known, uint64_t term, bool leader_known) {
  return leader_known && term > known ? term : known;
}

int64_t retry_delay_ms(uint32_t attempts, double jitter, int64_t base_ms, int64_t cap_ms) {
  int64_t d = base_ms;
  for (uint32_t i = 1; i < attempts && d < cap_ms; ++i) d *= 2;
  d = std::min(d, cap_ms);
  if (jitter < 0) jitter = 0;
  if (jitter >= 1) jitter = 0.999;
  return d / 2 + static_cast<int64_t>(static_cast<double>(d / 2) * jitter);
}

bool topology_matches(const v1::Topology& node, const v1::Topology& allowed) {
  for (const auto& [k, val] : allowed.segments()) {
    auto it = node.segments().find(k);
    if (it == node.segments().end() || it->second != val) return false;
  }
  return true;
}

}  // namespace berth
