// node: the leader: replication to followers, commit, ReadIndex, transfer.

#include <algorithm>
#include <functional>

#include "raft/invariant.hpp"
#include "raft/node_internal.hpp"
#include "raft/raft.hpp"

namespace berth::raft {

result node::step_leader(const pb::Message& m) {
  switch (m.type()) {
    case pb::MSG_BEAT:
      bcast_heartbeat();
      return {};
    case pb::MSG_CHECK_QUORUM:
      if (!quorum_active()) become_follower(term_, 0);
      for (auto& [id, pr] : prs_) pr.recent_active = id == id_;
      return {};
    case pb::MSG_READ_INDEX:
      return handle_read_index(m);
    case pb::MSG_TRANSFER_LEADER: {
      uint64_t to = m.from();
      if (!prs_.count(to)) return fail(errc::unknown_peer, lead_);
      if (to == id_ || lead_transferee_ == to) return {};
      abort_transfer();       // a newer request replaces an older one
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
  // it before it handles any acknowledgement of these appends (it may send
  // them first) and before it applies what they commit.
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

void node::send_timeout_now(uint64_t to) {
  send(make(pb::MSG_TIMEOUT_NOW, to));
}

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

}  // namespace berth::raft
