#include "control/lease.hpp"

#include <algorithm>
#include <cstdio>

namespace berth {

lease renew(const lease& l, int64_t sent_ms, int64_t length_ms) {
  if (length_ms <= 0) return l;
  lease out = l;
  out.length_ms = length_ms;
  out.until_ms = std::max(l.until_ms, sent_ms + length_ms);
  return out;
}

bool expired(const lease& l, int64_t now_ms) {
  return l.length_ms > 0 && now_ms >= l.until_ms;
}

lease lease_at_start(int64_t length_ms, int64_t renewed_wall_ms, int64_t wall_now_ms,
                     int64_t steady_now_ms) {
  if (length_ms <= 0 || renewed_wall_ms <= 0) return {};
  int64_t left = renewed_wall_ms + length_ms - wall_now_ms;
  left = std::clamp<int64_t>(left, 0, length_ms);
  return {length_ms, steady_now_ms + left};
}

bool lease_record_due(int64_t recorded_wall_ms, int64_t renewed_wall_ms, int64_t length_ms) {
  int64_t every = std::min<int64_t>(1000, std::max<int64_t>(length_ms / 4, 1));
  return renewed_wall_ms - recorded_wall_ms >= every;
}

int64_t heartbeat_period_ms(int64_t length_ms, int64_t interval_ms) {
  if (length_ms <= 0) return interval_ms;
  return std::max<int64_t>(100, length_ms / 4);
}

bool fenced_publication(v1::AccessMode mode, bool read_only) {
  if (read_only) return false;
  return mode == v1::SINGLE_NODE_WRITER || mode == v1::MULTI_NODE_SINGLE_WRITER;
}

bool start_allowed(bool lease_out, const v1::Alloc& alloc) {
  if (!lease_out) return true;
  return std::none_of(alloc.volumes().begin(), alloc.volumes().end(),
                      [](const v1::AllocVolume& v) { return !v.read_only(); });
}

fence_plan plan_fence(const std::vector<publication_fact>& publications,
                      const std::set<std::string>& running_allocs) {
  fence_plan plan;
  for (const auto& p : publications) {
    if (!fenced_publication(p.mode, p.read_only)) continue;
    if (running_allocs.count(p.alloc_id))
      plan.stop.insert(p.alloc_id);
    else
      plan.unmount.insert(p.alloc_id);
  }
  return plan;
}

guard_signal guard_step(int64_t now_ms, int64_t lease_until_ms, int64_t kill_timeout_ms,
                        int64_t& term_at_ms, int64_t& kill_at_ms) {
  if (lease_until_ms <= 0 || now_ms < lease_until_ms) return guard_signal::none;
  if (term_at_ms == 0) {
    term_at_ms = now_ms;
    return guard_signal::term;
  }
  if (now_ms < term_at_ms + kill_timeout_ms) return guard_signal::none;
  if (kill_at_ms != 0 && now_ms < kill_at_ms + 1000) return guard_signal::none;
  kill_at_ms = now_ms;
  return guard_signal::kill;
}

std::string lease_file_text(const std::string& boot_id, int64_t until_ms) {
  return boot_id + " " + std::to_string(until_ms) + "\n";
}

int64_t lease_until_in_file(const std::string& text, const std::string& boot_id) {
  constexpr int64_t lapsed = 1;
  if (boot_id.empty() || text.empty() || text.back() != '\n') return lapsed;
  auto space = text.find(' ');
  if (space == std::string::npos || text.compare(0, space, boot_id) != 0 ||
      space != boot_id.size())
    return lapsed;
  auto digits = text.substr(space + 1, text.size() - space - 2);
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return lapsed;
  auto until = std::stoll(digits);
  return until > 0 ? until : lapsed;
}

int64_t supervisor_lease_until(int64_t held_until_ms, int64_t read_until_ms, bool signalled) {
  if (signalled && held_until_ms > 0) return held_until_ms;
  return std::max(held_until_ms, read_until_ms);
}

bool first_lease_wait_over(int64_t since_ms, int64_t now_ms) {
  return now_ms - since_ms >= first_lease_wait_ms;
}

namespace {

std::string seconds(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(ms) / 1000.0);
  return buf;
}

}  // namespace

uint64_t floor_at_start(const lease& l, int64_t now_ms) {
  return l.length_ms > 0 && !expired(l, now_ms) ? 0 : floor_lapsed;
}

uint64_t floor_after_renewal(uint64_t floor, uint64_t applied_index, bool first_lease) {
  if (first_lease) return 0;
  return floor == floor_lapsed ? applied_index : floor;
}

bool publish_waits_for_lease(const lease& l, uint64_t floor) {
  return l.length_ms == 0 && floor == floor_lapsed;
}

bool publish_allowed(uint64_t claim_index, uint64_t floor) { return claim_index >= floor; }

int64_t default_lease_ms(int64_t node_down_ms) { return node_down_ms / 3; }

std::optional<failure> check_lease(int64_t lease_ms, int64_t node_down_ms) {
  if (lease_ms <= 0)
    return failure{errc::invalid, "--node-lease must be more than 0 s; give it in seconds, e.g. "
                                  "--node-lease 15"};
  // The margin: at least 1 s (half the timeout when that is shorter, for
  // the short timeouts of tests).
  if (node_down_ms - lease_ms < std::min<int64_t>(1000, node_down_ms / 2))
    return failure{errc::invalid,
                   "--node-lease (" + seconds(lease_ms) +
                       ") must be at least 1 s shorter than --node-down-timeout (" +
                       seconds(node_down_ms) +
                       "): a client must fence itself before the servers release its claims; "
                       "lower --node-lease or raise --node-down-timeout"};
  return std::nullopt;
}

bool lease_grantable(const v1::Node* committed, bool marking_down) {
  return committed != nullptr && committed->has_client() &&
         committed->status() == v1::NODE_READY && !marking_down;
}

bool reach_ping_due(const node_reach& r, int64_t now_ms, int64_t interval_ms) {
  if (r.asked_ms != 0) return false;
  return r.lost || r.answered_ms == 0 || now_ms - r.answered_ms >= interval_ms;
}

bool reachable(const node_reach& r) { return !r.lost; }

node_reach reach_after_ping(node_reach r, int64_t asked_ms, bool answered, int64_t now_ms) {
  if (r.asked_ms != asked_ms) return r;  // not the ping in flight
  r.asked_ms = 0;
  r.lost = !answered;
  if (answered) r.answered_ms = now_ms;
  return r;
}

step_watch watch_after_ping(step_watch w, bool arrived) {
  w.unseen = arrived ? 0 : w.unseen + 1;
  return w;
}

bool step_lost(const step_watch& w) { return w.unseen >= 2; }

int64_t step_failure_hold_ms(int64_t confirmed_ms, int64_t confirm_timeout_ms, int64_t now_ms) {
  if (confirmed_ms == 0) return 0;
  return std::max<int64_t>(0, confirmed_ms + confirm_timeout_ms + 1000 - now_ms);
}

}  // namespace berth
