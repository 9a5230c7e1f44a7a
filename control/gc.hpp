// Garbage collection of the catalog: terminal allocs and down nodes that
// nothing needs any more are deleted after a threshold (berthd
// --alloc-gc-threshold, --node-gc-threshold) or at once with `berth system
// gc`.  Plain functions on the catalog: the leader calls them on its tick
// and commits what they return as one entry.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "control/catalog.hpp"

namespace berth {

struct gc_thresholds {
  // How long an alloc stays after it became terminal (complete, failed,
  // lost); < 0: never collected.
  int64_t alloc_ms = 5 * 60 * 1000;
  // How long a node stays after it went down; < 0: never collected.
  int64_t node_ms = 24 * 60 * 60 * 1000;
};

struct gc_plan {
  std::vector<std::string> allocs;  // ids, sorted
  std::vector<std::string> nodes;   // ids, sorted
  bool empty() const { return allocs.empty() && nodes.empty(); }
};

// What may be collected at wall time `now_ms`:
// - an alloc that is terminal, has been for `alloc_ms` (its modified time),
//   and holds no claim on any volume (none taken, none being released);
//   a lost alloc of a node that is still down stays, and so does every
//   ended alloc of a node marked down (down_at_ms kept) until it came back
//   and confirmed its unmounts, so that the node's client is told to stop
//   and unmount it;
// - a node that is down, has been for `node_ms`, is not draining, and has
//   no alloc (after this plan's), no claim and no plugin instance left.
// A collected node that comes back registers again as a new node.
// `replacing`: lost members of groups the leader may still replace
// (leader_flows::drive_replacements); they stay, so that a replacement
// committed after the plan never names an alloc that is gone (claim
// simulation seeds 10450 and 13631), and their nodes with them.
gc_plan plan_gc(const catalog& c, int64_t now_ms, const gc_thresholds& t,
                const std::set<std::string>& replacing = {});

// The changes that delete what the plan names (allocs first, then nodes).
std::vector<v1::Change> gc_changes(const gc_plan& p);

// "collected 3 allocs and 1 node" / "nothing to collect".
std::string gc_summary(const gc_plan& p);

}  // namespace berth
