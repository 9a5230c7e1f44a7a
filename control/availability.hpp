// Volume availability (berth volume availability VOLUME active|pause|drain,
// as Docker Swarm's cluster volumes): what the command answers and what a
// draining volume needs next.  A paused volume keeps its claims and takes no
// new one (the refusal is claim admission's: `refuse_unavailable` in
// messages/model); a draining one also gives its claims up: the leader stops
// the allocs that use it through their nodes' clients (committing them
// complete, so the volume watcher releases their claims in the spec's
// order), and releases the claims that `volume claim` made (allocs without
// a command) through the release workflow.  active undoes both.  Pure
// functions of the committed catalog.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "control/catalog.hpp"
#include "messages/api.pb.h"
#include "messages/model.hpp"

namespace berth {

// What to tell the operator when `before` is set to `to`: what it means,
// or that it was so already (the command is safe to repeat).
std::string availability_message(const v1::Volume& before, v1::VolumeAvailability to);

// Whether setting `to` changes the volume (else nothing is committed).
bool availability_changes(const v1::Volume& v, v1::VolumeAvailability to);

// The volumes set to drain, in key order.
std::vector<volume_key> draining_volumes(const catalog& c);

// What the leader does next for a draining volume.
struct volume_drain_plan {
  // Running allocs with a command that hold a taken claim on the volume:
  // stopped through their node's client, then committed complete.
  std::vector<std::string> stop;
  // Allocs without a command (volume claim) whose taken claim on the
  // volume is released, as berth volume release does.
  std::vector<std::string> release;
  // Claims left on the volume (any state): 0 once the drain is done.
  int claims_left = 0;
};
// Nothing to do for a volume that is unknown or not draining.  Claims
// already in release, and claims of terminal or vanished allocs, are the
// volume watcher's; a pending alloc is left to finish claiming (it is
// stopped once running, or its failure releases what it claimed).
volume_drain_plan plan_volume_drain(const catalog& c, const volume_key& key);

}  // namespace berth
