// Volume health and usage (issue 14): which CSI call the leader's health
// check makes for a plugin's volumes, which conditions changed and need an
// entry, how a node's usage report changes the node (one entry per report,
// only when a value changed; a late report is stale), what volume status
// and the metrics show per node.  The claim admission of an abnormal volume
// is claim's (`refuse_abnormal` in messages/model).  Pure functions of the
// committed catalog and the plugin's answers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "control/catalog.hpp"
#include "messages/api.pb.h"
#include "messages/failure.hpp"

namespace berth {

// How the health check asks a plugin for its volumes' condition.
enum class health_call {
  none,          // no controller advertises VOLUME_CONDITION with a way to ask
  list_volumes,  // ListVolumes, paged (LIST_VOLUMES + VOLUME_CONDITION)
  get_volume,    // ControllerGetVolume per volume (GET_VOLUME + VOLUME_CONDITION)
};

// The call one controller instance can answer: ListVolumes when it can
// (one paged call for every volume), else ControllerGetVolume.
health_call health_call_of(const v1::PluginInstance& controller);

// The controllers among `candidates` (connected, in turn order) that can
// answer the plugin's health check, all with the call of the first one.
struct health_plan {
  health_call call = health_call::none;
  std::vector<std::string> controllers;
};
health_plan plan_health_check(const v1::Plugin& p, const std::vector<std::string>& candidates);

// Whether a periodic check is due: `interval_ms` < 0 never (`never`), else
// once `interval_ms` passed since `last_ms` (0: never ran).
bool health_due(int64_t last_ms, int64_t now_ms, int64_t interval_ms);

// The request a controller node gets for a plugin's check: the external
// ids of the plugin's volumes (ControllerGetVolume asks each; ListVolumes
// needs none).  nullopt when the plugin has no volume to check.
std::optional<v1::VolumeHealthRequest> health_request(const catalog& c,
                                                      const std::string& plugin_id,
                                                      health_call call);

// A volume whose condition changed: committed through its actor.
struct condition_change {
  volume_key key;
  v1::VolumeCondition to;  // since_ms set to now
  bool abnormal_now = false;
};

// Whether the two conditions differ (abnormal or message; since_ms aside).
bool condition_differs(const v1::VolumeCondition& a, const v1::VolumeCondition& b);

// The volumes of the plugin whose reported condition differs from the
// committed one, in key order.  Volumes the plugin did not report change
// nothing (no information is not a condition).
std::vector<condition_change> condition_changes(const catalog& c, const std::string& plugin_id,
                                                const v1::VolumeHealthResult& r, int64_t now_ms);

// What the leader logs for a change: "volume turned abnormal" (with the
// plugin's message) or "volume is ok again".
std::string condition_log_line(const condition_change& ch);

// The node as it is after a client's usage report, when a value changed;
// nullopt when nothing changed or the report is stale (measured before the
// newest one the node has: reports can arrive out of order).  Only volumes
// that exist and have a claim on the node are kept; each entry keeps its
// updated_at_ms unless its values changed.  Unknown node: not_found.
std::variant<failure, std::optional<v1::Node>> node_after_report(const catalog& c,
                                                                 const v1::VolumeStatsReport& r);

// Whether a report measured at `measured_at_ms` is older than what the
// node has committed (`node`'s newest updated_at_ms).
bool report_stale(const v1::Node& node, int64_t measured_at_ms);

// Whether two usage entries hold the same values (updated_at_ms aside).
bool same_usage(const v1::VolumeUsage& a, const v1::VolumeUsage& b);

// A volume's usage on each node that reported it, for volume status: the
// entries of the nodes it is claimed on, in node order.
std::vector<v1::VolumeUsage> usage_of(const catalog& c, const volume_key& key);

// The metric series of one volume (berth_volume_capacity_bytes,
// berth_volume_used_bytes, berth_volume_abnormal; labels namespace,
// volume, node): a row with node "" for the controller's condition (of a
// volume with a claim, or abnormal: an idle healthy volume has none), one
// per node that reported usage.  Empty for a volume that does not exist,
// so its series are removed.
struct health_series {
  std::string node;  // "" : the controller's condition (abnormal only)
  bool has_usage = false;
  int64_t capacity_bytes = 0;
  int64_t used_bytes = 0;
  bool abnormal = false;
};
std::vector<health_series> series_of(const catalog& c, const volume_key& key);

}  // namespace berth
