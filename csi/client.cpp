#include "csi/client.hpp"

#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>

#include "csi/csi.grpc.pb.h"

namespace berth::csi {

void skip_lock_order_checks() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

namespace v1 = ::csi::v1;

namespace {

void to_proto(const volume_capability& in, v1::VolumeCapability& out) {
  out.mutable_access_mode()->set_mode(
      static_cast<v1::VolumeCapability::AccessMode::Mode>(in.mode));
  if (in.block) {
    out.mutable_block();
    return;
  }
  auto* mount = out.mutable_mount();
  mount->set_fs_type(in.fs_type);
  for (const auto& flag : in.mount_flags)
    mount->add_mount_flags(flag);
}

template <class ProtoMap>
void to_proto(const string_map& in, ProtoMap& out) {
  for (const auto& [k, v] : in)
    out[k] = v;
}

template <class ProtoMap>
string_map from_proto(const ProtoMap& in) {
  return string_map(in.begin(), in.end());
}

volume from_proto(const v1::Volume& in) {
  volume out;
  out.volume_id = in.volume_id();
  out.capacity_bytes = in.capacity_bytes();
  out.volume_context = from_proto(in.volume_context());
  for (const auto& t : in.accessible_topology())
    out.accessible_topology.push_back(from_proto(t.segments()));
  out.source_snapshot_id = in.content_source().snapshot().snapshot_id();
  out.source_volume_id = in.content_source().volume().volume_id();
  return out;
}

}  // namespace

struct client::impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Identity::Stub> identity;
  std::unique_ptr<v1::Controller::Stub> controller;
  std::unique_ptr<v1::Node::Stub> node;
  std::unique_ptr<v1::GroupController::Stub> group;
  std::chrono::milliseconds deadline;
  call_observer observer;

  // Runs one unary call with a fresh context and the per-call deadline.
  template <class Call>
  call_status run(method m, Call&& call) {
    grpc::ClientContext ctx;
    auto start = std::chrono::steady_clock::now();
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    grpc::Status s = call(ctx);
    auto status = make_status(m, static_cast<code>(s.error_code()), s.error_message());
    if (observer) {
      std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      observer(m, status, took.count());
    }
    return status;
  }
};

client::client(const std::string& endpoint, std::chrono::milliseconds deadline)
    : impl_(std::make_unique<impl>()) {
  impl_->channel = grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
  impl_->identity = v1::Identity::NewStub(impl_->channel);
  impl_->controller = v1::Controller::NewStub(impl_->channel);
  impl_->node = v1::Node::NewStub(impl_->channel);
  impl_->group = v1::GroupController::NewStub(impl_->channel);
  impl_->deadline = deadline;
}

void client::observe(call_observer observer) { impl_->observer = std::move(observer); }

client::~client() = default;
client::client(client&&) noexcept = default;
client& client::operator=(client&&) noexcept = default;

result<plugin_info> client::get_plugin_info() {
  v1::GetPluginInfoRequest req;
  v1::GetPluginInfoResponse resp;
  result<plugin_info> r;
  r.status = impl_->run(method::get_plugin_info, [&](grpc::ClientContext& ctx) {
    return impl_->identity->GetPluginInfo(&ctx, req, &resp);
  });
  r.response = {resp.name(), resp.vendor_version()};
  return r;
}

result<plugin_capabilities> client::get_plugin_capabilities() {
  v1::GetPluginCapabilitiesRequest req;
  v1::GetPluginCapabilitiesResponse resp;
  result<plugin_capabilities> r;
  r.status = impl_->run(method::get_plugin_capabilities, [&](grpc::ClientContext& ctx) {
    return impl_->identity->GetPluginCapabilities(&ctx, req, &resp);
  });
  using svc = v1::PluginCapability::Service;
  using exp = v1::PluginCapability::VolumeExpansion;
  for (const auto& cap : resp.capabilities()) {
    if (cap.has_service()) {
      auto t = cap.service().type();
      r.response.controller_service |= t == svc::CONTROLLER_SERVICE;
      r.response.accessibility_constraints |= t == svc::VOLUME_ACCESSIBILITY_CONSTRAINTS;
      r.response.group_controller_service |= t == svc::GROUP_CONTROLLER_SERVICE;
    } else if (cap.has_volume_expansion()) {
      auto t = cap.volume_expansion().type();
      r.response.expansion_online |= t == exp::ONLINE;
      r.response.expansion_offline |= t == exp::OFFLINE;
    }
  }
  return r;
}

