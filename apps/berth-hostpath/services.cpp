#include "services.hpp"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "call_log.hpp"
#include "csi/csi.grpc.pb.h"
#include "csi/status.hpp"
#include "hostpath.hpp"

namespace berth::hostpath {

using fields = std::map<std::string, std::string>;

namespace {

// One call at a time per volume id: the others on that volume wait. A call
// on several volumes (CreateVolumeGroupSnapshot) takes all of their locks at
// once, when none is busy: no order between the ids, so no deadlock.
class volume_locks {
 public:
  class held {
   public:
    held(volume_locks& locks, std::set<std::string> ids) : locks_(locks), ids_(std::move(ids)) {
      ids_.erase(std::string());
      if (ids_.empty())
        return;
      std::unique_lock<std::mutex> lock(locks_.mu_);
      locks_.freed_.wait(lock, [&] {
        for (const auto& id : ids_)
          if (locks_.busy_.count(id) != 0)
            return false;
        return true;
      });
      locks_.busy_.insert(ids_.begin(), ids_.end());
    }
    ~held() {
      if (ids_.empty())
        return;
      std::lock_guard<std::mutex> lock(locks_.mu_);
      for (const auto& id : ids_)
        locks_.busy_.erase(id);
      locks_.freed_.notify_all();
    }
    held(const held&) = delete;
    held& operator=(const held&) = delete;

   private:
    volume_locks& locks_;
    std::set<std::string> ids_;
  };

 private:
  std::mutex mu_;
  std::condition_variable freed_;
  std::set<std::string> busy_;
};

// The volume a call is about, from its logged fields: volume_id, for
// CreateSnapshot source_volume_id (the volume it copies, which must not go
// meanwhile), or for CreateVolume the id its name maps to. Empty: none (no
// per-volume lock).
std::string volume_of(const fields& what) {
  if (auto it = what.find("volume_id"); it != what.end())
    return it->second;
  if (auto it = what.find("source_volume_id"); it != what.end())
    return it->second;
  if (auto it = what.find("name"); it != what.end() && !it->second.empty())
    return volume_id_for(it->second);
  return {};
}

}  // namespace

// Shared by the four services: the delay, the locking and the log around
// each call (see services.hpp).
struct dispatcher {
  plugin& p;
  call_log& log;
  std::map<std::string, std::chrono::milliseconds> delays;
  volume_locks volumes;
  std::mutex shared_root_mu;  // --shared-root only: one call at a time

  // `what` names the ids and paths of the call: never secrets or contexts.
  // `also_locks`: more volume ids whose locks the call holds, beyond the one
  // volume_of(what) names (CreateVolumeGroupSnapshot: its source volumes).
  template <class Fn>
  grpc::Status run(const char* method, const fields& what, Fn&& fn,
                   std::set<std::string> also_locks = {}) {
    int64_t at_ns = now_ns();
    if (auto d = delays.find(method); d != delays.end())
      std::this_thread::sleep_for(d->second);
    // Held until the call's log line is written: per volume, the log's
    // line order is the order the calls were served.
    also_locks.insert(volume_of(what));
    volume_locks::held one_per_volume(volumes, std::move(also_locks));
    std::unique_lock<std::mutex> serial(shared_root_mu, std::defer_lock);
    grpc::Status s;
    int64_t end_ns = -1;
    try {
      if (p.shared_root()) {
        serial.lock();
        p.begin_call();  // the lock of ROOT, and the state re-read
        // Taken under the lock of ROOT: the call logs of the processes
        // sharing ROOT merge into one order by this timestamp.
        at_ns = now_ns();
      }
      s = p.serve(fn);
      end_ns = now_ns();  // before ROOT's lock goes: shared-root calls never overlap
      p.end_call();
    } catch (const std::exception& e) {
      end_ns = now_ns();
      p.end_call();
      s = grpc::Status(grpc::StatusCode::INTERNAL, e.what());
    }
    auto c = static_cast<int>(s.error_code());
    log.append(method, what, c, berth::csi::code_name(static_cast<berth::csi::code>(c)), at_ns,
               end_ns);
    return s;
  }
};

namespace {

using grpc::ServerContext;
using grpc::Status;

class identity_service final : public v1::Identity::Service {
 public:
  explicit identity_service(dispatcher& d) : d_(d) {}

