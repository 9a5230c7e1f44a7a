// Where work goes: which node's controller instance serves a plugin's
// controller calls, how many of a plugin's volumes a node holds (what the
// plugin's max volumes per node limits), and which node an alloc run
// without --node runs on.  Pure: the leader passes in which nodes have a
// connected berth client.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "control/catalog.hpp"
#include "messages/failure.hpp"

namespace berth {

// Whether the node's instance of the plugin lies in one of the request's
// required topologies (true when none is required).
bool in_required_topology(const v1::Plugin& p, const std::string& node_id,
                          const v1::TopologyRequest* topology);

// The nodes that can run a controller call of the plugin: a healthy
// controller instance, a connected berth client, and (for CreateVolume
// with a required topology) a node instance inside it.  In the plugin's
// order of controllers.
std::vector<std::string> controller_candidates(
    const v1::Plugin& p, const std::function<bool(const std::string&)>& connected,
    const v1::TopologyRequest* topology = nullptr);

// Round-robin over the candidates (controller calls are load-balanced):
// the next one after `turn`, which advances.  nullopt when there is none.
std::optional<std::string> next_in_turn(const std::vector<std::string>& candidates, size_t& turn);

// How many controller calls of the plugin the leader has in flight at
// most: what its healthy controller instances take together (each its
// max_calls, 16 when it reported none), at least 1.
int controller_call_limit(const v1::Plugin& p);

// The volumes of `plugin` claimed on `node` (taken or in release) other
// than `except`, together with `in_flight` (volumes being claimed there
// right now): what the plugin's max volumes per node is checked against.
int64_t node_volume_count(const catalog& c, const std::string& node, const std::string& plugin,
                          const volume_key& except, const std::set<volume_key>& in_flight);

// --- alloc run without --node: placement ------------------------------------------

// What the leader knows besides the committed catalog when it places an
// alloc.
struct placement_facts {
  // The node's berth client is connected to this leader.
  std::function<bool(const std::string&)> connected;
  // The leader is writing the node's mark-down.
  std::function<bool(const std::string&)> marking_down;
  // Volumes being claimed right now, by node and plugin (the leader's
  // claims in flight): they count against max volumes per node.
  const std::map<std::pair<std::string, std::string>, std::set<volume_key>>* claiming = nullptr;
  // Allocs being started, not yet committed (the leader's starting
  // allocs, by id; their first claim commits them): they count as live.
  const std::map<std::string, v1::Alloc>* starting = nullptr;
  int64_t now_ms = 0;
  bool allow_abnormal = false;
};

// One node as placement judged it.
struct node_fit {
  std::string node_id;
  std::string reason;  // why the alloc cannot run there now; empty: it fits
  int64_t allocs = 0;  // allocs on the node that are not terminal
  int64_t group_allocs = 0;  // ... of those, the alloc's group's (0 without a group)
};

struct placement {
  std::vector<node_fit> nodes;        // every node of the catalog, by name
  std::optional<std::string> chosen;  // the node the alloc runs on; none fits: nullopt
};

// Where an alloc (`a`, its node unset) can run now: every node of the
// catalog with the first rule that rejects it, checked as alloc run and the
// claim would check them (a berth client that is up, connected and not
// being marked down; eligible and not draining; then, for each volume, the
// claim's rules: the volume's availability and condition, the plugin
// healthy on the node, the volume's accessible topology, the node's max
// volumes per node counting this alloc's other volumes of the plugin, the
// access mode and free writer slots; then, for each volume in a volume
// group, every other volume of that group accessible from the node:
// refuse_inaccessible).  Of the nodes that fit, the one with
// the fewest allocs of the alloc's group that are not terminal (a group
// spreads over the nodes), then the fewest such allocs of any group, ties
// by name.  Pure.
placement place_alloc(const catalog& c, const v1::Alloc& a, const placement_facts& facts);

// The claims on an alloc's volumes that the watcher is releasing (their
// allocs ended or vanished, or a release runs: `claims_to_release`), by
// volume and alloc.  A placement that finds no node waits for them once,
// bounded, and places again: a volume whose holder just completed is
// free a moment later (issue 59, item 7).
std::vector<std::pair<volume_key, std::string>> releases_in_placements_way(const catalog& c,
                                                                           const v1::Alloc& a);

// The refusal when no node fits: each node with its reason, one per line.
failure no_node_fits(const v1::Alloc& a, const placement& p);

}  // namespace berth