result<bool> client::probe() {
  v1::ProbeRequest req;
  v1::ProbeResponse resp;
  result<bool> r;
  r.status = impl_->run(method::probe, [&](grpc::ClientContext& ctx) {
    return impl_->identity->Probe(&ctx, req, &resp);
  });
  r.response = !resp.has_ready() || resp.ready().value();
  return r;
}

result<controller_capabilities> client::controller_get_capabilities() {
  v1::ControllerGetCapabilitiesRequest req;
  v1::ControllerGetCapabilitiesResponse resp;
  result<controller_capabilities> r;
  r.status = impl_->run(method::controller_get_capabilities, [&](grpc::ClientContext& ctx) {
    return impl_->controller->ControllerGetCapabilities(&ctx, req, &resp);
  });
  using rpc = v1::ControllerServiceCapability::RPC;
  auto& c = r.response;
  for (const auto& cap : resp.capabilities()) {
    switch (cap.rpc().type()) {
      case rpc::CREATE_DELETE_VOLUME: c.create_delete_volume = true; break;
      case rpc::PUBLISH_UNPUBLISH_VOLUME: c.publish_unpublish_volume = true; break;
      case rpc::LIST_VOLUMES: c.list_volumes = true; break;
      case rpc::GET_CAPACITY: c.get_capacity = true; break;
      case rpc::PUBLISH_READONLY: c.publish_readonly = true; break;
      case rpc::EXPAND_VOLUME: c.expand_volume = true; break;
      case rpc::LIST_VOLUMES_PUBLISHED_NODES: c.list_volumes_published_nodes = true; break;
      case rpc::SINGLE_NODE_MULTI_WRITER: c.single_node_multi_writer = true; break;
      case rpc::CREATE_DELETE_SNAPSHOT: c.create_delete_snapshot = true; break;
      case rpc::LIST_SNAPSHOTS: c.list_snapshots = true; break;
      case rpc::CLONE_VOLUME: c.clone_volume = true; break;
      case rpc::MODIFY_VOLUME: c.modify_volume = true; break;
      case rpc::GET_VOLUME: c.get_volume = true; break;
      case rpc::VOLUME_CONDITION: c.volume_condition = true; break;
      default: break;  // capabilities berth does not act on
    }
  }
  return r;
}

result<volume> client::create_volume(const create_volume_request& in) {
  v1::CreateVolumeRequest req;
  req.set_name(in.name);
  if (in.required_bytes != 0 || in.limit_bytes != 0) {
    req.mutable_capacity_range()->set_required_bytes(in.required_bytes);
    req.mutable_capacity_range()->set_limit_bytes(in.limit_bytes);
  }
  for (const auto& cap : in.capabilities)
    to_proto(cap, *req.add_volume_capabilities());
  to_proto(in.parameters, *req.mutable_parameters());
  to_proto(in.secrets, *req.mutable_secrets());
  for (const auto& t : in.requisite)
    to_proto(t, *req.mutable_accessibility_requirements()->add_requisite()->mutable_segments());
  for (const auto& t : in.preferred)
    to_proto(t, *req.mutable_accessibility_requirements()->add_preferred()->mutable_segments());
  if (!in.source_snapshot_id.empty())
    req.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(
        in.source_snapshot_id);
  else if (!in.source_volume_id.empty())
    req.mutable_volume_content_source()->mutable_volume()->set_volume_id(in.source_volume_id);
  to_proto(in.mutable_parameters, *req.mutable_mutable_parameters());
  v1::CreateVolumeResponse resp;
  result<volume> r;
  r.status = impl_->run(method::create_volume, [&](grpc::ClientContext& ctx) {
    return impl_->controller->CreateVolume(&ctx, req, &resp);
  });
  r.response = from_proto(resp.volume());
  return r;
}

