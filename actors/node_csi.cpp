#include "actors/node_csi.hpp"

#include <filesystem>
#include <optional>

#include "csi/client.hpp"
#include "csi/translate.hpp"
#include "log/log.hpp"
#include "persistence/spare_dirs.hpp"

namespace berth {

namespace fs = std::filesystem;

std::variant<node_plugin, std::string> parse_plugin_flag(const std::string& flag) {
  auto eq = flag.find('=');
  auto colon = flag.find(':', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || colon == std::string::npos)
    return "--plugin '" + flag +
           "' is not ID=TYPE:SOCKET[,OPTION=N...] (e.g. hostpath=monolith:/run/csi.sock)";
  node_plugin p;
  p.id = flag.substr(0, eq);
  auto type = flag.substr(eq + 1, colon - eq - 1);
  auto rest = flag.substr(colon + 1);
  auto comma = rest.find(',');
  auto socket = rest.substr(0, comma);
  if (!valid_id(p.id)) return "--plugin '" + flag + "': '" + p.id + "' is not a valid plugin id";
  auto t = parse_plugin_type(type);
  if (!t) return "--plugin '" + flag + "': type '" + type + "' is not node, controller or monolith";
  p.type = *t;
  if (socket.rfind("unix://", 0) == 0) socket = socket.substr(7);
  if (socket.empty() || socket[0] != '/')
    return "--plugin '" + flag + "': the socket must be an absolute path";
  p.endpoint = "unix://" + socket;
  // Options: max_controller_calls=N, max_node_calls=N (1..1024).
  while (comma != std::string::npos) {
    auto next = rest.find(',', comma + 1);
    auto opt =
        rest.substr(comma + 1, next == std::string::npos ? std::string::npos : next - comma - 1);
    comma = next;
    auto oeq = opt.find('=');
    auto name = opt.substr(0, oeq);
    int* target = name == "max_controller_calls" ? &p.max_controller_calls
                  : name == "max_node_calls"     ? &p.max_node_calls
                                                 : nullptr;
    if (target == nullptr)
      return "--plugin '" + flag + "': unknown option '" + name +
             "' (known: max_controller_calls=N, max_node_calls=N)";
    auto value = oeq == std::string::npos ? std::string{} : opt.substr(oeq + 1);
    int n = 0;
    bool digits = !value.empty() && value.size() <= 4 &&
                  value.find_first_not_of("0123456789") == std::string::npos;
    if (digits) n = std::stoi(value);
    if (!digits || n < 1 || n > 1024)
      return "--plugin '" + flag + "': " + name + " must be a number from 1 to 1024 (1: one call " +
             "at a time, as Nomad does), got '" + value + "'";
    *target = n;
  }
  return p;
}

std::string where(const std::string& node_id, const std::string& plugin) {
  return "plugin '" + plugin + "' on node '" + node_id + "'";
}

v1::PluginInstance probed_instance(const v1::PluginInstance* known, v1::PluginInstance probed,
                                   const std::string& node_id) {
  if (!probed.healthy() && known) {
    auto kept = *known;
    kept.set_healthy(false);
    kept.set_health_description(probed.health_description());
    probed = std::move(kept);
  }
  probed.set_node_id(node_id);
  return probed;
}

v1::Request fingerprint_report(const node_plugin& p, const std::string& node_id,
                               const std::string& node_secret, const v1::PluginInstance& inst) {
  v1::Request req;
  req.set_node_secret(node_secret);
  auto* f = req.mutable_plugin_fingerprint();
  f->set_plugin_id(p.id);
  f->set_node_id(node_id);
  f->set_type(p.type);
  *f->mutable_instance() = inst;
  return req;
}

namespace {

// Sets the outcome's error from a call's status; true when the call failed.
// RESOURCE_EXHAUSTED and ABORTED mark the plugin overloaded (the
// connection backs off and runs the job again).
bool failed(csi_outcome& out, const std::string& where, csi::method m, const csi::call_status& s) {
  out.error = csi::call_failure(where, m, s);
  out.overloaded =
      s.grpc_code == csi::code::resource_exhausted || s.grpc_code == csi::code::aborted;
  return out.error.has_value();
}

template <class Pred>
std::vector<waiting_calls::call> take(std::deque<waiting_calls::call>& calls, Pred pred) {
  std::vector<waiting_calls::call> taken;
  std::deque<waiting_calls::call> kept;
  for (auto& c : calls) {
    if (pred(c))
      taken.push_back(std::move(c));
    else
      kept.push_back(std::move(c));
  }
  calls = std::move(kept);
  return taken;
}


// A claim's directories are the CO's: <csi_root>/<plugin>/per-alloc/... and
// <csi_root>/<plugin>/staging/...  They are made from and given back to the
// spares of their plugin (<csi_root>/<plugin>/.spare, persistence/spare_dirs):
// no inode is allocated per publication.  `folder` is "per-alloc" or
// "staging"; a path outside one (a record of another layout) is made and
// removed plainly.
std::optional<fs::path> folder_of(const fs::path& p, const std::string& folder) {
  for (auto d = p; !d.empty() && d != d.parent_path(); d = d.parent_path())
    if (d.filename() == folder) return d;
  return std::nullopt;
}

std::error_code make_claim_dir(const fs::path& dir, const std::string& folder) {
  auto f = folder_of(dir, folder);
  if (!f) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    return ec;
  }
  return spare_dirs::at(f->parent_path() / ".spare").make(dir);
}

// Removes `dir` and each parent left empty, up to the folder; what is not
// empty or is a mount point stays.
void remove_claim_dirs(const fs::path& dir, const std::string& folder) {
  auto f = folder_of(dir, folder);
  if (!f) {
    std::error_code ec;
    fs::remove(dir, ec);  // only an empty directory
    return;
  }
  spare_dirs::at(f->parent_path() / ".spare").remove_empty(dir, *f);
}

}  // namespace

