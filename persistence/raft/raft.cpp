#include "persistence/raft/raft.hpp"
#include "persistence/raft/invariant.hpp"

#include <algorithm>

namespace berth::raft {

namespace {

// Carried in MsgVote's context when campaigning on MsgTimeoutNow, so voters
// grant it even while they still hear from the old leader.
const char* const campaign_transfer = "transfer";

bool is_local(pb::MessageType t) {
  return t == pb::MSG_HUP || t == pb::MSG_BEAT || t == pb::MSG_UNREACHABLE ||
         t == pb::MSG_SNAP_STATUS || t == pb::MSG_CHECK_QUORUM;
}

bool is_response(pb::MessageType t) {
  return t == pb::MSG_APP_RESP || t == pb::MSG_VOTE_RESP || t == pb::MSG_HEARTBEAT_RESP ||
         t == pb::MSG_UNREACHABLE || t == pb::MSG_PRE_VOTE_RESP;
}

pb::MessageType vote_response_type(pb::MessageType t) {
  return t == pb::MSG_VOTE ? pb::MSG_VOTE_RESP : pb::MSG_PRE_VOTE_RESP;
}

pb::Message make(pb::MessageType type, uint64_t to) {
  pb::Message m;
  m.set_type(type);
  m.set_to(to);
  return m;
}

result fail(errc code, uint64_t leader = 0) { return {code, leader, 0, 0}; }

bool same(const pb::HardState& a, const pb::HardState& b) {
  return a.term() == b.term() && a.vote() == b.vote() && a.commit() == b.commit();
}

}  // namespace

const char* to_string(role r) {
  switch (r) {
    case role::follower: return "follower";
    case role::pre_candidate: return "pre-candidate";
    case role::candidate: return "candidate";
    case role::leader: return "leader";
  }
  return "unknown";
}

const char* to_string(errc e) {
  switch (e) {
    case errc::ok: return "ok";
    case errc::not_leader: return "not leader";
    case errc::no_leader: return "no leader known";
    case errc::transfer_in_progress: return "leadership transfer in progress";
    case errc::conf_change_pending: return "a membership change is still pending";
    case errc::invalid_conf_change: return "invalid membership change";
    case errc::not_member: return "this node is not a member of the cluster";
    case errc::not_ready: return "leader has not committed an entry in its term yet";
    case errc::bootstrap_not_empty: return "cannot bootstrap a node that has state";
    case errc::invalid_message: return "invalid message";
  }
  return "unknown";
}

std::string result::message() const {
  std::string s = to_string(code);
  if (code == errc::not_leader)
    s += leader ? ", leader is " + std::to_string(leader) : ", leader unknown";
  return s;
}

// ---- construction and the shell-facing API ----

node::node(const config& cfg, memory_storage& storage)
    : id_(cfg.id), cfg_(cfg), rng_(cfg.seed), log_(storage) {
  BERTH_RAFT_INVARIANT(id_ != 0 && cfg.election_tick > cfg.heartbeat_tick && cfg.heartbeat_tick > 0, "config: id must be set, 0 < heartbeat_tick < election_tick");
  const auto& hs = storage.hard_state();
  term_ = hs.term();
  vote_ = hs.vote();
  log_.commit_to(hs.commit());
  prev_hard_ = hard();
  // Rebuild the configuration as of `applied`: the snapshot's, then the
  // changes after it that the state machine had already applied. Later
  // ones are applied again when handed out as committed entries.
  restore_conf(storage.snapshot().metadata().conf_state());
  uint64_t applied = std::max(cfg.applied, log_.first_index() - 1);
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

// ---- stepping ----

result node::step_internal(const pb::Message& m) {
  if (!handle_term(m)) return {};
  switch (m.type()) {
    case pb::MSG_HUP:
      hup(false);
      return {};
    case pb::MSG_VOTE:
    case pb::MSG_PRE_VOTE:
      handle_vote_request(m);
      return {};
    default:
      break;
  }
  switch (role_) {
    case role::leader: return step_leader(m);
    case role::pre_candidate:
    case role::candidate: return step_candidate(m);
    case role::follower: return step_follower(m);
  }
  return {};
}

// Applies Raft's term rules; false if the message is to be ignored.
bool node::handle_term(const pb::Message& m) {
  if (m.term() == 0) return true;  // local message, or a proposal/read forwarded
  if (m.term() > term_) {
    if (m.type() == pb::MSG_VOTE || m.type() == pb::MSG_PRE_VOTE) {
      bool force = m.context() == campaign_transfer;
      bool in_lease = cfg_.check_quorum && lead_ != 0 && election_elapsed_ < cfg_.election_tick;
      // We heard from a leader recently: a candidate is likely partitioned
      // from it, and must not disrupt the cluster.
      if (!force && in_lease) return false;
    }
    if (m.type() == pb::MSG_PRE_VOTE) {
      // Pre-votes never change our term.
    } else if (m.type() == pb::MSG_PRE_VOTE_RESP && !m.reject()) {
      // The pre-candidate bumps its term when it has a quorum of these.
    } else if (m.type() == pb::MSG_APP || m.type() == pb::MSG_HEARTBEAT ||
               m.type() == pb::MSG_SNAP) {
      become_follower(m.term(), m.from());
    } else {
      become_follower(m.term(), 0);
    }
    return true;
  }
  if (m.term() < term_) {
    if ((cfg_.check_quorum || cfg_.pre_vote) &&
        (m.type() == pb::MSG_HEARTBEAT || m.type() == pb::MSG_APP)) {
      // A stale leader (e.g. after a partition) learns our term from this
      // and steps down; otherwise it could never be told, since we ignore
      // its messages and with pre-vote nobody's term rises to reach it.
      send(make(pb::MSG_APP_RESP, m.from()));
    } else if (m.type() == pb::MSG_PRE_VOTE) {
      auto r = make(pb::MSG_PRE_VOTE_RESP, m.from());
      r.set_term(term_);
      r.set_reject(true);
      send(r);
    }
    return false;
  }
  return true;
}

void node::handle_vote_request(const pb::Message& m) {
  bool can_vote = vote_ == m.from() || (vote_ == 0 && lead_ == 0) ||
                  (m.type() == pb::MSG_PRE_VOTE && m.term() > term_);
  auto r = make(vote_response_type(m.type()), m.from());
  if (can_vote && log_.is_up_to_date(m.index(), m.log_term())) {
    // A pre-vote answer carries the term the candidate would campaign in,
    // not ours, so the candidate recognises it.
    r.set_term(m.term());
    if (m.type() == pb::MSG_VOTE) {
      election_elapsed_ = 0;
      vote_ = m.from();
    }
  } else {
    r.set_term(term_);
    r.set_reject(true);
  }
  send(r);
}

result node::step_leader(const pb::Message& m) {
  switch (m.type()) {
    case pb::MSG_BEAT:
      bcast_heartbeat();
      return {};
    case pb::MSG_CHECK_QUORUM:
      if (!quorum_active()) become_follower(term_, 0);
      for (auto& [id, pr] : prs_) pr.recent_active = id == id_;
      return {};
    case pb::MSG_PROP: {
      std::vector<pb::Entry> ents(m.entries().begin(), m.entries().end());
      return append_entries(std::move(ents));
    }
    case pb::MSG_READ_INDEX:
      return handle_read_index(m);
    case pb::MSG_TRANSFER_LEADER: {
      uint64_t to = m.from();
      if (!prs_.count(to)) return fail(errc::invalid_message, lead_);
      if (to == id_ || lead_transferee_ == to) return {};
      abort_transfer();  // a newer request replaces an older one
      election_elapsed_ = 0;  // the transfer gets one election timeout
      lead_transferee_ = to;
      if (prs_.at(to).match() == log_.last_index())
        send_timeout_now(to);
      else
        maybe_send_append(to, true);
      return {};
    }
    default:
      break;
  }
  auto it = prs_.find(m.from());
  if (it == prs_.end()) return {};
  progress& pr = it->second;
  switch (m.type()) {
    case pb::MSG_APP_RESP:
      handle_append_response(m, pr);
      break;
    case pb::MSG_HEARTBEAT_RESP:
      handle_heartbeat_response(m, pr);
      break;
    case pb::MSG_SNAP_STATUS:
      if (pr.state() != progress_state::snapshot) break;
      // Either way, wait for the follower's answer (or a heartbeat's)
      // before sending more: it may still be applying the snapshot.
      pr.snapshot_reported(!m.reject());
      break;
    case pb::MSG_UNREACHABLE:
      // Optimistic streaming is pointless if messages are being lost.
      if (pr.state() == progress_state::replicate) pr.become_probe();
      break;
    default:
      break;
  }
  return {};
}

void node::handle_append_response(const pb::Message& m, progress& pr) {
  pr.recent_active = true;
  if (m.reject()) {
    uint64_t next_probe = m.reject_hint();
    // The follower told us its term at the hint: skip our entries of
    // higher terms, which cannot match either.
    if (m.log_term() > 0) next_probe = log_.find_conflict_by_term(m.reject_hint(), m.log_term());
    if (pr.maybe_decrease_to(m.index(), next_probe)) {
      if (pr.state() == progress_state::replicate) pr.become_probe();
      maybe_send_append(m.from(), true);
    }
    return;
  }
  bool was_paused = pr.paused();
  if (!pr.maybe_update(m.index())) return;
  switch (pr.state()) {
    case progress_state::probe:
      pr.become_replicate();
      break;
    case progress_state::snapshot:
      if (pr.match() >= pr.pending_snapshot()) {
        pr.become_probe();
        pr.become_replicate();
      }
      break;
    case progress_state::replicate:
      pr.free_inflight_to(m.index());
      break;
  }
  if (maybe_commit()) {
    bcast_append();
  } else if (was_paused) {
    maybe_send_append(m.from(), true);
  }
  // Pipelining: keep the window full.
  while (maybe_send_append(m.from(), false)) {
  }
  if (m.from() == lead_transferee_ && pr.match() == log_.last_index()) send_timeout_now(m.from());
}

void node::handle_heartbeat_response(const pb::Message& m, progress& pr) {
  pr.recent_active = true;
  pr.resume();
  // An append lost while replicating would otherwise keep the window full
  // forever; the next append then exposes the gap and we fall back to probing.
  if (pr.state() == progress_state::replicate) pr.free_first_inflight_if_full();
  if (pr.match() < log_.last_index()) maybe_send_append(m.from(), true);
  if (m.context().empty()) return;
  auto it = std::find_if(pending_reads_.begin(), pending_reads_.end(),
                         [&](const read_request& r) { return r.context == m.context(); });
  if (it == pending_reads_.end()) return;
  it->acks.insert(m.from());
  size_t votes = 0;
  for (uint64_t id : it->acks) votes += prs_.count(id);
  if (votes < quorum()) return;
  // A quorum still follows us as of this request, hence also as of the
  // earlier ones: release them all, in order.
  auto end = std::next(it);
  for (auto r = pending_reads_.begin(); r != end; ++r) respond_read(*r);
  pending_reads_.erase(pending_reads_.begin(), end);
}

result node::handle_read_index(const pb::Message& m) {
  read_request req{log_.committed(), m.context(), m.from(), {id_}};
  if (prs_.size() == 1) {
    respond_read(req);  // a single member is its own quorum
    return {};
  }
  // Until an entry of our term commits we may not know the latest commit
  // index. A forwarded request is dropped silently: its shell retries.
  if (log_.zero_on_error(log_.term(log_.committed())) != term_) return fail(errc::not_ready, id_);
  for (const auto& r : pending_reads_)
    if (r.context == req.context) return {};  // duplicate request
  pending_reads_.push_back(std::move(req));
  // Confirm leadership with a heartbeat round carrying the context.
  for (const auto& [id, pr] : prs_)
    if (id != id_) send_heartbeat(id, m.context());
  return {};
}

void node::respond_read(const read_request& req) {
  if (req.from == id_) {
    read_states_.push_back({req.index, req.context});
    return;
  }
  auto r = make(pb::MSG_READ_INDEX_RESP, req.from);
  r.set_index(req.index);
  r.set_context(req.context);
  send(r);
}

result node::step_candidate(const pb::Message& m) {
  auto my_response =
      role_ == role::pre_candidate ? pb::MSG_PRE_VOTE_RESP : pb::MSG_VOTE_RESP;
  switch (m.type()) {
    case pb::MSG_PROP:
      return fail(errc::not_leader, 0);
    case pb::MSG_READ_INDEX:
    case pb::MSG_TRANSFER_LEADER:
      return fail(errc::no_leader);
    case pb::MSG_APP:
      // Same term: someone else won this election.
      become_follower(m.term(), m.from());
      handle_append(m);
      return {};
    case pb::MSG_HEARTBEAT:
      become_follower(m.term(), m.from());
      handle_heartbeat(m);
      return {};
    case pb::MSG_SNAP:
      become_follower(m.term(), m.from());
      handle_snapshot(m);
      return {};
    default:
      break;
  }
  if (m.type() != my_response) return {};
  switch (poll(m.from(), !m.reject())) {
    case vote_result::won:
      if (role_ == role::pre_candidate) {
        campaign(false, false);
      } else {
        become_leader();
        bcast_append();
      }
      break;
    case vote_result::lost:
      become_follower(term_, 0);
      break;
    case vote_result::pending:
      break;
  }
  return {};
}

result node::step_follower(const pb::Message& m) {
  switch (m.type()) {
    case pb::MSG_PROP:
      return fail(errc::not_leader, lead_);
    case pb::MSG_APP:
      election_elapsed_ = 0;
      lead_ = m.from();
      handle_append(m);
      break;
    case pb::MSG_HEARTBEAT:
      election_elapsed_ = 0;
      lead_ = m.from();
      handle_heartbeat(m);
      break;
    case pb::MSG_SNAP:
      election_elapsed_ = 0;
      lead_ = m.from();
      handle_snapshot(m);
      break;
    case pb::MSG_TRANSFER_LEADER:
    case pb::MSG_READ_INDEX: {
      if (lead_ == 0) return fail(errc::no_leader);
      auto fwd = m;
      fwd.set_to(lead_);
      send(fwd);
      break;
    }
    case pb::MSG_TIMEOUT_NOW:
      // The leader chose us: campaign at once, skipping pre-vote.
      hup(true);
      break;
    case pb::MSG_READ_INDEX_RESP:
      read_states_.push_back({m.index(), m.context()});
      break;
    default:
      break;
  }
  return {};
}

void node::handle_append(const pb::Message& m) {
  auto r = make(pb::MSG_APP_RESP, m.from());
  if (m.index() < log_.committed()) {
    // Everything up to our commit index matches the leader's log already.
    r.set_index(log_.committed());
    send(r);
    return;
  }
  std::vector<pb::Entry> ents(m.entries().begin(), m.entries().end());
  if (auto last_new = log_.maybe_append(m.index(), m.log_term(), m.commit(), ents)) {
    r.set_index(*last_new);
    send(r);
    return;
  }
  // Tell the leader where our log could match: the last index at or below
  // its probe whose term is not above the probe's term.
  uint64_t hint = log_.find_conflict_by_term(std::min(m.index(), log_.last_index()), m.log_term());
  r.set_index(m.index());
  r.set_reject(true);
  r.set_reject_hint(hint);
  r.set_log_term(log_.zero_on_error(log_.term(hint)));
  send(r);
}

void node::handle_heartbeat(const pb::Message& m) {
  log_.commit_to(m.commit());
  auto r = make(pb::MSG_HEARTBEAT_RESP, m.from());
  r.set_context(m.context());
  send(r);
}

void node::handle_snapshot(const pb::Message& m) {
  const auto& md = m.snapshot().metadata();
  auto r = make(pb::MSG_APP_RESP, m.from());
  if (md.index() <= log_.committed()) {
    r.set_index(log_.committed());  // stale: we are past it
  } else if (log_.match_term(md.index(), md.term())) {
    // We have the snapshot's last entry, hence all before it: just commit.
    log_.commit_to(md.index());
    r.set_index(log_.committed());
  } else {
    log_.restore(m.snapshot());
    restore_conf(md.conf_state());
    r.set_index(log_.last_index());
  }
  send(r);
}

// ---- roles and elections ----

void node::reset(uint64_t term) {
  if (term_ != term) {
    term_ = term;
    vote_ = 0;
  }
  lead_ = 0;
  election_elapsed_ = 0;
  heartbeat_elapsed_ = 0;
  reset_randomized_timeout();
  abort_transfer();
  votes_.clear();
  pending_reads_.clear();
  for (auto& [id, pr] : prs_) {
    pr = progress(log_.last_index() + 1, cfg_.max_inflight_msgs);
    if (id == id_) pr.maybe_update(log_.last_index());
  }
}

void node::reset_randomized_timeout() {
  randomized_timeout_ = cfg_.election_tick + static_cast<int>(rng_() % cfg_.election_tick);
}

void node::become_follower(uint64_t term, uint64_t leader) {
  reset(term);
  lead_ = leader;
  role_ = role::follower;
}

void node::become_pre_candidate() {
  // Term and vote stay as they are: a pre-vote changes no durable state.
  votes_.clear();
  lead_ = 0;
  role_ = role::pre_candidate;
}

void node::become_candidate() {
  reset(term_ + 1);
  vote_ = id_;
  role_ = role::candidate;
}

void node::become_leader() {
  reset(term_);
  lead_ = id_;
  role_ = role::leader;
  prs_.at(id_).become_replicate();
  // An empty entry of our term: committing it commits all before it.
  append_entries({pb::Entry{}});
  // No membership change until this entry is applied: a leader must commit
  // in its own term before changing the configuration (single-server
  // changes are otherwise unsafe across leader changes).
  pending_conf_index_ = log_.last_index();
}

void node::hup(bool transfer) {
  if (role_ == role::leader || !promotable()) return;
  // The configuration we would campaign in must be current.
  if (has_unapplied_conf_change()) return;
  campaign(cfg_.pre_vote && !transfer, transfer);
}

bool node::has_unapplied_conf_change() const {
  if (log_.committed() <= log_.applied()) return false;
  uint64_t lo = std::max(log_.applied() + 1, log_.first_index());
  if (lo > log_.committed()) return false;
  auto ents = log_.slice(lo, log_.committed() + 1, no_limit);
  for (const auto& e : ents.value)
    if (e.type() == pb::ENTRY_CONF_CHANGE) return true;
  return false;
}

void node::campaign(bool pre_vote, bool transfer) {
  uint64_t term;
  pb::MessageType type;
  if (pre_vote) {
    become_pre_candidate();
    type = pb::MSG_PRE_VOTE;
    term = term_ + 1;  // the term we would campaign in
  } else {
    become_candidate();
    type = pb::MSG_VOTE;
    term = term_;
  }
  if (poll(id_, true) == vote_result::won) {
    // A single member: no one to ask.
    if (pre_vote) {
      campaign(false, transfer);
    } else {
      become_leader();
    }
    return;
  }
  for (const auto& [id, pr] : prs_) {
    if (id == id_) continue;
    auto m = make(type, id);
    m.set_term(term);
    m.set_index(log_.last_index());
    m.set_log_term(log_.last_term());
    if (transfer) m.set_context(campaign_transfer);
    send(m);
  }
}

node::vote_result node::poll(uint64_t id, bool granted) {
  votes_.emplace(id, granted);  // the first answer from a member counts
  size_t yes = 0, no = 0;
  for (const auto& [voter, v] : votes_) {
    if (!prs_.count(voter)) continue;
    (v ? yes : no)++;
  }
  if (yes >= quorum()) return vote_result::won;
  if (no >= quorum()) return vote_result::lost;
  return vote_result::pending;
}

// ---- replication ----

result node::append_entries(std::vector<pb::Entry> ents) {
  if (role_ != role::leader) return fail(errc::not_leader, lead_);
  if (!promotable()) return fail(errc::not_member, lead_);
  if (lead_transferee_ != 0) return fail(errc::transfer_in_progress, lead_);
  uint64_t li = log_.last_index();
  for (size_t i = 0; i < ents.size(); ++i) {
    ents[i].set_term(term_);
    ents[i].set_index(li + 1 + i);
  }
  li = log_.append(ents);
  // Counting our own copy before it is durable is safe: the shell persists
  // it before sending the appends whose acknowledgements complete a quorum.
  prs_.at(id_).maybe_update(li);
  maybe_commit();
  bcast_append();
  return {errc::ok, id_, li, term_};
}

bool node::maybe_commit() {
  std::vector<uint64_t> matches;
  for (const auto& [id, pr] : prs_) matches.push_back(pr.match());
  if (matches.empty()) return false;
  std::sort(matches.begin(), matches.end(), std::greater<>());
  // Only an entry of our own term is committed by counting (Raft §5.4.2).
  return log_.maybe_commit(matches[quorum() - 1], term_);
}

bool node::quorum_active() {
  size_t active = 0;
  for (const auto& [id, pr] : prs_) active += (id == id_ || pr.recent_active);
  return active >= quorum();
}

void node::bcast_append() {
  for (const auto& [id, pr] : prs_)
    if (id != id_) maybe_send_append(id, true);
}

void node::bcast_heartbeat() {
  std::string ctx = pending_reads_.empty() ? std::string() : pending_reads_.back().context;
  for (const auto& [id, pr] : prs_)
    if (id != id_) send_heartbeat(id, ctx);
}

bool node::maybe_send_append(uint64_t to, bool send_if_empty) {
  progress& pr = prs_.at(to);
  if (pr.paused()) return false;
  auto prev_term = log_.term(pr.next() - 1);
  auto ents = log_.entries(pr.next(), cfg_.max_size_per_msg);
  if (ents.ok() && ents.value.empty() && !send_if_empty) return false;
  pb::Message m = make(pb::MSG_APP, to);
  if (!prev_term.ok() || !ents.ok()) {
    // What the follower needs next was compacted: send the snapshot. Not to
    // a follower we have not heard from lately: it is likely down.
    if (!pr.recent_active) return false;
    const pb::Snapshot& snap = log_.snapshot();
    BERTH_RAFT_INVARIANT(snap.metadata().index() != 0, "compacted without a snapshot");
    m.set_type(pb::MSG_SNAP);
    *m.mutable_snapshot() = snap;
    pr.become_snapshot(snap.metadata().index());
  } else {
    m.set_index(pr.next() - 1);
    m.set_log_term(prev_term.value);
    m.set_commit(log_.committed());
    uint64_t last = pr.next() - 1;
    for (auto& e : ents.value) {
      last = e.index();
      *m.add_entries() = std::move(e);
    }
    pr.sent_append(last);
  }
  send(std::move(m));
  return true;
}

void node::send_heartbeat(uint64_t to, const std::string& context) {
  auto m = make(pb::MSG_HEARTBEAT, to);
  // Not beyond what the follower is known to hold: it may lack the rest.
  m.set_commit(std::min(prs_.at(to).match(), log_.committed()));
  m.set_context(context);
  send(m);
}

void node::send_timeout_now(uint64_t to) { send(make(pb::MSG_TIMEOUT_NOW, to)); }

void node::send(pb::Message m) {
  // A forwarded request keeps its origin (the reader, or the transferee).
  if (m.from() == 0) m.set_from(id_);
  switch (m.type()) {
    case pb::MSG_VOTE:
    case pb::MSG_PRE_VOTE:
    case pb::MSG_VOTE_RESP:
    case pb::MSG_PRE_VOTE_RESP:
      BERTH_RAFT_INVARIANT(m.term() != 0, "election messages carry their term explicitly");
      break;
    case pb::MSG_PROP:
    case pb::MSG_READ_INDEX:
    case pb::MSG_TRANSFER_LEADER:
      // Forwarded requests carry no term: they are valid in any.
      m.set_term(0);
      break;
    default:
      m.set_term(term_);
  }
  msgs_.push_back(std::move(m));
}

// ---- membership ----

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
