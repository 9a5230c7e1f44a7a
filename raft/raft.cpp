// node: construction, the shell-facing API, Ready handling and membership.

#include "raft/raft.hpp"

#include <algorithm>

#include "raft/invariant.hpp"
#include "raft/node_internal.hpp"

namespace berth::raft {

namespace {

// Messages peers never send: the node's own timers and reports, and
// proposals (followers do not forward them; the shell redirects clients).
bool is_local(pb::MessageType t) {
  return t == pb::MSG_HUP || t == pb::MSG_BEAT || t == pb::MSG_UNREACHABLE ||
         t == pb::MSG_SNAP_STATUS || t == pb::MSG_CHECK_QUORUM || t == pb::MSG_PROP;
}

bool is_response(pb::MessageType t) {
  return t == pb::MSG_APP_RESP || t == pb::MSG_VOTE_RESP || t == pb::MSG_HEARTBEAT_RESP ||
         t == pb::MSG_PRE_VOTE_RESP;
}

bool same(const pb::HardState& a, const pb::HardState& b) {
  return a.term() == b.term() && a.vote() == b.vote() && a.commit() == b.commit();
}

}  // namespace

const char* to_string(role r) {
  switch (r) {
    case role::follower:
      return "follower";
    case role::pre_candidate:
      return "pre-candidate";
    case role::candidate:
      return "candidate";
    case role::leader:
      return "leader";
  }
  return "unknown";
}

const char* to_string(errc e) {
  switch (e) {
    case errc::ok:
      return "ok";
    case errc::not_leader:
      return "not leader";
    case errc::no_leader:
      return "no leader known";
    case errc::transfer_in_progress:
      return "leadership transfer in progress";
    case errc::conf_change_pending:
      return "a membership change is still pending";
    case errc::invalid_conf_change:
      return "invalid membership change";
    case errc::not_member:
      return "this node is not a member of the cluster";
    case errc::unknown_peer:
      return "no such member";
    case errc::not_ready:
      return "leader has not committed an entry in its term yet";
    case errc::bootstrap_not_empty:
      return "cannot bootstrap a node that has state";
    case errc::invalid_message:
      return "invalid message";
  }
  return "unknown";
}

std::string result::message() const {
  std::string s = to_string(code);
  if (code == errc::not_leader)
    s += leader ? ", leader is " + std::to_string(leader) : ", leader unknown";
  return s;
}

node::node(const config& cfg, const memory_storage& storage)
    : id_(cfg.id), cfg_(cfg), rng_(cfg.seed), log_(storage) {
  BERTH_RAFT_INVARIANT(id_ != 0 && cfg.election_tick > cfg.heartbeat_tick && cfg.heartbeat_tick > 0,
                       "config: id must be set, 0 < heartbeat_tick < election_tick");
  const auto& hs = storage.hard_state();
  term_ = hs.term();
  vote_ = hs.vote();
  // A commit-only hard state change is written without fsync, so the state
  // machine may durably have applied beyond the commit index that survived
  // a crash. Whatever was applied was committed.
  uint64_t applied = std::max(cfg.applied, log_.first_index() - 1);
  BERTH_RAFT_INVARIANT(applied <= log_.last_index(), "applied entries must be in storage");
  log_.commit_to(std::max(hs.commit(), applied));
  prev_hard_ = hard();
  // Rebuild the configuration as of `applied`: the snapshot's, then the
  // changes after it that the state machine had already applied. Later
  // ones are applied again when handed out as committed entries.
  restore_conf(storage.snapshot().metadata().conf_state());
  if (applied >= log_.first_index()) {
    auto ents = log_.slice(log_.first_index(), applied + 1, no_limit);
    BERTH_RAFT_INVARIANT(ents.ok(), "applied entries must be in storage");
    for (const auto& e : ents.value) {
      if (e.type() != pb::ENTRY_CONF_CHANGE) continue;
      pb::ConfChange cc;
      cc.ParseFromString(e.data());
      apply_conf_change(cc);
    }
  }
  log_.applied_to(applied);
  become_follower(term_, 0);
  prev_soft_ = soft();
}

result node::bootstrap(const std::vector<peer>& peers) {
  if (log_.last_index() != 0 || term_ != 0) return fail(errc::bootstrap_not_empty);
  // As etcd: the initial members are conf change entries at term 1, all
  // committed, so a member added later learns them by replication.
  become_follower(1, 0);
  std::vector<pb::Entry> ents;
  for (const auto& p : peers) {
    pb::ConfChange cc;
    cc.set_type(pb::ADD_NODE);
    cc.set_node_id(p.id);
    cc.set_context(p.context);
    pb::Entry e;
    e.set_term(1);
    e.set_index(ents.size() + 1);
    e.set_type(pb::ENTRY_CONF_CHANGE);
    e.set_data(cc.SerializeAsString());
    ents.push_back(std::move(e));
    apply_conf_change(cc);  // handed out again to apply: adding twice is a no-op
  }
  log_.append(ents);
  log_.commit_to(ents.size());
  return {};
}

void node::tick() {
  BERTH_RAFT_INVARIANT(!awaiting_advance_, "called between get_ready() and advance()");
  if (role_ != role::leader) {
    ++election_elapsed_;
    if (promotable() && past_election_timeout()) {
      election_elapsed_ = 0;
      step_internal(make(pb::MSG_HUP, id_));
    }
    return;
  }
  ++heartbeat_elapsed_;
  ++election_elapsed_;
  if (election_elapsed_ >= cfg_.election_tick) {
    election_elapsed_ = 0;
    if (cfg_.check_quorum) step_internal(make(pb::MSG_CHECK_QUORUM, id_));
    // A transfer that did not finish within an election timeout is abandoned.
    if (role_ == role::leader) abort_transfer();
  }
  if (role_ != role::leader) return;
  if (heartbeat_elapsed_ >= cfg_.heartbeat_tick) {
    heartbeat_elapsed_ = 0;
    step_internal(make(pb::MSG_BEAT, id_));
  }
}

result node::step(const pb::Message& m) {
  BERTH_RAFT_INVARIANT(!awaiting_advance_, "called between get_ready() and advance()");
  if (is_local(m.type())) return fail(errc::invalid_message);
  if (is_response(m.type()) && !prs_.count(m.from())) return fail(errc::invalid_message);
  return step_internal(m);
}

result node::propose(std::string data) {
  BERTH_RAFT_INVARIANT(!awaiting_advance_, "called between get_ready() and advance()");
  pb::Entry e;
  e.set_data(std::move(data));
  return append_entries({std::move(e)});
}

result node::propose_conf_change(const pb::ConfChange& cc) {
  BERTH_RAFT_INVARIANT(!awaiting_advance_, "called between get_ready() and advance()");
  if (role_ != role::leader) return fail(errc::not_leader, lead_);
  // Single-server changes stay safe only one at a time; pending_conf_index_
  // also covers the term's first entry (see become_leader).
  if (pending_conf_index_ > log_.applied()) return fail(errc::conf_change_pending, lead_);
  bool member = prs_.count(cc.node_id()) > 0;
  if (cc.node_id() == 0 || (cc.type() == pb::ADD_NODE && member) ||
      (cc.type() == pb::REMOVE_NODE && (!member || prs_.size() == 1)))
    return fail(errc::invalid_conf_change, lead_);
  pb::Entry e;
  e.set_type(pb::ENTRY_CONF_CHANGE);
  e.set_data(cc.SerializeAsString());
  auto r = append_entries({std::move(e)});
  if (r.ok()) pending_conf_index_ = r.index;
  return r;
}

result node::transfer_leadership(uint64_t to) {
  BERTH_RAFT_INVARIANT(!awaiting_advance_, "called between get_ready() and advance()");
  // etcd's convention: a MsgTransferLeader's `from` is the transferee.
  auto m = make(pb::MSG_TRANSFER_LEADER, id_);
  m.set_from(to);
  return step_internal(m);
}

result node::read_index(std::string context) {
  BERTH_RAFT_INVARIANT(!awaiting_advance_, "called between get_ready() and advance()");
  auto m = make(pb::MSG_READ_INDEX, id_);
  m.set_from(id_);
  m.set_context(std::move(context));
  return step_internal(m);
}

void node::report_unreachable(uint64_t id) {
  BERTH_RAFT_INVARIANT(!awaiting_advance_, "called between get_ready() and advance()");
  auto m = make(pb::MSG_UNREACHABLE, id_);
  m.set_from(id);
  step_internal(m);
}

void node::report_snapshot(uint64_t id, bool success) {
  BERTH_RAFT_INVARIANT(!awaiting_advance_, "called between get_ready() and advance()");
  auto m = make(pb::MSG_SNAP_STATUS, id_);
  m.set_from(id);
  m.set_reject(!success);
  step_internal(m);
}

bool node::has_ready() const {
  if (awaiting_advance_) return false;
  return soft() != prev_soft_ || !msgs_.empty() || !read_states_.empty() ||
         log_.unstable_snapshot() || !log_.unstable_entries().empty() ||
         log_.has_next_committed_entries() || !same(hard(), prev_hard_);
}

ready node::get_ready() {
  BERTH_RAFT_INVARIANT(!awaiting_advance_, "called between get_ready() and advance()");
  ready rd;
  rd.committed_entries = log_.next_committed_entries();
  // Membership takes effect when its entry is handed out to apply, before
  // the rest of this Ready is collected so it reflects the new config.
  for (const auto& e : rd.committed_entries) {
    if (e.type() != pb::ENTRY_CONF_CHANGE) continue;
    pb::ConfChange cc;
    cc.ParseFromString(e.data());
    apply_conf_change(cc);
  }
  rd.entries = log_.unstable_entries();
  if (log_.unstable_snapshot()) rd.snapshot = *log_.unstable_snapshot();
  rd.messages.swap(msgs_);
  rd.read_states.swap(read_states_);
  if (soft() != prev_soft_) {
    rd.soft_state = soft();
    prev_soft_ = soft();
  }
  auto hs = hard();
  if (!same(hs, prev_hard_)) {
    rd.must_sync = hs.term() != prev_hard_.term() || hs.vote() != prev_hard_.vote();
    rd.hard_state = hs;
    prev_hard_ = hs;
  }
  rd.must_sync = rd.must_sync || !rd.entries.empty() || rd.snapshot.has_value();

  unacked_ = {};
  if (!rd.entries.empty()) {
    unacked_.entries_index = rd.entries.back().index();
    unacked_.entries_term = rd.entries.back().term();
  }
  if (!rd.committed_entries.empty()) unacked_.committed_index = rd.committed_entries.back().index();
  if (rd.snapshot) unacked_.snapshot_index = rd.snapshot->metadata().index();
  awaiting_advance_ = true;
  return rd;
}

void node::advance() {
  BERTH_RAFT_INVARIANT(awaiting_advance_, "advance() without get_ready()");
  awaiting_advance_ = false;
  if (unacked_.snapshot_index) {
    log_.stable_snap_to(unacked_.snapshot_index);
    log_.applied_to(unacked_.snapshot_index);
  }
  if (unacked_.entries_index) log_.stable_to(unacked_.entries_index, unacked_.entries_term);
  if (unacked_.committed_index) log_.applied_to(unacked_.committed_index);
}

node_status node::status() const {
  node_status s;
  s.id = id_;
  s.term = term_;
  s.vote = vote_;
  s.leader = lead_;
  s.role = role_;
  s.commit = log_.committed();
  s.applied = log_.applied();
  s.last_index = log_.last_index();
  s.lead_transferee = lead_transferee_;
  if (role_ == role::leader)
    for (const auto& [id, pr] : prs_)
      s.progress[id] = {pr.match(), pr.next(), pr.state(), pr.recent_active, pr.inflight()};
  return s;
}

pb::ConfState node::conf_state() const {
  pb::ConfState cs;
  for (const auto& [id, pr] : prs_) cs.add_voters(id);
  return cs;
}

pb::HardState node::hard() const {
  pb::HardState hs;
  hs.set_term(term_);
  hs.set_vote(vote_);
  hs.set_commit(log_.committed());
  return hs;
}

void node::apply_conf_change(const pb::ConfChange& cc) {
  uint64_t id = cc.node_id();
  if (cc.type() == pb::ADD_NODE) {
    if (prs_.count(id)) return;
    progress pr(log_.last_index() + 1, cfg_.max_inflight_msgs);
    // Fresh members count as active, or check-quorum could depose us
    // before they had a chance to answer.
    pr.recent_active = true;
    prs_.emplace(id, pr);
  } else {
    prs_.erase(id);
    if (id == id_ && role_ != role::follower) {
      become_follower(term_, 0);  // a removed member stops leading
      return;
    }
  }
  if (role_ != role::leader) return;
  if (lead_transferee_ && !prs_.count(lead_transferee_)) abort_transfer();
  // A smaller quorum may commit more.
  if (maybe_commit()) bcast_append();
}

void node::restore_conf(const pb::ConfState& cs) {
  prs_.clear();
  for (uint64_t id : cs.voters()) {
    progress pr(log_.last_index() + 1, cfg_.max_inflight_msgs);
    if (id == id_) pr.maybe_update(log_.last_index());
    prs_.emplace(id, pr);
  }
}

}  // namespace berth::raft
