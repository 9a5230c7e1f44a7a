#pragma once
// berth-hostpath: a monolith CSI plugin (Identity + Controller + Node, and
// the GroupController for group snapshots) whose volumes are directories
// under ROOT/volumes/<id>. It is berth's reference
// plugin: it follows the spec's idempotency rules and error codes closely so
// that berth's CSI workflow can be tested against real plugin behaviour.
//
// plugin holds the logic, one method per RPC, each taking the request and
// filling the response. Thread safety: the RPC methods must be called through
// serve(), which runs them under the state mutex: their checks and in-memory
// changes are atomic with respect to each other. Mounts and volume directory
// work run with the mutex released (unlocked()); a path being mounted is
// reserved meanwhile (another volume's call on it gets ABORTED), and the
// caller must serialize calls per volume id (services.cpp does), so nothing
// a method checked about its own volume changes while it is unlocked.
// After the method, serve() waits without the mutex until the state the
// answer rests on is on disk. Saving is a group commit: each change (a list
// of records, state.hpp) gets a version number; one thread at a time
// appends every change made so far as one line to ROOT/state.journal and
// fdatasyncs it (now and then compacting into ROOT/state.json instead:
// journal.hpp), and each call answers once a save covering its version is
// durable. So an answer the CO saw survives a crash, N concurrent calls
// share far fewer than N fsyncs, and a save costs what changed, not what is
// stored.

#include <grpcpp/support/status.h>

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "csi/csi.pb.h"
#include "journal.hpp"
#include "mounter.hpp"
#include "state.hpp"

namespace berth::hostpath {

namespace v1 = ::csi::v1;

// Nanoseconds since the epoch (snapshot times, the call log).
int64_t now_ns();

struct options {
  std::filesystem::path root;
  std::string node_id;
  int64_t max_volumes = 0;  // per node; 0 = no limit
  std::map<std::string, std::string> topology;
  mount_mode mode = mount_mode::bind;
  // Other node ids the controller accepts in ControllerPublishVolume (a
  // monolith otherwise only knows its own node).
  std::vector<std::string> peer_nodes;
  // ROOT is shared with berth-hostpath processes on other nodes (a stand-in
  // for network storage): volumes and controller publications live in
  // ROOT/state.json, this node's stagings and publications in
  // ROOT/nodes/NODE-ID.json; every call holds an exclusive flock on
  // ROOT/state.lock and re-reads both files first. Every node with a file in
  // ROOT/nodes/ is known to the controller (no --peer-node needed).
  bool shared_root = false;
  // When a save compacts the journal into the snapshot (store's `limit`):
  // -1 (the default) when the journal reaches max(4 MiB, 2x the snapshot),
  // or with shared_root max(64 KiB, 2x the snapshot) since every call
  // re-reads it; N >= 0 once it holds N bytes (0: every save rewrites the
  // whole snapshot). A test and benchmark aid.
  int64_t journal_limit = -1;
  // The mutable parameter keys CreateVolume and ControllerModifyVolume
  // accept (--mutable-parameter-key); any other key is INVALID_ARGUMENT.
  std::set<std::string> mutable_keys{"iops", "tier"};
};

class plugin {
 public:
  // Creates ROOT/volumes and loads ROOT/state.json and ROOT/state.journal.
  // Throws on a corrupt state.
  explicit plugin(options opts);

  static constexpr const char* name = "berth-hostpath";

  bool shared_root() const { return opts_.shared_root; }

  // With options::shared_root: take the lock of ROOT and re-read the state
  // before a call (begin_call), release it after (end_call). Otherwise no-ops.
  // Throws std::runtime_error when the lock or the state cannot be read.
  // The caller must serialize whole calls in this mode (services.cpp does):
  // the state is only valid while ROOT's lock is held, so each call saves
  // its own changes before end_call, a group of one.
  void begin_call();
  void end_call();

  // Runs `fn` (one RPC method) under the state mutex, then waits without it
  // until a save covering every change `fn` saw or made is durable; a failed
  // save answers INTERNAL. Exceptions from `fn` propagate.
  template <class Fn>
  grpc::Status serve(Fn&& fn) {
    grpc::Status s;
    int64_t needed = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      serving_ = this;
      try {
        s = fn();
      } catch (...) {
        serving_ = nullptr;
        throw;
      }
      serving_ = nullptr;
      needed = version_;
    }
    if (auto saved = wait_durable(needed); !saved.ok())
      return saved;
    return s;
  }

  // Identity.
  grpc::Status get_plugin_info(const v1::GetPluginInfoRequest&, v1::GetPluginInfoResponse&);
  grpc::Status get_plugin_capabilities(const v1::GetPluginCapabilitiesRequest&,
                                       v1::GetPluginCapabilitiesResponse&);
  grpc::Status probe(const v1::ProbeRequest&, v1::ProbeResponse&);

