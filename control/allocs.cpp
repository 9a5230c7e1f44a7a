#include "control/allocs.hpp"
#include "messages/failure.hpp"

#include <algorithm>
#include <map>

#include "control/drain.hpp"
#include "control/entries.hpp"
#include "control/views.hpp"

namespace berth {

std::vector<std::string> claimed_volumes(const catalog& c, const v1::Alloc& a) {
  std::vector<std::string> out;
  for (const auto& av : a.volumes()) {
    auto v = find_volume(c, {a.namespace_(), av.volume_id()});
    if (v && find_claim(*v, a.id()) != nullptr) out.push_back(av.volume_id());
  }
  return out;
}

bool claims_freed(const catalog& c, const std::string& alloc_id) {
  const auto* a = find_alloc(c, alloc_id);
  return a == nullptr || claimed_volumes(c, *a).empty();
}

v1::Alloc pending_alloc(const v1::AllocRunRequest& req, std::string id, int64_t now_ms) {
  v1::Alloc a;
  a.set_id(std::move(id));
  a.set_namespace_(ns_or_default(req.namespace_()));
  a.set_node_id(req.node_id());
  a.set_group(req.group());
  a.set_replaces(req.replaces());
  *a.mutable_volumes() = req.volumes();
  *a.mutable_command() = req.command();
  a.set_state(v1::ALLOC_PENDING);
  a.set_created_at_ms(now_ms);
  a.set_modified_at_ms(now_ms);
  return a;
}

bool is_group_run(const v1::AllocRunRequest& req) {
  return req.count() > 0 || !req.group().empty() || req.per_alloc();
}

std::optional<failure> admit_group_run(const catalog& c, const v1::AllocRunRequest& req) {
  const std::string what = "alloc group " + quote_name(req.group());
  if (req.group().empty())
    return failure{errc::invalid, "alloc run --count and --per-alloc need --group NAME (the "
                                  "allocs are NAME[0], NAME[1], ...)"};
  if (!valid_id(req.group()))
    return failure{errc::invalid, what + ": not a valid group name (1-128 of A-Z a-z 0-9 _ . -, "
                                         "not starting with . or -)"};
  if (req.count() < 1 || req.count() > max_group_count)
    return failure{errc::invalid, what + ": --count must be 1 to " +
                                      std::to_string(max_group_count) + ", not " +
                                      std::to_string(req.count())};
  if (!req.id().empty())
    return failure{errc::invalid, what + ": --id is not taken with --group (the allocs are " +
                                      member_id(req.group(), 0) + " .. " +
                                      member_id(req.group(), static_cast<int>(req.count()) - 1) +
                                      ")"};
  if (!req.per_alloc()) return std::nullopt;
  std::vector<std::string> missing;
  for (int i = 0; i < static_cast<int>(req.count()); ++i)
    for (const auto& v : req.volumes()) {
      auto id = member_id(v.volume_id(), i);
      if (!has_volume(c, {ns_or_default(req.namespace_()), id})) missing.push_back(quote_name(id));
    }
  if (missing.empty()) return std::nullopt;
  std::string list;
  for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
  return failure{errc::not_found,
                 what + ": --per-alloc needs one volume per alloc, and " +
                     std::to_string(missing.size()) + " are not registered in namespace " +
                     quote_name(ns_or_default(req.namespace_())) + ": " + list +
                     " (create them with: berth volume create SPEC --count " +
                     std::to_string(req.count()) + "); nothing was run"};
}

v1::AllocRunRequest group_member(const v1::AllocRunRequest& req, int index) {
  auto m = req;
  m.set_id(member_id(req.group(), index));
  m.clear_count();
  m.clear_per_alloc();
  if (req.per_alloc())
    for (auto& v : *m.mutable_volumes()) v.set_volume_id(member_id(v.volume_id(), index));
  return m;
}

v1::Response group_outcome(const v1::AllocRunRequest& req,
                           const std::vector<v1::Response>& answers) {
  v1::Response out;
  std::vector<std::string> failed;
  std::map<std::string, int> states;  // of the members answered without an error
  for (size_t i = 0; i < answers.size(); ++i) {
    const auto& r = answers[i];
    for (const auto& a : r.allocs()) *out.add_allocs() = a;
    if (r.has_error())
      failed.push_back(member_id(req.group(), static_cast<int>(i)) + ": " + r.error().message());
    else if (r.allocs_size() > 0)
      ++states[std::string(name_of(r.allocs(0).state()))];
  }
  // "3 of 3 allocs running", or with members that ended before (a group
  // run sent again after they stopped): "1 of 3 allocs running, 2 complete".
  const int count = static_cast<int>(req.count());
  int running = states.count("running") ? states.at("running") : 0;
  std::string counts = std::to_string(running) + " of " + std::to_string(count) + " allocs running";
  for (const auto& [state, n] : states)
    if (state != "running") counts += ", " + std::to_string(n) + " " + state;
  const std::string what = "alloc group " + quote_name(req.group());
  if (failed.empty()) {
    out.set_message(what + ": " + counts +
                    (running < count ? " (members that ended are not run again: give the group "
                                       "another name to run it anew)"
                                     : ""));
    return out;
  }
  std::string text = what + ": " + std::to_string(failed.size()) + " of " +
                     std::to_string(count) + " allocs failed (" + counts + "):";
  for (const auto& f : failed) text += "\n  " + f;
  auto err = error_response(failure{errc::refused, text});
  *err.mutable_allocs() = out.allocs();
  return err;
}

bool same_alloc_run(const v1::Alloc& known, const v1::Alloc& requested) {
  if (known.group() != requested.group()) return false;
  if (known.namespace_() != requested.namespace_() ||
      (!requested.node_id().empty() && known.node_id() != requested.node_id()) ||
      known.volumes_size() != requested.volumes_size() ||
      known.command_size() != requested.command_size())
    return false;
  for (int i = 0; i < known.command_size(); ++i)
    if (known.command(i) != requested.command(i)) return false;
  for (int i = 0; i < known.volumes_size(); ++i) {
    auto k = known.volumes(i);
    k.clear_published_path();  // filled in as the alloc starts
    if (k.SerializeAsString() != requested.volumes(i).SerializeAsString()) return false;
  }
  return true;
}

std::optional<failure> admit_alloc_request(const catalog& c, const v1::Alloc& a) {
  auto problems = validate_alloc(a);
  if (a.node_id().empty())  // placed: the node comes after
    problems.erase(std::remove_if(problems.begin(), problems.end(),
                                  [](const problem& p) { return p.field == "node"; }),
                   problems.end());
  if (!problems.empty())
    return failure{errc::invalid, describe("alloc " + quote_name(a.id()), problems)};
  if (find_alloc(c, a.id()) != nullptr)
    return failure{errc::refused, "alloc " + quote_name(a.id()) +
                                      " exists already with another node, volumes or command; "
                                      "run with another id (see berth alloc status " +
                                      a.id() + ")"};
  for (const auto& v : a.volumes())
    if (!has_volume(c, {a.namespace_(), v.volume_id()}))
      return failure{errc::not_found, "volume " + quote_name(v.volume_id()) +
                                          " is not registered in namespace " +
                                          quote_name(a.namespace_()) +
                                          " (list volumes with: berth volume status)"};
  return std::nullopt;
}

std::optional<failure> refuse_alloc_node(const catalog& c, const std::string& node_id,
                                         bool connected) {
  const auto* n = find_node(c, node_id);
  if (n == nullptr || !n->has_client())
    return failure{errc::not_found, "node " + quote_name(node_id) +
                                        " has no berth client (list nodes with: berth node status)"};
  if (n->status() == v1::NODE_DOWN)
    return failure{errc::refused, "node " + quote_name(node_id) +
                                      " is down (its client stopped heartbeating); run the alloc "
                                      "on another node"};
  if (auto refused = refuse_ineligible(c, node_id)) return refused;
  if (!connected)
    return failure{errc::unavailable,
                   "the berth client of node " + quote_name(node_id) +
                       " is not connected to this leader yet; retry",
                   true};
  return std::nullopt;
}

std::optional<failure> admit_alloc_run(const catalog& c, const v1::Alloc& a, bool connected) {
  if (a.node_id().empty() || !valid_id(a.node_id())) {
    auto problems = validate_alloc(a);
    return failure{errc::invalid, describe("alloc " + quote_name(a.id()), problems)};
  }
  if (auto f = admit_alloc_request(c, a)) return f;
  return refuse_alloc_node(c, a.node_id(), connected);
}

std::optional<failure> repeated_run_failure(const v1::Alloc& settled) {
  if (settled.state() != v1::ALLOC_FAILED) return std::nullopt;
  return failure{errc::refused, "alloc " + quote_name(settled.id()) + " failed: " +
                                    settled.message() +
                                    " (this request was applied before and is not run "
                                    "again: to run it, give a new --id; see berth alloc "
                                    "status " +
                                    settled.id() + ")"};
}

alloc_for_claim alloc_of_claim(const catalog& c, const v1::ClaimRequest& req, int64_t now_ms) {
  v1::Alloc a;
  if (const auto* known = find_alloc(c, req.alloc_id())) {
    a = *known;
    if (alloc_terminal(a.state()))
      return {failure{errc::refused, "alloc " + quote_name(a.id()) + " is " +
                                         std::string(name_of(a.state())) +
                                         "; a terminal alloc claims nothing (use a new alloc id)"},
              std::nullopt};
    if (a.node_id() != req.node_id())
      return {failure{errc::refused, "alloc " + quote_name(a.id()) + " runs on node " +
                                         quote_name(a.node_id()) + ", not " + quote_name(req.node_id())},
              std::nullopt};
    for (const auto& v : a.volumes())
      if (v.volume_id() == req.volume_id()) return {std::nullopt, std::move(a)};
  } else {
    // The claim rules name a bad id; no alloc is made for it.
    if (!valid_alloc_id(req.alloc_id()) || !valid_id(req.node_id())) return {};
    a.set_id(req.alloc_id());
    a.set_namespace_(ns_or_default(req.namespace_()));
    a.set_node_id(req.node_id());
    a.set_state(v1::ALLOC_RUNNING);
    a.set_created_at_ms(now_ms);
    a.set_message("claims made with berth volume claim");
  }
  if (auto refused = refuse_ineligible(c, req.node_id())) return {refused, std::nullopt};
  auto* v = a.add_volumes();
  v->set_name(req.volume_id());
  v->set_volume_id(req.volume_id());
  v->set_read_only(req.read_only());
  a.set_modified_at_ms(now_ms);
  return {std::nullopt, std::move(a)};
}

bool alloc_may_become(v1::AllocState from, v1::AllocState to) {
  switch (from) {
    case v1::ALLOC_PENDING:
      return to == v1::ALLOC_RUNNING || to == v1::ALLOC_FAILED || to == v1::ALLOC_LOST;
    case v1::ALLOC_RUNNING:
      return to == v1::ALLOC_COMPLETE || to == v1::ALLOC_FAILED || to == v1::ALLOC_LOST;
    default:
      return false;
  }
}

v1::Alloc alloc_in_state(v1::Alloc a, v1::AllocState state, std::string why, int64_t now_ms,
                         int32_t exit_code) {
  a.set_state(state);
  a.set_message(std::move(why));
  a.set_exit_code(exit_code);
  a.set_modified_at_ms(now_ms);
  return a;
}

alloc_update_result alloc_after_update(const catalog& c, const v1::AllocUpdate& u,
                                       int64_t now_ms) {
  const auto* a = find_alloc(c, u.id());
  if (a == nullptr) return {failure{errc::not_found, "alloc " + quote_name(u.id()) + " does not exist"}, {}};
  if (!alloc_may_become(a->state(), u.state()) || a->node_id() != u.node_id()) return {};
  return {std::nullopt, alloc_in_state(*a, u.state(), u.message(), now_ms, u.exit_code())};
}

replacement replace_lost_member(const catalog& c, const std::string& id) {
  replacement out;
  const auto* a = find_alloc(c, id);
  if (a == nullptr || a->state() != v1::ALLOC_LOST || a->group().empty() || a->no_replace())
    return out;  // drop: gone, not lost, not a group's, or stopped by the operator
  auto next = replacement_id(id);
  if (next.size() > 128 || !valid_alloc_id(next)) {
    out.why = "its replacement's id " + quote_name(next) + " is not a valid alloc id";
    return out;  // drop: replaced 99,999 times (or an id at the length limit)
  }
  if (c.allocs.count(next)) return out;  // drop: replaced already
  if (auto held = claimed_volumes(c, *a); !held.empty()) {
    out.what = replacement::wait;
    out.why = "the release of its claims on";
    for (const auto& v : held) out.why += " " + quote_name(v);
    return out;
  }
  out.what = replacement::run;
  auto& r = out.request;
  r.set_id(next);
  r.set_namespace_(a->namespace_());
  r.set_group(a->group());
  r.set_replaces(id);
  // A pinned member stays on its node (and waits for it); a placed one is
  // placed anew.
  if (!a->placed()) r.set_node_id(a->node_id());
  *r.mutable_volumes() = a->volumes();
  for (auto& v : *r.mutable_volumes()) v.clear_published_path();
  *r.mutable_command() = a->command();
  return out;
}

std::optional<v1::Alloc> alloc_kept_lost(const catalog& c, const std::string& id, int64_t now_ms) {
  const auto* a = find_alloc(c, id);
  if (a == nullptr || a->state() != v1::ALLOC_LOST || a->group().empty() || a->no_replace() ||
      c.allocs.count(replacement_id(id)))
    return std::nullopt;
  auto kept = *a;
  kept.set_no_replace(true);
  kept.set_message(a->message() + "; stopped by the operator: not replaced");
  kept.set_modified_at_ms(now_ms);
  return kept;
}

std::vector<v1::Change> fail_interrupted_allocs(const catalog& c, int64_t now_ms) {
  std::vector<v1::Change> out;
  for (const auto& [id, a] : c.allocs)
    if (a.state() == v1::ALLOC_PENDING)
      out.push_back(upsert_change(alloc_in_state(
          a, v1::ALLOC_FAILED, "the leader changed while the alloc was starting; run it again",
          now_ms)));
  return out;
}

}  // namespace berth
