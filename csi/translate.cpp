#include "csi/translate.hpp"

namespace berth::csi {

access_mode to_csi(v1::AccessMode m) {
  switch (m) {
    case v1::SINGLE_NODE_READER_ONLY:
      return access_mode::single_node_reader_only;
    case v1::SINGLE_NODE_WRITER:
      return access_mode::single_node_writer;
    case v1::MULTI_NODE_READER_ONLY:
      return access_mode::multi_node_reader_only;
    case v1::MULTI_NODE_SINGLE_WRITER:
      return access_mode::multi_node_single_writer;
    case v1::MULTI_NODE_MULTI_WRITER:
      return access_mode::multi_node_multi_writer;
    default:
      return access_mode::unknown;
  }
}

string_map to_map(const google::protobuf::Map<std::string, std::string>& m) {
  return string_map(m.begin(), m.end());
}

volume_capability capability_of(const v1::NodeVolumeRequest& r) {
  volume_capability c;
  c.mode = to_csi(r.access_mode());
  c.block = r.attachment_mode() == v1::BLOCK_DEVICE;
  c.fs_type = r.volume().mount_options().fs_type();
  const auto& flags = r.volume().mount_options().mount_flags();
  c.mount_flags.assign(flags.begin(), flags.end());
  return c;
}

volume_capability capability_of(const v1::Volume& v, const v1::VolumeCapability& cap) {
  volume_capability c;
  c.mode = to_csi(cap.access_mode());
  c.block = cap.attachment_mode() == v1::BLOCK_DEVICE;
  c.fs_type = v.mount_options().fs_type();
  return c;
}

node_stage_request stage_request(const v1::NodeVolumeRequest& r, const std::string& staging_path) {
  node_stage_request s;
  s.volume_id = r.volume().external_id();
  s.publish_context = to_map(r.publish_context());
  s.staging_target_path = staging_path;
  s.capability = capability_of(r);
  s.secrets = to_map(r.volume().secrets());
  s.volume_context = to_map(r.volume().context());
  return s;
}

node_publish_request publish_request(const v1::NodeVolumeRequest& r,
                                     const std::string& staging_path,
                                     const std::string& target_path) {
  node_publish_request p;
  p.volume_id = r.volume().external_id();
  p.publish_context = to_map(r.publish_context());
  p.staging_target_path = staging_path;
  p.target_path = target_path;
  p.capability = capability_of(r);
  p.readonly = r.read_only();
  p.secrets = to_map(r.volume().secrets());
  p.volume_context = to_map(r.volume().context());
  return p;
}

controller_publish_request controller_publish_request_of(const v1::NodeVolumeRequest& r) {
  controller_publish_request p;
  p.volume_id = r.volume().external_id();
  p.node_id = r.csi_node_id();
  p.capability = capability_of(r);
  p.readonly = r.read_only();
  p.secrets = to_map(r.volume().secrets());
  p.volume_context = to_map(r.volume().context());
  return p;
}

create_volume_request create_request(const v1::Volume& spec) {
  create_volume_request cr;
  cr.name = spec.namespace_() + "-" + spec.id();
  cr.required_bytes = spec.capacity_min();
  cr.limit_bytes = spec.capacity_max();
  for (const auto& cap : spec.capabilities()) cr.capabilities.push_back(capability_of(spec, cap));
  cr.parameters = to_map(spec.parameters());
  cr.secrets = to_map(spec.secrets());
  for (const auto& t : spec.topology_request().required())
    cr.requisite.push_back(to_map(t.segments()));
  for (const auto& t : spec.topology_request().preferred())
    cr.preferred.push_back(to_map(t.segments()));
  if (!spec.snapshot_id().empty())
    cr.source_snapshot_id = spec.snapshot_id();
  else if (!spec.clone_id().empty())
    cr.source_volume_id = spec.clone_external_id();
  cr.mutable_parameters = to_map(spec.modified_parameters());
  return cr;
}

create_snapshot_request create_snapshot_request_of(const v1::SnapshotRequest& r) {
  create_snapshot_request c;
  c.source_volume_id = r.source_external_id();
  c.name = r.name();
  c.parameters = to_map(r.parameters());
  c.secrets = to_map(r.secrets());
  return c;
}

v1::Snapshot snapshot_of(const snapshot& s, const std::string& plugin_id) {
  v1::Snapshot out;
  out.set_id(s.snapshot_id);
  out.set_plugin_id(plugin_id);
  out.set_source_external_id(s.source_volume_id);
  out.set_size_bytes(s.size_bytes);
  out.set_created_at_ms(s.created_at_ms);
  out.set_ready_to_use(s.ready_to_use);
  out.set_group_snapshot_id(s.group_snapshot_id);
  return out;
}

create_group_snapshot_request group_snapshot_request_of(const v1::SnapshotRequest& r) {
  create_group_snapshot_request c;
  c.name = r.name();
  c.source_volume_ids.assign(r.source_external_ids().begin(), r.source_external_ids().end());
  c.parameters = to_map(r.parameters());
  c.secrets = to_map(r.secrets());
  return c;
}

v1::Volume created_volume(const v1::Volume& spec, const volume& created) {
  auto v = spec;
  v.set_external_id(created.volume_id);
  if (created.capacity_bytes > 0) {
    v.set_capacity_min(created.capacity_bytes);
    v.set_capacity_bytes(created.capacity_bytes);
  }
  for (const auto& [k, val] : created.volume_context) (*v.mutable_context())[k] = val;
  for (const auto& t : created.accessible_topology) {
    auto* topo = v.add_accessible_topology();
    for (const auto& [k, val] : t) (*topo->mutable_segments())[k] = val;
  }
  return v;
}

validate_request validate_request_of(const v1::Volume& v) {
  validate_request vr;
  vr.volume_id = v.external_id();
  for (const auto& cap : v.capabilities()) vr.capabilities.push_back(capability_of(v, cap));
  vr.volume_context = to_map(v.context());
  vr.parameters = to_map(v.parameters());
  vr.secrets = to_map(v.secrets());
  return vr;
}

std::string validation_reason(const validate_response& r) {
  if (r.confirmed) return "";
  return r.message.empty() ? "not confirmed" : r.message;
}

std::optional<failure> call_failure(const std::string& where, method m, const call_status& s) {
  if (s.kind == outcome::done || s.kind == outcome::already_done) return std::nullopt;
  std::string msg = where + ": " + std::string(method_name(m)) +
                    " failed: " + code_name(s.grpc_code) + ": " + s.message;
  if (s.kind == outcome::retryable) return failure{errc::unavailable, msg + " (retry)"};
  if (s.grpc_code == code::invalid_argument) return failure{errc::invalid, msg};
  return failure{errc::refused, msg};
}

std::string health_description(method m, const call_status& s) {
  return std::string(method_name(m)) + ": " + code_name(s.grpc_code) + ": " + s.message;
}

}  // namespace berth::csi
