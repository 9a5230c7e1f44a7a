// berth::raft::node: the Raft consensus algorithm as a pure state machine.
//
// The node does no I/O, reads no clock, starts no threads and draws
// randomness only from the seed in its config. The shell (berth's
// replicated-log actor) drives it: tick() on a timer, step() for every
// message received, propose*() for clients, and after each of those it
// drains get_ready(): persist, send, apply, then advance(). See
// docs/raft.md for the full contract. Modelled on etcd's raft.RawNode.
//
// Implemented in raft.cpp (API, Ready, membership), step.cpp (term rules,
// follower and candidate), election.cpp (roles, campaigns) and leader.cpp
// (replication, commit, ReadIndex, transfer).
//
// Not thread-safe. Errors are values (result); nothing throws. Broken
// invariants (a bug in the core, or a shell that broke the contract) abort,
// in every build type (invariant.hpp).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "raft/log.hpp"
#include "raft/progress.hpp"
#include "raft/storage.hpp"

namespace berth::raft {

struct config {
  uint64_t id = 0;           // this member; never 0
  int election_tick = 10;    // ticks without a leader before campaigning (randomized up to 2x)
  int heartbeat_tick = 1;    // ticks between a leader's heartbeats
  bool pre_vote = true;      // ask before campaigning, so a rejoining member does not disrupt
  bool check_quorum = true;  // a leader without a recent quorum steps down
  size_t max_inflight_msgs = 256;     // appends in flight per follower while replicating
  size_t max_size_per_msg = 1 << 20;  // bytes of entries per append (at least one entry)
  uint64_t seed = 0;                  // seeds election timeout randomization
  // Index the shell's state machine had applied when it (re)started; at
  // least the storage's snapshot index is assumed.
  uint64_t applied = 0;
};

enum class role { follower, pre_candidate, candidate, leader };
const char* to_string(role r);

enum class errc {
  ok,
  not_leader,            // result::leader names the leader, if known
  no_leader,             // none known to forward to
  transfer_in_progress,  // proposals wait until a leadership transfer ends
  conf_change_pending,   // one membership change at a time
  invalid_conf_change,   // adds a member or removes a non-member, or the last
  not_member,            // this node was removed from the configuration
  unknown_peer,          // transfer to a node that is not a member
  not_ready,             // read_index before the leader committed in its term
  bootstrap_not_empty,   // bootstrap on a node that already has state
  invalid_message,       // local message type, or from an unknown peer
};
const char* to_string(errc e);

struct result {
  errc code = errc::ok;
  uint64_t leader = 0;  // the known leader (0: unknown)
  uint64_t index = 0;   // a proposal's log index: it is applied with this index and term
  uint64_t term = 0;
  bool ok() const { return code == errc::ok; }
  std::string message() const;  // e.g. "not leader, leader is 3"
};

struct peer {
  uint64_t id = 0;
  std::string context;  // address, passed to the shell in the ConfChange
};

struct soft_state {
  uint64_t leader = 0;
  raft::role role = role::follower;
  bool operator==(const soft_state& o) const { return leader == o.leader && role == o.role; }
  bool operator!=(const soft_state& o) const { return !(*this == o); }
};

// A linearizable read may be served once the state machine applied `index`.
struct read_state {
  uint64_t index = 0;
  std::string context;
};

// What the shell must do, in this order: persist snapshot, entries and
// hard_state (fsync if must_sync), then send messages, then apply the
// snapshot and committed_entries, then call advance().  A leader whose
// term and vote did not change may send the messages before persisting
// (its appends then travel while it writes), as long as it steps no
// received message and applies nothing before the write is done.
struct ready {
  std::optional<raft::soft_state> soft_state;  // set when leader or role changed
  std::optional<pb::HardState> hard_state;     // set when changed
  std::vector<pb::Entry> entries;              // append to storage (replaces a conflicting suffix)
  std::optional<pb::Snapshot> snapshot;        // received from the leader: persist and restore
  std::vector<pb::Entry> committed_entries;    // apply in order
  std::vector<pb::Message> messages;           // send after persisting
  std::vector<raft::read_state> read_states;
  bool must_sync = false;  // entries or term/vote changed: fsync before sending
};

struct progress_status {
  uint64_t match = 0;
  uint64_t next = 0;
  progress_state state = progress_state::probe;
  bool recent_active = false;
  size_t inflight = 0;
};

struct node_status {
  uint64_t id = 0;
  uint64_t term = 0;
  uint64_t vote = 0;
  uint64_t leader = 0;
  raft::role role = role::follower;
  uint64_t commit = 0;
  uint64_t applied = 0;
  uint64_t last_index = 0;
  uint64_t lead_transferee = 0;
  std::map<uint64_t, progress_status> progress;  // filled on the leader only
};

class node {
 public:
  // Restores from what the shell persisted in `storage` (hard state,
  // snapshot, entries after it). The node only reads `storage`; the shell
  // writes it after persisting each Ready. It must outlive the node.
  node(const config& cfg, const memory_storage& storage);

