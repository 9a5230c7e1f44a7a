#include "control/lease.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

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

lease lease_at_start_in_boot(lease at_start, const std::string& file_text,
                             const std::string& boot_id) {
  if (at_start.length_ms <= 0 || boot_id.empty() ||
      file_text.compare(0, boot_id.size() + 1, boot_id + " ") != 0)
    return at_start;
  at_start.until_ms = std::min(at_start.until_ms, lease_until_in_file(file_text, boot_id));
  return at_start;
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

bool controller_publish_allowed(const lease& l, uint64_t floor, uint64_t claim_index) {
  return publish_waits_for_lease(l, floor) || publish_allowed(claim_index, floor);
}

int64_t default_lease_ms(int64_t node_down_ms) { return node_down_ms / 3; }

int64_t fence_margin_ms(int64_t lease_ms, int64_t node_down_ms, const fence_times& fence) {
  int64_t rates = (std::max<int64_t>(node_down_ms, 0) + 999) / 1000;
  return std::max(fence.kill_timeout_ms, heartbeat_period_ms(lease_ms, 0)) + fence.unmount_ms +
         fence_poll_ms + rates;
}

bool margin_covers_fence(int64_t lease_ms, int64_t node_down_ms, const fence_times& fence) {
  return lease_ms > 0 && node_down_ms - lease_ms >= fence_margin_ms(lease_ms, node_down_ms, fence);
}

int64_t least_node_down_ms(int64_t lease_ms, const fence_times& fence) {
  auto covers = [&](int64_t down) {
    return margin_covers_fence(lease_ms > 0 ? lease_ms : default_lease_ms(down), down, fence);
  };
  // Both sides grow with D (the margin by D/1000 and, with the default
  // lease, by D/12 at most, against 2D/3): the least D by bisection.
  int64_t lo = 0, hi = 1;
  while (!covers(hi)) {
    lo = hi;
    if (hi > std::numeric_limits<int64_t>::max() / 4) return std::numeric_limits<int64_t>::max();
    hi *= 2;
  }
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (covers(mid) ? hi : lo) = mid;
  }
  return hi;
}

std::optional<failure> check_lease(int64_t lease_ms, int64_t node_down_ms, const fence_times& fence,
                                   bool lease_given) {
  if (lease_ms <= 0)
    return failure{errc::invalid, "--node-lease must be more than 0 s; give it in seconds, e.g. "
                                  "--node-lease 15"};
  if (fence.kill_timeout_ms < 0 || fence.unmount_ms < 0)
    return failure{errc::invalid, "--kill-timeout and --fence-unmount-time must be 0 s or more"};
  if (margin_covers_fence(lease_ms, node_down_ms, fence)) return std::nullopt;
  auto period = heartbeat_period_ms(lease_ms, 0);
  auto least = least_node_down_ms(lease_given ? lease_ms : 0, fence);
  std::string lease_text = "--node-lease " + seconds(lease_ms);
  if (!lease_given) lease_text += " (a third of --node-down-timeout)";
  std::string fix = "raise --node-down-timeout to at least " + seconds(least);
  fix +=
      lease_given ? " (with --node-lease " + seconds(lease_ms) + ")" : " (the lease a third of it)";
  return failure{
      errc::invalid,
      "the lease margin does not cover a client's fence: --node-down-timeout - --node-lease "
      "must be at least max(--kill-timeout, --node-lease/4) + --fence-unmount-time + " +
          seconds(fence_poll_ms) + " + --node-down-timeout/1000, but " + seconds(node_down_ms) +
          " - " + seconds(lease_ms) + " = " + seconds(node_down_ms - lease_ms) + " < max(" +
          seconds(fence.kill_timeout_ms) + ", " + seconds(period) + ") + " +
          seconds(fence.unmount_ms) + " + " + seconds(fence_poll_ms) + " + " +
          seconds((std::max<int64_t>(node_down_ms, 0) + 999) / 1000) + " = " +
          seconds(fence_margin_ms(lease_ms, node_down_ms, fence)) + " (--node-down-timeout " +
          seconds(node_down_ms) + ", " + lease_text + ", --kill-timeout " +
          seconds(fence.kill_timeout_ms) + ", --fence-unmount-time " + seconds(fence.unmount_ms) +
          "): the servers could release a silent client's claims before its fence has stopped "
          "its writers (SIGTERM, SIGKILL after --kill-timeout) and unmounted their volumes; " +
          fix +
          ", or lower --node-lease, --kill-timeout or --fence-unmount-time "
          "(docs/user-guide.md, Leases and self-fencing)"};
}

int64_t most_client_kill_ms(int64_t lease_ms, int64_t node_down_ms, const fence_times& servers) {
  // D - L >= max(K, L/4) + U + polls + D/1000: the K side alone.
  fence_times none{0, servers.unmount_ms};
  int64_t room = node_down_ms - lease_ms -
                 (fence_margin_ms(lease_ms, node_down_ms, none) - heartbeat_period_ms(lease_ms, 0));
  return margin_covers_fence(lease_ms, node_down_ms,
                             {std::max<int64_t>(room, 0), servers.unmount_ms})
             ? std::max<int64_t>(room, 0)
             : 0;
}

std::optional<failure> check_client_fence(const std::string& node_id, int64_t client_kill_ms,
                                          int64_t lease_ms, int64_t node_down_ms,
                                          const fence_times& servers) {
  fence_times client{client_kill_ms, servers.unmount_ms};
  if (client_kill_ms >= 0 && margin_covers_fence(lease_ms, node_down_ms, client))
    return std::nullopt;
  auto most = most_client_kill_ms(lease_ms, node_down_ms, servers);
  return failure{
      errc::invalid,
      "node " + quote_name(node_id) + ": its client's --kill-timeout " + seconds(client_kill_ms) +
          " is longer than the servers' lease margin covers (at most " + seconds(most) +
          " with --node-down-timeout " + seconds(node_down_ms) + ", --node-lease " +
          seconds(lease_ms) + " and --fence-unmount-time " + seconds(servers.unmount_ms) +
          "; the servers' own --kill-timeout is " + seconds(servers.kill_timeout_ms) +
          "): D - L >= max(K, L/4) + U + " + seconds(fence_poll_ms) +
          " + D/1000 must hold with the client's K, or the servers could release its claims "
          "while its writers still run their SIGTERM grace; the servers grant this client no "
          "lease. Start it with --kill-timeout " +
          seconds(most) +
          " or less (the servers' value is safe), or raise the servers' --node-down-timeout "
          "(docs/user-guide.md, Leases and self-fencing)"};
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