std::vector<waiting_calls::call> waiting_calls::ready(const std::string& plugin) {
  return take(calls_, [&](const call& c) { return c.plugin == plugin; });
}

std::vector<waiting_calls::call> waiting_calls::expired(int64_t now_ms) {
  return take(calls_, [&](const call& c) { return c.deadline_ms <= now_ms; });
}

csi_outcome probe_plugin(csi::client& c, v1::PluginType type) {
  csi_outcome out;
  auto& inst = out.instance;
  auto fail = [&](csi::method m, const csi::call_status& s) {
    inst.set_healthy(false);
    inst.set_health_description(csi::health_description(m, s));
    return out;
  };
  auto info = c.get_plugin_info();
  if (!info.ok()) return fail(csi::method::get_plugin_info, info.status);
  inst.set_provider(info.response.name);
  inst.set_provider_version(info.response.vendor_version);
  auto ready = c.probe();
  if (!ready.ok()) return fail(csi::method::probe, ready.status);
  if (!ready.response) {
    inst.set_healthy(false);
    inst.set_health_description("Probe: the plugin is not ready");
    return out;
  }
  // Whether it expands volumes online or offline only; a plugin that does
  // not answer GetPluginCapabilities is taken to expand none.
  bool group_controller = false;
  if (auto plugin_caps = c.get_plugin_capabilities(); plugin_caps.ok()) {
    inst.set_expansion_online(plugin_caps.response.expansion_online);
    inst.set_expansion_offline(plugin_caps.response.expansion_offline);
    group_controller = plugin_caps.response.group_controller_service;
  }
  if (type == v1::PLUGIN_CONTROLLER || type == v1::PLUGIN_MONOLITH) {
    auto caps = c.controller_get_capabilities();
    if (!caps.ok()) return fail(csi::method::controller_get_capabilities, caps.status);
    inst.set_publish_unpublish(caps.response.publish_unpublish_volume);
    inst.set_create_delete_snapshot(caps.response.create_delete_snapshot);
    inst.set_list_snapshots(caps.response.list_snapshots);
    inst.set_clone_volume(caps.response.clone_volume);
    inst.set_modify_volume(caps.response.modify_volume);
    inst.set_list_volumes(caps.response.list_volumes);
    inst.set_get_volume(caps.response.get_volume);
    inst.set_volume_condition(caps.response.volume_condition);
    inst.set_expand_volume(caps.response.expand_volume);
    // Group snapshots need the GroupController service and its capability;
    // a plugin that fails to answer is taken to have none (as expansion).
    if (group_controller) {
      auto group_caps = c.group_controller_get_capabilities();
      inst.set_group_snapshot(group_caps.ok() &&
                              group_caps.response.create_delete_get_volume_group_snapshot);
    }
  }
  if (type == v1::PLUGIN_NODE || type == v1::PLUGIN_MONOLITH) {
    auto caps = c.node_get_capabilities();
    if (!caps.ok()) return fail(csi::method::node_get_capabilities, caps.status);
    inst.set_stage_unstage(caps.response.stage_unstage_volume);
    inst.set_get_volume_stats(caps.response.get_volume_stats);
    // A monolith's volume_condition is the controller's when it has one.
    if (type == v1::PLUGIN_NODE) inst.set_volume_condition(caps.response.volume_condition);
    inst.set_node_expand_volume(caps.response.expand_volume);
    auto node = c.node_get_info();
    if (!node.ok()) return fail(csi::method::node_get_info, node.status);
    inst.set_csi_node_id(node.response.node_id);
    inst.set_max_volumes(node.response.max_volumes_per_node);
    for (const auto& [k, v] : node.response.accessible_topology)
      (*inst.mutable_accessible_topology()->mutable_segments())[k] = v;
  }
  inst.set_healthy(true);
  inst.set_health_description("healthy");
  return out;
}

