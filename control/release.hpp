// The release of a claim, step by step, and which claims an operator's
// detach releases.  The volume actor asks `next_release_step` what to do,
// does it (a state change, or a CSI call through a node), and asks again;
// `commit_before_next_step` says which state changes are committed at once
// and which are kept until the next commit (a release interrupted anywhere,
// a failed call or a leader change, resumes from the last committed state,
// and every CSI call it repeats is idempotent).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "control/catalog.hpp"
#include "messages/api.pb.h"
#include "messages/model.hpp"

namespace berth {

// What the volume actor knows when it asks for the next step.
struct release_facts {
  bool node_connected = false;  // the claim's node has a connected berth client
  bool node_detached = false;   // the claim's node is down or has no client: nothing to unpublish
  bool controller_required = false;   // the plugin needs ControllerUnpublishVolume
  bool controller_available = false;  // a healthy controller on a connected node
  // The node came back from down and has not confirmed its unmounts yet: its
  // client may keep the volume staged for a record of an ended alloc (it
  // unstages only when no record of its own uses the staging), whatever the
  // servers' claims say.
  bool node_unmounts_pending = false;
};

enum class release_action {
  done,                  // the claim is freed (or never existed)
  commit,                // move the claim to state `to` (freed when ready-to-free)
  node_unpublish,        // NodeUnpublishVolume (and NodeUnstageVolume when `unstage`), then `to`
  controller_unpublish,  // ControllerUnpublishVolume, then `to`
  wait_for_node,         // the node's client is not connected: retry later
  wait_for_controller,   // no healthy controller: retry later
  wait_for_unmounts,     // the node has not confirmed its unmounts on return: retry later
};

struct release_step {
  release_action action = release_action::done;
  v1::ClaimState to = v1::CLAIM_STATE_UNKNOWN;
  bool unstage = false;
};

// The spec's order: taken -> unpublishing -> NodeUnpublish (+ NodeUnstage
// when no other claim on the node is published) -> node-detached ->
// ControllerUnpublish (when the plugin requires it and no other claim on
// the node remains, and once the node confirmed its unmounts on return) ->
// controller-detached -> freed.
release_step next_release_step(const v1::Volume& v, const std::string& alloc_id,
                               const release_facts& facts);

// Whether the release must commit the claim in state `to` before its next
// step, or may keep it in memory and commit it with a later state (issue 28:
// a cycle wrote 6 entries, each a leader and a follower fsync in sequence).
//  - unpublishing: yes. The release's intent is durable before its first
//    CSI call undoes anything: a claim the servers still call taken is never
//    half unpublished, a leader that takes over (the volume watcher) resumes
//    it, and no new claim counts the volume's writer slot free meanwhile.
//  - node-detached, controller-detached: no. Each follows a call that may be
//    repeated (NodeUnpublish, NodeUnstage and ControllerUnpublish succeed on
//    what is already undone, CSI spec), so a crash before the next commit
//    leaves the claim at unpublishing and the resumed release repeats them.
//    The release commits them when it cannot go on (a wait or a failed call),
//    so a retry starts after them; otherwise they commit with the free.
//  - ready-to-free (the free): yes, it is the release's end; the volume's
//    slot is free for new claims only once every call above succeeded.
bool commit_before_next_step(v1::ClaimState to);

// Whether a claim's release goes on without its node: unless its client is
// connected, the node is down (its lease ran out, so its client fenced its
// writers), unknown or has no berth client (nothing was published there),
// or the operator detaches it.  A drain past its deadline is no reason:
// its writers may still run (issue 59).  With `keep_down_writers` (berthd
// --keep-down-writers), a down node's claim that writes a single-writer
// volume waits for the node or the operator's detach instead: its client
// may be frozen and unable to fence itself (control/lease.hpp).
bool release_without_node(const catalog& c, const v1::Claim& claim, bool connected,
                          bool operator_detach, bool keep_down_writers = false);

// Whether an operator's release of alloc `alloc_id`'s claim on `v` (volume
// release, or deregister --force for each claim) is refused: while that
// alloc is known, not terminal and has a command, berth runs its writer,
// and the node refuses the NodeUnpublish from under it
// (refuse_unpublish_under_command).  Put in release anyway, the claim stayed
// there, and deregister --force then dropped it while the writer ran
// (issue 59).  `alloc stop` releases the claim once the writer stopped; a
// down node's allocs are lost (terminal), and volume detach is the
// operator's way for a node that is gone.  A command-less alloc (volume
// claim, or Nomad's claim endpoint) runs nothing of berth's: its claim is
// released at once.
std::optional<failure> refuse_release_under_writer(const catalog& c, const v1::Volume& v,
                                                   const std::string& alloc_id);

// The claims of `v` the watcher releases, judged on the catalog
// (`claims_to_release` with each alloc's committed state: in release, or
// of an alloc that ended or vanished).
std::vector<std::string> claims_being_released(const catalog& c, const v1::Volume& v);

// The claim a ClaimRequest asks for, at `now_ms`.
claim_request claim_request_of(const v1::ClaimRequest& q, int64_t now_ms);

// The claims a claim waits for instead of being refused (issue 59, item 7):
// those of allocs that ended (or are already being released, as the
// watcher's `claims_to_release` picks them) when the claim is refused with
// them on the volume and taken without them.  Empty when the claim need not
// wait: it is taken now, or refused for another reason as well.  An alloc's
// end is committed before its claims are freed (the watcher then releases
// them through the node); a script that waits for `complete` and claims the
// volume next waits this short while, bounded, instead of being refused.
std::vector<std::string> releases_awaited(const catalog& c, const v1::Volume& v,
                                          const claim_request& req, const v1::Plugin* plugin);

// Whether a release the leader decided to run without the claim's node
// (`node_detached`, at `detached_at_ms`) still runs without it when the
// volume's actor takes it up: not when that actor sent a NodePublish of the
// volume to that node at or after that moment (`last_publish_ms`, 0: none).
// The release waits in the actor's mailbox behind the requests before it (a
// CSI step can hold it up to the step timeout); the node may have come back
// meanwhile and have the volume published again, which a release that skips
// NodeUnpublishVolume would leave behind (claim simulation seed 16517: a
// claim published again for its expansion, then freed by a release decided
// while its node was down).  Not detached, the release waits for the node's
// client and the watcher asks again with what the leader knows then.  A
// request without the time (0) is taken as decided.
bool still_detached(bool node_detached, int64_t detached_at_ms, int64_t last_publish_ms);

// Whether the volume watcher's release (`judged_claimed_at_ms`: the claim
// it judged, 0: not the watcher's) finds another claim of the alloc than
// the one it judged (`now`: taken at another time): the one judged was
// freed, and the alloc claimed the volume again since.  That claim is not
// released (claim simulation: a retried `volume claim` waited in the volume
// actor behind the first one's unwind, committed, was acknowledged, and the
// watcher's release asked for the half-released first claim, waiting
// behind it, then released the new one).
bool release_judged_another(int64_t judged_claimed_at_ms, const v1::Claim& now);

// Whether a release of a claim asked while another release of the same
// claim runs (or waits for its plugin's window) waits for that one's outcome
// instead of running again: unless it asks for more than the running one, a
// volume detach (`asks_detach`: a node without a client counts as detached)
// behind a plain release.  Run twice, the second waited in the volume
// actor's mailbox and then failed "has no claim", although the claim was
// released (issue 28: the watcher asked again for every release taking over
// 100 ms, and an operator's retried `volume release` got that error).
bool joins_running_release(bool running_is_detach, bool asks_detach);

// volume detach VOLUME NODE: the claims on that node to release (of allocs
// that are terminal or vanished, claims already in release, or any claim
// when the node is down) and the ones kept (taken by running allocs).
struct detach_plan {
  std::vector<std::string> release;
  std::vector<std::string> kept;
};
detach_plan plan_detach(const catalog& c, const v1::Volume& v, const std::string& node_id);

// The part of a volume a client reads for its CSI calls: id, namespace,
// external id, modify index (a publish's claim index: control/lease's
// publish floor), mount options, context and secrets.  Its claims,
// capabilities, topology, parameters, capacity and the rest stay on the
// servers (issue 28: every node request carried, encoded, shipped and
// decoded the whole volume, its every claim included).  A client's
// client.db keeps what it was sent, so a node-side read of another field
// must add it here first (tests/control/release_test.cpp pins the set).
v1::Volume node_view(const v1::Volume& v);

// What a node actor needs for one claim's CSI calls (the term is added by
// the sender); its volume is node_view's.
v1::NodeVolumeRequest node_request(const v1::Volume& v, const v1::Claim& c,
                                   const v1::Plugin& plugin);

// The CSI calls a node actor runs for a NodeVolumeRequest, and whether each
// sends the volume's secrets to the plugin.  CSI gives secrets to
// ControllerPublish/Unpublish, NodeStage, NodePublish and
// ControllerExpandVolume; berth sends none with NodeUnpublish, NodeUnstage
// (CSI has no field for them) and NodeExpandVolume.  A request carries the
// secrets to a node only for a call that sends them (request_for), so a node
// that only unpublishes or expands never holds them.
enum class node_step {
  controller_publish,
  controller_unpublish,
  stage_publish,      // NodeStage (when the plugin stages) and NodePublish
  unpublish_unstage,  // NodeUnpublish, then NodeUnstage when asked
  controller_expand,
  node_expand,
};
bool step_uses_secrets(node_step s);

// `r` as sent for `s`: without the volume's secrets unless the step uses them.
v1::NodeVolumeRequest request_for(v1::NodeVolumeRequest r, node_step s);

// A claim's publication: ControllerPublishVolume first when the plugin
// requires it, then NodeStage/NodePublish with the claim's mount flags (when
// given, they replace the volume's).  The attachment is per volume and node,
// shared by every claim there: it is read-only exactly when the access mode
// allows no writer, so each claim's ControllerPublishVolume repeats the same
// arguments (idempotent, same publish context).
struct publish_plan {
  bool controller_publish = false;
  v1::NodeVolumeRequest attach;
  v1::NodeVolumeRequest publish;
};
publish_plan plan_publish(const v1::Volume& v, const v1::Claim& c, const v1::Plugin& plugin,
                          const std::vector<std::string>& mount_flags);

}  // namespace berth