  // Controller (controller.cpp).
  grpc::Status create_volume(const v1::CreateVolumeRequest&, v1::CreateVolumeResponse&);
  grpc::Status delete_volume(const v1::DeleteVolumeRequest&, v1::DeleteVolumeResponse&);
  grpc::Status controller_publish(const v1::ControllerPublishVolumeRequest&,
                                  v1::ControllerPublishVolumeResponse&);
  grpc::Status controller_unpublish(const v1::ControllerUnpublishVolumeRequest&,
                                    v1::ControllerUnpublishVolumeResponse&);
  grpc::Status validate_capabilities(const v1::ValidateVolumeCapabilitiesRequest&,
                                     v1::ValidateVolumeCapabilitiesResponse&);
  grpc::Status list_volumes(const v1::ListVolumesRequest&, v1::ListVolumesResponse&);
  grpc::Status get_capacity(const v1::GetCapacityRequest&, v1::GetCapacityResponse&);
  grpc::Status controller_capabilities(const v1::ControllerGetCapabilitiesRequest&,
                                       v1::ControllerGetCapabilitiesResponse&);
  grpc::Status controller_expand(const v1::ControllerExpandVolumeRequest&,
                                 v1::ControllerExpandVolumeResponse&);
  grpc::Status controller_get_volume(const v1::ControllerGetVolumeRequest&,
                                     v1::ControllerGetVolumeResponse&);
  grpc::Status controller_modify(const v1::ControllerModifyVolumeRequest&,
                                 v1::ControllerModifyVolumeResponse&);

  // Snapshots (snapshot.cpp): copies of a volume's directory.
  grpc::Status create_snapshot(const v1::CreateSnapshotRequest&, v1::CreateSnapshotResponse&);
  grpc::Status delete_snapshot(const v1::DeleteSnapshotRequest&, v1::DeleteSnapshotResponse&);
  grpc::Status list_snapshots(const v1::ListSnapshotsRequest&, v1::ListSnapshotsResponse&);
  grpc::Status get_snapshot(const v1::GetSnapshotRequest&, v1::GetSnapshotResponse&);

  // GroupController (group_snapshot.cpp): a group snapshot is one member
  // snapshot (an ordinary snapshot with group_snapshot_id set) per source
  // volume, all copied while the state mutex is held throughout (no
  // unlocked()): no other call changes anything meanwhile. The caller must
  // also hold the per-volume locks of every source volume (services.cpp
  // does), so that no call on a member is in an unlocked phase either.
  grpc::Status group_controller_capabilities(const v1::GroupControllerGetCapabilitiesRequest&,
                                             v1::GroupControllerGetCapabilitiesResponse&);
  grpc::Status create_group_snapshot(const v1::CreateVolumeGroupSnapshotRequest&,
                                     v1::CreateVolumeGroupSnapshotResponse&);
  grpc::Status delete_group_snapshot(const v1::DeleteVolumeGroupSnapshotRequest&,
                                     v1::DeleteVolumeGroupSnapshotResponse&);
  grpc::Status get_group_snapshot(const v1::GetVolumeGroupSnapshotRequest&,
                                  v1::GetVolumeGroupSnapshotResponse&);

  // Node (node.cpp).
  grpc::Status node_stage(const v1::NodeStageVolumeRequest&, v1::NodeStageVolumeResponse&);
  grpc::Status node_unstage(const v1::NodeUnstageVolumeRequest&, v1::NodeUnstageVolumeResponse&);
  grpc::Status node_publish(const v1::NodePublishVolumeRequest&, v1::NodePublishVolumeResponse&);
  grpc::Status node_unpublish(const v1::NodeUnpublishVolumeRequest&,
                              v1::NodeUnpublishVolumeResponse&);
  grpc::Status node_volume_stats(const v1::NodeGetVolumeStatsRequest&,
                                 v1::NodeGetVolumeStatsResponse&);
  grpc::Status node_expand(const v1::NodeExpandVolumeRequest&, v1::NodeExpandVolumeResponse&);
  grpc::Status node_capabilities(const v1::NodeGetCapabilitiesRequest&,
                                 v1::NodeGetCapabilitiesResponse&);
  grpc::Status node_info(const v1::NodeGetInfoRequest&, v1::NodeGetInfoResponse&);