csi_outcome publish_claim(csi::client& c, const v1::NodeVolumeRequest& r, const claim_paths& paths,
                          bool stage, const std::string& where) {
  csi_outcome out;
  auto parent = fs::path(paths.target).parent_path();
  for (const auto& [dir, folder] :
       {std::pair{stage ? fs::path(paths.staging) : fs::path(), "staging"},
        std::pair{parent, "per-alloc"}}) {
    if (dir.empty()) continue;
    if (auto ec = make_claim_dir(dir, folder)) {
      out.error =
          failure{errc::internal, where + ": cannot create " + dir.string() + ": " + ec.message()};
      return out;
    }
  }
  if (stage && failed(out, where, csi::method::node_stage_volume,
                      c.node_stage_volume(csi::stage_request(r, paths.staging)).status))
    return out;
  auto p = csi::publish_request(r, stage ? paths.staging : "", paths.target);
  if (failed(out, where, csi::method::node_publish_volume, c.node_publish_volume(p).status))
    return out;
  out.target_path = paths.target;
  // An expansion waiting for the volume's next stage: NodeExpandVolume now.
  // Its failure does not undo the publication (the leader tries again).
  if (r.expand_required_bytes() > 0) {
    auto grown = node_expand(c, r, paths, stage, where);
    out.expanded = !grown.error;
    out.capacity_bytes = grown.capacity_bytes;
  }
  return out;
}

csi_outcome unpublish_claim(csi::client& c, const v1::NodeVolumeRequest& r,
                            const claim_paths& paths, bool unstage, const std::string& where) {
  csi_outcome out;
  const auto& id = r.volume().external_id();
  if (failed(out, where, csi::method::node_unpublish_volume,
             c.node_unpublish_volume(id, paths.target).status))
    return out;
  // The per-alloc directories are the CO's: removed once empty.
  remove_claim_dirs(fs::path(paths.target).parent_path(), "per-alloc");
  if (unstage) return unstage_claim(c, r, paths, true, where);
  return out;
}

