// Node drain and scheduling eligibility: what `berth node drain` and `berth
// node eligibility` commit, and what a draining node needs next.  A drain
// makes the node ineligible (no new allocs or claims), stops its allocs
// through its client so that the watcher releases their claims through the
// node's own plugins in the spec's order, and withdraws the node's plugin
// instances last, once no claim is left on the node (unless the operator
// keeps them).  After the deadline every alloc still on the node, pending
// ones too, is stopped through its client; a claim is freed only after its
// writer stopped (the client confirmed it) or was fenced (the node is down
// past its lease), never by the deadline alone (issue 59).  Pure functions of the
// committed catalog and the leader's wall clock, which the leader passes in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "control/catalog.hpp"
#include "messages/api.pb.h"
#include "messages/model.hpp"

namespace berth {

// A node request's outcome: the node record to commit (nullopt: nothing
// changes) and what to tell the operator, or why it is refused.
struct node_update {
  std::optional<failure> error;
  std::optional<v1::Node> upsert;
  std::string message;
};

// berth node drain: starts a drain (or changes the deadline and
// keep-plugins of the one in progress), or cancels it (`disable`).
node_update drain_request(const catalog& c, const v1::NodeDrainRequest& r, int64_t now_ms);

// berth node eligibility --enable|--disable.  Enabling a draining node is
// refused (cancel the drain first); enabling a drained node lets its
// plugin instances be reported again.
node_update eligibility_request(const catalog& c, const v1::NodeEligibilityRequest& r);

// Why a new alloc or claim on the node is refused (it is ineligible), or
// nullopt.
std::optional<failure> refuse_ineligible(const catalog& c, const std::string& node_id);

// What a drain still waits for: allocs on the node that are not terminal,
// and claims on the node (any volume) that are not freed yet.
v1::DrainProgress drain_progress(const catalog& c, const std::string& node_id);

// The nodes with a drain in progress.
std::vector<std::string> draining_nodes(const catalog& c);

// What the leader does next for a draining node at `now_ms`.
struct drain_plan {
  // Allocs to stop through the node's client: the running ones; once forced,
  // every alloc on the node that has not ended.
  std::vector<std::string> stop;
  bool force = false;  // the deadline passed: commit force_drain
  bool done = false;   // nothing left on the node: commit finish_drain
};
drain_plan plan_drain(const catalog& c, const std::string& node_id, int64_t now_ms);

// The deadline passed, as one entry: the drain marked forced (plan_drain
// stops every alloc left from now on, through the client).  On a node
// without a berth client nothing runs, so its allocs end in the same entry
// (running ones complete, pending ones failed); on a node with a client
// they end when the client confirms their stop (`stopped_state`), so that
// their claims are released after their writers stopped, through the node.
// Empty when the node is not draining or is forced already.
std::vector<v1::Change> force_drain(const catalog& c, const std::string& node_id, int64_t now_ms);

// The state an alloc the servers stopped ends in: complete, or failed when
// it never started (a pending alloc cannot complete).
v1::AllocState stopped_state(v1::AllocState from);

// The drain is done: the drain cleared, the node ineligible and drained at
// `now_ms`, its plugin instances withdrawn unless it keeps them.  Empty
// when it is not draining or something is still left on it.
std::vector<v1::Change> finish_drain(const catalog& c, const std::string& node_id, int64_t now_ms);

// The fingerprints that withdraw a drained node's plugin instances (after
// finish_drain committed plugins_withdrawn).
std::vector<v1::Fingerprint> instances_to_withdraw(const catalog& c, const std::string& node_id);

// A fingerprint from a drained node whose plugin instances were withdrawn:
// not applied until the node is enabled again.
bool fingerprint_withheld(const catalog& c, const v1::Fingerprint& f);

}  // namespace berth
