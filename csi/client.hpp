#pragma once
// A synchronous CSI client over a unix socket. Each call blocks its thread
// until the plugin answers or the per-call deadline passes, so call it from a
// detached actor (own thread), never from CAF's shared scheduler threads.
//
// The header is gRPC-free on purpose (gRPC headers are slow to compile):
// requests and responses are plain structs, the stubs live behind a pimpl.
// Thread safety: one client may be used from several threads (gRPC channels
// and stubs are thread-safe); berth keeps at most one call per volume anyway.
// Errors are values: every call returns a result whose status says whether
// the step is done, retryable, already done, or final (see status.hpp).
// Secrets are passed through to the plugin and never logged or copied into
// results.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "csi/status.hpp"

namespace berth::csi {

// Turns off absl's lock-order checking in this process (issue 28).  Debian
// builds absl without NDEBUG, so every absl::Mutex gRPC takes on every call
// also updates a graph of lock orders to report deadlocks (seen in perf as
// GraphCycles::GetId in berthd and berth-hostpath); it reports nothing a
// working process needs.  Call once at start, before any gRPC object exists.
void skip_lock_order_checks();

using string_map = std::map<std::string, std::string>;

// CSI VolumeCapability.AccessMode.Mode; values are the spec's wire numbers.
enum class access_mode : int {
  unknown = 0,
  single_node_writer = 1,
  single_node_reader_only = 2,
  multi_node_reader_only = 3,
  multi_node_single_writer = 4,
  multi_node_multi_writer = 5,
  single_node_single_writer = 6,
  single_node_multi_writer = 7,
};

// CSI VolumeCapability: a block device, or a filesystem mount.
struct volume_capability {
  access_mode mode = access_mode::single_node_writer;
  bool block = false;  // false: mount
  std::string fs_type;
  std::vector<std::string> mount_flags;  // may be sensitive: never logged
};

struct plugin_info {
  std::string name;
  std::string vendor_version;
};

struct plugin_capabilities {
  bool controller_service = false;
  bool accessibility_constraints = false;
  bool group_controller_service = false;  // GROUP_CONTROLLER_SERVICE (CSI v1.10+)
  bool expansion_online = false;
  bool expansion_offline = false;
};

struct controller_capabilities {
  bool create_delete_volume = false;
  bool publish_unpublish_volume = false;
  bool list_volumes = false;
  bool get_capacity = false;
  bool publish_readonly = false;
  bool expand_volume = false;
  bool list_volumes_published_nodes = false;
  bool single_node_multi_writer = false;
  bool create_delete_snapshot = false;
  bool list_snapshots = false;
  bool clone_volume = false;
  bool modify_volume = false;
  bool get_volume = false;
  bool volume_condition = false;
};

struct node_capabilities {
  bool stage_unstage_volume = false;
  bool get_volume_stats = false;
  bool expand_volume = false;
  bool single_node_multi_writer = false;
  bool volume_condition = false;
};

struct node_info {
  std::string node_id;
  int64_t max_volumes_per_node = 0;  // 0: no limit declared
  string_map accessible_topology;
};

struct volume {
  std::string volume_id;
  int64_t capacity_bytes = 0;
  string_map volume_context;
  std::vector<string_map> accessible_topology;
  // content_source: the snapshot or volume it was made from (empty: none).
  std::string source_snapshot_id;
  std::string source_volume_id;
};

struct create_volume_request {
  std::string name;
  int64_t required_bytes = 0;
  int64_t limit_bytes = 0;
  std::vector<volume_capability> capabilities;
  string_map parameters;
  string_map secrets;
  // accessibility_requirements: where the volume must (requisite) and
  // should (preferred) be accessible from.
  std::vector<string_map> requisite;
  std::vector<string_map> preferred;
  // volume_content_source: at most one of the two (empty: a new, empty volume).
  std::string source_snapshot_id;
  std::string source_volume_id;
  string_map mutable_parameters;
};

// CSI Snapshot.
struct snapshot {
  std::string snapshot_id;
  std::string source_volume_id;
  int64_t size_bytes = 0;
  int64_t created_at_ms = 0;  // creation_time, unix milliseconds (0: unset)
  bool ready_to_use = false;
  // Set: a member of that group snapshot, deleted only with its group.
  std::string group_snapshot_id;
};

struct group_controller_capabilities {
  bool create_delete_get_volume_group_snapshot = false;
};

// CSI VolumeGroupSnapshot: one snapshot per source volume, taken at one
// point in time.
struct group_snapshot {
  std::string group_snapshot_id;
  std::vector<snapshot> snapshots;
  int64_t created_at_ms = 0;  // creation_time, unix milliseconds (0: unset)
  bool ready_to_use = false;
};

struct create_group_snapshot_request {
  std::string name;  // the idempotency key
  std::vector<std::string> source_volume_ids;
  string_map parameters;
  string_map secrets;
};

struct create_snapshot_request {
  std::string source_volume_id;
  std::string name;
  string_map parameters;
  string_map secrets;
};

struct list_snapshots_request {
  int32_t max_entries = 0;
  std::string starting_token;
  std::string source_volume_id;
  std::string snapshot_id;
  string_map secrets;
};

struct list_snapshots_response {
  std::vector<snapshot> entries;
  std::string next_token;  // empty: last page
};

struct controller_publish_request {
  std::string volume_id;
  std::string node_id;
  volume_capability capability;
  bool readonly = false;
  string_map secrets;
  string_map volume_context;
};

struct validate_request {
  std::string volume_id;
  std::vector<volume_capability> capabilities;
  string_map volume_context;
  string_map parameters;
  string_map secrets;
};

struct validate_response {
  bool confirmed = false;
  std::string message;  // the plugin's reason when not confirmed
};

// CSI VolumeCondition (alpha): reported by plugins with VOLUME_CONDITION.
struct volume_condition {
  bool reported = false;  // the answer carried one
  bool abnormal = false;
  std::string message;
};

struct list_volumes_response {
  struct entry {
    volume vol;
    std::vector<std::string> published_node_ids;
    volume_condition condition;
  };
  std::vector<entry> entries;
  std::string next_token;  // empty: last page
};

struct node_stage_request {
  std::string volume_id;
  string_map publish_context;
  std::string staging_target_path;
  volume_capability capability;
  string_map secrets;
  string_map volume_context;
};

struct node_publish_request {
  std::string volume_id;
  string_map publish_context;
  std::string staging_target_path;  // empty when the plugin does not stage
  std::string target_path;
  volume_capability capability;
  bool readonly = false;
  string_map secrets;
  string_map volume_context;
};

struct volume_stats {
  int64_t bytes_total = 0;
  int64_t bytes_used = 0;
  int64_t bytes_available = 0;
  volume_condition condition;
};

struct get_volume_response {
  volume vol;
  std::vector<std::string> published_node_ids;
  volume_condition condition;
};

// ControllerExpandVolume / NodeExpandVolume.
struct expand_request {
  std::string volume_id;
  int64_t required_bytes = 0;
  int64_t limit_bytes = 0;  // 0: no limit
  string_map secrets;       // controller only
  // node only: where the volume is published and staged ("" when not staged)
  std::string volume_path;
  std::string staging_target_path;
};

struct expand_response {
  int64_t capacity_bytes = 0;
  bool node_expansion_required = false;  // controller only
};

struct empty {};

// The outcome of one call: its classified status and, when ok(), the answer.
template <class T>
struct result {
  call_status status;
  T response{};