  Status GetPluginInfo(ServerContext*, const v1::GetPluginInfoRequest* req,
                       v1::GetPluginInfoResponse* resp) override {
    return d_.run("GetPluginInfo", {}, [&] { return d_.p.get_plugin_info(*req, *resp); });
  }
  Status GetPluginCapabilities(ServerContext*, const v1::GetPluginCapabilitiesRequest* req,
                               v1::GetPluginCapabilitiesResponse* resp) override {
    return d_.run("GetPluginCapabilities", {},
                  [&] { return d_.p.get_plugin_capabilities(*req, *resp); });
  }
  Status Probe(ServerContext*, const v1::ProbeRequest* req, v1::ProbeResponse* resp) override {
    return d_.run("Probe", {}, [&] { return d_.p.probe(*req, *resp); });
  }

 private:
  dispatcher& d_;
};

class controller_service final : public v1::Controller::Service {
 public:
  explicit controller_service(dispatcher& d) : d_(d) {}

  Status CreateVolume(ServerContext*, const v1::CreateVolumeRequest* req,
                      v1::CreateVolumeResponse* resp) override {
    return d_.run("CreateVolume", {{"name", req->name()}},
                  [&] { return d_.p.create_volume(*req, *resp); });
  }
  Status DeleteVolume(ServerContext*, const v1::DeleteVolumeRequest* req,
                      v1::DeleteVolumeResponse* resp) override {
    return d_.run("DeleteVolume", {{"volume_id", req->volume_id()}},
                  [&] { return d_.p.delete_volume(*req, *resp); });
  }
  Status ControllerPublishVolume(ServerContext*, const v1::ControllerPublishVolumeRequest* req,
                                 v1::ControllerPublishVolumeResponse* resp) override {
    return d_.run("ControllerPublishVolume",
                  {{"volume_id", req->volume_id()},
                   {"node_id", req->node_id()},
                   {"readonly", req->readonly() ? "true" : ""}},
                  [&] { return d_.p.controller_publish(*req, *resp); });
  }
  Status ControllerUnpublishVolume(ServerContext*, const v1::ControllerUnpublishVolumeRequest* req,
                                   v1::ControllerUnpublishVolumeResponse* resp) override {
    return d_.run("ControllerUnpublishVolume",
                  {{"volume_id", req->volume_id()}, {"node_id", req->node_id()}},
                  [&] { return d_.p.controller_unpublish(*req, *resp); });
  }
  Status ValidateVolumeCapabilities(ServerContext*,
                                    const v1::ValidateVolumeCapabilitiesRequest* req,
                                    v1::ValidateVolumeCapabilitiesResponse* resp) override {
    return d_.run("ValidateVolumeCapabilities", {{"volume_id", req->volume_id()}},
                  [&] { return d_.p.validate_capabilities(*req, *resp); });
  }
  Status ListVolumes(ServerContext*, const v1::ListVolumesRequest* req,
                     v1::ListVolumesResponse* resp) override {
    return d_.run("ListVolumes", {}, [&] { return d_.p.list_volumes(*req, *resp); });
  }
  Status GetCapacity(ServerContext*, const v1::GetCapacityRequest* req,
                     v1::GetCapacityResponse* resp) override {
    return d_.run("GetCapacity", {}, [&] { return d_.p.get_capacity(*req, *resp); });
  }
  Status ControllerGetCapabilities(ServerContext*, const v1::ControllerGetCapabilitiesRequest* req,
                                   v1::ControllerGetCapabilitiesResponse* resp) override {
    return d_.run("ControllerGetCapabilities", {},
                  [&] { return d_.p.controller_capabilities(*req, *resp); });
  }
  Status CreateSnapshot(ServerContext*, const v1::CreateSnapshotRequest* req,
                        v1::CreateSnapshotResponse* resp) override {
    return d_.run("CreateSnapshot",
                  {{"snapshot_name", req->name()}, {"source_volume_id", req->source_volume_id()}},
                  [&] { return d_.p.create_snapshot(*req, *resp); });
  }
  Status DeleteSnapshot(ServerContext*, const v1::DeleteSnapshotRequest* req,
                        v1::DeleteSnapshotResponse* resp) override {
    return d_.run("DeleteSnapshot", {{"snapshot_id", req->snapshot_id()}},
                  [&] { return d_.p.delete_snapshot(*req, *resp); });
  }
  Status ListSnapshots(ServerContext*, const v1::ListSnapshotsRequest* req,
                       v1::ListSnapshotsResponse* resp) override {
    return d_.run("ListSnapshots", {}, [&] { return d_.p.list_snapshots(*req, *resp); });
  }
  Status GetSnapshot(ServerContext*, const v1::GetSnapshotRequest* req,
                     v1::GetSnapshotResponse* resp) override {
    return d_.run("GetSnapshot", {{"snapshot_id", req->snapshot_id()}},
                  [&] { return d_.p.get_snapshot(*req, *resp); });
  }
  Status ControllerExpandVolume(ServerContext*, const v1::ControllerExpandVolumeRequest* req,
                                v1::ControllerExpandVolumeResponse* resp) override {
    return d_.run("ControllerExpandVolume",
                  {{"volume_id", req->volume_id()},
                   {"required_bytes", std::to_string(req->capacity_range().required_bytes())},
                   {"limit_bytes", std::to_string(req->capacity_range().limit_bytes())}},
                  [&] { return d_.p.controller_expand(*req, *resp); });
  }
  Status ControllerGetVolume(ServerContext*, const v1::ControllerGetVolumeRequest* req,
                             v1::ControllerGetVolumeResponse* resp) override {
    return d_.run("ControllerGetVolume", {{"volume_id", req->volume_id()}},
                  [&] { return d_.p.controller_get_volume(*req, *resp); });
  }
  Status ControllerModifyVolume(ServerContext*, const v1::ControllerModifyVolumeRequest* req,
                                v1::ControllerModifyVolumeResponse* resp) override {
    return d_.run("ControllerModifyVolume", {{"volume_id", req->volume_id()}},
                  [&] { return d_.p.controller_modify(*req, *resp); });
  }

