// berth-hostpath's GroupController service: a group snapshot is one member
// snapshot per source volume, a copy of the volume's directory under
// ROOT/snapshots/<member id> like any snapshot (snapshot.cpp), all taken
// together:
//   - while the copies are made, the state mutex stays held (no
//     unlocked()), and services.cpp holds the per-volume locks of every
//     source volume: no CSI call changes any member meanwhile, neither in
//     its critical section nor in an unlocked phase (a mount, a directory
//     removal). Application writes through bind mounts that already exist
//     are NOT held: hostpath has no filesystem to freeze (docs).
//   - each copy is fsynced (files, directories, its name in
//     ROOT/snapshots) before the group is recorded; the members and the
//     group are then recorded by one change, one journal line: after a
//     crash the whole group is there or none of it. The ids are derived
//     from the group's name (hostpath.hpp), so a retry of a CreateVolume-
//     GroupSnapshot that crashed copies into the same directories again
//     and ends with the whole group; a restart removes the copies of a
//     group that was never recorded (sweep_unrecorded_members).
// Members are ordinary snapshots otherwise (ListSnapshots, GetSnapshot,
// CreateVolume from them), but carry group_snapshot_id and DeleteSnapshot
// refuses them (FAILED_PRECONDITION): only DeleteVolumeGroupSnapshot
// deletes them, with their group.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>

#include "hostpath.hpp"
#include "persistence/crashpoint.hpp"
#include "persistence/durable_file.hpp"

namespace berth::hostpath {

namespace fs = std::filesystem;
using grpc::Status;
using grpc::StatusCode;

namespace {

void fsync_path(const fs::path& p, bool dir) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
  if (fd < 0)
    throw std::runtime_error("cannot open " + p.string() + ": " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    throw std::runtime_error("cannot fsync " + p.string() + ": " + std::strerror(err));
}

// Makes the copy at `dir` durable: every regular file and directory in it,
// `dir` itself, and its name in its parent. Symlinks are copied as links
// and need nothing more than their directory's fsync. Throws.
void sync_tree(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_symlink())
      continue;
    if (e.is_directory())
      fsync_path(e.path(), true);
    else if (e.is_regular_file())
      fsync_path(e.path(), false);
  }
  fsync_path(dir, true);
  if (auto f = fsync_dir_of(dir.string()))
    throw std::runtime_error(f->message);
}

std::set<std::string> as_set(const google::protobuf::RepeatedPtrField<std::string>& ids) {
  return {ids.begin(), ids.end()};
}

}  // namespace

Status plugin::fill_group_snapshot(const std::string& id, const group_snapshot_record& rec,
                                   v1::VolumeGroupSnapshot& out) const {
  out.set_group_snapshot_id(id);
  out.mutable_creation_time()->set_seconds(rec.creation_time_ns / 1000000000);
  out.mutable_creation_time()->set_nanos(static_cast<int32_t>(rec.creation_time_ns % 1000000000));
  for (const auto& member : rec.snapshot_ids) {
    auto it = state_.snapshots.find(member);
    if (it == state_.snapshots.end())
      return {StatusCode::INTERNAL,
              "group snapshot " + id + ": its member snapshot " + member + " is not recorded"};
    fill_snapshot(member, it->second, *out.add_snapshots());
  }
  // Every member is whole before the group is recorded.
  out.set_ready_to_use(true);
  return Status::OK;
}

Status plugin::group_controller_capabilities(const v1::GroupControllerGetCapabilitiesRequest&,
                                             v1::GroupControllerGetCapabilitiesResponse& resp) {
  resp.add_capabilities()->mutable_rpc()->set_type(
      v1::GroupControllerServiceCapability::RPC::CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT);
  return Status::OK;
}

