// The message types of berth's actor protocol (actors/actors.hpp): pb<T>,
// which carries a protobuf message between actors and processes, the
// in-process messages, and how berth's one error type (failure) crosses
// actors as a caf::error.
#pragma once

#include <caf/actor_addr.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/result.hpp>
#include <caf/sec.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "control/call_gate.hpp"
#include "control/catalog.hpp"
#include "messages/api.pb.h"
#include "messages/berth.pb.h"
#include "messages/model.hpp"
#include "messages/raft.pb.h"
#include "persistence/log_store.hpp"
#include "persistence/state_store.hpp"

namespace berth::csi {
class client;
}

namespace berth {

// --- pb<T>: a protobuf message as a CAF message element --------------------

// Serialized as its protobuf bytes when it crosses the network.  Printing
// one (CAF's to_string) shows only its type, never its contents, so no
// secret can reach a log through it.
template <class T>
struct pb {
  T msg;
};

template <class T>
pb<T> wrap(T msg) {
  return pb<T>{std::move(msg)};
}

template <class T>
std::string to_string(const pb<T>&) {
  return "pb<" + T::descriptor()->full_name() + ">";
}

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, pb<T>& x) {
  std::string bytes;
  if constexpr (Inspector::reads_state) bytes = x.msg.SerializeAsString();
  auto load = caf::meta::load_callback([&]() -> caf::error {
    if (!x.msg.ParseFromString(bytes)) return caf::make_error(caf::sec::invalid_argument);
    return caf::none;
  });
  return f(caf::meta::type_name("berth.pb"), bytes, load);
}

// --- errors -----------------------------------------------------------------

// A berth failure as a caf::error (category "berth") and back.  Errors of
// CAF itself (timeouts, dead actors) come back as unavailable/internal.
caf::error to_error(const failure& f);
caf::error make_error(errc code, std::string message);
failure to_failure(const caf::error& e);

// How long a server waits for a client's answer to one CSI step (a few CSI
// calls, each under the client's --csi-timeout, 30 s by default).  CAF does
// not fail a request to a remote actor whose connection died, so without
// this a volume would wait forever for a client killed mid-step; the step
// fails instead, and the volume watcher retries it (CSI calls are
// idempotent, and the client runs a plugin's calls in order).
constexpr std::chrono::seconds csi_step_timeout{75};

// How long a node waits for a step's sender to confirm that it still waits
// for the step (NodeVolumeRequest.confirm_start) before the step's CSI call
// is sent; no answer within it and the call is not sent.  The sender's
// helper (actors/node_call.hpp) gives up on a step it confirmed no sooner
// than this after its confirmation (plus a second for the two clocks'
// rates), so a call it gave up on can no longer start.
constexpr std::chrono::seconds step_confirm_timeout{10};

// --- in-process messages ----------------------------------------------------

// Committed entries, in index order, for the state machine and the leader
// actor to apply: decoded once by the replicated log (a configuration
// change as an empty entry), shared by both, never changed.
struct committed_batch {
  state_store::decoded entries;
};

// The events of applied entries, for the event journal: every event of
// the entries after the journal's applied index up to `applied`.  `reset`:
// a snapshot replaced the state tables at `applied`, the journal starts
// over there.
struct event_batch {
  std::vector<v1::Event> events;
  uint64_t applied = 0;
  bool reset = false;
};

// What CSI calls produced: an error for the operator, or the values the
// caller asked for.
struct csi_outcome {
  std::optional<failure> error;
  std::map<std::string, std::string> publish_context;
  std::string target_path;
  v1::Volume volume;            // CreateVolume
  std::string validation;       // ValidateVolumeCapabilities: "" = confirmed, else why not
  v1::PluginInstance instance;  // fingerprint: the instance as probed
  v1::SnapshotList snapshots;   // CreateSnapshot (one), ListSnapshots (a page)
  bool found = true;            // DeleteSnapshot: false when it was gone already
  v1::VolumeHealthResult health;        // ListVolumes / ControllerGetVolume conditions
  v1::ExternalVolumeList external;      // ListVolumes, one page (Nomad's external list)
  std::vector<v1::VolumeUsage> usage;   // NodeGetVolumeStats of published volumes
  // ControllerExpandVolume / NodeExpandVolume: the capacity the plugin
  // reported, and whether the controller said the node must expand too.
  int64_t capacity_bytes = 0;
  bool node_expansion_required = false;
  bool expanded = false;  // publish: NodeExpandVolume ran after the stage
  // The plugin answered RESOURCE_EXHAUSTED or ABORTED: the connection backs
  // off and runs the job again (control/call_gate).
  bool overloaded = false;
};

// A sequence of CSI calls to run on a plugin connection's own thread.
struct csi_job {
  csi_job() = default;
  csi_job(std::function<csi_outcome(csi::client&)> run, call_kind kind, std::string volume = {},
          uint64_t leader_term = 0)
      : run(std::move(run)), kind(kind), volume(std::move(volume)), leader_term(leader_term) {}
  std::function<csi_outcome(csi::client&)> run;
  call_kind kind = call_kind::identity;  // which limit of the connection it counts against
  std::string volume;                    // the CSI volume id: its calls never overlap
  // The Raft term of the leader that asked for it (0: the node's own, e.g.
  // unmounting a lost alloc): checked against the node's fence again when
  // the call starts.
  uint64_t leader_term = 0;
  // A NodeStage/NodePublish: the index of its claim's commit, checked
  // against the node's publish floor when the call starts (control/lease).
  bool publish = false;
  uint64_t claim_index = 0;
  // Who must confirm that it still waits for the step before its call is
  // sent (null: nobody; NodeVolumeRequest.confirm_start): asked when the
  // call's turn comes, with step_confirm_timeout.
  caf::actor_addr confirm;
};

}  // namespace berth

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(berth::state_contents)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(berth::catalog)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(berth::committed_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(berth::event_batch)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(berth::csi_outcome)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(berth::csi_job)

namespace berth {

// "HOST:PORT" as host and port (0 when there is none).
std::pair<std::string, uint16_t> split_address(const std::string& address);

// Registers the message types that cross the network with a CAF config.
void add_message_types(caf::actor_system_config& cfg);

}  // namespace berth
