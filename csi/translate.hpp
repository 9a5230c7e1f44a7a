// berth's types as CSI requests, and CSI answers as berth's results.
// Pure: plain functions, no I/O, no gRPC, no actors, so every mapping can be
// tested on its own.  The node's CSI jobs (actors/node_csi) call the client
// with what these build.
//
// Secrets and mount flags are copied into requests for the plugin and never
// into results or messages.
#pragma once

#include <google/protobuf/map.h>

#include <optional>
#include <string>

#include "csi/client.hpp"
#include "messages/api.pb.h"
#include "messages/berth.pb.h"
#include "messages/model.hpp"

namespace berth::csi {

// berth's access modes as CSI's (the wire numbers differ); unknown for an
// unset mode.
access_mode to_csi(v1::AccessMode m);

string_map to_map(const google::protobuf::Map<std::string, std::string>& m);

// The capability one claim is published with: its modes, the volume's file
// system and mount flags (the alloc's flags are merged into the volume by
// the leader before it asks).
volume_capability capability_of(const v1::NodeVolumeRequest& r);

// One of a volume's declared capabilities, with its file system (no mount
// flags: CreateVolume and ValidateVolumeCapabilities check what the volume
// can do, not how one claim mounts it).
volume_capability capability_of(const v1::Volume& v, const v1::VolumeCapability& c);

// NodeStageVolume of a claim at `staging_path`.
node_stage_request stage_request(const v1::NodeVolumeRequest& r, const std::string& staging_path);

// NodePublishVolume of a claim at `target_path`; `staging_path` is empty
// when the plugin does not stage.
node_publish_request publish_request(const v1::NodeVolumeRequest& r,
                                     const std::string& staging_path,
                                     const std::string& target_path);

// ControllerPublishVolume of a claim to the node named by csi_node_id.
controller_publish_request controller_publish_request_of(const v1::NodeVolumeRequest& r);

// CreateVolume of a volume spec: named NAMESPACE-ID (idempotent across
// retries), sized by capacity_min/max, with its capabilities, parameters,
// secrets and topology request; from a snapshot (snapshot_id) or a clone
// of another volume (clone_external_id) when the spec names one.
create_volume_request create_request(const v1::Volume& spec);

// The spec completed with what CreateVolume answered: the plugin's id, the
// capacity it gave (when it said), its context and topology.
v1::Volume created_volume(const v1::Volume& spec, const volume& created);

// CreateSnapshot of a snapshot create request (the leader set the source
// volume's external id in it).
create_snapshot_request create_snapshot_request_of(const v1::SnapshotRequest& r);

// A CSI snapshot as berth shows it, of the plugin `plugin_id`.
v1::Snapshot snapshot_of(const snapshot& s, const std::string& plugin_id);

// CreateVolumeGroupSnapshot of a group snapshot create request (the leader
// set the members' external ids, source_external_ids).
create_group_snapshot_request group_snapshot_request_of(const v1::SnapshotRequest& r);

// ValidateVolumeCapabilities of a registered volume.
validate_request validate_request_of(const v1::Volume& v);

// "" when the plugin confirmed the capabilities, else its reason.
std::string validation_reason(const validate_response& r);

// The failure an operator sees for a CSI call that did not succeed
// (unavailable when it may be retried, invalid for INVALID_ARGUMENT,
// refused otherwise), naming `where` (the plugin and node) and the call;
// nullopt when it succeeded or found its work already done.
std::optional<failure> call_failure(const std::string& where, method m, const call_status& s);

// What a plugin instance's health description says for a failed call.
std::string health_description(method m, const call_status& s);

}  // namespace berth::csi