result<empty> client::delete_volume(const std::string& volume_id, const string_map& secrets) {
  v1::DeleteVolumeRequest req;
  req.set_volume_id(volume_id);
  to_proto(secrets, *req.mutable_secrets());
  v1::DeleteVolumeResponse resp;
  result<empty> r;
  r.status = impl_->run(method::delete_volume, [&](grpc::ClientContext& ctx) {
    return impl_->controller->DeleteVolume(&ctx, req, &resp);
  });
  return r;
}

result<string_map> client::controller_publish_volume(const controller_publish_request& in) {
  v1::ControllerPublishVolumeRequest req;
  req.set_volume_id(in.volume_id);
  req.set_node_id(in.node_id);
  to_proto(in.capability, *req.mutable_volume_capability());
  req.set_readonly(in.readonly);
  to_proto(in.secrets, *req.mutable_secrets());
  to_proto(in.volume_context, *req.mutable_volume_context());
  v1::ControllerPublishVolumeResponse resp;
  result<string_map> r;
  r.status = impl_->run(method::controller_publish_volume, [&](grpc::ClientContext& ctx) {
    return impl_->controller->ControllerPublishVolume(&ctx, req, &resp);
  });
  r.response = from_proto(resp.publish_context());
  return r;
}

result<empty> client::controller_unpublish_volume(const std::string& volume_id,
                                                  const std::string& node_id,
                                                  const string_map& secrets) {
  v1::ControllerUnpublishVolumeRequest req;
  req.set_volume_id(volume_id);
  req.set_node_id(node_id);
  to_proto(secrets, *req.mutable_secrets());
  v1::ControllerUnpublishVolumeResponse resp;
  result<empty> r;
  r.status = impl_->run(method::controller_unpublish_volume, [&](grpc::ClientContext& ctx) {
    return impl_->controller->ControllerUnpublishVolume(&ctx, req, &resp);
  });
  return r;
}

result<validate_response> client::validate_volume_capabilities(const validate_request& in) {
  v1::ValidateVolumeCapabilitiesRequest req;
  req.set_volume_id(in.volume_id);
  for (const auto& cap : in.capabilities)
    to_proto(cap, *req.add_volume_capabilities());
  to_proto(in.volume_context, *req.mutable_volume_context());
  to_proto(in.parameters, *req.mutable_parameters());
  to_proto(in.secrets, *req.mutable_secrets());
  v1::ValidateVolumeCapabilitiesResponse resp;
  result<validate_response> r;
  r.status = impl_->run(method::validate_volume_capabilities, [&](grpc::ClientContext& ctx) {
    return impl_->controller->ValidateVolumeCapabilities(&ctx, req, &resp);
  });
  // The spec asks the CO to compare what was confirmed with what it asked
  // for, so that an older plugin cannot confirm fields it does not know.
  r.response.confirmed = resp.has_confirmed()
                         && resp.confirmed().volume_capabilities_size()
                                == req.volume_capabilities_size();
  r.response.message = resp.message();
  return r;
}