  // First start of a new cluster: every initial member calls this with the
  // same peers. Members added later start empty and never bootstrap.
  result bootstrap(const std::vector<peer>& peers);

  void tick();
  // A message from a peer. Local message types and proposals are refused.
  result step(const pb::Message& m);
  result propose(std::string data);
  result propose_conf_change(const pb::ConfChange& cc);
  // Asks the leader to hand leadership to `to` (forwarded if not leader).
  result transfer_leadership(uint64_t to);
  // Requests a read_state carrying `context` (unique per request).
  result read_index(std::string context);
  void report_unreachable(uint64_t id);
  void report_snapshot(uint64_t id, bool success);

  bool has_ready() const;
  ready get_ready();
  // Acknowledges the last get_ready() as persisted, sent and applied. No
  // other call may come between get_ready() and advance().
  void advance();

  node_status status() const;
  // The configuration as of the last committed entry handed out: what the
  // shell stores with a snapshot it creates after advance().
  pb::ConfState conf_state() const;
  uint64_t id() const { return id_; }
  uint64_t term() const { return term_; }
  uint64_t leader() const { return lead_; }
  raft::role current_role() const { return role_; }
  const raft_log& log() const { return log_; }  // read-only, for tests and diagnostics

 private:
  enum class vote_result { pending, won, lost };
  struct read_request {
    uint64_t index;
    std::string context;
    uint64_t from;
    std::set<uint64_t> acks;
  };

  result step_internal(const pb::Message& m);
  result step_leader(const pb::Message& m);
  result step_candidate(const pb::Message& m);
  result step_follower(const pb::Message& m);
  bool handle_term(const pb::Message& m);
  void handle_vote_request(const pb::Message& m);
  void handle_append(const pb::Message& m);
  void handle_heartbeat(const pb::Message& m);
  void handle_snapshot(const pb::Message& m);
  void handle_append_response(const pb::Message& m, progress& pr);
  void handle_heartbeat_response(const pb::Message& m, progress& pr);
  result handle_read_index(const pb::Message& m);

  void become_follower(uint64_t term, uint64_t leader);
  void become_pre_candidate();
  void become_candidate();
  void become_leader();
  void reset(uint64_t term);
  void hup(bool transfer);
  void campaign(bool pre_vote, bool transfer);
  vote_result poll(uint64_t id, bool granted);
  bool promotable() const { return prs_.count(id_) > 0; }
  bool has_unapplied_conf_change() const;
  bool past_election_timeout() const { return election_elapsed_ >= randomized_timeout_; }
  void reset_randomized_timeout();

  result append_entries(std::vector<pb::Entry> ents);
  bool maybe_commit();
  size_t quorum() const { return prs_.size() / 2 + 1; }
  bool quorum_active();
  void bcast_append();
  void bcast_heartbeat();
  bool maybe_send_append(uint64_t to, bool send_if_empty);
  void send_heartbeat(uint64_t to, const std::string& context);
  void send_timeout_now(uint64_t to);
  void send(pb::Message m);
  void abort_transfer() { lead_transferee_ = 0; }
  void respond_read(const read_request& req);

  void apply_conf_change(const pb::ConfChange& cc);
  void restore_conf(const pb::ConfState& cs);
  soft_state soft() const { return {lead_, role_}; }
  pb::HardState hard() const;

  uint64_t id_;
  config cfg_;
  std::mt19937_64 rng_;
  raft_log log_;
  uint64_t term_ = 0;
  uint64_t vote_ = 0;
  uint64_t lead_ = 0;
  raft::role role_ = role::follower;
  std::map<uint64_t, progress> prs_;  // the voters, this node included if a member
  std::map<uint64_t, bool> votes_;
  std::vector<pb::Message> msgs_;
  int election_elapsed_ = 0;
  int heartbeat_elapsed_ = 0;
  int randomized_timeout_ = 0;
  uint64_t lead_transferee_ = 0;
  uint64_t pending_conf_index_ = 0;  // leader: no new conf change until applied reaches it
  std::deque<read_request> pending_reads_;
  std::vector<raft::read_state> read_states_;

  // What the last Ready contained and advance() acknowledges.
  soft_state prev_soft_;
  pb::HardState prev_hard_;
  struct {
    uint64_t entries_index = 0, entries_term = 0, committed_index = 0, snapshot_index = 0;
  } unacked_;
  bool awaiting_advance_ = false;
};

}  // namespace berth::raft
