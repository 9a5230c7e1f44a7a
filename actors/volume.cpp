#include "actors/volume.hpp"

#include <chrono>

#include <caf/event_based_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "persistence/state_store.hpp"

namespace berth {

namespace {

using self_ptr = volume_actor::stateful_pointer<volume_state>;
using volume_promise = caf::typed_response_promise<pb<v1::Volume>>;

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// Commits `next` as the volume's new state (or its deletion), then updates
// the actor, tells the leader and answers.  await() keeps every other
// request of this volume waiting until the change is durable.
void commit(self_ptr self, v1::Volume next, bool remove, volume_promise rp) {
  v1::LogEntry entry;
  entry.set_format_version(1);
  auto* change = entry.add_changes();
  if (remove) {
    change->mutable_volume_delete()->set_namespace_(next.namespace_());
    change->mutable_volume_delete()->set_id(next.id());
  } else {
    *change->mutable_volume_upsert() = next;
  }
  self->request(self->state.log, caf::infinite, propose_atom::value, wrap(std::move(entry)))
      .await(
          [self, next, remove, rp](uint64_t index) mutable {
            if (remove) {
              v1::VolumeKey key;
              key.set_namespace_(next.namespace_());
              key.set_id(next.id());
              self->send(self->state.leader, removed_atom::value, wrap(std::move(key)));
              rp.deliver(wrap(next));
              self->quit();
              return;
            }
            v1::Change stamped;
            *stamped.mutable_volume_upsert() = std::move(next);
            stamp(stamped, index);
            self->state.volume = std::move(*stamped.mutable_volume_upsert());
            self->state.registered = true;
            self->send(self->state.leader, changed_atom::value, wrap(self->state.volume));
            rp.deliver(wrap(self->state.volume));
          },
          [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
}

caf::error not_registered(const self_ptr& self) {
  return make_error(errc::not_found, "volume '" + self->state.volume.id() + "' is not registered");
}

}  // namespace

volume_actor::behavior_type volume(self_ptr self, replicated_log_actor log, leader_actor leader,
                                   v1::Volume initial, bool registered) {
  self->state.log = std::move(log);
  self->state.leader = std::move(leader);
  self->state.volume = std::move(initial);
  self->state.registered = registered;
  return {
      [self](register_atom, pb<v1::Volume>& incoming) -> caf::result<pb<v1::Volume>> {
        v1::Volume next;
        if (self->state.registered) {
          next = self->state.volume;
          if (auto f = reregister(next, incoming.msg)) return to_error(*f);
        } else {
          next = std::move(incoming.msg);
        }
        // (A promise takes over the reply: make it only once the checks
        // passed, or a returned error would go nowhere.)
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        commit(self, std::move(next), false, rp);
        return rp;
      },
      [self](claim_atom, pb<v1::ClaimRequest>& req,
             plugin_actor plugin) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        auto decide = [self, req = std::move(req.msg), rp](const v1::Plugin* p) mutable {
          claim_request r;
          r.alloc_id = req.alloc_id();
          r.node_id = req.node_id();
          r.write = !req.read_only();
          r.access_mode = req.access_mode();
          r.attachment_mode = req.attachment_mode();
          r.now_ms = now_ms();
          auto next = self->state.volume;
          if (auto f = claim(next, r, p)) {
            rp.deliver(to_error(*f));
            return;
          }
          if (next.SerializeAsString() == self->state.volume.SerializeAsString()) {
            rp.deliver(wrap(self->state.volume));  // idempotent repeat
            return;
          }
          commit(self, std::move(next), false, rp);
        };
        if (!plugin) {
          decide(nullptr);
          return rp;
        }
        // await: no other request of this volume runs until it is decided.
        self->request(plugin, std::chrono::seconds(10), status_atom::value)
            .await([decide](pb<v1::Plugin>& p) mutable { decide(&p.msg); },
                   [decide](caf::error&) mutable { decide(nullptr); });
        return rp;
      },
      [self](release_atom, pb<v1::ReleaseRequest>& req) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        auto next = self->state.volume;
        const auto& alloc = req.msg.alloc_id();
        if (alloc.empty()) return make_error(errc::invalid, "release needs an alloc id (--alloc)");
        if (auto f = release(next, alloc, "released", now_ms())) return to_error(*f);
        // No node-side CSI steps exist yet (they come with the CSI issue):
        // the claim has nothing to unpublish, so it is freed at once.
        advance_claim(next, alloc, v1::CLAIM_READY_TO_FREE);
        free_claim(next, alloc);
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        commit(self, std::move(next), false, rp);
        return rp;
      },
      [self](deregister_atom, bool force) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        auto next = self->state.volume;
        if (!force) {
          if (auto f = can_deregister(next)) return to_error(*f);
        } else {
          std::vector<std::string> allocs;
          for (const auto& c : next.claims()) allocs.push_back(c.alloc_id());
          for (const auto& a : allocs) {
            release(next, a, "deregister --force", now_ms());
            advance_claim(next, a, v1::CLAIM_READY_TO_FREE);
            free_claim(next, a);
          }
        }
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        commit(self, std::move(next), true, rp);
        return rp;
      },
      [self](status_atom) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        return wrap(self->state.volume);
      },
  };
}

}  // namespace berth
