// Nodes: their liveness (heartbeats, down after a silence, back again), the
// plugins they run, and the garbage collection of plugins no node runs any
// more.  Pure functions of the committed catalog and the leader's clock
// readings, which the leader passes in.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "control/catalog.hpp"
#include "messages/api.pb.h"
#include "messages/model.hpp"

namespace berth {

// A heartbeat from the node's berth client: the node record to commit
// (ready, with a client), or nullopt when it is so already.  `down_at_ms`
// stays until the node confirmed its unmounts (below).
std::optional<v1::Node> node_after_heartbeat(const catalog& c, const std::string& node_id,
                                             int64_t now_ms);

// Nodes with a client that have been silent for longer than `timeout_ms`
// at `now_ms` (steady clock), with how long.  A node the leader has not
// heard from since it started gets a full timeout from now (recorded in
// `last_seen`): a new leader does not declare nodes down for its own
// absence.
struct silent_node {
  std::string id;
  int64_t silent_ms;
};
std::vector<silent_node> silent_nodes(const catalog& c, std::map<std::string, int64_t>& last_seen,
                                      int64_t now_ms, int64_t timeout_ms);

// Marking a node down, as one entry: the node down and its live allocs
// lost (the watcher then releases their claims without the node).
std::vector<v1::Change> mark_down(const catalog& c, const std::string& node_id,
                                  int64_t silent_ms, int64_t now_ms);

// When a node's client connects again: the complete allocs whose claims
// are still held (the client must stop their commands before the watcher
// unpublishes).
std::vector<std::string> allocs_to_stop_on_reconnect(const catalog& c, const std::string& node_id);
// One alloc of that list: complete while claims of it are still held.
bool stop_awaits_client(const catalog& c, const v1::Alloc& a);

// The stops a heartbeat of a connected client carries: those of
// allocs_to_stop_on_reconnect that the client has not confirmed to this
// leader and that are not on their way.  A stop that failed is neither, so
// every heartbeat sends it again until the client confirms it (a stop sent
// once at the reconnect and dropped on error left the claims held, and the
// release refused, until the next reconnect: issue 59).
std::vector<std::string> stops_due(const catalog& c, const std::string& node_id,
                                   const std::set<std::string>& confirmed,
                                   const std::set<std::string>& in_flight);
std::vector<std::string> lost_allocs_of(const catalog& c, const std::string& node_id);

// A node marked down keeps `down_at_ms` when it comes back, until its
// client confirmed that it stopped and unmounted, from its own records,
// every alloc of the node that had ended (lost, complete or failed): the
// servers may have released any of their claims without the node, lost
// allocs and allocs that ended before alike.  The leader asks on every
// heartbeat until the client confirms (a new leader too: it is committed).
bool unmounts_pending(const v1::Node& n);
// A node back from down (ready again, or its client `connected` before its
// heartbeat committed it ready) that has not confirmed the unmounts asked
// on its return: a ControllerUnpublish of a claim there waits for them
// (control/release: wait_for_unmounts).  A node still down and away is not
// waited for: it fenced itself when its lease ran out (control/lease), and
// it may never come back; its claims are released without it.
bool unmounts_awaited(const v1::Node& n, bool connected);
std::vector<std::string> allocs_to_unmount_on_return(const catalog& c, const std::string& node_id);
// The node once its client confirmed the unmounts asked while its record
// had `down_at_ms`: cleared; nullopt when it is not ready or was marked down
// again since (a later round asks again).
std::optional<v1::Node> node_after_unmounts(const catalog& c, const std::string& node_id,
                                            int64_t down_at_ms);

// A claim on a node whose berth client is not connected now (down, or
// away): refused, to retry once it is.  Recorded without publishing, it
// would stay taken there unpublished (an expansion then waits for a
// NodeExpandVolume the node cannot run, and a later unpublish of another
// claim keeps a staging that nobody unstages).  A node without a client
// (named only by hand-made fingerprints) takes claims that are recorded only.
// A node whose mark-down the leader is writing (`marking_down`) is away too,
// though its client may have heartbeated again meanwhile: the mark-down
// commits after the claim, and the claim's release without the node would
// leave the publication made after it (claim simulation seeds 33650, 52520).
std::optional<failure> refuse_client_away(const catalog& c, const std::string& node_id,
                                          bool connected, bool marking_down = false);

// Every problem of a plugin fingerprint at once.
std::vector<problem> validate_fingerprint(const v1::Fingerprint& f);

// Applies a fingerprint to the plugin's instances (adds, updates or
// removes the node's instance; stamps the changed instances with `now_ms`).
// Returns true when anything changed.
bool apply_fingerprint(v1::Plugin& p, const v1::Fingerprint& f, int64_t now_ms);

// After a plugin's instances changed by a fingerprint: the node record
// listing (or no longer listing) the plugin, or nullopt when unchanged.
std::optional<v1::Node> node_after_fingerprint(const catalog& c, const v1::Fingerprint& f,
                                               const v1::Plugin& p);

// The fingerprints that remove a down node's instances of its plugins.
std::vector<v1::Fingerprint> instances_of_down_node(const catalog& c, const std::string& node_id);

// Whether a plugin the node lists has no instance of the node: its
// instances were removed while it was down (or the removal landed after its
// report), and a client that is not asked again never reports them, since
// nothing changed on its side.  A drained node's withdrawn ones are meant.
bool instances_missing(const catalog& c, const std::string& node_id);

// Whether a client's heartbeat asks it to report its plugins again: its
// instances were removed when it went down (`was_down`: the node was down
// when the heartbeat came), or it lists a plugin without its instance.
// Asked on every heartbeat until the instance is there, not once: the ask
// or the report can be lost (a client cut off again right after the
// heartbeat that found it down; claim simulation seeds 13030 and 15824: its
// controller instance was never reported again, an expansion and a release
// waited for ControllerExpandVolume and ControllerUnpublishVolume for ever).
bool report_plugins_again(const catalog& c, const std::string& node_id, bool was_down);

// Plugins without any instance left (Nomad's zombie plugins) that no
// volume uses: deleted.  A plugin a volume uses is kept without instances
// (as Nomad keeps a plugin "in use"): what its controllers could do
// (Plugin.controller_required, controller_expands) is remembered only
// there, and a plugin made again from a node-only instance would say that
// the volume needs no ControllerPublishVolume and no ControllerExpandVolume
// (claim simulation seeds 3028, 8066, 9427, 10561: every node of the plugin
// went down, the plugin was collected, a node-only client came back).
std::vector<std::string> plugins_to_collect(const catalog& c);

}  // namespace berth