  bool ok() const { return status.ok(); }
};

// Told about every call (for metrics and the log): method, its status (the
// plugin's code and message), seconds.
using call_observer = std::function<void(method, const call_status&, double)>;

class client {
 public:
  // Calls `observer` after every RPC of this client.
  void observe(call_observer observer);

  // `endpoint` is a gRPC target, e.g. "unix:///var/lib/berth/plugins/x/csi.sock".
  // Connecting is lazy: a missing socket shows up as UNAVAILABLE (retryable)
  // on the first call, not here.
  explicit client(const std::string& endpoint,
                  std::chrono::milliseconds deadline = std::chrono::seconds(30));
  ~client();
  client(client&&) noexcept;
  client& operator=(client&&) noexcept;

  // Identity.
  result<plugin_info> get_plugin_info();
  result<plugin_capabilities> get_plugin_capabilities();
  result<bool> probe();  // response: ready (an unset field counts as ready)

  // Controller.
  result<controller_capabilities> controller_get_capabilities();
  result<volume> create_volume(const create_volume_request& req);
  result<empty> delete_volume(const std::string& volume_id, const string_map& secrets = {});
  result<string_map> controller_publish_volume(const controller_publish_request& req);
  result<empty> controller_unpublish_volume(const std::string& volume_id,
                                            const std::string& node_id,
                                            const string_map& secrets = {});
  result<validate_response> validate_volume_capabilities(const validate_request& req);
  result<list_volumes_response> list_volumes(int32_t max_entries = 0,
                                             const std::string& starting_token = {});
  result<int64_t> get_capacity(const std::vector<volume_capability>& capabilities = {},
                               const string_map& parameters = {});
  result<snapshot> create_snapshot(const create_snapshot_request& req);
  result<empty> delete_snapshot(const std::string& snapshot_id, const string_map& secrets = {});
  result<list_snapshots_response> list_snapshots(const list_snapshots_request& req);
  result<get_volume_response> controller_get_volume(const std::string& volume_id);
  result<empty> controller_modify_volume(const std::string& volume_id,
                                         const string_map& mutable_parameters,
                                         const string_map& secrets = {});
  result<expand_response> controller_expand_volume(const expand_request& req);

  // GroupController (CSI v1.10+; a plugin declares it with
  // plugin_capabilities::group_controller_service). Delete and Get name the
  // group's members (`snapshot_ids`), as the spec requires.
  result<group_controller_capabilities> group_controller_get_capabilities();
  result<group_snapshot> create_volume_group_snapshot(const create_group_snapshot_request& req);
  result<empty> delete_volume_group_snapshot(const std::string& group_snapshot_id,
                                             const std::vector<std::string>& snapshot_ids,
                                             const string_map& secrets = {});
  result<group_snapshot> get_volume_group_snapshot(const std::string& group_snapshot_id,
                                                   const std::vector<std::string>& snapshot_ids,
                                                   const string_map& secrets = {});

  // Node.
  result<node_capabilities> node_get_capabilities();
  result<node_info> node_get_info();
  result<empty> node_stage_volume(const node_stage_request& req);
  result<empty> node_unstage_volume(const std::string& volume_id,
                                    const std::string& staging_target_path);
  result<empty> node_publish_volume(const node_publish_request& req);
  result<empty> node_unpublish_volume(const std::string& volume_id,
                                      const std::string& target_path);
  result<volume_stats> node_get_volume_stats(const std::string& volume_id,
                                             const std::string& volume_path,
                                             const std::string& staging_target_path = {});
  result<expand_response> node_expand_volume(const expand_request& req);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace berth::csi