Status plugin::create_group_snapshot(const v1::CreateVolumeGroupSnapshotRequest& req,
                                     v1::CreateVolumeGroupSnapshotResponse& resp) {
  if (req.name().empty())
    return {StatusCode::INVALID_ARGUMENT, "name is required"};
  if (req.source_volume_ids().empty())
    return {StatusCode::INVALID_ARGUMENT, "source_volume_ids are required"};
  const std::vector<std::string> sources(req.source_volume_ids().begin(),
                                         req.source_volume_ids().end());
  std::set<std::string> wanted;
  for (const auto& v : sources) {
    if (v.empty())
      return {StatusCode::INVALID_ARGUMENT, "source_volume_ids holds an empty volume id"};
    if (!wanted.insert(v).second)
      return {StatusCode::INVALID_ARGUMENT, "source_volume_ids names volume " + v + " twice"};
  }
  const auto id = group_snapshot_id_for(req.name());
  const std::map<std::string, std::string> params(req.parameters().begin(),
                                                  req.parameters().end());
  // Idempotent by name: the same name with the same set of volumes (in any
  // order) and parameters is the group made before; anything else under
  // that name is ALREADY_EXISTS. Checked before the volumes: a retry finds
  // its group even if a source volume has been deleted since.
  if (auto it = state_.group_snapshots.find(id); it != state_.group_snapshots.end()) {
    const auto& had = it->second;
    std::set<std::string> had_set(had.source_volume_ids.begin(), had.source_volume_ids.end());
    if (had_set != wanted || had.parameters != params)
      return {StatusCode::ALREADY_EXISTS, "group snapshot '" + req.name()
                                              + "' exists for other source volumes or with "
                                                "other parameters"};
    return fill_group_snapshot(id, had, *resp.mutable_group_snapshot());
  }
  for (const auto& v : sources)
    if (state_.volumes.count(v) == 0)
      return {StatusCode::NOT_FOUND, "volume " + v + " does not exist"};
  std::vector<std::string> members;
  for (const auto& v : sources) {
    members.push_back(member_snapshot_id_for(req.name(), v));
    // Members and group are recorded and forgotten together: a member
    // without its group is a damaged state (or a hash collision).
    if (state_.snapshots.count(members.back()) != 0)
      return {StatusCode::INTERNAL, "snapshot id " + members.back() + " (volume " + v
                                        + " of group '" + req.name() + "') is already taken"};
  }

  // The copies, all under the state mutex (see the top of this file): the
  // point in time of every member is this call's.
  const int64_t taken_ns = now_ns();
  std::vector<record> change;
  size_t made = 0;
  try {
    for (; made < sources.size(); ++made) {
      const auto& v = sources[made];
      const auto dir = snapshot_dir(members[made]);
      copy_tree(volume_dir(v), dir);
      auto copied = directory_usage(dir);
      sync_tree(dir);
      crashpoint("hostpath.group_snapshot", "after_member");
      const int64_t capacity = state_.volumes.at(v).capacity_bytes;
      change.push_back(put_snapshot{
          members[made], snapshot_record{req.name() + "/" + v, v, params,
                                         capacity > 0 ? capacity : copied.bytes, taken_ns, id}});
    }
  } catch (const std::exception& e) {
    // Nothing is recorded: take the copies made so far back (a retry would
    // overwrite them anyway; a restart would remove them).
    for (size_t i = 0; i <= made && i < members.size(); ++i) {
      const auto dir = snapshot_dir(members[i]);
      std::error_code ec;
      fs::remove_all(dir, ec);
      fs::remove_all(dir.parent_path() / (".incoming-" + members[i]), ec);  // copy_tree's
    }
    return {StatusCode::INTERNAL, "cannot copy volume " + sources[made] + " for group snapshot '"
                                      + req.name() + "': " + e.what()};
  }
  group_snapshot_record group{req.name(), sources, members, params, taken_ns};
  change.push_back(put_group_snapshot{id, group});
  apply(std::move(change));  // one journal line: the whole group or nothing
  return fill_group_snapshot(id, group, *resp.mutable_group_snapshot());
}

