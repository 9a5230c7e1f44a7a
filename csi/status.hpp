#pragma once
// What a CSI call's gRPC status means for the orchestrator. Pure: no gRPC
// headers, no I/O, so the claim workflow can be tested without a plugin.

#include <string>
#include <string_view>

namespace berth::csi {

// The CSI RPCs berth issues (Identity, Controller, Node).
enum class method {
  get_plugin_info,
  get_plugin_capabilities,
  probe,
  create_volume,
  delete_volume,
  controller_publish_volume,
  controller_unpublish_volume,
  validate_volume_capabilities,
  list_volumes,
  get_capacity,
  controller_get_capabilities,
  node_stage_volume,
  node_unstage_volume,
  node_publish_volume,
  node_unpublish_volume,
  node_get_volume_stats,
  node_get_capabilities,
  node_get_info,
  create_snapshot,
  delete_snapshot,
  list_snapshots,
  controller_modify_volume,
  controller_get_volume,
  controller_expand_volume,
  node_expand_volume,
  group_controller_get_capabilities,
  create_volume_group_snapshot,
  delete_volume_group_snapshot,
  get_volume_group_snapshot,
};

// The spec's RPC name, e.g. "NodeUnpublishVolume".
std::string_view method_name(method m);

// gRPC's canonical status codes; the numbers are the wire values.
enum class code : int {
  ok = 0,
  cancelled = 1,
  unknown = 2,
  invalid_argument = 3,
  deadline_exceeded = 4,
  not_found = 5,
  already_exists = 6,
  permission_denied = 7,
  resource_exhausted = 8,
  failed_precondition = 9,
  aborted = 10,
  out_of_range = 11,
  unimplemented = 12,
  internal = 13,
  unavailable = 14,
  data_loss = 15,
  unauthenticated = 16,
};

// Canonical upper-case name, e.g. "NOT_FOUND"; "CODE_<n>" when out of range.
std::string code_name(code c);

enum class outcome {
  done,          // OK: the step happened
  retryable,     // transient: retry the same call with backoff
  already_done,  // the undo step finds nothing to undo: count it as done
  final,         // the request or the plugin must change first: do not retry
};

std::string_view outcome_name(outcome o);

// How berth must react to code `c` returned by method `m`.
// NOT_FOUND is "already done" only for the release steps (NodeUnpublish,
// NodeUnstage, ControllerUnpublish) and DeleteSnapshot, as in Nomad: the
// thing to release or delete is gone. Everywhere else it is final until an operator or a re-check changes
// the request. RESOURCE_EXHAUSTED and ABORTED are transient per the spec.
outcome classify(method m, code c);

// A classified call status; `message` is the plugin's own text, unchanged.
struct call_status {
  outcome kind = outcome::done;
  code grpc_code = code::ok;
  std::string message;

  bool ok() const { return grpc_code == code::ok; }
};

call_status make_status(method m, code c, std::string message);

}  // namespace berth::csi