csi_outcome unstage_claim(csi::client& c, const v1::NodeVolumeRequest& r, const claim_paths& paths,
                          bool stages, const std::string& where) {
  csi_outcome out;
  if (!stages) return out;
  if (failed(out, where, csi::method::node_unstage_volume,
             c.node_unstage_volume(r.volume().external_id(), paths.staging).status))
    return out;
  remove_claim_dirs(paths.staging, "staging");
  return out;
}

csi_outcome controller_publish(csi::client& c, const v1::NodeVolumeRequest& r,
                               const std::string& where) {
  csi_outcome out;
  auto res = c.controller_publish_volume(csi::controller_publish_request_of(r));
  if (failed(out, where, csi::method::controller_publish_volume, res.status)) return out;
  out.publish_context = std::move(res.response);
  return out;
}

csi_outcome controller_unpublish(csi::client& c, const v1::NodeVolumeRequest& r,
                                 const std::string& where) {
  csi_outcome out;
  failed(out, where, csi::method::controller_unpublish_volume,
         c.controller_unpublish_volume(r.volume().external_id(), r.csi_node_id(),
                                       csi::to_map(r.volume().secrets()))
             .status);
  return out;
}

csi_outcome create_volume(csi::client& c, const v1::Volume& spec, const std::string& where) {
  csi_outcome out;
  auto res = c.create_volume(csi::create_request(spec));
  if (failed(out, where, csi::method::create_volume, res.status)) return out;
  out.volume = csi::created_volume(spec, res.response);
  // The reply goes back to the leader, which has the secrets already.
  out.volume.clear_secrets();
  return out;
}

csi_outcome validate_volume(csi::client& c, const v1::Volume& v, const std::string& where) {
  csi_outcome out;
  auto res = c.validate_volume_capabilities(csi::validate_request_of(v));
  if (failed(out, where, csi::method::validate_volume_capabilities, res.status)) return out;
  out.validation = csi::validation_reason(res.response);
  return out;
}

csi_outcome delete_volume(csi::client& c, const v1::Volume& v, const std::string& where) {
  csi_outcome out;
  failed(out, where, csi::method::delete_volume,
         c.delete_volume(v.external_id(), csi::to_map(v.secrets())).status);
  return out;
}

csi_outcome create_snapshot(csi::client& c, const v1::SnapshotRequest& r,
                            const std::string& where) {
  csi_outcome out;
  auto res = c.create_snapshot(csi::create_snapshot_request_of(r));
  if (failed(out, where, csi::method::create_snapshot, res.status)) return out;
  auto* s = out.snapshots.add_snapshots();
  *s = csi::snapshot_of(res.response, r.plugin_id());
  s->set_name(r.name());
  return out;
}

csi_outcome delete_snapshot(csi::client& c, const v1::SnapshotRequest& r,
                            const std::string& where) {
  csi_outcome out;
  if (r.can_list()) {
    csi::list_snapshots_request q;
    q.snapshot_id = r.snapshot_id();
    q.secrets = csi::to_map(r.secrets());
    auto listed = c.list_snapshots(q);
    // Only a clear answer counts; a failed listing leaves it to DeleteSnapshot.
    if (listed.ok() && listed.response.entries.empty()) out.found = false;
  }
  auto res = c.delete_snapshot(r.snapshot_id(), csi::to_map(r.secrets()));
  if (failed(out, where, csi::method::delete_snapshot, res.status)) return out;
  if (res.status.grpc_code == csi::code::not_found) out.found = false;
  return out;
}

csi_outcome create_group_snapshot(csi::client& c, const v1::SnapshotRequest& r,
                                  const std::string& where) {
  csi_outcome out;
  auto res = c.create_volume_group_snapshot(csi::group_snapshot_request_of(r));
  if (failed(out, where, csi::method::create_volume_group_snapshot, res.status)) return out;
  for (const auto& m : res.response.snapshots) {
    auto* s = out.snapshots.add_snapshots();
    *s = csi::snapshot_of(m, r.plugin_id());
    // The group's id even when a plugin leaves it out of the members.
    s->set_group_snapshot_id(res.response.group_snapshot_id);
    s->set_name(r.name());
  }
  return out;
}