Status plugin::delete_group_snapshot(const v1::DeleteVolumeGroupSnapshotRequest& req,
                                     v1::DeleteVolumeGroupSnapshotResponse&) {
  const auto& id = req.group_snapshot_id();
  if (id.empty())
    return {StatusCode::INVALID_ARGUMENT, "group_snapshot_id is required"};
  auto it = state_.group_snapshots.find(id);
  if (it == state_.group_snapshots.end())
    return Status::OK;  // already gone: deletion is idempotent
  const group_snapshot_record group = it->second;
  // snapshot_ids, when given, must name exactly the group's members (the
  // spec's "snapshot list mismatch": INVALID_ARGUMENT); nothing is deleted
  // otherwise.
  if (!req.snapshot_ids().empty()
      && as_set(req.snapshot_ids())
             != std::set<std::string>(group.snapshot_ids.begin(), group.snapshot_ids.end()))
    return {StatusCode::INVALID_ARGUMENT,
            "snapshot_ids do not match the members of group snapshot " + id};
  // Removed under the state mutex, like the copies were made: no call sees
  // a member half removed and still recorded. A failure (or a crash) part
  // way leaves the group recorded, and a retry finishes it.
  for (const auto& member : group.snapshot_ids) {
    std::error_code ec;
    fs::remove_all(snapshot_dir(member), ec);
    if (ec)
      return {StatusCode::INTERNAL,
              "cannot remove snapshot directory of " + member + ": " + ec.message()};
  }
  std::vector<record> change;
  for (const auto& member : group.snapshot_ids)
    change.push_back(erase_snapshot{member});
  change.push_back(erase_group_snapshot{id});
  apply(std::move(change));  // one journal line: the whole group goes
  return Status::OK;
}

Status plugin::get_group_snapshot(const v1::GetVolumeGroupSnapshotRequest& req,
                                  v1::GetVolumeGroupSnapshotResponse& resp) {
  const auto& id = req.group_snapshot_id();
  if (id.empty())
    return {StatusCode::INVALID_ARGUMENT, "group_snapshot_id is required"};
  auto it = state_.group_snapshots.find(id);
  if (it == state_.group_snapshots.end())
    return {StatusCode::NOT_FOUND, "group snapshot " + id + " does not exist"};
  const auto& group = it->second;
  if (!req.snapshot_ids().empty()
      && as_set(req.snapshot_ids())
             != std::set<std::string>(group.snapshot_ids.begin(), group.snapshot_ids.end()))
    return {StatusCode::INVALID_ARGUMENT,
            "snapshot_ids do not match the members of group snapshot " + id};
  return fill_group_snapshot(id, group, *resp.mutable_group_snapshot());
}

void plugin::sweep_unrecorded_members() {
  const auto dir = opts_.root / "snapshots";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return;
  std::vector<fs::path> stale;
  try {
    for (const auto& e : fs::directory_iterator(dir)) {
      auto name = e.path().filename().string();
      const std::string incoming = ".incoming-";
      if (name.rfind(incoming, 0) == 0)
        name = name.substr(incoming.size());
      else if (state_.snapshots.count(name) != 0)
        continue;
      // Only group members: a CreateSnapshot's leftovers are left as they
      // always were.
      if (name.rfind("gsnap-", 0) == 0)
        stale.push_back(e.path());
    }
  } catch (const std::exception& e) {
    // Leftovers cost disk space only: never refuse to start over them.
    std::fprintf(stderr, "berth-hostpath: cannot list %s: %s\n", dir.c_str(), e.what());
  }
  for (const auto& p : stale) {
    fs::remove_all(p, ec);
    if (ec)
      std::fprintf(stderr, "berth-hostpath: cannot remove %s (the copy of a group snapshot "
                   "member never recorded): %s\n", p.c_str(), ec.message().c_str());
  }
}

}  // namespace berth::hostpath
