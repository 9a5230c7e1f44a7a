// The volume actor: one per volume with work in progress (the leader spawns
// it on demand from the catalog and stops it when idle, control/activation).
// It runs the claim rules of
// messages/model on the committed state and commits each change through
// the replicated log before it answers; the next request waits until then,
// so claims and releases of one volume are strictly serialized.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "actors/actors.hpp"
#include "actors/node_call.hpp"

namespace berth {

struct volume_state {
  v1::Volume volume;
  bool registered = false;
  replicated_log_actor log;
  uint64_t term = 0;  // the leader's Raft term: sent with every CSI request
  // When this actor last sent a NodePublish of the volume to each node
  // (steady clock): a release decided without the node before then goes
  // through it after all (control/release still_detached).
  std::map<std::string, int64_t> published_ms;
  // The node actors the leader retired (actors/node_call.hpp).
  retired_nodes_ptr retired;
  static inline const char* name = "volume";
};

// `initial` is the committed volume when restoring, or empty (registered =
// false) for a volume about to be registered.
volume_actor::behavior_type volume(volume_actor::stateful_pointer<volume_state> self,
                                   replicated_log_actor log, v1::Volume initial,
                                   bool registered, uint64_t term, retired_nodes_ptr retired);

}  // namespace berth