result<list_volumes_response> client::list_volumes(int32_t max_entries,
                                                   const std::string& starting_token) {
  v1::ListVolumesRequest req;
  req.set_max_entries(max_entries);
  req.set_starting_token(starting_token);
  v1::ListVolumesResponse resp;
  result<list_volumes_response> r;
  r.status = impl_->run(method::list_volumes, [&](grpc::ClientContext& ctx) {
    return impl_->controller->ListVolumes(&ctx, req, &resp);
  });
  for (const auto& e : resp.entries()) {
    list_volumes_response::entry out{from_proto(e.volume()), {}, {}};
    for (const auto& n : e.status().published_node_ids())
      out.published_node_ids.push_back(n);
    if (e.status().has_volume_condition())
      out.condition = {true, e.status().volume_condition().abnormal(),
                       e.status().volume_condition().message()};
    r.response.entries.push_back(std::move(out));
  }
  r.response.next_token = resp.next_token();
  return r;
}

result<int64_t> client::get_capacity(const std::vector<volume_capability>& capabilities,
                                     const string_map& parameters) {
  v1::GetCapacityRequest req;
  for (const auto& cap : capabilities)
    to_proto(cap, *req.add_volume_capabilities());
  to_proto(parameters, *req.mutable_parameters());
  v1::GetCapacityResponse resp;
  result<int64_t> r;
  r.status = impl_->run(method::get_capacity, [&](grpc::ClientContext& ctx) {
    return impl_->controller->GetCapacity(&ctx, req, &resp);
  });
  r.response = resp.available_capacity();
  return r;
}

// A CSI creation_time as unix milliseconds.
static int64_t unix_ms(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000 + t.nanos() / 1000000;
}

static snapshot from_proto(const v1::Snapshot& in) {
  snapshot out;
  out.snapshot_id = in.snapshot_id();
  out.source_volume_id = in.source_volume_id();
  out.size_bytes = in.size_bytes();
  if (in.has_creation_time()) out.created_at_ms = unix_ms(in.creation_time());
  out.ready_to_use = in.ready_to_use();
  out.group_snapshot_id = in.group_snapshot_id();
  return out;
}

result<snapshot> client::create_snapshot(const create_snapshot_request& in) {
  v1::CreateSnapshotRequest req;
  req.set_source_volume_id(in.source_volume_id);
  req.set_name(in.name);
  to_proto(in.parameters, *req.mutable_parameters());
  to_proto(in.secrets, *req.mutable_secrets());
  v1::CreateSnapshotResponse resp;
  result<snapshot> r;
  r.status = impl_->run(method::create_snapshot, [&](grpc::ClientContext& ctx) {
    return impl_->controller->CreateSnapshot(&ctx, req, &resp);
  });
  r.response = from_proto(resp.snapshot());
  return r;
}

result<empty> client::delete_snapshot(const std::string& snapshot_id, const string_map& secrets) {
  v1::DeleteSnapshotRequest req;
  req.set_snapshot_id(snapshot_id);
  to_proto(secrets, *req.mutable_secrets());
  v1::DeleteSnapshotResponse resp;
  result<empty> r;
  r.status = impl_->run(method::delete_snapshot, [&](grpc::ClientContext& ctx) {
    return impl_->controller->DeleteSnapshot(&ctx, req, &resp);
  });
  return r;
}

result<list_snapshots_response> client::list_snapshots(const list_snapshots_request& in) {
  v1::ListSnapshotsRequest req;
  req.set_max_entries(in.max_entries);
  req.set_starting_token(in.starting_token);
  req.set_source_volume_id(in.source_volume_id);
  req.set_snapshot_id(in.snapshot_id);
  to_proto(in.secrets, *req.mutable_secrets());
  v1::ListSnapshotsResponse resp;
  result<list_snapshots_response> r;
  r.status = impl_->run(method::list_snapshots, [&](grpc::ClientContext& ctx) {
    return impl_->controller->ListSnapshots(&ctx, req, &resp);
  });
  for (const auto& e : resp.entries()) r.response.entries.push_back(from_proto(e.snapshot()));
  r.response.next_token = resp.next_token();
  return r;
}

