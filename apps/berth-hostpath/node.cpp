// berth-hostpath's Node service: staging and publishing through the mounter
// (bind mounts or symlinks), with the spec's ordering rules enforced from the
// recorded state rather than from what happens to be mounted.
#include <sys/statvfs.h>

#include <algorithm>

#include "hostpath.hpp"

namespace berth::hostpath {

namespace fs = std::filesystem;
using grpc::Status;
using grpc::StatusCode;

namespace {

Status internal(const std::exception& e) {
  return {StatusCode::INTERNAL, e.what()};
}

Status require(bool present, const char* field) {
  if (present)
    return Status::OK;
  return {StatusCode::INVALID_ARGUMENT, std::string(field) + " is required"};
}

bool absolute(const std::string& p) {
  return fs::path(p).is_absolute();
}

Status in_progress(const std::string& path) {
  return {StatusCode::ABORTED,
          "another volume's operation on " + path + " is in progress: retry later"};
}

// Runs `f` when the scope ends (a reservation's release).
template <class F>
struct on_exit {
  F f;
  ~on_exit() { f(); }
};
template <class F>
on_exit(F) -> on_exit<F>;

}  // namespace

Status plugin::node_stage(const v1::NodeStageVolumeRequest& req, v1::NodeStageVolumeResponse&) {
  for (auto s : {require(!req.volume_id().empty(), "volume_id"),
                 require(!req.staging_target_path().empty(), "staging_target_path"),
                 require(req.has_volume_capability(), "volume_capability")})
    if (!s.ok())
      return s;
  if (!absolute(req.staging_target_path()))
    return {StatusCode::INVALID_ARGUMENT, "staging_target_path must be absolute"};
  if (auto why = unsupported(req.volume_capability()); !why.empty())
    return {StatusCode::INVALID_ARGUMENT, why};
  const auto& id = req.volume_id();
  const auto& path = req.staging_target_path();
  if (state_.volumes.count(id) == 0)
    return {StatusCode::NOT_FOUND, "volume " + id + " does not exist"};

  attachment how{req.volume_capability().access_mode().mode(), false};
  if (auto it = state_.stagings.find(path); it != state_.stagings.end()) {
    if (it->second.volume_id != id || !(it->second.how == how))
      return {StatusCode::ALREADY_EXISTS,
              "staging path " + path + " holds volume " + it->second.volume_id
                  + " or another capability"};
    try {
      unlocked([&] { mounter_.stage(volume_dir(id), path); });  // repairs a mount lost since
    } catch (const std::exception& e) {
      return internal(e);
    }
    return Status::OK;
  }
  if (pending_paths_.count(path) != 0)
    return in_progress(path);
  for (const auto& [other, st] : state_.stagings)
    if (st.volume_id == id)
      return {StatusCode::FAILED_PRECONDITION, "volume " + id + " is already staged at " + other};
  auto staged = static_cast<int64_t>(state_.stagings.size()) + pending_stages_;
  if (opts_.max_volumes > 0 && staged >= opts_.max_volumes)
    return {StatusCode::RESOURCE_EXHAUSTED,
            "node " + opts_.node_id + " already has " + std::to_string(staged)
                + " volumes staged or being staged (max " + std::to_string(opts_.max_volumes)
                + ")"};
  reserve(path, true);
  on_exit done{[&] { release(path, true); }};
  try {
    unlocked([&] { mounter_.stage(volume_dir(id), path); });
  } catch (const std::exception& e) {
    return internal(e);
  }
  apply({put_staging{path, {id, how}}});
  return Status::OK;
}

Status plugin::node_unstage(const v1::NodeUnstageVolumeRequest& req,
                            v1::NodeUnstageVolumeResponse&) {
  for (auto s : {require(!req.volume_id().empty(), "volume_id"),
                 require(!req.staging_target_path().empty(), "staging_target_path")})
    if (!s.ok())
      return s;
  const auto& path = req.staging_target_path();
  auto it = state_.stagings.find(path);
  if (it == state_.stagings.end() || it->second.volume_id != req.volume_id())
    return Status::OK;  // not staged there: nothing to undo
  for (const auto& [target, pub] : state_.publications)
    if (pub.staging_target_path == path)
      return {StatusCode::FAILED_PRECONDITION,
              "volume " + req.volume_id() + " is still published at " + target};
  try {
    unlocked([&] { mounter_.unstage(path); });
  } catch (const std::exception& e) {
    return internal(e);
  }
  apply({erase_staging{path}});
  return Status::OK;
}

Status plugin::node_publish(const v1::NodePublishVolumeRequest& req,
                            v1::NodePublishVolumeResponse&) {
  for (auto s : {require(!req.volume_id().empty(), "volume_id"),
                 require(!req.target_path().empty(), "target_path"),
                 require(req.has_volume_capability(), "volume_capability")})
    if (!s.ok())
      return s;
  if (!absolute(req.target_path()))
    return {StatusCode::INVALID_ARGUMENT, "target_path must be absolute"};
  if (auto why = unsupported(req.volume_capability()); !why.empty())
    return {StatusCode::INVALID_ARGUMENT, why};
  const auto& id = req.volume_id();
  const auto& target = req.target_path();
  const auto& staging = req.staging_target_path();
  // STAGE_UNSTAGE_VOLUME is advertised: the spec's code for a missing
  // staging path is FAILED_PRECONDITION (stage first), not INVALID_ARGUMENT.
  if (staging.empty())
    return {StatusCode::FAILED_PRECONDITION, "staging_target_path is required: stage first"};
  if (state_.volumes.count(id) == 0)
    return {StatusCode::NOT_FOUND, "volume " + id + " does not exist"};
  auto st = state_.stagings.find(staging);
  if (st == state_.stagings.end() || st->second.volume_id != id)
    return {StatusCode::FAILED_PRECONDITION, "volume " + id + " is not staged at " + staging};

  publication_record rec{id, staging, {req.volume_capability().access_mode().mode(), req.readonly()}};
  if (auto it = state_.publications.find(target); it != state_.publications.end()) {
    const auto& old = it->second;
    if (old.volume_id != id || old.staging_target_path != staging || !(old.how == rec.how))
      return {StatusCode::ALREADY_EXISTS,
              "target " + target + " is published with other arguments (volume "
                  + old.volume_id + ")"};
    try {
      unlocked([&] { mounter_.publish(volume_dir(id), staging, target, req.readonly()); });
    } catch (const std::exception& e) {
      return internal(e);
    }
    return Status::OK;
  }
  for (const auto& [other, pub] : state_.publications)
    if (pub.volume_id == id && !(multi_publish(rec.how.access_mode) && multi_publish(pub.how.access_mode)))
      return {StatusCode::FAILED_PRECONDITION,
              "volume " + id + " is already published at " + other
                  + " and its access mode allows one publication per node"};
  if (pending_paths_.count(target) != 0)
    return in_progress(target);
  reserve(target, false);
  on_exit done{[&] { release(target, false); }};
  try {
    unlocked([&] { mounter_.publish(volume_dir(id), staging, target, req.readonly()); });
  } catch (const std::exception& e) {
    return internal(e);
  }
  apply({put_publication{target, rec}});
  return Status::OK;
}

Status plugin::node_unpublish(const v1::NodeUnpublishVolumeRequest& req,
                              v1::NodeUnpublishVolumeResponse&) {
  for (auto s : {require(!req.volume_id().empty(), "volume_id"),
                 require(!req.target_path().empty(), "target_path")})
    if (!s.ok())
      return s;
  const auto& id = req.volume_id();
  const auto& target = req.target_path();
  auto it = state_.publications.find(target);
  if (it == state_.publications.end() || it->second.volume_id != id) {
    // Not recorded. A crash between mounting and saving can still have left
    // this volume at the target: undo that, but never touch anything else.
    try {
      if (state_.volumes.count(id) != 0)
        unlocked([&] {
          if (same_inode(target, volume_dir(id)))
            mounter_.unpublish(target);
        });
    } catch (const std::exception& e) {
      return internal(e);
    }
    return Status::OK;
  }
  try {
    unlocked([&] { mounter_.unpublish(target); });
  } catch (const std::exception& e) {
    return internal(e);
  }
  apply({erase_publication{target}});
  return Status::OK;
}

Status plugin::node_volume_stats(const v1::NodeGetVolumeStatsRequest& req,
                                 v1::NodeGetVolumeStatsResponse& resp) {
  for (auto s : {require(!req.volume_id().empty(), "volume_id"),
                 require(!req.volume_path().empty(), "volume_path")})
    if (!s.ok())
      return s;
  const auto& id = req.volume_id();
  const auto& path = req.volume_path();
  auto vol = state_.volumes.find(id);
  if (vol == state_.volumes.end())
    return {StatusCode::NOT_FOUND, "volume " + id + " does not exist"};
  auto pub = state_.publications.find(path);
  auto st = state_.stagings.find(path);
  bool here = (pub != state_.publications.end() && pub->second.volume_id == id)
              || (st != state_.stagings.end() && st->second.volume_id == id);
  if (!here)
    return {StatusCode::NOT_FOUND, "volume " + id + " is not staged or published at " + path};

  const int64_t capacity = vol->second.capacity_bytes;
  const auto dir = volume_dir(id);
  // The walk can be long: other volumes' calls go on meanwhile (this
  // volume's wait for this call).
  bool present = false;
  usage used;
  struct statvfs fsst {};
  bool have_fs = false;
  unlocked([&] {
    std::error_code ec;
    present = fs::is_directory(dir, ec);
    if (!present)
      return;
    used = directory_usage(dir);
    have_fs = ::statvfs(dir.c_str(), &fsst) == 0;
  });
  if (!present) {
    // Nothing to measure: the condition says why.
    *resp.mutable_volume_condition() = condition_of(id);
    return Status::OK;
  }
  int64_t total = capacity;
  int64_t available = std::max<int64_t>(0, total - used.bytes);
  if (total == 0 && have_fs) {  // no capacity requested: report the backing filesystem
    total = static_cast<int64_t>(fsst.f_blocks) * static_cast<int64_t>(fsst.f_frsize);
    available = static_cast<int64_t>(fsst.f_bavail) * static_cast<int64_t>(fsst.f_frsize);
  }
  auto* bytes = resp.add_usage();
  bytes->set_unit(v1::VolumeUsage::BYTES);
  bytes->set_total(total);
  bytes->set_used(used.bytes);
  bytes->set_available(available);
  if (have_fs) {  // inodes are the backing filesystem's, shared by every volume
    auto* inodes = resp.add_usage();
    inodes->set_unit(v1::VolumeUsage::INODES);
    inodes->set_total(static_cast<int64_t>(fsst.f_files));
    inodes->set_used(used.inodes);
    inodes->set_available(static_cast<int64_t>(fsst.f_favail));
  }
  *resp.mutable_volume_condition() = condition_of(id);
  return Status::OK;
}

Status plugin::node_expand(const v1::NodeExpandVolumeRequest& req,
                           v1::NodeExpandVolumeResponse& resp) {
  for (auto s : {require(!req.volume_id().empty(), "volume_id"),
                 require(!req.volume_path().empty(), "volume_path")})
    if (!s.ok())
      return s;
  if (req.has_volume_capability())
    if (auto why = unsupported(req.volume_capability()); !why.empty())
      return {StatusCode::INVALID_ARGUMENT, why};
  int64_t required = req.capacity_range().required_bytes();
  int64_t limit = req.capacity_range().limit_bytes();
  if (required < 0 || limit < 0)
    return {StatusCode::INVALID_ARGUMENT, "capacity_range must not be negative"};
  if (limit > 0 && limit < required)
    return {StatusCode::OUT_OF_RANGE, "capacity_range: limit_bytes < required_bytes"};
  const auto& id = req.volume_id();
  const auto& path = req.volume_path();
  auto vol = state_.volumes.find(id);
  if (vol == state_.volumes.end())
    return {StatusCode::NOT_FOUND, "volume " + id + " does not exist"};
  auto pub = state_.publications.find(path);
  auto st = state_.stagings.find(path);
  bool here = (pub != state_.publications.end() && pub->second.volume_id == id)
              || (st != state_.stagings.end() && st->second.volume_id == id);
  if (!here)
    return {StatusCode::NOT_FOUND, "volume " + id + " is not staged or published at " + path};
  // A directory has no filesystem to grow: the node's part is to check that
  // the controller's expansion happened.
  const int64_t capacity = vol->second.capacity_bytes;
  if (required > capacity)
    return {StatusCode::OUT_OF_RANGE, "volume " + id + " has " + std::to_string(capacity)
                                          + " bytes: expand it with ControllerExpandVolume first"};
  if (limit > 0 && limit < capacity)
    return {StatusCode::OUT_OF_RANGE, "volume " + id + " has " + std::to_string(capacity)
                                          + " bytes, more than limit_bytes: volumes do not shrink"};
  resp.set_capacity_bytes(capacity);
  return Status::OK;
}

Status plugin::node_capabilities(const v1::NodeGetCapabilitiesRequest&,
                                 v1::NodeGetCapabilitiesResponse& resp) {
  using rpc = v1::NodeServiceCapability::RPC;
  for (auto t : {rpc::STAGE_UNSTAGE_VOLUME, rpc::GET_VOLUME_STATS, rpc::EXPAND_VOLUME,
                 rpc::VOLUME_CONDITION, rpc::SINGLE_NODE_MULTI_WRITER})
    resp.add_capabilities()->mutable_rpc()->set_type(t);
  return Status::OK;
}

Status plugin::node_info(const v1::NodeGetInfoRequest&, v1::NodeGetInfoResponse& resp) {
  resp.set_node_id(opts_.node_id);
  resp.set_max_volumes_per_node(opts_.max_volumes);
  if (!opts_.topology.empty())
    resp.mutable_accessible_topology()->mutable_segments()->insert(opts_.topology.begin(),
                                                                   opts_.topology.end());
  return Status::OK;
}

}  // namespace berth::hostpath
