#include "csi/status.hpp"

#include <array>

namespace berth::csi {

std::string_view method_name(method m) {
  switch (m) {
    case method::get_plugin_info: return "GetPluginInfo";
    case method::get_plugin_capabilities: return "GetPluginCapabilities";
    case method::probe: return "Probe";
    case method::create_volume: return "CreateVolume";
    case method::delete_volume: return "DeleteVolume";
    case method::controller_publish_volume: return "ControllerPublishVolume";
    case method::controller_unpublish_volume: return "ControllerUnpublishVolume";
    case method::validate_volume_capabilities: return "ValidateVolumeCapabilities";
    case method::list_volumes: return "ListVolumes";
    case method::get_capacity: return "GetCapacity";
    case method::controller_get_capabilities: return "ControllerGetCapabilities";
    case method::node_stage_volume: return "NodeStageVolume";
    case method::node_unstage_volume: return "NodeUnstageVolume";
    case method::node_publish_volume: return "NodePublishVolume";
    case method::node_unpublish_volume: return "NodeUnpublishVolume";
    case method::node_get_volume_stats: return "NodeGetVolumeStats";
    case method::node_get_capabilities: return "NodeGetCapabilities";
    case method::node_get_info: return "NodeGetInfo";
    case method::create_snapshot: return "CreateSnapshot";
    case method::delete_snapshot: return "DeleteSnapshot";
    case method::list_snapshots: return "ListSnapshots";
    case method::controller_modify_volume: return "ControllerModifyVolume";
    case method::controller_get_volume: return "ControllerGetVolume";
    case method::controller_expand_volume:
      return "ControllerExpandVolume";
    case method::node_expand_volume:
      return "NodeExpandVolume";
    case method::group_controller_get_capabilities: return "GroupControllerGetCapabilities";
    case method::create_volume_group_snapshot: return "CreateVolumeGroupSnapshot";
    case method::delete_volume_group_snapshot: return "DeleteVolumeGroupSnapshot";
    case method::get_volume_group_snapshot: return "GetVolumeGroupSnapshot";
  }
  return "?";
}

std::string code_name(code c) {
  static constexpr std::array<const char*, 17> names = {
      "OK",
      "CANCELLED",
      "UNKNOWN",
      "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED",
      "NOT_FOUND",
      "ALREADY_EXISTS",
      "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION",
      "ABORTED",
      "OUT_OF_RANGE",
      "UNIMPLEMENTED",
      "INTERNAL",
      "UNAVAILABLE",
      "DATA_LOSS",
      "UNAUTHENTICATED",
  };
  auto i = static_cast<int>(c);
  if (i < 0 || i >= static_cast<int>(names.size()))
    return "CODE_" + std::to_string(i);
  return names[static_cast<size_t>(i)];
}

std::string_view outcome_name(outcome o) {
  switch (o) {
    case outcome::done: return "done";
    case outcome::retryable: return "retryable";
    case outcome::already_done: return "already_done";
    case outcome::final: return "final";
  }
  return "?";
}

namespace {

bool is_release(method m) {
  return m == method::node_unpublish_volume || m == method::node_unstage_volume
         || m == method::controller_unpublish_volume || m == method::delete_snapshot
         || m == method::delete_volume_group_snapshot;
}

}  // namespace

outcome classify(method m, code c) {
  switch (c) {
    case code::ok:
      return outcome::done;
    case code::unavailable:
    case code::deadline_exceeded:
    case code::aborted:
    case code::resource_exhausted:
    case code::cancelled:
      return outcome::retryable;
    case code::not_found:
      return is_release(m) ? outcome::already_done : outcome::final;
    default:
      return outcome::final;
  }
}

call_status make_status(method m, code c, std::string message) {
  return call_status{classify(m, c), c, std::move(message)};
}

}  // namespace berth::csi
