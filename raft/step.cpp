// node: receiving messages: Raft's term rules, votes, and the follower and
// candidate sides of replication.

#include <algorithm>

#include "raft/node_internal.hpp"
#include "raft/raft.hpp"

namespace berth::raft {

namespace {

pb::MessageType vote_response_type(pb::MessageType t) {
  return t == pb::MSG_VOTE ? pb::MSG_VOTE_RESP : pb::MSG_PRE_VOTE_RESP;
}

}  // namespace

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
    case role::leader:
      return step_leader(m);
    case role::pre_candidate:
    case role::candidate:
      return step_candidate(m);
    case role::follower:
      return step_follower(m);
  }
  return {};
}

// Applies Raft's term rules; false if the message is to be ignored.
bool node::handle_term(const pb::Message& m) {
  if (m.term() == 0) return true;  // local, or a forwarded read or transfer request
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

result node::step_candidate(const pb::Message& m) {
  auto my_response = role_ == role::pre_candidate ? pb::MSG_PRE_VOTE_RESP : pb::MSG_VOTE_RESP;
  switch (m.type()) {
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

}  // namespace berth::raft