csi_outcome delete_group_snapshot(csi::client& c, const v1::SnapshotRequest& r,
                                  const std::string& where) {
  csi_outcome out;
  std::vector<std::string> members(r.snapshot_ids().begin(), r.snapshot_ids().end());
  if (members.empty()) {
    if (!r.can_list()) {
      out.error = failure{errc::invalid,
                          where + ": plugin '" + r.plugin_id() +
                              "' cannot list snapshots (no LIST_SNAPSHOTS), so berth cannot find "
                              "the group's members; name them with --member SNAPSHOT_ID"};
      return out;
    }
    csi::list_snapshots_request q;
    q.secrets = csi::to_map(r.secrets());
    for (int pages = 0; pages < 1000; ++pages) {
      auto listed = c.list_snapshots(q);
      if (failed(out, where, csi::method::list_snapshots, listed.status)) return out;
      for (const auto& s : listed.response.entries)
        if (s.group_snapshot_id == r.group_snapshot_id()) members.push_back(s.snapshot_id);
      if (listed.response.next_token.empty()) break;
      q.starting_token = listed.response.next_token;
    }
    // No member listed: the group is gone (the spec's DeleteVolumeGroupSnapshot
    // of an unknown group is OK, so nothing is left to ask).
    if (members.empty()) {
      out.found = false;
      return out;
    }
  }
  auto res =
      c.delete_volume_group_snapshot(r.group_snapshot_id(), members, csi::to_map(r.secrets()));
  if (failed(out, where, csi::method::delete_volume_group_snapshot, res.status)) return out;
  if (res.status.grpc_code == csi::code::not_found) out.found = false;
  return out;
}

csi_outcome list_snapshots(csi::client& c, const v1::SnapshotRequest& r,
                           const std::string& where) {
  csi_outcome out;
  csi::list_snapshots_request q;
  q.max_entries = static_cast<int32_t>(r.per_page());
  q.starting_token = r.page_token();
  q.secrets = csi::to_map(r.secrets());
  auto res = c.list_snapshots(q);
  if (failed(out, where, csi::method::list_snapshots, res.status)) return out;
  for (const auto& s : res.response.entries)
    *out.snapshots.add_snapshots() = csi::snapshot_of(s, r.plugin_id());
  out.snapshots.set_next_token(res.response.next_token);
  return out;
}

csi_outcome list_external_volumes(csi::client& c, const v1::ExternalVolumeListRequest& r,
                                  const std::string& where) {
  csi_outcome out;
  auto res = c.list_volumes(static_cast<int32_t>(r.per_page()), r.page_token());
  if (failed(out, where, csi::method::list_volumes, res.status)) return out;
  for (const auto& e : res.response.entries) {
    auto* v = out.external.add_volumes();
    v->set_external_id(e.vol.volume_id);
    v->set_capacity_bytes(e.vol.capacity_bytes);
    for (const auto& [k, val] : e.vol.volume_context) (*v->mutable_context())[k] = val;
    v->set_source_volume_id(e.vol.source_volume_id);
    v->set_source_snapshot_id(e.vol.source_snapshot_id);
    for (const auto& n : e.published_node_ids) v->add_published_node_ids(n);
    v->set_condition_reported(e.condition.reported);
    v->set_abnormal(e.condition.abnormal);
    v->set_condition_message(e.condition.message);
  }
  out.external.set_next_token(res.response.next_token);
  return out;
}

csi_outcome modify_volume(csi::client& c, const v1::Volume& v, const std::string& where) {
  csi_outcome out;
  failed(out, where, csi::method::controller_modify_volume,
         c.controller_modify_volume(v.external_id(), csi::to_map(v.modified_parameters()),
                                    csi::to_map(v.secrets()))
             .status);
  return out;
}