result<empty> client::controller_modify_volume(const std::string& volume_id,
                                               const string_map& mutable_parameters,
                                               const string_map& secrets) {
  v1::ControllerModifyVolumeRequest req;
  req.set_volume_id(volume_id);
  to_proto(mutable_parameters, *req.mutable_mutable_parameters());
  to_proto(secrets, *req.mutable_secrets());
  v1::ControllerModifyVolumeResponse resp;
  result<empty> r;
  r.status = impl_->run(method::controller_modify_volume, [&](grpc::ClientContext& ctx) {
    return impl_->controller->ControllerModifyVolume(&ctx, req, &resp);
  });
  return r;
}

result<expand_response> client::controller_expand_volume(const expand_request& in) {
  v1::ControllerExpandVolumeRequest req;
  req.set_volume_id(in.volume_id);
  req.mutable_capacity_range()->set_required_bytes(in.required_bytes);
  req.mutable_capacity_range()->set_limit_bytes(in.limit_bytes);
  to_proto(in.secrets, *req.mutable_secrets());
  v1::ControllerExpandVolumeResponse resp;
  result<expand_response> r;
  r.status = impl_->run(method::controller_expand_volume, [&](grpc::ClientContext& ctx) {
    return impl_->controller->ControllerExpandVolume(&ctx, req, &resp);
  });
  r.response.capacity_bytes = resp.capacity_bytes();
  r.response.node_expansion_required = resp.node_expansion_required();
  return r;
}

result<node_capabilities> client::node_get_capabilities() {
  v1::NodeGetCapabilitiesRequest req;
  v1::NodeGetCapabilitiesResponse resp;
  result<node_capabilities> r;
  r.status = impl_->run(method::node_get_capabilities, [&](grpc::ClientContext& ctx) {
    return impl_->node->NodeGetCapabilities(&ctx, req, &resp);
  });
  using rpc = v1::NodeServiceCapability::RPC;
  auto& c = r.response;
  for (const auto& cap : resp.capabilities()) {
    switch (cap.rpc().type()) {
      case rpc::STAGE_UNSTAGE_VOLUME: c.stage_unstage_volume = true; break;
      case rpc::GET_VOLUME_STATS: c.get_volume_stats = true; break;
      case rpc::EXPAND_VOLUME: c.expand_volume = true; break;
      case rpc::SINGLE_NODE_MULTI_WRITER: c.single_node_multi_writer = true; break;
      case rpc::VOLUME_CONDITION: c.volume_condition = true; break;
      default: break;
    }
  }
  return r;
}

result<node_info> client::node_get_info() {
  v1::NodeGetInfoRequest req;
  v1::NodeGetInfoResponse resp;
  result<node_info> r;
  r.status = impl_->run(method::node_get_info, [&](grpc::ClientContext& ctx) {
    return impl_->node->NodeGetInfo(&ctx, req, &resp);
  });
  r.response.node_id = resp.node_id();
  r.response.max_volumes_per_node = resp.max_volumes_per_node();
  r.response.accessible_topology = from_proto(resp.accessible_topology().segments());
  return r;
}

result<empty> client::node_stage_volume(const node_stage_request& in) {
  v1::NodeStageVolumeRequest req;
  req.set_volume_id(in.volume_id);
  to_proto(in.publish_context, *req.mutable_publish_context());
  req.set_staging_target_path(in.staging_target_path);
  to_proto(in.capability, *req.mutable_volume_capability());
  to_proto(in.secrets, *req.mutable_secrets());
  to_proto(in.volume_context, *req.mutable_volume_context());
  v1::NodeStageVolumeResponse resp;
  result<empty> r;
  r.status = impl_->run(method::node_stage_volume, [&](grpc::ClientContext& ctx) {
    return impl_->node->NodeStageVolume(&ctx, req, &resp);
  });
  return r;
}

result<empty> client::node_unstage_volume(const std::string& volume_id,
                                          const std::string& staging_target_path) {
  v1::NodeUnstageVolumeRequest req;
  req.set_volume_id(volume_id);
  req.set_staging_target_path(staging_target_path);
  v1::NodeUnstageVolumeResponse resp;
  result<empty> r;
  r.status = impl_->run(method::node_unstage_volume, [&](grpc::ClientContext& ctx) {
    return impl_->node->NodeUnstageVolume(&ctx, req, &resp);
  });
  return r;
}

