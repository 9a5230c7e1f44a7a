// The node's plugins: the --plugin flag, what a probe leaves of an
// instance, and the sequences of CSI calls the node actor runs on a plugin connection's
// thread (a csi_job each): probe, stage+publish, unpublish+unstage, the
// controller calls.  The requests come from csi/translate (pure); what is
// here is the order of the calls, the CO's directories, and the outcome.
// Never called on CAF's shared threads: every call blocks.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "actors/actors.hpp"
#include "actors/node_mounts.hpp"

namespace berth {

struct node_plugin {
  std::string id;
  v1::PluginType type = v1::PLUGIN_MONOLITH;
  std::string endpoint;  // unix:///path/csi.sock
  // CSI calls in flight on this connection at most, per kind (calls for one
  // volume never overlap).  1 is Nomad's one call at a time.
  int max_controller_calls = default_max_calls;
  int max_node_calls = default_max_calls;
  static constexpr int default_max_calls = 16;
};

// "plugin 'P' on node 'N'": where a CSI call failed, in its messages.
std::string where(const std::string& node_id, const std::string& plugin);

// Parses "--plugin ID=TYPE:SOCKET[,max_controller_calls=N][,max_node_calls=N]"
// (SOCKET: a path or unix:///path).
std::variant<node_plugin, std::string> parse_plugin_flag(const std::string& flag);

// The instance to keep after a probe: a failed probe keeps what the plugin
// told while it was healthy (`known`, null when nothing), because its ids
// and capabilities do not vanish with one failed probe.
v1::PluginInstance probed_instance(const v1::PluginInstance* known, v1::PluginInstance probed,
                                   const std::string& node_id);

// The fingerprint request that reports an instance to the leader.
v1::Request fingerprint_report(const node_plugin& p, const std::string& node_id,
                               const std::string& node_secret, const v1::PluginInstance& inst);

// CSI calls waiting for their plugin's first healthy probe since the
// client started (after a restart the plugin may not be back yet, and what
// it stages is only known then), each until a deadline.
class waiting_calls {
 public:
  struct call {
    std::string plugin;
    int64_t deadline_ms;  // steady clock
    std::function<void()> go;
    std::function<void(caf::error)> fail;
  };
  void add(call c) { calls_.push_back(std::move(c)); }
  bool empty() const { return calls_.empty(); }
  // Removes and returns the calls of a plugin that became ready, in order.
  std::vector<call> ready(const std::string& plugin);
  // Removes and returns the calls whose deadline passed.
  std::vector<call> expired(int64_t now_ms);

