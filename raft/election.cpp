// node: role changes and campaigning.

#include "raft/node_internal.hpp"
#include "raft/raft.hpp"

namespace berth::raft {

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

}  // namespace berth::raft
