#include "control/placement.hpp"
#include "messages/failure.hpp"

#include <algorithm>

#include "control/allocs.hpp"
#include "control/nodes.hpp"
#include "control/release.hpp"
#include "messages/model.hpp"

namespace berth {

bool in_required_topology(const v1::Plugin& p, const std::string& node_id,
                          const v1::TopologyRequest* topology) {
  if (topology == nullptr || topology->required().empty()) return true;
  const auto* inst = node_instance(p, node_id);
  if (inst == nullptr) return false;
  for (const auto& t : topology->required())
    if (topology_matches(inst->accessible_topology(), t)) return true;
  return false;
}

std::vector<std::string> controller_candidates(
    const v1::Plugin& p, const std::function<bool(const std::string&)>& connected,
    const v1::TopologyRequest* topology) {
  std::vector<std::string> out;
  for (const auto& c : p.controllers())
    if (c.healthy() && connected(c.node_id()) && in_required_topology(p, c.node_id(), topology))
      out.push_back(c.node_id());
  return out;
}

std::optional<std::string> next_in_turn(const std::vector<std::string>& candidates, size_t& turn) {
  if (candidates.empty()) return std::nullopt;
  return candidates[turn++ % candidates.size()];
}

int64_t node_volume_count(const catalog& c, const std::string& node, const std::string& plugin,
                          const volume_key& except, const std::set<volume_key>& in_flight) {
  // |claimed ∪ in_flight \ {except}| without building the union: an attach
  // storm of k claims on one node called this k times with both sets
  // growing to k (copying and inserting into a set each time: quadratic
  // allocations in the leader's one mailbox, ahead of every other plugin's
  // claims).  Lookups only, over the smaller set.
  static const std::set<volume_key> none;
  auto it = c.claimed_on.find({node, plugin});
  const auto& claimed = it == c.claimed_on.end() ? none : it->second;
  auto n = static_cast<int64_t>(claimed.size() + in_flight.size());
  const auto& small = claimed.size() <= in_flight.size() ? claimed : in_flight;
  const auto& large = &small == &claimed ? in_flight : claimed;
  for (const auto& k : small)
    if (large.count(k)) --n;
  if (claimed.count(except) || in_flight.count(except)) --n;
  return n;
}

int controller_call_limit(const v1::Plugin& p) {
  int sum = 0;
  for (const auto& c : p.controllers())
    if (c.healthy()) sum += c.max_calls() > 0 ? c.max_calls() : 16;
  return std::max(1, sum);
}

// --- alloc run without --node -----------------------------------------------------

namespace {

// A volume of the volume group of one of the alloc's volumes (`with`),
// not itself requested: the node must reach it too.
struct group_volume {
  std::string group, with;
  v1::Volume volume;
};

// The other volumes of the groups of the alloc's volumes, each decoded once.
std::vector<group_volume> group_volumes_of(const catalog& c, const v1::Alloc& a,
                                           const std::vector<std::optional<v1::Volume>>& volumes) {
  std::vector<group_volume> out;
  std::set<std::string> requested, groups;
  for (const auto& v : volumes)
    if (v) requested.insert(v->id());
  for (const auto& v : volumes) {
    if (!v || v->group().empty() || !groups.insert(v->group()).second) continue;
    auto it = c.volume_groups.find({v->namespace_(), v->group()});
    if (it == c.volume_groups.end()) continue;
    for (const auto& id : it->second)
      if (!requested.count(id))
        if (auto other = find_volume(c, {v->namespace_(), id}))
          out.push_back({v->group(), v->id(), std::move(*other)});
  }
  return out;
}

// Why `a` cannot run on `node` now, or "" when it can.
std::string node_reason(const catalog& c, const v1::Alloc& a, const std::string& node,
                        const std::vector<std::optional<v1::Volume>>& volumes,
                        const std::vector<group_volume>& grouped, const placement_facts& facts) {
  const bool connected = facts.connected && facts.connected(node);
  if (auto f = refuse_alloc_node(c, node, connected)) return f->message;
  if (auto f = refuse_client_away(c, node, connected,
                                  facts.marking_down && facts.marking_down(node)))
    return f->message;
  static const std::map<std::pair<std::string, std::string>, std::set<volume_key>> none;
  const auto& claiming = facts.claiming != nullptr ? *facts.claiming : none;
  // This alloc's volumes checked so far, by plugin: they count against the
  // node's max volumes for the ones after them.
  std::map<std::string, std::set<volume_key>> planned;
  for (int i = 0; i < a.volumes_size(); ++i) {
    const auto& av = a.volumes(i);
    if (!volumes[i])
      return "volume " + quote_name(av.volume_id()) + " is not registered in namespace " +
             quote_name(a.namespace_());
    auto v = *volumes[i];
    const volume_key key{v.namespace_(), v.id()};
    const auto* plugin = find_plugin(c, v.plugin_id());
    auto& in_flight = planned[v.plugin_id()];
    if (auto it = claiming.find({node, v.plugin_id()}); it != claiming.end())
      in_flight.insert(it->second.begin(), it->second.end());
    claim_request r;
    r.alloc_id = a.id();
    r.node_id = node;
    r.write = !av.read_only();
    r.now_ms = facts.now_ms;
    r.node_volume_count = node_volume_count(c, node, v.plugin_id(), key, in_flight);
    r.allow_abnormal = facts.allow_abnormal;
    if (auto f = claim(v, r, plugin)) return f->message;
    in_flight.insert(key);
  }
  for (const auto& g : grouped)
    if (auto f = refuse_inaccessible(g.volume, find_plugin(c, g.volume.plugin_id()), node))
      return "volume " + quote_name(g.with) + " is in volume group " + quote_name(g.group) + ", and " +
             f->message;
  return "";
}

}  // namespace

placement place_alloc(const catalog& c, const v1::Alloc& a, const placement_facts& facts) {
  placement out;
  std::map<std::string, int64_t> live, group;
  auto add = [&](const std::string& id, const v1::Alloc& other) {
    if (id == a.id() || alloc_terminal(other.state())) return;
    ++live[other.node_id()];
    if (!a.group().empty() && other.group() == a.group()) ++group[other.node_id()];
  };
  for (const auto& [id, other] : c.allocs) add(id, other);
  if (facts.starting != nullptr)
    for (const auto& [id, other] : *facts.starting)
      if (c.allocs.count(id) == 0) add(id, other);  // committed already: counted above
  auto count = [](const std::map<std::string, int64_t>& m, const std::string& node) {
    auto it = m.find(node);
    return it == m.end() ? int64_t{0} : it->second;
  };
  std::vector<std::optional<v1::Volume>> volumes;  // each decoded once
  for (const auto& av : a.volumes())
    volumes.push_back(find_volume(c, {ns_or_default(a.namespace_()), av.volume_id()}));
  auto grouped = group_volumes_of(c, a, volumes);
  const node_fit* best = nullptr;
  out.nodes.reserve(c.nodes.size());
  for (const auto& [id, n] : c.nodes)
    out.nodes.push_back(
        {id, node_reason(c, a, id, volumes, grouped, facts), count(live, id), count(group, id)});
  auto fewer = [](const node_fit& x, const node_fit& y) {
    return std::pair{x.group_allocs, x.allocs} < std::pair{y.group_allocs, y.allocs};
  };
  for (const auto& fit : out.nodes)
    if (fit.reason.empty() && (best == nullptr || fewer(fit, *best))) best = &fit;
  if (best != nullptr) out.chosen = best->node_id;
  return out;
}

failure no_node_fits(const v1::Alloc& a, const placement& p) {
  if (p.nodes.empty())
    return failure{errc::refused, "no node can run alloc " + quote_name(a.id()) +
                                      ": no node is known (start berthd --client on a host, "
                                      "then see berth node status)"};
  std::string text = "no node can run alloc " + quote_name(a.id()) + " now (" +
                     std::to_string(p.nodes.size()) + " node" +
                     (p.nodes.size() == 1 ? "" : "s") + " considered):";
  for (const auto& fit : p.nodes) text += "\n  " + fit.node_id + ": " + fit.reason;
  text += "\nRun it on a node once one fits, or pin it with --node; berth alloc run --explain "
          "shows this table without running anything";
  return failure{errc::refused, std::move(text)};
}

std::vector<std::pair<volume_key, std::string>> releases_in_placements_way(const catalog& c,
                                                                           const v1::Alloc& a) {
  std::vector<std::pair<volume_key, std::string>> out;
  for (const auto& av : a.volumes()) {
    volume_key key{ns_or_default(a.namespace_()), av.volume_id()};
    auto v = find_volume(c, key);
    if (!v) continue;
    for (auto& id : claims_being_released(c, *v))
      if (id != a.id()) out.emplace_back(key, std::move(id));
  }
  return out;
}

}  // namespace berth