 private:
  std::deque<call> calls_;
};

// GetPluginInfo, Probe, then the capabilities (and NodeGetInfo) of the
// services the plugin's type runs: the instance as probed, unhealthy with
// the first failed call's status.
csi_outcome probe_plugin(csi::client& c, v1::PluginType type);

// NodeStageVolume (when `stage`) and NodePublishVolume, creating the CO's
// directories first; the outcome carries the target path.
csi_outcome publish_claim(csi::client& c, const v1::NodeVolumeRequest& r, const claim_paths& paths,
                          bool stage, const std::string& where);

// NodeUnpublishVolume, removing the emptied per-alloc directories, then
// NodeUnstageVolume when `unstage`.  Already gone counts as done.
csi_outcome unpublish_claim(csi::client& c, const v1::NodeVolumeRequest& r,
                            const claim_paths& paths, bool unstage, const std::string& where);

// NodeUnstageVolume of a staging no publication uses any more (when the
// plugin stages), then its directory is removed.
csi_outcome unstage_claim(csi::client& c, const v1::NodeVolumeRequest& r, const claim_paths& paths,
                          bool stages, const std::string& where);

// ControllerPublishVolume; the outcome carries the publish context.
csi_outcome controller_publish(csi::client& c, const v1::NodeVolumeRequest& r,
                               const std::string& where);

csi_outcome controller_unpublish(csi::client& c, const v1::NodeVolumeRequest& r,
                                 const std::string& where);

// CreateVolume; the outcome carries the completed volume.
csi_outcome create_volume(csi::client& c, const v1::Volume& spec, const std::string& where);

// ValidateVolumeCapabilities; the outcome carries the plugin's reason
// ("" = confirmed).
csi_outcome validate_volume(csi::client& c, const v1::Volume& v, const std::string& where);

csi_outcome delete_volume(csi::client& c, const v1::Volume& v, const std::string& where);

// CreateSnapshot; the outcome carries the snapshot (snapshots, one entry).
csi_outcome create_snapshot(csi::client& c, const v1::SnapshotRequest& r,
                            const std::string& where);

// DeleteSnapshot; `found` is false when the snapshot was gone already: the
// plugin answered NOT_FOUND, or (r.can_list) ListSnapshots by its id, asked
// first, did not list it.
csi_outcome delete_snapshot(csi::client& c, const v1::SnapshotRequest& r,
                            const std::string& where);

// CreateVolumeGroupSnapshot of r.source_external_ids named r.name; the
// outcome carries the member snapshots (snapshots), each with the group id.
csi_outcome create_group_snapshot(csi::client& c, const v1::SnapshotRequest& r,
                                  const std::string& where);

// DeleteVolumeGroupSnapshot of r.group_snapshot_id with its members
// (r.snapshot_ids; when none are given, the ones ListSnapshots reports with
// that group id, every page).  `found` is false when the group was gone
// already: NOT_FOUND, or listing found no member.  Fails, naming --member,
// when no member was given and the plugin cannot list (r.can_list false).
csi_outcome delete_group_snapshot(csi::client& c, const v1::SnapshotRequest& r,
                                  const std::string& where);

// ListSnapshots, one page (r.per_page entries from r.page_token).
csi_outcome list_snapshots(csi::client& c, const v1::SnapshotRequest& r,
                           const std::string& where);

// ListVolumes, one page (r.per_page entries from r.page_token); the
// outcome's external carries the plugin's volumes and its next token.
csi_outcome list_external_volumes(csi::client& c, const v1::ExternalVolumeListRequest& r,
                                  const std::string& where);

// ControllerModifyVolume of the volume's external id with its
// modified_parameters (the mutable parameters to set) and secrets.
csi_outcome modify_volume(csi::client& c, const v1::Volume& v, const std::string& where);

// The leader's health check: ListVolumes, every page of `page_size`
// entries (r.use_list), or ControllerGetVolume of each of r.external_ids
// (NOT_FOUND: left out); the outcome's health carries the conditions the
// plugin reported.
csi_outcome check_volume_health(csi::client& c, const v1::VolumeHealthRequest& r,
                                const std::string& where, int32_t page_size = 1000);

// One published volume to measure (NodeGetVolumeStats).
struct volume_measure {
  std::string ns;
  std::string volume_id;
  std::string external_id;
  std::string target_path;
  std::string staging_path;  // empty when the plugin does not stage
};

// NodeGetVolumeStats of each volume; the outcome's usage carries the ones
// the plugin answered (a failed one is left out, the rest reported).
csi_outcome measure_volumes(csi::client& c, const std::vector<volume_measure>& volumes,
                            const std::string& where);

// ControllerExpandVolume of the volume's external id to
// r.expand_required_bytes (limit r.expand_limit_bytes) with its secrets;
// the outcome carries the capacity and node_expansion_required.
csi_outcome controller_expand(csi::client& c, const v1::NodeVolumeRequest& r,
                              const std::string& where);

// NodeExpandVolume of the volume published at `paths` (the staging path
// only when `staged`); the outcome carries the capacity.
csi_outcome node_expand(csi::client& c, const v1::NodeVolumeRequest& r, const claim_paths& paths,
                        bool staged, const std::string& where);

}  // namespace berth