 private:
  dispatcher& d_;
};

class node_service final : public v1::Node::Service {
 public:
  explicit node_service(dispatcher& d) : d_(d) {}

  Status NodeStageVolume(ServerContext*, const v1::NodeStageVolumeRequest* req,
                         v1::NodeStageVolumeResponse* resp) override {
    return d_.run("NodeStageVolume",
                  {{"volume_id", req->volume_id()},
                   {"staging_target_path", req->staging_target_path()}},
                  [&] { return d_.p.node_stage(*req, *resp); });
  }
  Status NodeUnstageVolume(ServerContext*, const v1::NodeUnstageVolumeRequest* req,
                           v1::NodeUnstageVolumeResponse* resp) override {
    return d_.run("NodeUnstageVolume",
                  {{"volume_id", req->volume_id()},
                   {"staging_target_path", req->staging_target_path()}},
                  [&] { return d_.p.node_unstage(*req, *resp); });
  }
  Status NodePublishVolume(ServerContext*, const v1::NodePublishVolumeRequest* req,
                           v1::NodePublishVolumeResponse* resp) override {
    return d_.run("NodePublishVolume",
                  {{"volume_id", req->volume_id()},
                   {"staging_target_path", req->staging_target_path()},
                   {"target_path", req->target_path()},
                   {"readonly", req->readonly() ? "true" : ""}},
                  [&] { return d_.p.node_publish(*req, *resp); });
  }
  Status NodeUnpublishVolume(ServerContext*, const v1::NodeUnpublishVolumeRequest* req,
                             v1::NodeUnpublishVolumeResponse* resp) override {
    return d_.run("NodeUnpublishVolume",
                  {{"volume_id", req->volume_id()}, {"target_path", req->target_path()}},
                  [&] { return d_.p.node_unpublish(*req, *resp); });
  }
  Status NodeGetVolumeStats(ServerContext*, const v1::NodeGetVolumeStatsRequest* req,
                            v1::NodeGetVolumeStatsResponse* resp) override {
    return d_.run("NodeGetVolumeStats",
                  {{"volume_id", req->volume_id()}, {"volume_path", req->volume_path()}},
                  [&] { return d_.p.node_volume_stats(*req, *resp); });
  }
  Status NodeExpandVolume(ServerContext*, const v1::NodeExpandVolumeRequest* req,
                          v1::NodeExpandVolumeResponse* resp) override {
    return d_.run("NodeExpandVolume",
                  {{"volume_id", req->volume_id()},
                   {"volume_path", req->volume_path()},
                   {"staging_target_path", req->staging_target_path()},
                   {"required_bytes", std::to_string(req->capacity_range().required_bytes())}},
                  [&] { return d_.p.node_expand(*req, *resp); });
  }
  Status NodeGetCapabilities(ServerContext*, const v1::NodeGetCapabilitiesRequest* req,
                             v1::NodeGetCapabilitiesResponse* resp) override {
    return d_.run("NodeGetCapabilities", {}, [&] { return d_.p.node_capabilities(*req, *resp); });
  }
  Status NodeGetInfo(ServerContext*, const v1::NodeGetInfoRequest* req,
                     v1::NodeGetInfoResponse* resp) override {
    return d_.run("NodeGetInfo", {}, [&] { return d_.p.node_info(*req, *resp); });
  }

