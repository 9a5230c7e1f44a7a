// Every typed actor interface of berth, one comment per handler, and the
// atoms (verbs) they use; nothing else.  A reader learns the whole protocol
// of the system from this file; each actor's implementation lives in
// actors/<name>.{hpp,cpp} (docs/architecture.md has the table), the message
// types in actors/types.hpp.
//
//   berth (shell) --middleman--> server --> leader --> volume (one per volume)
//                                  ^  |        |   \--> plugin (one per plugin)
//                 committed entries|  |        |--> watcher
//                                  |  v        v
//                             replicated_log --> state_machine (state.db)
//   client: node --> csi_plugin (gRPC) --> CSI plugin
//
// Messages that cross processes are protobuf messages wrapped in pb<T>, so
// their encoding is versioned and tolerates added fields.  In-process-only
// messages are plain structs.
#pragma once

#include <caf/atom.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/types.hpp"

namespace berth {

// --- atoms (verbs) ---------------------------------------------------------

using acl_atom = caf::atom_constant<caf::atom("acl")>;
using api_atom = caf::atom_constant<caf::atom("api")>;
using availability_atom = caf::atom_constant<caf::atom("availabl")>;
using append_atom = caf::atom_constant<caf::atom("append")>;
using apply_atom = caf::atom_constant<caf::atom("apply")>;
using applied_atom = caf::atom_constant<caf::atom("applied")>;
using changed_atom = caf::atom_constant<caf::atom("changed")>;
using claim_atom = caf::atom_constant<caf::atom("claim")>;
using condition_atom = caf::atom_constant<caf::atom("condition")>;
// A node's question to the helper of a CSI step (actors/node_call.hpp)
// right before the step's call is sent: whether it still waits for the
// step (bool).  Only the helper answers it; it is no actor's interface.
using confirm_atom = caf::atom_constant<caf::atom("confirm")>;
using create_atom = caf::atom_constant<caf::atom("create")>;
using csi_atom = caf::atom_constant<caf::atom("csi")>;
using ctrl_publish_atom = caf::atom_constant<caf::atom("ctrlpub")>;
using ctrl_unpublish_atom = caf::atom_constant<caf::atom("ctrlunpub")>;
using deregister_atom = caf::atom_constant<caf::atom("deregistr")>;
using digest_atom = caf::atom_constant<caf::atom("digest")>;
using fingerprint_atom = caf::atom_constant<caf::atom("fingerpr")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using health_atom = caf::atom_constant<caf::atom("health")>;
using following_atom = caf::atom_constant<caf::atom("following")>;
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using prove_atom = caf::atom_constant<caf::atom("prove")>;
using install_atom = caf::atom_constant<caf::atom("install")>;
using leading_atom = caf::atom_constant<caf::atom("leading")>;
using lease_atom = caf::atom_constant<caf::atom("lease")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using load_atom = caf::atom_constant<caf::atom("load")>;
using monitor_atom = caf::atom_constant<caf::atom("monitor")>;
using node_atom = caf::atom_constant<caf::atom("node")>;
using propose_atom = caf::atom_constant<caf::atom("propose")>;
using raft_atom = caf::atom_constant<caf::atom("raft")>;
using read_atom = caf::atom_constant<caf::atom("read")>;
using remove_atom = caf::atom_constant<caf::atom("remove")>;
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;
using transfer_atom = caf::atom_constant<caf::atom("transfer")>;
using publish_atom = caf::atom_constant<caf::atom("publish")>;
using register_atom = caf::atom_constant<caf::atom("register")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using run_atom = caf::atom_constant<caf::atom("run")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using removed_atom = caf::atom_constant<caf::atom("removed")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using stream_atom = caf::atom_constant<caf::atom("stream")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using unpublish_atom = caf::atom_constant<caf::atom("unpublish")>;
using validate_atom = caf::atom_constant<caf::atom("validate")>;
using modify_atom = caf::atom_constant<caf::atom("modify")>;
using snapshot_delete_atom = caf::atom_constant<caf::atom("snapdel")>;
using snapshot_list_atom = caf::atom_constant<caf::atom("snaplist")>;
using list_volumes_atom = caf::atom_constant<caf::atom("listvols")>;
using group_snapshot_atom = caf::atom_constant<caf::atom("grpsnap")>;
using group_snapshot_delete_atom = caf::atom_constant<caf::atom("grpsnapdel")>;
using expand_atom = caf::atom_constant<caf::atom("expand")>;
using expand_step_atom = caf::atom_constant<caf::atom("expandstp")>;
using ctrl_expand_atom = caf::atom_constant<caf::atom("ctrlexpand")>;

// --- interfaces ---------------------------------------------------------------

// The event journal (actors/event_journal.hpp): the recent events of the
// entries this server applied, and the event stream's waiting requests.
using event_journal_actor = caf::typed_actor<
    // The events of the entries applied up to an index (from the state
    // machine), in order; or, after a snapshot was installed, a new start.
    caf::reacts_to<apply_atom, event_batch>,
    // event stream (long poll): replies with the matching events from an
    // index, at once when there are some, else when some arrive or the
    // request's wait ends.
    caf::replies_to<stream_atom, pb<v1::EventStreamRequest>>::with<pb<v1::Response>>,
    // Timer: the wait of the request with this id ended.
    caf::reacts_to<tick_atom, uint64_t>>;

// Owns the state tables; runs detached.
using state_machine_actor = caf::typed_actor<
    // Applies committed entries with the applied index in one transaction,
    // then tells the event journal their events.
    caf::reacts_to<apply_atom, committed_batch>,
    // Replies with the applied index.
    caf::replies_to<applied_atom>::with<uint64_t>,
    // Replies with the applied index and a digest of the state tables.
    caf::replies_to<digest_atom>::with<uint64_t, std::string>,
    // Replies with a copy of the catalog (after every apply sent before
    // this request): what a new leader starts from.  The copy shares every
    // volume's row with the state machine's catalog.
    caf::replies_to<load_atom>::with<catalog>,
    // A --stale read (any status or list, with its filter and page):
    // answered from this server's catalog as of its applied index.
    caf::replies_to<read_atom, pb<v1::Request>>::with<pb<v1::Response>>,
    // ACLs (berthd --acl): checks a request the server answers itself
    // (event stream, monitor, raft, snapshots) against its token with this
    // server's catalog; replies OK or the refusal.
    caf::replies_to<acl_atom, pb<v1::Request>>::with<pb<v1::Response>>,
    // ACLs: the answer to a request (events, lists) without what the
    // request's token may not see (or the refusal).
    caf::replies_to<acl_atom, pb<v1::Request>, pb<v1::Response>>::with<pb<v1::Response>>,
    // Replies with the applied index and a consistent copy of the state
    // database (after every apply sent before this request): a backup; an
    // error when the copy cannot be made (nothing changes).
    caf::replies_to<snapshot_atom>::with<uint64_t, std::string>,
    // Writes that copy to the file at the path given (mode 0600) and replies
    // with its applied index: a Raft snapshot's database (or the error).
    caf::replies_to<snapshot_atom, std::string>::with<uint64_t>,
    // Replaces the state database with the one inside the Raft snapshot
    // file at the path given (persistence/snapshot_file.hpp), then removes
    // that path (a link the replicated log made for this install).
    caf::reacts_to<install_atom, std::string>>;

// One CSI plugin connection on a node.  Its jobs run on a pool of
// detached workers (gRPC calls block, CAF's threads never do): up to the
// plugin's max_controller_calls and max_node_calls at once, never two for
// one volume (control/call_gate).  A worker has the same interface.
using csi_plugin_actor = caf::typed_actor<
    // Runs the job's CSI calls (each with a deadline) and replies with what
    // they produced; one overloaded by the plugin is run again after a
    // backoff.
    caf::replies_to<csi_atom, csi_job>::with<csi_outcome>,
    // Timer: starts the jobs whose backoff ended.
    caf::reacts_to<tick_atom>>;

// The node actor: one per host running a berth client.  It drives the CSI
// calls against the plugins on its host and fingerprints them.
using node_actor = caf::typed_actor<
    // Stages the volume (when the plugin stages and it is not staged here
    // yet) and publishes it for an alloc; replies with the target path.
    caf::replies_to<publish_atom, pb<v1::NodeVolumeRequest>>::with<pb<v1::NodeVolumeResult>>,
    // Unpublishes an alloc's publication, then unstages when asked (no
    // other claim on this node uses the staging).  Already gone counts as
    // done.
    caf::replies_to<unpublish_atom, pb<v1::NodeVolumeRequest>>::with<pb<v1::NodeVolumeResult>>,
    // ControllerPublishVolume through this node's controller instance, for
    // the node named by csi_node_id; replies with the publish context.
    caf::replies_to<ctrl_publish_atom, pb<v1::NodeVolumeRequest>>::with<pb<v1::NodeVolumeResult>>,
    // ControllerUnpublishVolume through this node's controller instance.
    caf::replies_to<ctrl_unpublish_atom, pb<v1::NodeVolumeRequest>>::with<pb<v1::NodeVolumeResult>>,
    // CreateVolume through this node's controller instance, for the leader
    // of the given Raft term (fenced like publish); replies with the volume
    // completed with the plugin's id, capacity, context and topology.
    caf::replies_to<create_atom, pb<v1::Volume>, uint64_t>::with<pb<v1::Volume>>,
    // ValidateVolumeCapabilities through this node's controller instance,
    // for the leader of the given term (fenced): replies "" when the plugin
    // confirms the volume's capabilities, else the plugin's reason.
    caf::replies_to<validate_atom, pb<v1::Volume>, uint64_t>::with<std::string>,
    // DeleteVolume through this node's controller instance, for the leader
    // of the given term (fenced).
    caf::replies_to<deregister_atom, pb<v1::Volume>, uint64_t>::with<bool>,
    // CreateSnapshot of the request's source_external_id through this
    // node's controller instance, for the leader of the given term (fenced);
    // replies with the snapshot as the plugin reports it.
    caf::replies_to<snapshot_atom, pb<v1::SnapshotRequest>, uint64_t>::with<pb<v1::Snapshot>>,
    // DeleteSnapshot through this node's controller instance (fenced);
    // replies false when the snapshot was gone already (NOT_FOUND, or not
    // listed by a plugin that can list snapshots).
    caf::replies_to<snapshot_delete_atom, pb<v1::SnapshotRequest>, uint64_t>::with<bool>,
    // CreateVolumeGroupSnapshot of the request's source_external_ids through
    // this node's controller instance (fenced); replies with the member
    // snapshots, each carrying the group's id.
    caf::replies_to<group_snapshot_atom, pb<v1::SnapshotRequest>,
                    uint64_t>::with<pb<v1::SnapshotList>>,
    // DeleteVolumeGroupSnapshot of the request's group_snapshot_id (fenced);
    // its members are the request's snapshot_ids, or else the snapshots the
    // plugin lists with that group id; replies false when it was gone already.
    caf::replies_to<group_snapshot_delete_atom, pb<v1::SnapshotRequest>, uint64_t>::with<bool>,
    // ListSnapshots (one page) through this node's controller instance.
    caf::replies_to<snapshot_list_atom, pb<v1::SnapshotRequest>,
                    uint64_t>::with<pb<v1::SnapshotList>>,
    // ListVolumes (one page) through this node's controller instance, for
    // the leader of the given term (fenced): the plugin's own volumes.
    caf::replies_to<list_volumes_atom, pb<v1::ExternalVolumeListRequest>,
                    uint64_t>::with<pb<v1::ExternalVolumeList>>,
    // ControllerModifyVolume of the volume's external id with its
    // modified_parameters (the ones to set) and secrets, for the leader of
    // the given term (fenced).
    caf::replies_to<modify_atom, pb<v1::Volume>, uint64_t>::with<bool>,
    // The leader's health check of one plugin's volumes through this node's
    // controller instance, for the leader of the given term (fenced):
    // ListVolumes (every page) or ControllerGetVolume of each volume;
    // replies with the conditions the plugin reported.
    caf::replies_to<health_atom, pb<v1::VolumeHealthRequest>,
                    uint64_t>::with<pb<v1::VolumeHealthResult>>,
    // Timer (--volume-stats-interval): NodeGetVolumeStats of every volume
    // published here whose plugin has GET_VOLUME_STATS, reported to the
    // leader as one volume_stats_report.
    caf::reacts_to<stats_atom>,
    // Replies at once, with whether a CSI step from the pinging actor
    // reached this node: whoever waits on a long step of this node checks
    // that the node actor still hears it and got the step
    // (actors/node_call.hpp); the leader's pings on the way back only wait
    // for the answer (control/lease.hpp, node_reach).
    caf::replies_to<ping_atom>::with<bool>,
    // ControllerExpandVolume of the request's volume (expand_required_bytes,
    // leader_term); replies with the capacity the plugin reported and
    // whether it needs NodeExpandVolume.
    caf::replies_to<ctrl_expand_atom, pb<v1::NodeVolumeRequest>>::with<pb<v1::NodeVolumeResult>>,
    // NodeExpandVolume of the volume at the staging and target paths this
    // client published it at (fenced with leader_term); replies with the
    // capacity the plugin reported.  not_found when it is not published here.
    caf::replies_to<expand_atom, pb<v1::NodeVolumeRequest>>::with<pb<v1::NodeVolumeResult>>,
    // Runs an alloc whose volumes are published here: records it in the
    // client's database, then starts its command (if any) with each
    // volume's path in BERTH_VOLUME_<NAME>.  Its exit is reported to the
    // leader (alloc_update).  Running an alloc already running succeeds.
    caf::replies_to<run_atom, pb<v1::Alloc>>::with<bool>,
    // Stops an alloc's command (SIGTERM to its process group, SIGKILL after
    // a grace period); replies with its exit code (0 when it had none or
    // was not running).  With unmount (an alloc the servers declared lost
    // while this node was away), also unpublishes what this client still
    // has published for it, from its own records.
    caf::replies_to<stop_atom, std::string, bool>::with<int32_t>,
    // The leader lost this node's plugin instances (it was marked down):
    // report every plugin again on the next fingerprint.
    caf::reacts_to<fingerprint_atom>,
    // Group commit: writes the publication records queued since the last
    // one to client.db in one transaction, then runs what waited for them.
    caf::reacts_to<flush_atom>,
    // Timer: fingerprints every plugin and reports changes to the leader.
    caf::reacts_to<tick_atom>,
    // Timer: checks whether alloc commands exited and reports them.
    caf::reacts_to<run_atom>,
    // Timer: renews the lease with a heartbeat, and fences this node when
    // the lease ran out (control/lease.hpp): stops the allocs that write
    // single-writer volumes here and unmounts them.
    caf::reacts_to<lease_atom>,
    // berth monitor --node: this process's recent log lines (its
    // log_monitor answers).
    caf::replies_to<monitor_atom, pb<v1::MonitorRequest>>::with<pb<v1::MonitorResult>>>;

// Owns one plugin's instances and thus its health counts: every change of
// them is serialized here (no write skew between concurrent updates).
using plugin_actor = caf::typed_actor<
    // Adds, updates or removes the instance a node reports; commits the
    // change (if any) and replies with the plugin.
    caf::replies_to<fingerprint_atom, pb<v1::Fingerprint>>::with<pb<v1::Plugin>>,
    // Replies with the plugin as committed.
    caf::replies_to<status_atom>::with<pb<v1::Plugin>>,
    // ControllerPublishVolume through the given controller node.  The
    // controller RPCs of a plugin run one at a time (queued here), so
    // concurrent attachments never race in the storage provider.
    caf::replies_to<ctrl_publish_atom, pb<v1::NodeVolumeRequest>,
                    node_actor>::with<pb<v1::NodeVolumeResult>>,
    // ControllerUnpublishVolume, queued like ControllerPublishVolume.
    caf::replies_to<ctrl_unpublish_atom, pb<v1::NodeVolumeRequest>,
                    node_actor>::with<pb<v1::NodeVolumeResult>>,
    // Deletes the plugin when it has no instance left (garbage collection),
    // committing the deletion, and then quits; replies whether it did.
    caf::replies_to<remove_atom>::with<bool>>;

// Owns one volume and serializes its claims and releases: the rules run on
// the committed state and the next request waits until the change commits,
// so two claims can never race.  Every reply carries the volume with the
// modify index of the entry that committed it (the leader waits until its
// catalog applied that index before it answers).
using volume_actor = caf::typed_actor<
    // Registers the volume (first time) or applies a re-registration (a
    // larger capacity_min asks for an expansion, decided with the committed
    // plugin given); replies with the committed volume.
    caf::replies_to<register_atom, pb<v1::Volume>, pb<v1::Plugin>>::with<pb<v1::Volume>>,
    // Claims the volume for an alloc, checking the plugin's health on the
    // committed plugin the leader gives (empty: unknown to the leader),
    // committing the request's alloc record in the same entry when it
    // carries one; then has the controller node (when the plugin requires
    // it, queued by the plugin actor) and the target node publish it
    // (invalid handles: no client on that node, nothing to publish).  A
    // failed publication is unwound and its claim freed.
    caf::replies_to<claim_atom, pb<v1::ClaimRequest>, pb<v1::Plugin>, plugin_actor, node_actor,
                    node_actor>::with<pb<v1::ClaimResult>>,
    // Releases an alloc's claim: node unpublish (and unstage when it was
    // the node's last claim), controller unpublish (when no live claim on
    // that node remains and the committed plugin given requires it), then
    // frees it, committing after each step.  A failed step leaves the claim
    // at that step; releasing again resumes.
    caf::replies_to<release_atom, pb<v1::ReleaseRequest>, pb<v1::Plugin>, plugin_actor, node_actor,
                    node_actor>::with<pb<v1::Volume>>,
    // Deregisters the volume; replies with the volume as it was (its
    // modify index: the deregistration's) and then quits.  Refused while it has claims; with force,
    // claims whose release is stuck are dropped (live claims are still refused).
    caf::replies_to<deregister_atom, bool>::with<pb<v1::Volume>>,
    // Replies with the volume as committed.
    caf::replies_to<status_atom>::with<pb<v1::Volume>>,
    // Has the controller node take a snapshot of the volume (CreateSnapshot),
    // in turn with the volume's claims and releases; commits nothing (the
    // plugin keeps its snapshots) and replies with the snapshot.
    caf::replies_to<snapshot_atom, pb<v1::SnapshotRequest>, node_actor>::with<pb<v1::Snapshot>>,
    // Has the controller node modify the volume (ControllerModifyVolume),
    // then commits the mutable parameters the plugin accepted; replies with
    // the committed volume.
    caf::replies_to<modify_atom, pb<v1::VolumeModifyRequest>, node_actor>::with<pb<v1::Volume>>,
    // Sets the volume's availability (active, pause, drain), committing it
    // unless it is so already; replies with the committed volume.  A drain's
    // stops and releases are the leader's (control/availability).
    caf::replies_to<availability_atom, pb<v1::VolumeAvailabilityRequest>>::with<pb<v1::Volume>>,
    // Sets the volume's condition as the leader's health check found it,
    // committing it unless it is so already; replies with the committed
    // volume.
    caf::replies_to<condition_atom, pb<v1::VolumeCondition>>::with<pb<v1::Volume>>,
    // Asks for an expansion (control/expansion's decide_expand with the
    // committed plugin given), committing its record unless it is the size
    // already; replies with the committed volume.
    caf::replies_to<expand_atom, pb<v1::VolumeExpandRequest>, pb<v1::Plugin>>::with<pb<v1::Volume>>,
    // Runs the next step of the volume's expansion (next_expansion_step on
    // the committed plugin given): ControllerExpandVolume through the controller node, NodeExpandVolume
    // through the target node (whose id is given; refused when the step is
    // another node's), or finishing; commits it and replies with the
    // committed volume (unavailable when the step cannot run now).
    caf::replies_to<expand_step_atom, pb<v1::Plugin>, plugin_actor, node_actor, node_actor,
                    std::string>::with<pb<v1::Volume>>,
    // Stops the idle actor (the leader asks only when nothing of this volume
    // is in flight): replies with the modify index of the last change it
    // committed, then quits; the volume's next actor starts from the
    // catalog once the catalog applied that index.
    caf::replies_to<stop_atom>::with<uint64_t>>;

// The leader of the control plane: receives every command, answers reads
// from its catalog and routes changes to the volume and plugin actors.  Its
// catalog changes only by applying committed entries.
using leader_actor = caf::typed_actor<
    // Executes one shell request; errors are returned inside the response.
    caf::replies_to<api_atom, pb<v1::Request>>::with<pb<v1::Response>>,
    // The volume watcher releases a claim: the leader adds the plugin, the
    // claim's node (or node_detached when that node is down or has no
    // client) and a controller, and hands it to the volume actor.
    caf::replies_to<release_atom, pb<v1::ReleaseRequest>>::with<pb<v1::Volume>>,
    // Committed entries in index order (from the server, which has them
    // from the replicated log): the only way the catalog changes.
    caf::reacts_to<apply_atom, committed_batch>,
    // Timer: marks nodes whose client stopped heartbeating down (their
    // allocs lost) and garbage-collects empty plugins.
    caf::reacts_to<tick_atom>,
    // A node actor (a berth client) serves the node with this id (its
    // heartbeat); with ACLs on, only when the node secret given is the one
    // its id is bound to (or binds it, the first time).  Replies with this
    // leader's term, the node's lease in ms (control/lease.hpp) and the
    // catalog's applied index once a ReadIndex round confirmed that it
    // still leads; an error otherwise.  The int64 is the client's
    // --kill-timeout in ms: one the lease margin does not cover is refused
    // (errc::invalid, control/lease check_client_fence).
    caf::replies_to<node_atom, std::string, std::string, int64_t,
                    node_actor>::with<uint64_t, int64_t, uint64_t>>;

// The volume watcher (actors/watcher.hpp), spawned by the leader: releases
// the claims of terminal, lost and vanished allocs, retrying failed steps
// with backoff.
using watcher_actor = caf::typed_actor<
    // A volume as committed (the leader tells it every change).
    caf::reacts_to<changed_atom, pb<v1::Volume>>,
    // A volume was deregistered.
    caf::reacts_to<removed_atom, pb<v1::VolumeKey>>,
    // An alloc as committed.
    caf::reacts_to<changed_atom, pb<v1::Alloc>>,
    // An alloc was deleted: its claims belong to a vanished alloc.
    caf::reacts_to<removed_atom, std::string>,
    // Timer: starts the releases that are due.
    caf::reacts_to<tick_atom>,
    // Replies with the releases in progress, their attempts and last error.
    caf::replies_to<status_atom>::with<pb<v1::WatcherStatus>>>;

// One per berthd process (actors/log_monitor.hpp), registered under
// monitor_atom: serves berth monitor from the process's ring of recent log
// lines (log/log.hpp).
using log_monitor_actor = caf::typed_actor<
    // Replies with the lines after the request's number at its level or
    // above; with none yet, once one is written or wait_ms passed.
    caf::replies_to<monitor_atom, pb<v1::MonitorRequest>>::with<pb<v1::MonitorResult>>,
    // A line was written (or a wait may have ended): answers the waiting.
    caf::reacts_to<tick_atom>>;

// What a server publishes on its port for the shell and for clients.
using api_actor = caf::typed_actor<
    // Executes one request on the leader (forwarding it when this server
    // follows) and replies with its response.
    caf::replies_to<api_atom, pb<v1::Request>>::with<pb<v1::Response>>,
    // A client's node actor serves the node with this id (its heartbeat,
    // so a new leader learns it); replies with the newest Raft term in
    // which this server knows a leader (0: none yet), so the client fences
    // off older leaders before the new one calls it, and the lease the
    // leader granted in ms (0: none, when the leader could not be reached
    // or did not confirm that it leads; control/lease.hpp), and the
    // leader's applied index with it (a node back from a lapse publishes no
    // claim committed before it: publish_floor).
    // The second string is the client's node secret (ACLs: checked by the
    // leader against the one the node id is bound to), the int64 its
    // --kill-timeout in ms (checked by the leader: a refusal, errc::invalid,
    // is passed on to the client, which exits with it).
    caf::replies_to<node_atom, std::string, std::string, int64_t,
                    node_actor>::with<uint64_t, int64_t, uint64_t>>;

// The replicated log: Raft across the servers (one member in --dev),
// durable in SQLite.  Runs detached: it fsyncs.  Published on the raft port
// for the other servers.
using replicated_log_actor = caf::typed_actor<
    // Appends an entry; replies with its index once it is committed
    // (durable on a majority).  Entries that arrive while an fsync runs
    // share the next one (group commit).  Committed entries go to the state
    // machine in index order.  Fails when this server does not lead, or
    // leads another term than the one given (the proposer's leader term; 0:
    // any): an actor that outlived its leader never writes its old state
    // (raft/proposal.hpp).
    caf::replies_to<propose_atom, pb<v1::LogEntry>, uint64_t>::with<uint64_t>,
    // ReadIndex: replies once this server has confirmed with a quorum that
    // it still leads and has applied everything committed before the
    // request; a read served after that is linearizable.
    caf::replies_to<read_atom>::with<uint64_t>,
    // A Raft message from a peer server.
    caf::reacts_to<raft_atom, pb<raft::v1::Message>>,
    // A piece of the leader's snapshot file (persistence/snapshot_file.hpp)
    // for a MSG_SNAP that follows the last piece: the sender's raft id, the
    // snapshot's index and term, the piece's offset and bytes, whether it is
    // the last.  Replies with the bytes received so far; an error when the
    // piece does not follow the one before (the leader starts again).
    caf::replies_to<snapshot_atom, uint64_t, uint64_t, uint64_t, uint64_t, std::string,
                    bool>::with<uint64_t>,
    // With TLS, a peer proves it holds a server certificate before its Raft
    // and discovery messages count (tls/proof.hpp): it asks for a challenge
    // (fresh for each ask) ...
    caf::replies_to<prove_atom>::with<std::string>,
    // ... and sends its certificate and its signature over the challenge;
    // replies true, or refused naming why (logged here once per peer).
    caf::replies_to<prove_atom, pb<v1::ServerProof>>::with<bool>,
    // Bootstrap discovery: a server announces the servers it knows; the
    // reply lists the ones this server knows.
    caf::replies_to<hello_atom, pb<v1::ServerList>>::with<pb<v1::ServerList>>,
    // Replies with this server's view of the log and its members.
    caf::replies_to<status_atom>::with<pb<v1::RaftStatus>>,
    // The view of the member with this raft id, asked of its replicated log
    // over the raft link (never a second connection between two servers:
    // over CAF 0.17.6's TLS, requests on one time out).
    caf::replies_to<status_atom, uint64_t>::with<pb<v1::RaftStatus>>,
    // A peer asks for this server's shell endpoint (its server actor's api),
    // to forward requests to it over the raft link.
    caf::replies_to<api_atom>::with<api_actor>,
    // The shell endpoint of the member with this raft id, asked of its
    // replicated log over the raft link (this server's own for its own id).
    caf::replies_to<api_atom, uint64_t>::with<api_actor>,
    // Removes a member (by server name) through a committed configuration
    // change; replies with what was done.
    caf::replies_to<remove_atom, std::string>::with<std::string>,
    // Hands leadership to a member (by name; "" = the most up to date
    // other); replies with what was asked.
    caf::replies_to<transfer_atom, std::string>::with<std::string>,
    // Timer: drives Raft's elections and heartbeats.
    caf::reacts_to<tick_atom>,
    // Group commit: persists, sends and applies what Raft made ready.
    caf::reacts_to<flush_atom>>;

// The server actor: the api (published), plus what the replicated log
// tells it about leadership.  It runs the leader actor while this server
// leads, and forwards to the leader's server otherwise.
using server_actor = api_actor::extend<
    // This server now leads (in the given Raft term) and the state machine
    // holds everything committed: start the leader actor with it.
    caf::reacts_to<leading_atom, catalog, uint64_t>,
    // Entries committed after that state (in index order): handed on to the
    // leader actor's catalog.
    caf::reacts_to<apply_atom, committed_batch>,
    // Another server (or none, id 0) leads in the given Raft term: stop the
    // leader actor, forward.
    caf::reacts_to<following_atom, uint64_t, pb<v1::ServerInfo>, uint64_t>,
    // At start: the replicated log this server runs (spawned after it) and
    // this server's identity (its shell port is known once published).
    caf::reacts_to<replicated_log_actor, pb<v1::ServerInfo>>>;

}  // namespace berth
