#include "control/availability.hpp"
#include "messages/failure.hpp"

namespace berth {

namespace {

std::string meaning(v1::VolumeAvailability a) {
  switch (a) {
    case v1::VOLUME_PAUSE:
      return "new claims are refused, existing claims are kept";
    case v1::VOLUME_DRAIN:
      return "new claims are refused, the allocs using it are stopped and its claims released";
    default:
      return "it takes new claims";
  }
}

}  // namespace

bool availability_changes(const v1::Volume& v, v1::VolumeAvailability to) {
  return v.availability() != to;
}

std::string availability_message(const v1::Volume& before, v1::VolumeAvailability to) {
  auto name = "volume " + quote_name(before.id());
  if (!availability_changes(before, to))
    return name + " is already " + std::string(name_of(to)) + " (" + meaning(to) +
           "); nothing to do";
  return name + " availability set to " + std::string(name_of(to)) + " (was " +
         std::string(name_of(before.availability())) + "): " + meaning(to);
}

std::vector<volume_key> draining_volumes(const catalog& c) {
  return {c.draining.begin(), c.draining.end()};  // the index apply keeps
}

volume_drain_plan plan_volume_drain(const catalog& c, const volume_key& key) {
  volume_drain_plan plan;
  auto v = find_volume(c, key);
  if (!v || v->availability() != v1::VOLUME_DRAIN) return plan;
  plan.claims_left = v->claims_size();
  for (const auto& claim : v->claims()) {
    if (claim.state() != v1::CLAIM_TAKEN) continue;  // in release: the watcher's
    const auto* a = find_alloc(c, claim.alloc_id());
    if (a == nullptr || a->state() != v1::ALLOC_RUNNING) continue;
    if (a->command().empty())
      plan.release.push_back(a->id());
    else
      plan.stop.push_back(a->id());
  }
  return plan;
}

}  // namespace berth