 private:
  std::filesystem::path volume_dir(const std::string& volume_id) const;
  std::filesystem::path snapshot_dir(const std::string& snapshot_id) const;
  bool known_node(const std::string& node_id) const;
  void fill_volume(const std::string& id, const volume_record& rec, v1::Volume& out) const;
  void fill_snapshot(const std::string& id, const snapshot_record& rec, v1::Snapshot& out) const;
  // The group with its members (in the group's order); INTERNAL when a
  // member's record is missing (a damaged state).
  grpc::Status fill_group_snapshot(const std::string& id, const group_snapshot_record& rec,
                                   v1::VolumeGroupSnapshot& out) const;
  // The volume's condition: abnormal when its directory is missing.
  v1::VolumeCondition condition_of(const std::string& volume_id) const;
  // Copies directory `from` to `to` through a temporary directory beside
  // it (a half-made copy never has the final name). Throws.
  void copy_tree(const std::filesystem::path& from, const std::filesystem::path& to) const;
  // Runs `fn` (a mount, a directory operation) with the state mutex that
  // serve() holds released, and takes it back after (also on an exception).
  // References into state_ do not survive it. Called outside serve() (the
  // fuzz harness: one thread), runs `fn` as is.
  template <class Fn>
  void unlocked(Fn&& fn) {
    if (serving_ != this) {
      fn();
      return;
    }
    struct relock {
      std::mutex& mu;
      ~relock() { mu.lock(); }
    };
    mu_.unlock();
    relock again{mu_};
    fn();
  }
  // `path` is being staged or published (the mount runs unlocked): other
  // calls on it get ABORTED, and a stage counts against --max-volumes.
  void reserve(const std::string& path, bool stage);
  void release(const std::string& path, bool stage);

  // Applies `change` to the current state (in memory, under mu_), queues it
  // for the next save and gives it the next version; serve() waits for it
  // to be saved before answering.
  void apply(std::vector<record> change);
  // Returns once state version `v` (or a later one) is durable, saving it if
  // no other thread is; INTERNAL if the save that covered `v` failed.
  grpc::Status wait_durable(int64_t v);
  // Appends `change` to the journal (shared_root: the shared records to
  // ROOT's, the node's own to the node's); with `whole`, compacts instead
  // (each store whose turn it is). Throws.
  void save(const std::vector<record>& change, const state* whole);
  // True when the next save must have the whole state (a compaction).
  bool must_compact() const;

  state load();
  // Removes the directories under ROOT/snapshots of group members that no
  // record names (a CreateVolumeGroupSnapshot that crashed before it
  // recorded its group) and their half-made copies. Called at startup,
  // before any call (with --shared-root under ROOT's lock: a group is made
  // while that lock is held, so no other process is making one).
  void sweep_unrecorded_members();

  options opts_;
  mounter mounter_;
  // ROOT/state.json + state.journal: everything, or with shared_root the
  // volumes, controller publications and snapshots.
  std::unique_ptr<store> store_;
  // shared_root only: ROOT/nodes/NODE-ID.json + .journal, this node's
  // stagings and publications.
  std::unique_ptr<store> node_store_;
  int lock_fd_ = -1;                 // shared_root only

  std::mutex mu_;  // guards everything below, and the RPC methods' work
  state state_;
  int64_t version_ = 0;             // of state_: one more per apply()
  std::vector<record> unsaved_;     // changes no save has taken yet
  int64_t durable_ = 0;             // the newest version saved durably
  bool saving_ = false;             // one thread saves at a time
  uint64_t failed_saves_ = 0;       // count of saves that threw
  int64_t failed_covers_ = 0;       // the version the last failed save held
  std::string failed_why_;          // and its error
  std::condition_variable saved_;   // a save ended (durable_ or failed_*)
  std::set<std::string> pending_paths_;  // reserve()d: being mounted
  int64_t pending_stages_ = 0;
  // The plugin whose mutex this thread holds through serve(), if any.
  inline static thread_local const plugin* serving_ = nullptr;
};

// The stable volume id for a CreateVolume name ("hp-" + 16 hex digits), so a
// retried CreateVolume finds the volume an earlier attempt made.
std::string volume_id_for(const std::string& name);

// The same for a CreateSnapshot name ("snap-" + 16 hex digits).
std::string snapshot_id_for(const std::string& name);

// The same for a CreateVolumeGroupSnapshot name ("group-" + 16 hex digits),
// and for the member of that group copied from volume `volume_id`
// ("gsnap-" + 16 hex digits: never the id of a CreateSnapshot snapshot).
// A retry after a crash in the middle of a group therefore reuses the ids,
// and the directories, of the first attempt.
std::string group_snapshot_id_for(const std::string& name);
std::string member_snapshot_id_for(const std::string& group_name, const std::string& volume_id);

// Empty when `params` are mutable parameters berth-hostpath accepts (keys
// of 1 to 63 characters out of [A-Za-z0-9._/-]; any value), else why not.
std::string bad_mutable_parameters(const google::protobuf::Map<std::string, std::string>& params,
                                   const std::set<std::string>& supported);

// Empty when `cap` is a capability berth-hostpath serves, else the reason
// (for an INVALID_ARGUMENT answer).
std::string unsupported(const v1::VolumeCapability& cap);

// SINGLE_NODE_* access modes: at most one node at a time.
bool single_node(int access_mode);

// Modes that allow several publications on one node (MULTI_NODE_* and
// SINGLE_NODE_MULTI_WRITER, per the spec's NodePublishVolume table).
bool multi_publish(int access_mode);

}  // namespace berth::hostpath