result<empty> client::node_publish_volume(const node_publish_request& in) {
  v1::NodePublishVolumeRequest req;
  req.set_volume_id(in.volume_id);
  to_proto(in.publish_context, *req.mutable_publish_context());
  req.set_staging_target_path(in.staging_target_path);
  req.set_target_path(in.target_path);
  to_proto(in.capability, *req.mutable_volume_capability());
  req.set_readonly(in.readonly);
  to_proto(in.secrets, *req.mutable_secrets());
  to_proto(in.volume_context, *req.mutable_volume_context());
  v1::NodePublishVolumeResponse resp;
  result<empty> r;
  r.status = impl_->run(method::node_publish_volume, [&](grpc::ClientContext& ctx) {
    return impl_->node->NodePublishVolume(&ctx, req, &resp);
  });
  return r;
}

result<empty> client::node_unpublish_volume(const std::string& volume_id,
                                            const std::string& target_path) {
  v1::NodeUnpublishVolumeRequest req;
  req.set_volume_id(volume_id);
  req.set_target_path(target_path);
  v1::NodeUnpublishVolumeResponse resp;
  result<empty> r;
  r.status = impl_->run(method::node_unpublish_volume, [&](grpc::ClientContext& ctx) {
    return impl_->node->NodeUnpublishVolume(&ctx, req, &resp);
  });
  return r;
}

result<volume_stats> client::node_get_volume_stats(const std::string& volume_id,
                                                   const std::string& volume_path,
                                                   const std::string& staging_target_path) {
  v1::NodeGetVolumeStatsRequest req;
  req.set_volume_id(volume_id);
  req.set_volume_path(volume_path);
  req.set_staging_target_path(staging_target_path);
  v1::NodeGetVolumeStatsResponse resp;
  result<volume_stats> r;
  r.status = impl_->run(method::node_get_volume_stats, [&](grpc::ClientContext& ctx) {
    return impl_->node->NodeGetVolumeStats(&ctx, req, &resp);
  });
  for (const auto& u : resp.usage()) {
    if (u.unit() != v1::VolumeUsage::BYTES)
      continue;
    r.response.bytes_total = u.total();
    r.response.bytes_used = u.used();
    r.response.bytes_available = u.available();
  }
  if (resp.has_volume_condition())
    r.response.condition = {true, resp.volume_condition().abnormal(),
                            resp.volume_condition().message()};
  return r;
}

result<get_volume_response> client::controller_get_volume(const std::string& volume_id) {
  v1::ControllerGetVolumeRequest req;
  req.set_volume_id(volume_id);
  v1::ControllerGetVolumeResponse resp;
  result<get_volume_response> r;
  r.status = impl_->run(method::controller_get_volume, [&](grpc::ClientContext& ctx) {
    return impl_->controller->ControllerGetVolume(&ctx, req, &resp);
  });
  r.response.vol = from_proto(resp.volume());
  for (const auto& n : resp.status().published_node_ids())
    r.response.published_node_ids.push_back(n);
  if (resp.status().has_volume_condition())
    r.response.condition = {true, resp.status().volume_condition().abnormal(),
                            resp.status().volume_condition().message()};
  return r;
}

result<expand_response> client::node_expand_volume(const expand_request& in) {
  v1::NodeExpandVolumeRequest req;
  req.set_volume_id(in.volume_id);
  req.set_volume_path(in.volume_path);
  req.set_staging_target_path(in.staging_target_path);
  req.mutable_capacity_range()->set_required_bytes(in.required_bytes);
  req.mutable_capacity_range()->set_limit_bytes(in.limit_bytes);
  v1::NodeExpandVolumeResponse resp;
  result<expand_response> r;
  r.status = impl_->run(method::node_expand_volume, [&](grpc::ClientContext& ctx) {
    return impl_->node->NodeExpandVolume(&ctx, req, &resp);
  });
  r.response.capacity_bytes = resp.capacity_bytes();
  return r;
}

