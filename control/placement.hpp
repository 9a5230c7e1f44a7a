// Where CSI calls go: which node's controller instance serves a plugin's
// controller calls, and how many of a plugin's volumes a node holds (what
// the plugin's max volumes per node limits).  Pure: the leader passes in
// which nodes have a connected berth client.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "control/catalog.hpp"

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

}  // namespace berth