csi_outcome check_volume_health(csi::client& c, const v1::VolumeHealthRequest& r,
                                const std::string& where, int32_t page_size) {
  csi_outcome out;
  auto put = [&out](const std::string& id, const csi::volume_condition& cond) {
    if (!cond.reported) return;
    v1::VolumeCondition vc;
    vc.set_abnormal(cond.abnormal);
    vc.set_message(cond.message);
    (*out.health.mutable_conditions())[id] = vc;
  };
  if (r.use_list()) {
    std::string token;
    for (int page = 0; page < 10000; ++page) {  // a plugin repeating its token ends here
      auto res = c.list_volumes(page_size, token);
      if (failed(out, where, csi::method::list_volumes, res.status)) return out;
      for (const auto& e : res.response.entries) put(e.vol.volume_id, e.condition);
      if (res.response.next_token.empty() || res.response.next_token == token) break;
      token = res.response.next_token;
    }
    return out;
  }
  for (const auto& id : r.external_ids()) {
    auto res = c.controller_get_volume(id);
    if (res.status.grpc_code == csi::code::not_found) continue;  // no information
    if (failed(out, where, csi::method::controller_get_volume, res.status)) return out;
    put(id, res.response.condition);
  }
  return out;
}

csi_outcome measure_volumes(csi::client& c, const std::vector<volume_measure>& volumes,
                            const std::string& where) {
  csi_outcome out;
  for (const auto& m : volumes) {
    auto res = c.node_get_volume_stats(m.external_id, m.target_path, m.staging_path);
    if (!res.ok()) {
      // One volume's failure does not hide the others' usage: the volume is
      // left out of this report (its last committed usage stays).
      auto f = csi::call_failure(where, csi::method::node_get_volume_stats, res.status);
      logging::debug("node", "NodeGetVolumeStats failed",
                     {{"namespace", m.ns},
                      {"volume", m.volume_id},
                      {"error", f ? f->message : std::string()}});
      continue;
    }
    v1::VolumeUsage u;
    u.set_namespace_(m.ns);
    u.set_volume_id(m.volume_id);
    u.set_capacity_bytes(res.response.bytes_total);
    u.set_used_bytes(res.response.bytes_used);
    u.set_available_bytes(res.response.bytes_available);
    if (res.response.condition.reported) {
      u.set_condition_reported(true);
      u.set_abnormal(res.response.condition.abnormal);
      if (u.abnormal()) u.set_message(res.response.condition.message);
    }
    out.usage.push_back(std::move(u));
  }
  return out;
}

csi_outcome controller_expand(csi::client& c, const v1::NodeVolumeRequest& r,
                              const std::string& where) {
  csi_outcome out;
  csi::expand_request q;
  q.volume_id = r.volume().external_id();
  q.required_bytes = r.expand_required_bytes();
  q.limit_bytes = r.expand_limit_bytes();
  q.secrets = csi::to_map(r.volume().secrets());
  auto res = c.controller_expand_volume(q);
  if (failed(out, where, csi::method::controller_expand_volume, res.status)) return out;
  out.capacity_bytes = res.response.capacity_bytes;
  out.node_expansion_required = res.response.node_expansion_required;
  return out;
}

csi_outcome node_expand(csi::client& c, const v1::NodeVolumeRequest& r, const claim_paths& paths,
                        bool staged, const std::string& where) {
  csi_outcome out;
  csi::expand_request q;
  q.volume_id = r.volume().external_id();
  q.required_bytes = r.expand_required_bytes();
  q.limit_bytes = r.expand_limit_bytes();
  q.volume_path = paths.target;
  if (staged) q.staging_target_path = paths.staging;
  auto res = c.node_expand_volume(q);
  if (failed(out, where, csi::method::node_expand_volume, res.status)) return out;
  out.capacity_bytes = res.response.capacity_bytes;
  return out;
}

}  // namespace berth
