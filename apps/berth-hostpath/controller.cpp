// berth-hostpath's Controller service: volumes are directories, controller
// publication is bookkeeping per node (there is nothing to attach), which is
// still enough to enforce the spec's single-node rules.
#include <sys/statvfs.h>

#include "hostpath.hpp"

namespace berth::hostpath {

namespace fs = std::filesystem;
using grpc::Status;
using grpc::StatusCode;

namespace {

std::map<std::string, std::string> to_map(const google::protobuf::Map<std::string, std::string>& m) {
  return {m.begin(), m.end()};
}

// Free bytes of the filesystem holding ROOT (what new volumes can use).
int64_t free_bytes(const fs::path& root) {
  struct statvfs st {};
  if (::statvfs(root.c_str(), &st) != 0)
    return 0;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

}  // namespace

Status plugin::create_volume(const v1::CreateVolumeRequest& req, v1::CreateVolumeResponse& resp) {
  if (req.name().empty())
    return {StatusCode::INVALID_ARGUMENT, "name is required"};
  if (req.volume_capabilities().empty())
    return {StatusCode::INVALID_ARGUMENT, "volume_capabilities are required"};
  for (const auto& cap : req.volume_capabilities())
    if (auto why = unsupported(cap); !why.empty())
      return {StatusCode::INVALID_ARGUMENT, why};
  std::string src_snapshot, src_volume;
  if (req.has_volume_content_source()) {
    const auto& src = req.volume_content_source();
    if (src.has_snapshot())
      src_snapshot = src.snapshot().snapshot_id();
    else if (src.has_volume())
      src_volume = src.volume().volume_id();
    if (src_snapshot.empty() && src_volume.empty())
      return {StatusCode::INVALID_ARGUMENT,
              "volume_content_source needs a snapshot_id or a volume_id"};
  }
  if (auto why = bad_mutable_parameters(req.mutable_parameters(), opts_.mutable_keys); !why.empty())
    return {StatusCode::INVALID_ARGUMENT, why};
  int64_t required = req.capacity_range().required_bytes();
  int64_t limit = req.capacity_range().limit_bytes();
  if (required < 0 || limit < 0)
    return {StatusCode::INVALID_ARGUMENT, "capacity_range must not be negative"};
  if (limit > 0 && limit < required)
    return {StatusCode::OUT_OF_RANGE, "capacity_range: limit_bytes < required_bytes"};
  if (!opts_.topology.empty() && !req.accessibility_requirements().requisite().empty()) {
    bool reachable = false;
    for (const auto& t : req.accessibility_requirements().requisite())
      reachable |= to_map(t.segments()) == opts_.topology;
    if (!reachable)
      return {StatusCode::RESOURCE_EXHAUSTED, "no requisite topology matches this plugin's"};
  }

  auto id = volume_id_for(req.name());
  auto params = to_map(req.parameters());
  auto mutable_params = to_map(req.mutable_parameters());
  if (auto it = state_.volumes.find(id); it != state_.volumes.end()) {
    const auto& rec = it->second;
    bool fits = (required == 0 || rec.capacity_bytes >= required)
                && (limit == 0 || rec.capacity_bytes <= limit) && rec.parameters == params
                && rec.mutable_parameters == mutable_params
                && rec.source_snapshot_id == src_snapshot && rec.source_volume_id == src_volume;
    if (!fits)
      return {StatusCode::ALREADY_EXISTS, "volume '" + req.name() + "' exists with capacity "
                                              + std::to_string(rec.capacity_bytes)
                                              + " or other parameters or content source"};
    fill_volume(id, rec, *resp.mutable_volume());
    return Status::OK;
  }

  // The new volume's contents: empty, or a copy of the source, which it
  // must be at least as large as.
  int64_t capacity = required > 0 ? required : limit;
  fs::path from;
  int64_t source_bytes = 0;
  if (!src_snapshot.empty()) {
    auto snap = state_.snapshots.find(src_snapshot);
    if (snap == state_.snapshots.end())
      return {StatusCode::NOT_FOUND, "snapshot " + src_snapshot + " does not exist"};
    from = snapshot_dir(src_snapshot);
    source_bytes = snap->second.size_bytes;
  } else if (!src_volume.empty()) {
    auto vol = state_.volumes.find(src_volume);
    if (vol == state_.volumes.end())
      return {StatusCode::NOT_FOUND, "volume " + src_volume + " does not exist"};
    from = volume_dir(src_volume);
    source_bytes = vol->second.capacity_bytes;
  }
  if (capacity < source_bytes) {
    if (limit > 0 && limit < source_bytes)
      return {StatusCode::OUT_OF_RANGE, "the source has " + std::to_string(source_bytes)
                                            + " bytes, more than capacity_range.limit_bytes"};
    capacity = source_bytes;
  }

  std::string failed;
  unlocked([&] {
    try {
      if (from.empty())
        fs::create_directories(volume_dir(id));
      else
        copy_tree(from, volume_dir(id));
    } catch (const std::exception& e) {
      failed = e.what();
    }
  });
  if (!failed.empty())
    return {StatusCode::INTERNAL, "cannot make the volume directory: " + failed};
  // The source may have gone while it was copied (its own calls do not
  // wait for this one): then the copy may be partial.
  if ((!src_snapshot.empty() && state_.snapshots.count(src_snapshot) == 0)
      || (!src_volume.empty() && state_.volumes.count(src_volume) == 0)) {
    std::error_code ec;
    unlocked([&] { fs::remove_all(volume_dir(id), ec); });
    return {StatusCode::ABORTED, "the content source was deleted during the copy: retry"};
  }
  volume_record rec{req.name(), capacity, params, mutable_params, src_snapshot, src_volume};
  apply({put_volume{id, rec}});
  fill_volume(id, rec, *resp.mutable_volume());
  return Status::OK;
}

Status plugin::delete_volume(const v1::DeleteVolumeRequest& req, v1::DeleteVolumeResponse&) {
  const auto& id = req.volume_id();
  if (id.empty())
    return {StatusCode::INVALID_ARGUMENT, "volume_id is required"};
  if (state_.volumes.count(id) == 0)
    return Status::OK;  // already gone: deletion is idempotent
  if (auto it = state_.controller_publications.find(id);
      it != state_.controller_publications.end() && !it->second.empty())
    return {StatusCode::FAILED_PRECONDITION,
            "volume " + id + " is still published to node " + it->second.begin()->first};
  for (const auto& [path, st] : state_.stagings)
    if (st.volume_id == id)
      return {StatusCode::FAILED_PRECONDITION, "volume " + id + " is still staged at " + path};
  std::error_code ec;
  unlocked([&] { fs::remove_all(volume_dir(id), ec); });
  if (ec)
    return {StatusCode::INTERNAL, "cannot remove volume directory: " + ec.message()};
  apply({erase_volume{id}});  // it has no controller publications (checked above)
  return Status::OK;
}

Status plugin::controller_publish(const v1::ControllerPublishVolumeRequest& req,
                                  v1::ControllerPublishVolumeResponse& resp) {
  const auto& id = req.volume_id();
  const auto& node = req.node_id();
  if (id.empty())
    return {StatusCode::INVALID_ARGUMENT, "volume_id is required"};
  if (node.empty())
    return {StatusCode::INVALID_ARGUMENT, "node_id is required"};
  if (!req.has_volume_capability())
    return {StatusCode::INVALID_ARGUMENT, "volume_capability is required"};
  if (auto why = unsupported(req.volume_capability()); !why.empty())
    return {StatusCode::INVALID_ARGUMENT, why};
  if (state_.volumes.count(id) == 0)
    return {StatusCode::NOT_FOUND, "volume " + id + " does not exist"};
  if (!known_node(node))
    return {StatusCode::NOT_FOUND, "node " + node + " is unknown to this plugin"};

  attachment how{req.volume_capability().access_mode().mode(), req.readonly()};
  // Deterministic, so a repeated publish returns the same context.
  auto answer = [&] { (*resp.mutable_publish_context())["published_node"] = node; };
  static const std::map<std::string, attachment> nowhere;
  auto pubs = state_.controller_publications.find(id);
  const auto& on_nodes = pubs == state_.controller_publications.end() ? nowhere : pubs->second;
  if (auto it = on_nodes.find(node); it != on_nodes.end()) {
    if (!(it->second == how))
      return {StatusCode::ALREADY_EXISTS, "volume " + id + " is published to node " + node
                                              + " with another mode or readonly flag"};
    answer();
    return Status::OK;
  }
  for (const auto& [other, other_how] : on_nodes)
    if (single_node(how.access_mode) || single_node(other_how.access_mode))
      return {StatusCode::FAILED_PRECONDITION,
              "volume " + id + " is single-node and published to node " + other};
  if (opts_.max_volumes > 0) {
    int64_t on_node = 0;
    for (const auto& [vol, nodes] : state_.controller_publications)
      on_node += static_cast<int64_t>(nodes.count(node));
    if (on_node >= opts_.max_volumes)
      return {StatusCode::RESOURCE_EXHAUSTED,
              "node " + node + " already has " + std::to_string(on_node) + " volumes published"};
  }
  apply({put_controller_publication{id, node, how}});
  answer();
  return Status::OK;
}

Status plugin::controller_unpublish(const v1::ControllerUnpublishVolumeRequest& req,
                                    v1::ControllerUnpublishVolumeResponse&) {
  const auto& id = req.volume_id();
  if (id.empty())
    return {StatusCode::INVALID_ARGUMENT, "volume_id is required"};
  auto it = state_.controller_publications.find(id);
  if (it == state_.controller_publications.end())
    return Status::OK;  // not published (or unknown volume): nothing to undo
  std::vector<record> change;
  for (const auto& [node, how] : it->second)  // the spec: no node id means every node
    if (req.node_id().empty() || node == req.node_id())
      change.push_back(erase_controller_publication{id, node});
  if (change.empty())
    return Status::OK;
  apply(std::move(change));
  return Status::OK;
}

Status plugin::validate_capabilities(const v1::ValidateVolumeCapabilitiesRequest& req,
                                     v1::ValidateVolumeCapabilitiesResponse& resp) {
  if (req.volume_id().empty())
    return {StatusCode::INVALID_ARGUMENT, "volume_id is required"};
  if (req.volume_capabilities().empty())
    return {StatusCode::INVALID_ARGUMENT, "volume_capabilities are required"};
  if (state_.volumes.count(req.volume_id()) == 0)
    return {StatusCode::NOT_FOUND, "volume " + req.volume_id() + " does not exist"};
  for (const auto& cap : req.volume_capabilities()) {
    if (auto why = unsupported(cap); !why.empty()) {
      resp.set_message(why);  // not confirmed; still an OK answer per the spec
      return Status::OK;
    }
  }
  auto* confirmed = resp.mutable_confirmed();
  *confirmed->mutable_volume_capabilities() = req.volume_capabilities();
  *confirmed->mutable_volume_context() = req.volume_context();
  *confirmed->mutable_parameters() = req.parameters();
  return Status::OK;
}

Status plugin::list_volumes(const v1::ListVolumesRequest& req, v1::ListVolumesResponse& resp) {
  if (req.max_entries() < 0)
    return {StatusCode::INVALID_ARGUMENT, "max_entries must not be negative"};
  // The token is the id of the next volume: stable while volumes come and go
  // elsewhere in the list, and checkable.
  auto it = state_.volumes.begin();
  if (!req.starting_token().empty()) {
    it = state_.volumes.find(req.starting_token());
    if (it == state_.volumes.end())
      return {StatusCode::ABORTED, "starting_token is not valid (volume gone?): restart the listing"};
  }
  for (int n = 0; it != state_.volumes.end(); ++it, ++n) {
    if (req.max_entries() > 0 && n == req.max_entries()) {
      resp.set_next_token(it->first);
      break;
    }
    auto* entry = resp.add_entries();
    fill_volume(it->first, it->second, *entry->mutable_volume());
    if (auto pubs = state_.controller_publications.find(it->first);
        pubs != state_.controller_publications.end())
      for (const auto& [node, how] : pubs->second)
        entry->mutable_status()->add_published_node_ids(node);
    *entry->mutable_status()->mutable_volume_condition() = condition_of(it->first);
  }
  return Status::OK;
}

Status plugin::get_capacity(const v1::GetCapacityRequest& req, v1::GetCapacityResponse& resp) {
  for (const auto& cap : req.volume_capabilities()) {
    if (!unsupported(cap).empty()) {
      resp.set_available_capacity(0);  // no volume with these capabilities fits
      return Status::OK;
    }
  }
  resp.set_available_capacity(free_bytes(opts_.root));
  return Status::OK;
}

Status plugin::controller_capabilities(const v1::ControllerGetCapabilitiesRequest&,
                                       v1::ControllerGetCapabilitiesResponse& resp) {
  using rpc = v1::ControllerServiceCapability::RPC;
  for (auto t : {rpc::CREATE_DELETE_VOLUME, rpc::PUBLISH_UNPUBLISH_VOLUME, rpc::LIST_VOLUMES,
                 rpc::GET_CAPACITY, rpc::CREATE_DELETE_SNAPSHOT, rpc::LIST_SNAPSHOTS,
                 rpc::CLONE_VOLUME, rpc::PUBLISH_READONLY, rpc::EXPAND_VOLUME,
                 rpc::LIST_VOLUMES_PUBLISHED_NODES, rpc::VOLUME_CONDITION, rpc::GET_VOLUME,
                 rpc::SINGLE_NODE_MULTI_WRITER, rpc::MODIFY_VOLUME, rpc::GET_SNAPSHOT})
    resp.add_capabilities()->mutable_rpc()->set_type(t);
  return Status::OK;
}

Status plugin::controller_expand(const v1::ControllerExpandVolumeRequest& req,
                                 v1::ControllerExpandVolumeResponse& resp) {
  const auto& id = req.volume_id();
  if (id.empty())
    return {StatusCode::INVALID_ARGUMENT, "volume_id is required"};
  if (!req.has_capacity_range())
    return {StatusCode::INVALID_ARGUMENT, "capacity_range is required"};
  if (req.has_volume_capability())
    if (auto why = unsupported(req.volume_capability()); !why.empty())
      return {StatusCode::INVALID_ARGUMENT, why};
  int64_t required = req.capacity_range().required_bytes();
  int64_t limit = req.capacity_range().limit_bytes();
  if (required < 0 || limit < 0)
    return {StatusCode::INVALID_ARGUMENT, "capacity_range must not be negative"};
  if (required == 0 && limit == 0)
    return {StatusCode::INVALID_ARGUMENT, "capacity_range needs required_bytes or limit_bytes"};
  if (limit > 0 && limit < required)
    return {StatusCode::OUT_OF_RANGE, "capacity_range: limit_bytes < required_bytes"};
  auto it = state_.volumes.find(id);
  if (it == state_.volumes.end())
    return {StatusCode::NOT_FOUND, "volume " + id + " does not exist"};
  const int64_t current = it->second.capacity_bytes;
  if (limit > 0 && limit < current)
    return {StatusCode::OUT_OF_RANGE, "volume " + id + " has " + std::to_string(current)
                                          + " bytes, more than limit_bytes: volumes do not shrink"};
  // Online: published or not, the capacity is bookkeeping for a directory.
  // The node still gets NodeExpandVolume, which checks the new size.
  resp.set_node_expansion_required(true);
  int64_t target = required > 0 ? required : limit;
  if (target <= current) {  // already that large: the spec's idempotent OK
    resp.set_capacity_bytes(current);
    return Status::OK;
  }
  volume_record rec = it->second;
  rec.capacity_bytes = target;
  apply({put_volume{id, rec}});
  resp.set_capacity_bytes(target);
  return Status::OK;
}

Status plugin::controller_get_volume(const v1::ControllerGetVolumeRequest& req,
                                     v1::ControllerGetVolumeResponse& resp) {
  const auto& id = req.volume_id();
  if (id.empty())
    return {StatusCode::INVALID_ARGUMENT, "volume_id is required"};
  auto it = state_.volumes.find(id);
  if (it == state_.volumes.end())
    return {StatusCode::NOT_FOUND, "volume " + id + " does not exist"};
  fill_volume(id, it->second, *resp.mutable_volume());
  if (auto pubs = state_.controller_publications.find(id);
      pubs != state_.controller_publications.end())
    for (const auto& [node, how] : pubs->second)
      resp.mutable_status()->add_published_node_ids(node);
  *resp.mutable_status()->mutable_volume_condition() = condition_of(id);
  return Status::OK;
}

Status plugin::controller_modify(const v1::ControllerModifyVolumeRequest& req,
                                 v1::ControllerModifyVolumeResponse&) {
  const auto& id = req.volume_id();
  if (id.empty())
    return {StatusCode::INVALID_ARGUMENT, "volume_id is required"};
  if (req.mutable_parameters().empty())
    return {StatusCode::INVALID_ARGUMENT, "mutable_parameters are required"};
  if (auto why = bad_mutable_parameters(req.mutable_parameters(), opts_.mutable_keys); !why.empty())
    return {StatusCode::INVALID_ARGUMENT, why};
  auto it = state_.volumes.find(id);
  if (it == state_.volumes.end())
    return {StatusCode::NOT_FOUND, "volume " + id + " does not exist"};
  volume_record rec = it->second;
  for (const auto& [key, value] : req.mutable_parameters())
    rec.mutable_parameters[key] = value;  // the ones not named keep their values
  if (rec == it->second)
    return Status::OK;  // already so: a repeat changes nothing
  apply({put_volume{id, rec}});
  return Status::OK;
}

}  // namespace berth::hostpath
