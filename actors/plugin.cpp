#include "actors/clock.hpp"
#include "actors/node_call.hpp"
#include "actors/plugin.hpp"

#include <chrono>

#include <caf/typed_event_based_actor.hpp>

#include "persistence/state_store.hpp"

namespace berth {

namespace {


using self_ptr = plugin_actor::stateful_pointer<plugin_state>;
using result_promise = caf::typed_response_promise<pb<v1::NodeVolumeResult>>;

void next_controller_call(self_ptr self) {
  auto& st = self->state;
  if (st.controller_busy || st.controller_queue.empty()) return;
  st.controller_busy = true;
  auto job = std::move(st.controller_queue.front());
  st.controller_queue.pop_front();
  job();
}

// Queues a controller RPC; it runs once every earlier one finished.
template <class Atom>
result_promise queue_controller_call(self_ptr self, Atom atom, v1::NodeVolumeRequest req,
                                     node_actor controller) {
  auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
  auto id = self->state.next_call++;
  self->state.open_calls->emplace(id, rp);
  self->state.controller_queue.emplace_back([self, atom, req = std::move(req), controller, rp,
                                             id]() mutable {
    auto done = [self, id] {
      self->state.open_calls->erase(id);
      self->state.controller_busy = false;
      next_controller_call(self);
    };
    if (!controller) {
      rp.deliver(make_error(errc::unavailable,
                            "plugin '" + self->state.plugin.id() +
                                "' has no healthy controller on a node with a berth client"));
      done();
      return;
    }
    call_node<pb<v1::NodeVolumeResult>>(self, controller, csi_step_timeout, atom,
                                        wrap(std::move(req)))
        .then(
            [rp, done](pb<v1::NodeVolumeResult>& r) mutable {
              rp.deliver(std::move(r));
              done();
            },
            [rp, done](caf::error& e) mutable {
              rp.deliver(std::move(e));
              done();
            });
  });
  next_controller_call(self);
  return rp;
}

}  // namespace

plugin_actor::behavior_type plugin(plugin_actor::stateful_pointer<plugin_state> self,
                                   replicated_log_actor log, leader_actor leader,
                                   v1::Plugin initial) {
  self->state.log = std::move(log);
  self->state.leader = std::move(leader);
  self->state.plugin = std::move(initial);
  self->attach_functor([open = self->state.open_calls, id = self->state.plugin.id()](
                           const caf::error&) {
    for (auto& [n, rp] : *open)
      rp.deliver(make_error(errc::unavailable,
                            "plugin '" + id +
                                "' stopped (its leader stepped down, or it was garbage-collected) "
                                "before this controller call was done; the step is retried"));
    open->clear();
  });
  return {
      [self](fingerprint_atom, pb<v1::Fingerprint>& fp) -> caf::result<pb<v1::Plugin>> {
        const auto& f = fp.msg;
        auto next = self->state.plugin;
        bool changed;
        if (f.remove()) {
          changed = remove_instance(next, f.type(), f.node_id());
        } else {
          auto inst = f.instance();
          inst.set_node_id(f.node_id());
          changed = upsert_instance(next, f.type(), inst);
          // Stamp the time only on real changes: a periodic fingerprint
          // that changes nothing must not write to the log.
          if (changed) {
            for (auto* list : {next.mutable_controllers(), next.mutable_nodes()})
              for (auto& i : *list)
                if (i.node_id() == f.node_id()) i.set_updated_at_ms(wall_ms());
          }
        }
        if (!changed) return wrap(self->state.plugin);
        v1::LogEntry entry;
        entry.set_format_version(1);
        *entry.add_changes()->mutable_plugin_upsert() = next;
        auto rp = self->make_response_promise<pb<v1::Plugin>>();
        self->request(self->state.log, caf::infinite, propose_atom::value, wrap(std::move(entry)))
            .await(
                [self, next, rp](uint64_t index) mutable {
                  v1::Change stamped;
                  *stamped.mutable_plugin_upsert() = std::move(next);
                  stamp(stamped, index);
                  self->state.plugin = std::move(*stamped.mutable_plugin_upsert());
                  self->send(self->state.leader, changed_atom::value, wrap(self->state.plugin));
                  rp.deliver(wrap(self->state.plugin));
                },
                [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [self](status_atom) -> pb<v1::Plugin> { return wrap(self->state.plugin); },
      [self](ctrl_publish_atom atom, pb<v1::NodeVolumeRequest>& req,
             node_actor controller) -> caf::result<pb<v1::NodeVolumeResult>> {
        return queue_controller_call(self, atom, std::move(req.msg), std::move(controller));
      },
      [self](ctrl_unpublish_atom atom, pb<v1::NodeVolumeRequest>& req,
             node_actor controller) -> caf::result<pb<v1::NodeVolumeResult>> {
        return queue_controller_call(self, atom, std::move(req.msg), std::move(controller));
      },
  };
}

}  // namespace berth