 private:
  dispatcher& d_;
};

std::string joined(const google::protobuf::RepeatedPtrField<std::string>& ids) {
  std::string out;
  for (const auto& id : ids)
    out += (out.empty() ? "" : ",") + id;
  return out;
}

class group_controller_service final : public v1::GroupController::Service {
 public:
  explicit group_controller_service(dispatcher& d) : d_(d) {}

  Status GroupControllerGetCapabilities(ServerContext*,
                                        const v1::GroupControllerGetCapabilitiesRequest* req,
                                        v1::GroupControllerGetCapabilitiesResponse* resp) override {
    return d_.run("GroupControllerGetCapabilities", {},
                  [&] { return d_.p.group_controller_capabilities(*req, *resp); });
  }
  // Holds the lock of every source volume (services.hpp): no other call on a
  // member runs while the members are copied.
  Status CreateVolumeGroupSnapshot(ServerContext*, const v1::CreateVolumeGroupSnapshotRequest* req,
                                   v1::CreateVolumeGroupSnapshotResponse* resp) override {
    return d_.run(
        "CreateVolumeGroupSnapshot",
        {{"group_snapshot_name", req->name()},
         {"source_volume_ids", joined(req->source_volume_ids())}},
        [&] { return d_.p.create_group_snapshot(*req, *resp); },
        {req->source_volume_ids().begin(), req->source_volume_ids().end()});
  }
  Status DeleteVolumeGroupSnapshot(ServerContext*, const v1::DeleteVolumeGroupSnapshotRequest* req,
                                   v1::DeleteVolumeGroupSnapshotResponse* resp) override {
    return d_.run("DeleteVolumeGroupSnapshot",
                  {{"group_snapshot_id", req->group_snapshot_id()},
                   {"snapshot_ids", joined(req->snapshot_ids())}},
                  [&] { return d_.p.delete_group_snapshot(*req, *resp); });
  }
  Status GetVolumeGroupSnapshot(ServerContext*, const v1::GetVolumeGroupSnapshotRequest* req,
                                v1::GetVolumeGroupSnapshotResponse* resp) override {
    return d_.run("GetVolumeGroupSnapshot",
                  {{"group_snapshot_id", req->group_snapshot_id()},
                   {"snapshot_ids", joined(req->snapshot_ids())}},
                  [&] { return d_.p.get_group_snapshot(*req, *resp); });
  }

 private:
  dispatcher& d_;
};

}  // namespace

struct services::impl {
  dispatcher d;
  identity_service identity{d};
  controller_service controller{d};
  node_service node{d};
  group_controller_service group_controller{d};
};

const std::vector<std::string>& rpc_names() {
  static const std::vector<std::string> names = {
      "GetPluginInfo",           "GetPluginCapabilities",     "Probe",
      "CreateVolume",            "DeleteVolume",              "ControllerPublishVolume",
      "ControllerUnpublishVolume", "ValidateVolumeCapabilities", "ListVolumes",
      "GetCapacity",             "ControllerGetCapabilities", "NodeStageVolume",
      "NodeUnstageVolume",       "NodePublishVolume",         "NodeUnpublishVolume",
      "NodeGetVolumeStats",      "NodeGetCapabilities",       "NodeGetInfo",
      "CreateSnapshot",          "DeleteSnapshot",            "ListSnapshots",
      "GetSnapshot",             "ControllerExpandVolume",    "ControllerGetVolume",
      "ControllerModifyVolume",  "NodeExpandVolume",
      "GroupControllerGetCapabilities", "CreateVolumeGroupSnapshot",
      "DeleteVolumeGroupSnapshot", "GetVolumeGroupSnapshot"};
  return names;
}

services::services(plugin& p, call_log& log,
                   std::map<std::string, std::chrono::milliseconds> delays) {
  const auto& names = rpc_names();
  for (const auto& [name, ms] : delays)
    if (std::find(names.begin(), names.end(), name) == names.end())
      throw std::invalid_argument("unknown RPC '" + name + "'");
  impl_.reset(new impl{{p, log, std::move(delays), {}, {}}});
}

services::~services() = default;

void services::register_with(grpc::ServerBuilder& builder) {
  builder.RegisterService(&impl_->identity);
  builder.RegisterService(&impl_->controller);
  builder.RegisterService(&impl_->node);
  builder.RegisterService(&impl_->group_controller);  // on the Controller's server
}

}  // namespace berth::hostpath
