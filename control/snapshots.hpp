// Snapshots, clones and volume modify (issue 14): which plugins can do
// them, what a create spec may name as its content, and what the leader
// sends.  Pure: plain functions of the committed catalog and plain values.
//
// Snapshots are not part of berth's replicated state: create, delete and
// list pass through to the plugin (as Nomad's do), so the plugin is the one
// place they live and nothing in berth can drift from it.  What a volume
// was created from (snapshot_id, clone_id) and the mutable parameters a
// volume modify set are fields of the committed volume.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "control/catalog.hpp"
#include "messages/api.pb.h"
#include "messages/model.hpp"

namespace berth {

// The controller capabilities these commands need (CSI
// ControllerServiceCapability.RPC).
enum class controller_capability {
  create_delete_snapshot,
  list_snapshots,
  clone_volume,
  modify_volume,
  expand_volume,  // volume expansion (control/expansion)
  // The GroupController's CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT (with the
  // plugin capability GROUP_CONTROLLER_SERVICE).
  group_snapshot,
  list_volumes  // Nomad's GET /v1/volumes/external
};

// The spec's name, e.g. "CREATE_DELETE_SNAPSHOT".
std::string capability_name(controller_capability c);

// Whether one controller instance advertises the capability.
bool advertises(const v1::PluginInstance& controller, controller_capability c);

// Whether the plugin can run the call now: some healthy controller
// instance advertises the capability.
bool plugin_can(const v1::Plugin& p, controller_capability c);

// The candidates (control/placement's controller_candidates) whose
// controller instance advertises the capability, in the same order.
std::vector<std::string> capable_controllers(const v1::Plugin& p,
                                             const std::vector<std::string>& candidates,
                                             controller_capability c);

// nullopt when plugin `plugin_id` (null: not registered) can run a call
// needing `c`; else the failure, naming the plugin, the capability and what
// was asked (`what`, e.g. "volume 'db' cannot be snapshotted"): not_found for
// an unknown plugin, refused when no healthy controller advertises it.
std::optional<failure> capability_refusal(const v1::Plugin* p, const std::string& plugin_id,
                                          controller_capability c, const std::string& what);

// The capability a volume create spec needs for its content source
// (snapshot_id: CREATE_DELETE_SNAPSHOT, clone_id: CLONE_VOLUME); nullopt
// for an empty volume.
std::optional<controller_capability> content_source_capability(const v1::Volume& spec);

// The problems of a spec's content source: snapshot_id and clone_id are
// exclusive (naming both fields), only for volume create (`creating`), and
// the leader's own clone_external_id is never the shell's to set.
std::vector<problem> content_source_problems(const v1::Volume& spec, bool creating);

// The external id CreateVolume clones from: the clone_id volume of the
// spec's namespace, which must be of the same plugin (CSI clones within
// one plugin) and created or registered with an external id.
std::variant<failure, std::string> clone_source(const catalog& c, const v1::Volume& spec);

// The snapshot name the shell sends when none is given: deterministic in
// the volume and the moment the shell chose (`now_ms`), so a retry of the
// same command sends the same name and CreateSnapshot finds the snapshot
// the first attempt made.  At most 63 characters of [a-z0-9-].
std::string generated_snapshot_name(const std::string& ns, const std::string& volume_id,
                                    int64_t now_ms);

// The problems of a snapshot create, delete or list request as the shell
// sent it (names the flags).
std::vector<problem> snapshot_request_problems(const v1::SnapshotRequest& r,
                                               v1::Request::CommandCase which);

// What a group snapshot create sends (CreateVolumeGroupSnapshot): the
// members' plugin, their external ids in the order given, and the call's
// secrets (every member's call_secrets, which must agree: one call carries
// one set).
struct group_snapshot_plan {
  std::string plugin_id;
  std::vector<std::string> external_ids;
  google::protobuf::Map<std::string, std::string> secrets;
};

// The plan of a group snapshot create (r.volume_ids of r's namespace), or
// the failure naming the volumes: not_found for unknown ones, invalid when
// they are of more than one plugin or their secrets differ (the keys'
// values never shown), refused for one without an external id.
std::variant<failure, group_snapshot_plan> plan_group_snapshot(const catalog& c,
                                                               const v1::SnapshotRequest& r);

// The plugins `snapshot list` asks: the one named (refused when it cannot
// list snapshots), or every plugin that can (--per-page and --page-token
// need --plugin: a page token is one plugin's).
std::variant<failure, std::vector<std::string>> plugins_to_list(const catalog& c,
                                                                const v1::SnapshotRequest& r);

// The problems of a volume modify request: at least one --parameter, keys
// non-empty.
std::vector<problem> modify_problems(const v1::VolumeModifyRequest& r);

// The volume after the plugin accepted a modify: its mutable parameters
// with the request's merged in (the ones not named keep their values, as
// ControllerModifyVolume does).
v1::Volume modified(v1::Volume v, const v1::VolumeModifyRequest& r);

// The secrets a snapshot or modify call sends: the volume's own, with the
// ones given on the command line (--secret) over them.
google::protobuf::Map<std::string, std::string> call_secrets(
    const v1::Volume& v, const google::protobuf::Map<std::string, std::string>& given);

// Snapshots as the leader answers them: each with the berth volume it was
// taken of, when a volume of its plugin has that external id (one pass over
// the volumes, however many snapshots).
void add_sources(const catalog& c, google::protobuf::RepeatedPtrField<v1::Snapshot>& snapshots);

}  // namespace berth
