// What the replicated log's files share (actors/raft_log.cpp, the actor and
// its Raft shell; actors/raft_log_snapshots.cpp, its snapshots).  Internal
// to the replicated log: nothing else includes it.
#pragma once

#include <string>
#include <vector>

#include "actors/raft_log.hpp"

namespace berth::raft_log_detail {

namespace pbr = raft::v1;

using self_ptr = replicated_log_actor::stateful_pointer<raft_log_state>;

// Stops berthd at once: nothing after this point could be made durable.
[[noreturn]] void fatal(const std::string& what);

// Marks the core dirty: one flush message handles whatever it made ready.
void schedule_flush(const self_ptr& self);

// With TLS: whether the message being handled counts (from this process,
// or from a peer process whose server proof verified).
bool from_proven(const self_ptr& self);

// A member joins the address book; when it is the leader this server
// follows, the server is told its address (learn_member, raft_log.cpp).
void learn_member(const self_ptr& self, const v1::ServerInfo& info);

// The members named in a snapshot's data (SnapshotData) join the address
// book.
void learn_members(const self_ptr& self, const pbr::Snapshot& snap);

// --- snapshots (raft_log_snapshots.cpp) ---------------------------------

// Takes a snapshot when raft::snapshot_due says so (after each flush).
void maybe_snapshot(self_ptr self);

// Sends the snapshot file in pieces to the peer, then the core's MSG_SNAP
// `m`; reports the transfer's fate to the core (report_snapshot).
void send_snapshot(self_ptr self, replicated_log_actor peer, pbr::Message m);

// A piece of a leader's snapshot file; replies with the bytes received so
// far, or an error when it does not follow the piece before it.
caf::result<uint64_t> receive_piece(self_ptr self, uint64_t from, uint64_t term, uint64_t index,
                                    uint64_t offset, const std::string& bytes, bool last);

// Whether the leader's snapshot of MSG_SNAP `m` arrived whole (its pieces):
// the core may take it only then.
bool snapshot_arrived(const self_ptr& self, const pbr::Message& m);

// Makes the received snapshot file this server's snapshot, durably (before
// the log is truncated for it).
void place_received_snapshot(const self_ptr& self, const pbr::Snapshot& snap);

// After the log was truncated: the core's storage takes the snapshot and
// the state machine installs its database.
void install_snapshot(const self_ptr& self, const pbr::Snapshot& snap);

// At start: the snapshot file's Snapshot into the core's storage (and the
// leftovers of transfers and installs removed).
void load_snapshot(const self_ptr& self);

}  // namespace berth::raft_log_detail
