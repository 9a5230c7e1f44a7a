// The leader actor: volume availability (berth volume availability VOLUME
// active|pause|drain) and the drive of draining volumes.  What to do is
// control/availability's; the volume's actor commits the availability.
#include <caf/typed_event_based_actor.hpp>

#include "actors/clock.hpp"
#include "messages/failure.hpp"
#include "actors/leader_flows.hpp"
#include "control/allocs.hpp"
#include "control/availability.hpp"
#include "control/entries.hpp"
#include "log/log.hpp"

namespace berth::leader_flows {

void volume_availability(const self_ptr& self, const v1::VolumeAvailabilityRequest& r,
                         response_promise rp) {
  auto& st = self->state;
  auto found = lookup_volume(st.cat, r.namespace_(), r.volume_id());
  if (found.error) {
    deliver(rp, *found.error);
    return;
  }
  // The message is decided on the committed volume: a repeat (its answer
  // was lost) says it was so already.
  auto message = availability_message(volume_at(st.cat, found.key), r.availability());
  bool drain = r.availability() == v1::VOLUME_DRAIN;
  ask_volume_actor<pb<v1::Volume>>(
      self, found.key,
      [self, rp, message, drain](pb<v1::Volume>& v) mutable {
        auto index = v.msg.modify_index();  // read before the lambda moves v
        when_applied(self, index, [self, rp, message, drain, v = std::move(v.msg)]() mutable {
          deliver(rp, volume_response(self->state.cat, v, message));
          if (drain) drive_volume_drains(self);
        });
      },
      [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); }, availability_atom::value,
      wrap(r));
}

namespace {

// Releases a command-less alloc's claim on a draining volume, as berth
// volume release does: the volume then leaves the alloc (an alloc left
// with no volume is deleted).  A failed step is the watcher's to resume.
void release_for_drain(const self_ptr& self, const volume_key& key, const std::string& alloc) {
  auto slot = key.first + "/" + key.second + "/" + alloc;
  if (!self->state.volume_drain_releases.insert(slot).second) return;  // in flight
  logging::info("leader", "volume drain releases claim",
                {{"namespace", key.first}, {"volume", key.second}, {"alloc", alloc}});
  v1::ReleaseRequest r;
  r.set_namespace_(key.first);
  r.set_volume_id(key.second);
  r.set_alloc_id(alloc);
  r.set_reason("volume drain");
  release_claim(self, std::move(r), [self, key, alloc, slot](std::optional<failure> f, v1::Volume) {
    self->state.volume_drain_releases.erase(slot);
    if (f) {
      logging::warn("leader", "volume drain could not release claim",
                    {{"namespace", key.first},
                     {"volume", key.second},
                     {"alloc", alloc},
                     {"error", f->message}});
    }
  });
}

}  // namespace

void drive_volume_drains(const self_ptr& self) {
  auto& st = self->state;
  for (const auto& key : draining_volumes(st.cat)) {
    auto plan = plan_volume_drain(st.cat, key);
    for (const auto& id : plan.stop) {
      const auto* a = find_alloc(st.cat, id);
      if (a == nullptr) continue;
      stop_alloc(self, a->node_id(), id,
                 "stopped by the drain of volume " + quote_name(key.second) +
                     " (berth volume availability " + key.second + " drain)");
    }
    for (const auto& id : plan.release) release_for_drain(self, key, id);
  }
}

}  // namespace berth::leader_flows
