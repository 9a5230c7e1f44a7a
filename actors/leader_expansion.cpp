// The leader actor: volume expansion (berth volume expand VOLUME SIZE, and
// re-registrations with a larger capacity_min).  What to do next is
// control/expansion's; the volume's actor runs each step and commits it, so
// a new leader resumes an expansion from the catalog's `expanding` index.
#include <caf/typed_event_based_actor.hpp>

#include "actors/clock.hpp"
#include "messages/failure.hpp"
#include "actors/leader_flows.hpp"
#include "control/expansion.hpp"
#include "log/log.hpp"

namespace berth::leader_flows {

namespace {

// From clock.hpp's random_seed, like the watcher's jitter: the claim
// simulation replays a seed only when every draw comes from its own RNG.
double expansion_jitter() {
  return static_cast<double>(random_seed() >> 11) * 0x1.0p-53;
}

// One step through the volume's actor, then the next once the catalog
// applied it.  `before`: the modify index the step started from; a step
// that committed nothing ends the drive.
void expansion_step(const self_ptr& self, const volume_key& key,
                    std::function<void(std::optional<failure>)> done) {
  auto& st = self->state;
  auto v = find_volume(st.cat, key);
  if (!v || !expanding(*v)) {
    done(std::nullopt);
    return;
  }
  const auto* p = find_plugin(st.cat, v->plugin_id());
  auto s = p != nullptr ? expansion_support_of(*p) : expansion_support{};
  auto step = next_expansion_step(*v, s);
  node_actor controller;
  node_actor target;
  std::string target_node;
  if (step.action == expansion_action::controller_expand)
    controller =
        pick_capable_controller(self, v->plugin_id(), controller_capability::expand_volume);
  if (step.action == expansion_action::node_expand) {
    target = node_of(self, step.node_id);
    target_node = step.node_id;
    // For a claim there the node never published: published again first
    // (ControllerPublishVolume through this controller when required).
    controller = pick_controller(self, v->plugin_id());
  }
  auto before = v->modify_index();
  auto plugin = ensure_plugin_actor(self, v->plugin_id());
  ask_volume_actor<pb<v1::Volume>>(
      self, key,
      [self, key, done, before](pb<v1::Volume>& r) {
        auto index = r.msg.modify_index();
        when_applied(self, index, [self, key, done, before, index]() {
          if (index == before) {
            done(std::nullopt);  // nothing left to do
            return;
          }
          expansion_step(self, key, done);
        });
      },
      [done](caf::error& e) { done(to_failure(e)); }, expand_step_atom::value,
      committed_plugin(self, v->plugin_id()), plugin, controller,
      target, target_node);
}

}  // namespace

void drive_expansion(const self_ptr& self, const volume_key& key,
                     std::function<void(std::optional<failure>)> done) {
  auto& drive = self->state.expansions[key];
  if (drive.in_flight) {
    done(failure{errc::unavailable, "volume " + quote_name(key.second) +
                                        ": its expansion's steps are running (see berth volume "
                                        "status " +
                                        key.second + ")"});
    return;
  }
  drive.in_flight = true;
  expansion_step(self, key, [self, key, done](std::optional<failure> f) {
    auto& st = self->state;
    auto& d = st.expansions[key];
    d.in_flight = false;
    auto v = find_volume(st.cat, key);
    if (!f || !v || !expanding(*v)) {
      st.expansions.erase(key);
      if (v && !f)
        logging::info("leader", "volume expanded",
                      {{"namespace", key.first},
                       {"volume", key.second},
                       {"capacity_bytes", std::to_string(v->capacity_bytes())}});
    } else {
      d.attempts++;
      auto delay = expansion_retry_delay_ms(d.attempts, expansion_jitter());
      d.due_ms = steady_ms() + delay;
      logging::warn("leader", "volume expansion step did not run, retrying",
                    {{"namespace", key.first},
                     {"volume", key.second},
                     {"attempt", std::to_string(d.attempts)},
                     {"retry_in_ms", std::to_string(delay)},
                     {"error", f->message}});
    }
    done(f);
  });
}

void drive_expansions(const self_ptr& self) {
  auto& st = self->state;
  auto now = steady_ms();
  for (const auto& key : st.cat.expanding) {
    auto it = st.expansions.find(key);
    if (it != st.expansions.end() && (it->second.in_flight || it->second.due_ms > now)) continue;
    drive_expansion(self, key, [](std::optional<failure>) {});
  }
  // Expansions that ended (finished, or the volume is gone) while waiting.
  for (auto it = st.expansions.begin(); it != st.expansions.end();)
    it = !it->second.in_flight && !st.cat.expanding.count(it->first) ? st.expansions.erase(it)
                                                                     : std::next(it);
}

void volume_expand(const self_ptr& self, const v1::VolumeExpandRequest& r, response_promise rp) {
  auto& st = self->state;
  auto found = lookup_volume(st.cat, r.namespace_(), r.volume_id());
  if (found.error) {
    deliver(rp, *found.error);
    return;
  }
  auto key = found.key;
  const auto& v = volume_at(st.cat, key);
  const auto* p = find_plugin(st.cat, v.plugin_id());
  // Decided on the committed volume for the answer; the volume's actor
  // decides again on its own state before it commits.
  auto d = decide_expand(v, r.required_bytes(), p, wall_ms());
  if (auto* f = std::get_if<failure>(&d)) {
    deliver(rp, *f);
    return;
  }
  auto message = std::get<expand_decision>(d).message;
  ask_volume_actor<pb<v1::Volume>>(
      self, key,
      [self, rp, key, message](pb<v1::Volume>& committed) mutable {
        when_applied(self, committed.msg.modify_index(), [self, rp, key, message]() mutable {
          drive_expansion(self, key, [self, rp, key, message](std::optional<failure> f) mutable {
            auto now = find_volume(self->state.cat, key);
            if (!now) {
              deliver(rp, failure{errc::not_found,
                                  "volume " + quote_name(key.second) + " was deregistered meanwhile"});
              return;
            }
            auto text = message;
            if (f)
              text += "; " + f->message + " (the leader retries; see berth volume status " +
                      key.second + ")";
            else if (!expanding(*now))
              text += "; done, the plugin reports " + size_text(now->capacity_bytes());
            deliver(rp, volume_response(self->state.cat, *now, text));
          });
        });
      },
      [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); }, expand_atom::value, wrap(r),
      wrap(p != nullptr ? *p : v1::Plugin{}));
}

}  // namespace berth::leader_flows
