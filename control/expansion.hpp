// Volume expansion (issue 14): berth volume expand VOLUME SIZE, or a
// re-registration with a larger capacity_min.  What a request may ask, and
// what the volume's actor does next, as pure functions of the committed
// volume and its plugin.
//
// An expansion is a record on the volume (v1::VolumeExpansion), committed
// when it is asked and after every step, so a new leader resumes it where
// the last one stopped (the catalog indexes the volumes with one):
//   ControllerExpandVolume, when the plugin's controller advertises
//   EXPAND_VOLUME (an OFFLINE-only plugin: once no claim is published);
//   then, when the plugin said node_expansion_required (or has no
//   controller expansion), NodeExpandVolume on every node where the volume
//   is published (ONLINE), or at the volume's next NodeStage (OFFLINE only,
//   or when it is published nowhere);
//   then the record is cleared and capacity_bytes holds what the plugin
//   reported.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "messages/berth.pb.h"
#include "messages/failure.hpp"

namespace berth {

// What a plugin can do for an expansion, from its committed instances.
struct expansion_support {
  // A controller instance advertises EXPAND_VOLUME, or one did
  // (Plugin.controller_expands, sticky): healthy or not, there or not now,
  // the controller step then waits for one; it is never skipped.
  bool controller = false;
  bool node = false;     // a node instance advertises EXPAND_VOLUME
  bool online = false;   // VolumeExpansion ONLINE
  bool offline = false;  // VolumeExpansion OFFLINE
  // Expands only unpublished volumes (OFFLINE without ONLINE).
  bool offline_only() const { return offline && !online; }
};
expansion_support expansion_support_of(const v1::Plugin& p);

// The volume's capacity now: what the plugin reported, else what was asked
// (capacity_min).
int64_t current_capacity(const v1::Volume& v);

// Whether the volume has an expansion in progress.
bool expanding(const v1::Volume& v);

// What an expansion request does.
struct expand_decision {
  bool start = false;  // false: nothing to do (the same size again), nothing is committed
  v1::Volume next;     // start: the volume with its expansion record
  std::string message;
};

// Decides a request to grow volume `v` to `required` bytes.  Refused, and
// nothing changes: 0 or less (invalid), less than the current capacity or
// than an expansion in progress (CSI volumes only grow), more than
// capacity_max, a plugin that is not registered (not_found) or that
// advertises no EXPAND_VOLUME.  The same size as the capacity or as the
// expansion in progress is not a change (safe to retry); a larger one
// replaces an expansion in progress (its steps run again, to the new size).
std::variant<failure, expand_decision> decide_expand(const v1::Volume& v, int64_t required,
                                                     const v1::Plugin* p, int64_t now_ms);

// A re-registration (or re-creation) `next` of `before` (next as
// model's reregister made it): a larger capacity_min asks for an expansion
// (decide_expand's rules: `next` gets its record); a smaller one than the
// current capacity is refused.  nullopt: accepted (with or without an
// expansion).
std::optional<failure> reregistration_expansion(const v1::Volume& before, v1::Volume& next,
                                                const v1::Plugin* p, int64_t now_ms);

// The next step of a volume's expansion.
enum class expansion_action {
  none,                // no expansion in progress
  controller_expand,   // ControllerExpandVolume through a controller node
  wait_for_unpublish,  // OFFLINE-only plugin: the controller step waits for no published claim
  node_expand,         // NodeExpandVolume on `node`, where the volume is published
  wait_for_stage,      // NodeExpandVolume runs at the volume's next NodeStage
  finish,              // every step is done: clear the record
};
struct expansion_step {
  expansion_action action = expansion_action::none;
  std::string node_id;  // node_expand
};
expansion_step next_expansion_step(const v1::Volume& v, const expansion_support& s);

// "ControllerExpandVolume", "NodeExpandVolume on node 'n1'", ...: for logs
// and messages.
std::string describe(const expansion_step& s);

// The nodes where the volume is published (a taken claim), sorted, once each.
std::vector<std::string> published_nodes(const v1::Volume& v);

// The volume after ControllerExpandVolume succeeded: the controller step
// done, `capacity` (when reported, > 0) recorded, and the node step needed
// when the plugin said so and its nodes can expand.
v1::Volume after_controller_expand(v1::Volume v, int64_t capacity, bool node_expansion_required,
                                   const expansion_support& s);

// The volume after NodeExpandVolume succeeded on `node` (recorded once).
v1::Volume after_node_expand(v1::Volume v, const std::string& node, int64_t capacity);

// The volume with its expansion finished: the record cleared, and the
// capacity at least what was asked when the plugin reported less or none.
v1::Volume expansion_finished(v1::Volume v);

// Whether a publish of the volume runs NodeExpandVolume after its
// NodeStage (the expansion's node step is pending and waits for a stage).
bool publish_expands(const v1::Volume& v, const expansion_support& s);

// The failure for a step that cannot run now (the leader tries again
// later): names the volume and what it waits for.
failure expansion_waits(const v1::Volume& v, const expansion_step& s);

// A size as berth says it: "2 MiB", "1536 bytes" (whole units only).
std::string size_text(int64_t bytes);

// The delay before the n-th retry (n >= 1) of a failed expansion step:
// as release steps', 1 s doubling, at most 60 s; `jitter` in [0, 1).
int64_t expansion_retry_delay_ms(uint32_t attempts, double jitter);

}  // namespace berth