static group_snapshot from_proto(const v1::VolumeGroupSnapshot& in) {
  group_snapshot out;
  out.group_snapshot_id = in.group_snapshot_id();
  for (const auto& s : in.snapshots())
    out.snapshots.push_back(from_proto(s));
  if (in.has_creation_time()) out.created_at_ms = unix_ms(in.creation_time());
  out.ready_to_use = in.ready_to_use();
  return out;
}

namespace {

template <class Request>
void name_members(Request& req, const std::string& group_snapshot_id,
                  const std::vector<std::string>& snapshot_ids, const string_map& secrets) {
  req.set_group_snapshot_id(group_snapshot_id);
  for (const auto& id : snapshot_ids)
    req.add_snapshot_ids(id);
  to_proto(secrets, *req.mutable_secrets());
}

}  // namespace

result<group_controller_capabilities> client::group_controller_get_capabilities() {
  v1::GroupControllerGetCapabilitiesRequest req;
  v1::GroupControllerGetCapabilitiesResponse resp;
  result<group_controller_capabilities> r;
  r.status = impl_->run(method::group_controller_get_capabilities, [&](grpc::ClientContext& ctx) {
    return impl_->group->GroupControllerGetCapabilities(&ctx, req, &resp);
  });
  using rpc = v1::GroupControllerServiceCapability::RPC;
  for (const auto& cap : resp.capabilities())
    if (cap.has_rpc() && cap.rpc().type() == rpc::CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT)
      r.response.create_delete_get_volume_group_snapshot = true;
  return r;
}

result<group_snapshot> client::create_volume_group_snapshot(
    const create_group_snapshot_request& in) {
  v1::CreateVolumeGroupSnapshotRequest req;
  req.set_name(in.name);
  for (const auto& id : in.source_volume_ids)
    req.add_source_volume_ids(id);
  to_proto(in.parameters, *req.mutable_parameters());
  to_proto(in.secrets, *req.mutable_secrets());
  v1::CreateVolumeGroupSnapshotResponse resp;
  result<group_snapshot> r;
  r.status = impl_->run(method::create_volume_group_snapshot, [&](grpc::ClientContext& ctx) {
    return impl_->group->CreateVolumeGroupSnapshot(&ctx, req, &resp);
  });
  r.response = from_proto(resp.group_snapshot());
  return r;
}

result<empty> client::delete_volume_group_snapshot(const std::string& group_snapshot_id,
                                                   const std::vector<std::string>& snapshot_ids,
                                                   const string_map& secrets) {
  v1::DeleteVolumeGroupSnapshotRequest req;
  name_members(req, group_snapshot_id, snapshot_ids, secrets);
  v1::DeleteVolumeGroupSnapshotResponse resp;
  result<empty> r;
  r.status = impl_->run(method::delete_volume_group_snapshot, [&](grpc::ClientContext& ctx) {
    return impl_->group->DeleteVolumeGroupSnapshot(&ctx, req, &resp);
  });
  return r;
}

result<group_snapshot> client::get_volume_group_snapshot(
    const std::string& group_snapshot_id, const std::vector<std::string>& snapshot_ids,
    const string_map& secrets) {
  v1::GetVolumeGroupSnapshotRequest req;
  name_members(req, group_snapshot_id, snapshot_ids, secrets);
  v1::GetVolumeGroupSnapshotResponse resp;
  result<group_snapshot> r;
  r.status = impl_->run(method::get_volume_group_snapshot, [&](grpc::ClientContext& ctx) {
    return impl_->group->GetVolumeGroupSnapshot(&ctx, req, &resp);
  });
  r.response = from_proto(resp.group_snapshot());
  return r;
}

}  // namespace berth::csi
