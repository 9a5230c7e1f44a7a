#include "actors/plugin.hpp"

#include <caf/typed_event_based_actor.hpp>
#include <chrono>

#include "actors/clock.hpp"
#include "actors/node_call.hpp"
#include "actors/propose.hpp"
#include "control/nodes.hpp"
#include "control/placement.hpp"

namespace berth {

namespace {

using self_ptr = plugin_actor::stateful_pointer<plugin_state>;
using result_promise = caf::typed_response_promise<pb<v1::NodeVolumeResult>>;

void next_controller_call(self_ptr self) {
  auto& st = self->state;
  while (!st.controller_queue.empty() && st.controller_running < controller_call_limit(st.plugin)) {
    ++st.controller_running;
    auto job = std::move(st.controller_queue.front());
    st.controller_queue.pop_front();
    job();
  }
}

// Queues a controller RPC; it runs once fewer than the plugin's limit run
// (calls for one volume never overlap: its volume actor sends one at a
// time).  Waiting here, not at the node, keeps the step's timeout for the
// call itself.
template <class Atom>
result_promise queue_controller_call(self_ptr self, Atom atom, v1::NodeVolumeRequest req,
                                     node_actor controller) {
  auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
  auto id = self->state.next_call++;
  self->state.open_calls->emplace(id, rp);
  self->state.controller_queue.emplace_back(
      [self, atom, req = std::move(req), controller, rp, id]() mutable {
        auto done = [self, id] {
          self->state.open_calls->erase(id);
          --self->state.controller_running;
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
                                            wrap(std::move(req)), self->state.retired)
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

// Commits the plugin's next state (or its deletion) and continues with the
// committed plugin.  await(): the next fingerprint builds on this one.
void persist(self_ptr self, v1::Plugin next, bool remove, std::function<void(caf::error)> then) {
  auto change = remove ? plugin_delete_change(next.id()) : upsert_change(next);
  propose(self, self->state.log, self->state.term, {std::move(change)})
      .await(
          [self, next, then](uint64_t index) mutable {
            auto stamped = upsert_change(std::move(next));
            stamp(stamped, index);
            self->state.plugin = std::move(*stamped.mutable_plugin_upsert());
            then(caf::none);
          },
          [then](caf::error& e) mutable { then(std::move(e)); });
}

}  // namespace

plugin_actor::behavior_type plugin(plugin_actor::stateful_pointer<plugin_state> self,
                                   replicated_log_actor log, v1::Plugin initial, uint64_t term,
                                   retired_nodes_ptr retired) {
  self->state.log = std::move(log);
  self->state.retired = std::move(retired);
  self->state.term = term;
  self->state.plugin = std::move(initial);
  self->attach_functor([open = self->state.open_calls,
                        id = self->state.plugin.id()](const caf::error&) {
    for (auto& [n, rp] : *open)
      rp.deliver(make_error(errc::unavailable,
                            "plugin '" + id +
                                "' stopped (its leader stepped down, or it was garbage-collected) "
                                "before this controller call was done; the step is retried"));
    open->clear();
  });
  return {
      [self](fingerprint_atom, pb<v1::Fingerprint>& fp) -> caf::result<pb<v1::Plugin>> {
        auto next = self->state.plugin;
        // A periodic fingerprint that changes nothing writes nothing.
        if (!apply_fingerprint(next, fp.msg, wall_ms())) return wrap(self->state.plugin);
        auto rp = self->make_response_promise<pb<v1::Plugin>>();
        persist(self, std::move(next), false, [self, rp](caf::error e) mutable {
          if (e)
            rp.deliver(std::move(e));
          else
            rp.deliver(wrap(self->state.plugin));
        });
        return rp;
      },
      [self](remove_atom) -> caf::result<bool> {
        if (!plugin_is_empty(self->state.plugin)) return false;
        auto rp = self->make_response_promise<bool>();
        persist(self, self->state.plugin, true, [self, rp](caf::error e) mutable {
          if (e) {
            rp.deliver(std::move(e));
            return;
          }
          rp.deliver(true);
          self->quit();
        });
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
