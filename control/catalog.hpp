// The catalog: volumes (with their claims), plugins, nodes and allocs as of
// an applied log index.  It changes only in `apply`, with committed entries
// in index order, so whoever reads it (the leader's answers, the volume
// watcher, the metrics) sees exactly what the log committed, never a change
// still in flight.  Plain data, no I/O: the state tables (persistence/
// state_store) apply the same entries with the same `stamp`.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "messages/berth.pb.h"

namespace berth {

using volume_key = std::pair<std::string, std::string>;  // namespace, id

// What applying one change did: the change as stamped, and the object it
// replaced or deleted (an empty change when there was none).  The leader
// tells the watcher and the metrics from these.
struct applied_change {
  v1::Change change;
  v1::Change before;
};

struct catalog {
  uint64_t applied_index = 0;
  std::map<volume_key, v1::Volume> volumes;  // with secrets: never shown as is
  std::map<std::string, v1::Plugin> plugins;
  std::map<std::string, v1::Node> nodes;
  std::map<std::string, v1::Alloc> allocs;
  // (node, plugin) -> the volumes of the plugin with a claim (any state) on
  // the node: kept by apply and add_volume, so that a claim's max-volumes
  // check does not scan every volume.
  std::map<std::pair<std::string, std::string>, std::set<volume_key>> claimed_on;
  // The volumes whose availability is drain (berth volume availability):
  // kept by apply and add_volume, so the leader's tick does not scan every
  // volume for them.
  std::set<volume_key> draining;
  // The volumes with an expansion in progress (control/expansion): kept by
  // apply and add_volume, so a new leader finds the expansions to resume
  // without scanning every volume.
  std::set<volume_key> expanding;
  // ACLs (control/acl): policies by name, tokens by accessor id, the
  // accessor id of each token's secret hash, and the index of the committed
  // bootstrap (0: none yet).
  std::map<std::string, v1::AclPolicy> acl_policies;
  std::map<std::string, v1::AclToken> acl_tokens;
  std::map<std::string, std::string> acl_by_hash;
  uint64_t acl_bootstrap_index = 0;
  // A committed operator restore replaced the state wholesale: this copy is
  // stale until it is loaded again from the state tables.
  bool restored = false;
};

// Applies one committed entry at `index` (entries at or below the applied
// index are skipped: applying is idempotent).  Returns what changed.
std::vector<applied_change> apply(catalog& c, uint64_t index, const v1::LogEntry& entry);

// The order in which one entry's changes are told to the watcher: alloc
// upserts first, the rest as they came.  A claim committed together with
// its alloc (volume claim, alloc run) must never reach the watcher before
// the alloc does: between the two messages its timer could find the claim's
// alloc missing and release a claim just acknowledged.
void alloc_upserts_first(std::vector<applied_change>& changes);

// Adds a volume loaded from the state tables (no entry, no stamp), with
// its claims indexed.
void add_volume(catalog& c, v1::Volume v);

// Adds the ACL objects loaded from the state tables (no entry, no stamp).
void add_acl(catalog& c, std::vector<v1::AclPolicy> policies, std::vector<v1::AclToken> tokens,
             uint64_t bootstrap_index);

// The volumes with a claim (any state) on the node, from claimed_on.
std::set<volume_key> volumes_claimed_on(const catalog& c, const std::string& node_id);

const v1::Volume* find_volume(const catalog& c, const volume_key& key);
const v1::Alloc* find_alloc(const catalog& c, const std::string& id);
const v1::Node* find_node(const catalog& c, const std::string& id);
const v1::Plugin* find_plugin(const catalog& c, const std::string& id);

// "default" for an empty namespace.
std::string ns_or_default(const std::string& ns);

}  // namespace berth
