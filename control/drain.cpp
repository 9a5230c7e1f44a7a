#include "control/drain.hpp"

#include "control/allocs.hpp"
#include "control/entries.hpp"
#include "control/nodes.hpp"
#include "messages/failure.hpp"

namespace berth {

namespace {

failure unknown_node(const std::string& id) {
  return failure{errc::not_found,
                 "node " + quote_name(id) + " is not known (list nodes with: berth node status)"};
}

std::string seconds(int64_t ms) {
  return std::to_string((ms + 999) / 1000) + " s";
}

}  // namespace

node_update drain_request(const catalog& c, const v1::NodeDrainRequest& r, int64_t now_ms) {
  const auto* n = find_node(c, r.node_id());
  if (n == nullptr) return {unknown_node(r.node_id()), std::nullopt, ""};
  const auto& id = r.node_id();
  if (r.disable()) {
    if (!n->has_drain())
      return {std::nullopt, std::nullopt,
              "node " + quote_name(id) + " is not draining; nothing to cancel"};
    auto next = *n;
    next.clear_drain();
    next.set_ineligible(r.keep_ineligible());
    return {std::nullopt, std::move(next),
            "drain of node " + quote_name(id) + " cancelled; " +
                (r.keep_ineligible() ? "it stays ineligible (enable it with: berth node "
                                       "eligibility " +
                                           id + " --enable)"
                                     : std::string("it takes new allocs and claims again"))};
  }
  if (r.keep_ineligible())
    return {failure{errc::invalid, "--keep-ineligible goes with --disable (cancelling a drain)"},
            std::nullopt, ""};
  if (r.deadline_ms() < 0)
    return {failure{errc::invalid, "the drain deadline of node " + quote_name(id) +
                                       " is negative; give a duration such as 30m or 1h"},
            std::nullopt, ""};
  auto next = *n;
  auto* d = next.mutable_drain();
  bool started = n->has_drain();
  if (!started) d->set_started_at_ms(now_ms);
  // 0 with no_deadline: none; 0 without it: force at once (now).
  d->set_deadline_ms(r.no_deadline() ? 0 : now_ms + r.deadline_ms());
  d->set_keep_plugins(r.keep_plugins());
  next.set_ineligible(true);
  next.set_drained_at_ms(0);
  auto progress = drain_progress(c, id);
  std::string msg = "node " + quote_name(id) + (started ? " drain updated" : " is draining") +
                    ": " + std::to_string(progress.allocs_left()) + " alloc(s) to stop, " +
                    std::to_string(progress.claims_left()) + " claim(s) to release; ";
  if (r.no_deadline())
    msg += "no deadline";
  else if (r.deadline_ms() == 0)
    msg += "deadline now (claims released without the node)";
  else
    msg += "deadline in " + seconds(r.deadline_ms());
  msg += " (follow with: berth node status " + id + ")";
  if (!started && progress.allocs_left() == 0 && progress.claims_left() == 0)
    msg = "node " + quote_name(id) + " is draining: nothing runs on it, so it is drained at once";
  return {std::nullopt, std::move(next), std::move(msg)};
}

node_update eligibility_request(const catalog& c, const v1::NodeEligibilityRequest& r) {
  const auto* n = find_node(c, r.node_id());
  if (n == nullptr) return {unknown_node(r.node_id()), std::nullopt, ""};
  const auto& id = r.node_id();
  if (r.eligible()) {
    if (n->has_drain())
      return {failure{errc::refused, "node " + quote_name(id) +
                                         " is draining; cancel the drain first with: berth node "
                                         "drain " +
                                         id + " --disable"},
              std::nullopt, ""};
    if (!n->ineligible() && !n->plugins_withdrawn())
      return {std::nullopt, std::nullopt, "node " + quote_name(id) + " is eligible already"};
    auto next = *n;
    next.set_ineligible(false);
    next.set_plugins_withdrawn(false);
    next.set_drained_at_ms(0);
    return {std::nullopt, std::move(next),
            "node " + quote_name(id) + " is eligible: it takes new allocs and claims" +
                (n->plugins_withdrawn() ? "; its plugin instances are reported again" : "")};
  }
  if (n->ineligible())
    return {std::nullopt, std::nullopt, "node " + quote_name(id) + " is ineligible already"};
  auto next = *n;
  next.set_ineligible(true);
  return {std::nullopt, std::move(next),
          "node " + quote_name(id) +
              " is ineligible: it takes no new allocs or claims; what runs there keeps running "
              "(stop it with: berth node drain " +
              id + ")"};
}

std::optional<failure> refuse_ineligible(const catalog& c, const std::string& node_id) {
  const auto* n = find_node(c, node_id);
  if (n == nullptr || !n->ineligible()) return std::nullopt;
  if (n->has_drain())
    return failure{errc::refused, "node " + quote_name(node_id) +
                                      " is draining and takes no new allocs or claims; use "
                                      "another node (or cancel the drain: berth node drain " +
                                      node_id + " --disable)"};
  return failure{errc::refused, "node " + quote_name(node_id) +
                                    " is ineligible and takes no new allocs or claims; use "
                                    "another node (or enable it: berth node eligibility " +
                                    node_id + " --enable)"};
}

v1::DrainProgress drain_progress(const catalog& c, const std::string& node_id) {
  v1::DrainProgress p;
  uint32_t allocs = 0;
  uint32_t claims = 0;
  for (const auto& [id, a] : c.allocs)
    if (a.node_id() == node_id && !alloc_terminal(a.state())) ++allocs;
  for (const auto& key : volumes_claimed_on(c, node_id))
    if (auto v = find_volume(c, key))
      for (const auto& claim : v->claims())
        if (claim.node_id() == node_id) ++claims;
  p.set_allocs_left(allocs);
  p.set_claims_left(claims);
  return p;
}

std::vector<std::string> draining_nodes(const catalog& c) {
  std::vector<std::string> out;
  for (const auto& [id, n] : c.nodes)
    if (n.has_drain()) out.push_back(id);
  return out;
}

drain_plan plan_drain(const catalog& c, const std::string& node_id, int64_t now_ms) {
  drain_plan plan;
  const auto* n = find_node(c, node_id);
  if (n == nullptr || !n->has_drain()) return plan;
  const auto& d = n->drain();
  auto progress = drain_progress(c, node_id);
  if (progress.allocs_left() == 0 && progress.claims_left() == 0) {
    plan.done = true;
    return plan;
  }
  if (!d.forced() && d.deadline_ms() != 0 && now_ms >= d.deadline_ms() &&
      progress.allocs_left() + progress.claims_left() > 0) {
    plan.force = true;
    return plan;
  }
  for (const auto& [id, a] : c.allocs) {
    if (a.node_id() != node_id) continue;
    if (a.state() == v1::ALLOC_RUNNING || (d.forced() && !alloc_terminal(a.state())))
      plan.stop.push_back(id);
  }
  return plan;
}

std::vector<v1::Change> force_drain(const catalog& c, const std::string& node_id, int64_t now_ms) {
  std::vector<v1::Change> out;
  const auto* n = find_node(c, node_id);
  if (n == nullptr || !n->has_drain() || n->drain().forced()) return out;
  auto next = *n;
  next.mutable_drain()->set_forced(true);
  out.push_back(upsert_change(std::move(next)));
  // A client may run their commands: they end when it confirms the stop.
  if (n->has_client()) return out;
  auto why = "stopped by the drain of node " + quote_name(node_id) + " at its deadline";
  for (const auto& [id, a] : c.allocs) {
    if (a.node_id() != node_id || alloc_terminal(a.state())) continue;
    out.push_back(upsert_change(alloc_in_state(a, stopped_state(a.state()), why, now_ms)));
  }
  return out;
}

v1::AllocState stopped_state(v1::AllocState from) {
  return alloc_may_become(from, v1::ALLOC_COMPLETE) ? v1::ALLOC_COMPLETE : v1::ALLOC_FAILED;
}

std::vector<v1::Change> finish_drain(const catalog& c, const std::string& node_id, int64_t now_ms) {
  const auto* n = find_node(c, node_id);
  if (n == nullptr || !n->has_drain()) return {};
  if (!plan_drain(c, node_id, now_ms).done) return {};
  auto next = *n;
  bool keep = n->drain().keep_plugins();
  next.clear_drain();
  next.set_ineligible(true);
  next.set_drained_at_ms(now_ms);
  next.set_plugins_withdrawn(!keep && next.plugin_ids_size() > 0);
  return {upsert_change(std::move(next))};
}

std::vector<v1::Fingerprint> instances_to_withdraw(const catalog& c, const std::string& node_id) {
  const auto* n = find_node(c, node_id);
  if (n == nullptr || !n->plugins_withdrawn()) return {};
  return instances_of_down_node(c, node_id);
}

bool fingerprint_withheld(const catalog& c, const v1::Fingerprint& f) {
  if (f.remove()) return false;
  const auto* n = find_node(c, f.node_id());
  return n != nullptr && n->plugins_withdrawn();
}

}  // namespace berth
