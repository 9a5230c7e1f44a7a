// berth-hostpath's snapshots: a snapshot is a copy of its volume's
// directory under ROOT/snapshots/<id>, made before CreateSnapshot answers
// (so it is ready_to_use at once), and the source of volumes created from it
// (CreateVolume's volume_content_source, controller.cpp). The members of a
// group snapshot (group_snapshot.cpp) are snapshots too, listed and used
// like these, but deleted only with their group.
#include <chrono>

#include "hostpath.hpp"

namespace berth::hostpath {

namespace fs = std::filesystem;
using grpc::Status;
using grpc::StatusCode;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status plugin::create_snapshot(const v1::CreateSnapshotRequest& req,
                               v1::CreateSnapshotResponse& resp) {
  if (req.name().empty())
    return {StatusCode::INVALID_ARGUMENT, "name is required"};
  const auto& source = req.source_volume_id();
  if (source.empty())
    return {StatusCode::INVALID_ARGUMENT, "source_volume_id is required"};
  auto id = snapshot_id_for(req.name());
  std::map<std::string, std::string> params(req.parameters().begin(), req.parameters().end());
  if (auto it = state_.snapshots.find(id); it != state_.snapshots.end()) {
    if (it->second.source_volume_id != source || it->second.parameters != params)
      return {StatusCode::ALREADY_EXISTS, "snapshot '" + req.name() + "' exists for volume "
                                              + it->second.source_volume_id
                                              + " or with other parameters"};
    fill_snapshot(id, it->second, *resp.mutable_snapshot());
    return Status::OK;
  }
  auto vol = state_.volumes.find(source);
  if (vol == state_.volumes.end())
    return {StatusCode::NOT_FOUND, "volume " + source + " does not exist"};
  const int64_t capacity = vol->second.capacity_bytes;
  // Two names can only map to one id by a hash collision, but the same name
  // can come twice at once for two volumes (the per-volume lock is the
  // source's): the second waits for the first to be recorded.
  const auto dir = snapshot_dir(id);
  if (pending_paths_.count(dir.string()) != 0)
    return {StatusCode::ABORTED, "snapshot '" + req.name() + "' is being made: retry later"};
  reserve(dir.string(), false);
  std::string failed;
  usage copied;
  unlocked([&] {
    try {
      copy_tree(volume_dir(source), dir);
      copied = directory_usage(dir);
    } catch (const std::exception& e) {
      failed = e.what();
    }
  });
  release(dir.string(), false);
  if (!failed.empty())
    return {StatusCode::INTERNAL, "cannot copy volume " + source + ": " + failed};
  // The size a volume made from it needs: its source's capacity (or, for a
  // volume created without one, what the copy holds).
  snapshot_record rec{req.name(), source, params, capacity > 0 ? capacity : copied.bytes,
                      now_ns(), /*group_snapshot_id=*/{}};
  apply({put_snapshot{id, rec}});
  fill_snapshot(id, rec, *resp.mutable_snapshot());
  return Status::OK;
}

Status plugin::delete_snapshot(const v1::DeleteSnapshotRequest& req,
                               v1::DeleteSnapshotResponse&) {
  const auto& id = req.snapshot_id();
  if (id.empty())
    return {StatusCode::INVALID_ARGUMENT, "snapshot_id is required"};
  const auto dir = snapshot_dir(id);
  if (pending_paths_.count(dir.string()) != 0)
    return {StatusCode::ABORTED, "snapshot " + id + " is being made: retry later"};
  auto it = state_.snapshots.find(id);
  if (it == state_.snapshots.end())
    return Status::OK;  // already gone: deletion is idempotent
  // A member of a group snapshot carries its group's id, which (spec,
  // Snapshot.group_snapshot_id) says it must not be deleted on its own: only
  // DeleteVolumeGroupSnapshot deletes it, with the rest of its group.
  if (!it->second.group_snapshot_id.empty())
    return {StatusCode::FAILED_PRECONDITION,
            "snapshot " + id + " is a member of group snapshot " + it->second.group_snapshot_id
                + ": delete the group (DeleteVolumeGroupSnapshot) instead"};
  std::error_code ec;
  unlocked([&] { fs::remove_all(dir, ec); });
  if (ec)
    return {StatusCode::INTERNAL, "cannot remove snapshot directory: " + ec.message()};
  apply({erase_snapshot{id}});
  return Status::OK;
}

Status plugin::list_snapshots(const v1::ListSnapshotsRequest& req,
                              v1::ListSnapshotsResponse& resp) {
  if (req.max_entries() < 0)
    return {StatusCode::INVALID_ARGUMENT, "max_entries must not be negative"};
  auto matches = [&](const std::string& id, const snapshot_record& rec) {
    return (req.snapshot_id().empty() || id == req.snapshot_id())
           && (req.source_volume_id().empty() || rec.source_volume_id == req.source_volume_id());
  };
  // A filter that matches nothing is an empty list, not an error (spec).
  if (!req.snapshot_id().empty()) {
    auto it = state_.snapshots.find(req.snapshot_id());
    if (it != state_.snapshots.end() && matches(it->first, it->second))
      fill_snapshot(it->first, it->second, *resp.add_entries()->mutable_snapshot());
    return Status::OK;
  }
  // The token is the id of the next snapshot to list, as in ListVolumes.
  auto it = state_.snapshots.begin();
  if (!req.starting_token().empty()) {
    it = state_.snapshots.find(req.starting_token());
    if (it == state_.snapshots.end())
      return {StatusCode::ABORTED,
              "starting_token is not valid (snapshot gone?): restart the listing"};
  }
  for (int n = 0; it != state_.snapshots.end(); ++it) {
    if (!matches(it->first, it->second))
      continue;
    if (req.max_entries() > 0 && n == req.max_entries()) {
      resp.set_next_token(it->first);
      break;
    }
    fill_snapshot(it->first, it->second, *resp.add_entries()->mutable_snapshot());
    ++n;
  }
  return Status::OK;
}

Status plugin::get_snapshot(const v1::GetSnapshotRequest& req, v1::GetSnapshotResponse& resp) {
  const auto& id = req.snapshot_id();
  if (id.empty())
    return {StatusCode::INVALID_ARGUMENT, "snapshot_id is required"};
  auto it = state_.snapshots.find(id);
  if (it == state_.snapshots.end())
    return {StatusCode::NOT_FOUND, "snapshot " + id + " does not exist"};
  fill_snapshot(id, it->second, *resp.mutable_snapshot());
  return Status::OK;
}

}  // namespace berth::hostpath
