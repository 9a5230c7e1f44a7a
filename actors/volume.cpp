#include "actors/volume.hpp"

#include <chrono>
#include <functional>
#include <memory>

#include "actors/clock.hpp"
#include "actors/node_call.hpp"
#include "actors/propose.hpp"
#include "control/availability.hpp"
#include "control/health.hpp"
#include "control/expansion.hpp"
#include "control/release.hpp"
#include "control/snapshots.hpp"
#include "persistence/crashpoint.hpp"

namespace berth {

namespace {

using self_ptr = volume_actor::stateful_pointer<volume_state>;
using volume_promise = caf::typed_response_promise<pb<v1::Volume>>;
using claim_promise = caf::typed_response_promise<pb<v1::ClaimResult>>;
// Continuations of the claim and release workflows: nullopt = success.
using then_fn = std::function<void(std::optional<caf::error>)>;


// Commits `next` as the volume's new state (or its deletion), with `also`
// in the same entry, then updates the actor before continuing.  await()
// keeps every other request of this volume waiting until the change is
// durable.  The committed volume carries the entry's index as its modify
// index (a deleted one too): the leader answers once its catalog has it.
void persist(self_ptr self, v1::Volume next, bool remove, then_fn then,
             std::vector<v1::Change> also = {}) {
  std::vector<v1::Change> changes;
  changes.push_back(remove ? volume_delete_change(next.namespace_(), next.id())
                           : upsert_change(next));
  for (auto& c : also) changes.push_back(std::move(c));
  propose(self, self->state.log, self->state.term, std::move(changes))
      .await(
          [self, next, remove, then](uint64_t index) mutable {
            // Committed on a majority, not yet answered: a shell that loses
            // its answer here must say "may have been applied" (exit 7).
            crashpoint("volume.committed");
            auto stamped = upsert_change(std::move(next));
            stamp(stamped, index);
            self->state.volume = std::move(*stamped.mutable_volume_upsert());
            self->state.registered = !remove;
            then(std::nullopt);
          },
          [then](caf::error& e) mutable { then(std::move(e)); });
}

// Answers with the committed volume once `persist` finished.
then_fn answer(self_ptr self, volume_promise rp) {
  return [self, rp](std::optional<caf::error> err) mutable {
    if (err)
      rp.deliver(std::move(*err));
    else
      rp.deliver(wrap(self->state.volume));
  };
}

caf::error not_registered(const self_ptr& self) {
  return make_error(errc::not_found, "volume '" + self->state.volume.id() + "' is not registered");
}

// Sends one CSI step to a node actor and continues with its result.
template <class Atom>
void csi_step(self_ptr self, const node_actor& node, Atom atom, v1::NodeVolumeRequest req,
              std::function<void(v1::NodeVolumeResult)> ok, then_fn fail) {
  req.set_leader_term(self->state.term);
  call_node<pb<v1::NodeVolumeResult>>(self, node, csi_step_timeout, atom, wrap(std::move(req)),
                                      self->state.retired)
      .await([ok](pb<v1::NodeVolumeResult>& r) mutable { ok(std::move(r.msg)); },
             [fail](caf::error& e) mutable { fail(std::move(e)); });
}

struct release_ctx {
  std::string alloc;
  std::string reason;
  // Shared by every step's closure: a plugin lists all its instances, so a
  // copy per closure cost O(nodes) per step (issue 28).
  std::shared_ptr<const v1::Plugin> plugin;
  plugin_actor plugin_handle;  // queues the controller RPCs
  node_actor target;
  node_actor controller;
  // The claim's node is down or has no berth client: nothing to unpublish.
  bool node_detached = false;
  // The node has not confirmed its unmounts on return (control/release).
  bool node_unmounts_pending = false;
  // The volume with the steps this release took and has not committed yet.
  std::optional<v1::Volume> unsaved;
};

// A controller RPC, queued by the plugin actor (one at a time per plugin).
template <class Atom>
void controller_step(self_ptr self, const plugin_actor& plugin, const node_actor& controller,
                     Atom atom, v1::NodeVolumeRequest req,
                     std::function<void(v1::NodeVolumeResult)> ok, then_fn fail) {
  // No timeout here: the plugin actor's queue answers every call (its own
  // request to the controller node is bounded), and a call given up while
  // still queued would run after the step that follows it.
  req.set_leader_term(self->state.term);
  self->request(plugin, caf::infinite, atom, wrap(std::move(req)), controller)
      .await([ok](pb<v1::NodeVolumeResult>& r) mutable { ok(std::move(r.msg)); },
             [fail](caf::error& e) mutable { fail(std::move(e)); });
}

// The release workflow of one claim: taken -> unpublishing -> node-detached
// (NodeUnpublish, NodeUnstage when no other claim on the node is published)
// -> controller-detached (ControllerUnpublish when no live claim on the node
// remains) -> freed.  A node without a berth client counts as detached.
// Unpublishing and the free are committed when reached; node-detached and
// controller-detached are kept in `ctx.unsaved` and committed with the free,
// or before the release stops short of it (control/release.hpp,
// commit_before_next_step, says why each may or must wait).  A release
// interrupted anywhere resumes from the last committed state.
void release_steps(self_ptr self, release_ctx ctx, then_fn done) {
  // Ends this run of the release with `result`, committing first the
  // steps it took and has not committed, so a retry starts after them.
  auto stop = [self, ctx, done](std::optional<caf::error> result) mutable {
    if (!ctx.unsaved) {
      done(std::move(result));
      return;
    }
    persist(self, std::move(*ctx.unsaved), false,
            [done, result](std::optional<caf::error> err) mutable {
              done(result ? std::move(result) : std::move(err));
            });
  };
  const auto& vol = ctx.unsaved ? *ctx.unsaved : self->state.volume;
  release_facts facts;
  facts.node_connected = static_cast<bool>(ctx.target);
  facts.node_detached = ctx.node_detached;
  facts.controller_required = ctx.plugin->controller_required();
  facts.controller_available = ctx.controller && ctx.plugin_handle;
  facts.node_unmounts_pending = ctx.node_unmounts_pending;
  auto step = next_release_step(vol, ctx.alloc, facts);
  auto commit = [self, ctx, done](v1::ClaimState to) mutable {
    auto v = ctx.unsaved ? std::move(*ctx.unsaved) : self->state.volume;
    if (to == v1::CLAIM_UNPUBLISHING)
      release(v, ctx.alloc, ctx.reason, wall_ms());
    else
      advance_claim(v, ctx.alloc, to);
    if (to == v1::CLAIM_READY_TO_FREE) free_claim(v, ctx.alloc);
    if (!commit_before_next_step(to)) {
      ctx.unsaved = std::move(v);
      // A CSI step done and not committed: a crash here leaves the claim
      // at unpublishing (integration.retry ReleaseCrashTest).
      crashpoint("release.uncommitted");
      release_steps(self, std::move(ctx), std::move(done));
      return;
    }
    ctx.unsaved.reset();
    // The free's entry also drops the volume from the alloc record that
    // `volume claim` made (resolved at apply: nothing for other allocs).
    std::vector<v1::Change> also;
    if (to == v1::CLAIM_READY_TO_FREE)
      also.push_back(alloc_volume_freed_change(ctx.alloc, v.namespace_(), v.id()));
    persist(
        self, std::move(v), false,
        [self, ctx, done](std::optional<caf::error> err) mutable {
          if (err)
            done(std::move(err));
          else
            release_steps(self, std::move(ctx), std::move(done));
        },
        std::move(also));
  };
  const auto* c = find_claim(vol, ctx.alloc);
  // Whether ControllerUnpublishVolume is needed is the plugin's to say:
  // with the plugin unknown (not registered now, or its actor did not
  // answer in time) the step waits instead of taking "not required", which
  // would leave the volume attached to the node.
  if (c != nullptr && c->state() == v1::CLAIM_NODE_DETACHED && ctx.plugin->id().empty()) {
    stop(make_error(errc::unavailable,
                    "volume '" + vol.id() + "': plugin '" + vol.plugin_id() +
                        "' is not known right now, so whether ControllerUnpublishVolume is "
                        "needed cannot be told; the release stays at node-detached until it is "
                        "(the volume watcher retries)"));
    return;
  }
  switch (step.action) {
    case release_action::done:
      stop(std::nullopt);
      return;
    case release_action::commit:
      commit(step.to);
      return;
    case release_action::wait_for_node:
      stop(make_error(errc::unavailable,
                      "volume '" + vol.id() + "': the berth client of node '" + c->node_id() +
                          "' is not connected, so NodeUnpublishVolume waits for it (or for "
                          "the node to be marked down; then the claim is released without it)"));
      return;
    case release_action::wait_for_controller:
      stop(make_error(errc::unavailable,
                      "volume '" + vol.id() + "': plugin '" + ctx.plugin->id() +
                          "' has no healthy controller on a node with a berth client; the "
                          "release stays at node-detached until one is back (the volume "
                          "watcher retries)"));
      return;
    case release_action::wait_for_unmounts:
      stop(make_error(errc::unavailable,
                      "volume '" + vol.id() + "': node '" + c->node_id() +
                          "' came back from down and has not confirmed that it unmounted what "
                          "was released without it (it may still have the volume staged); "
                          "ControllerUnpublishVolume waits for it (the volume watcher retries)"));
      return;
    case release_action::node_unpublish: {
      auto req = request_for(node_request(vol, *c, *ctx.plugin), node_step::unpublish_unstage);
      req.set_unstage(step.unstage);
      csi_step(self, ctx.target, unpublish_atom::value, std::move(req),
               [commit, to = step.to](v1::NodeVolumeResult) mutable { commit(to); }, stop);
      return;
    }
    case release_action::controller_unpublish:
      controller_step(self, ctx.plugin_handle, ctx.controller, ctrl_unpublish_atom::value,
                      node_request(vol, *c, *ctx.plugin),
                      [commit, to = step.to](v1::NodeVolumeResult) mutable { commit(to); }, stop);
      return;
  }
}

struct claim_ctx {
  std::string alloc;
  std::shared_ptr<const v1::Plugin> plugin;  // shared, as in release_ctx
  plugin_actor plugin_handle;
  node_actor target;
  node_actor controller;
  std::vector<std::string> mount_flags;  // override the volume's, when given
  // The node has not confirmed its unmounts on return: an unwind's
  // ControllerUnpublish waits for them (claim simulation seed 507047).
  bool node_unmounts_pending = false;
  // The claim was committed before this request (a repeat: its steps run
  // again, idempotent): a failed step leaves it as it is, since an earlier
  // request's answer stands on it .
  bool repeat = false;
};

// After a claim is committed: controller publish (when the plugin requires
// it), then stage and publish on the target node.  Any failure unwinds
// whatever was done and frees the claim: no claim is left behind.
void publish_steps(self_ptr self, claim_ctx ctx, claim_promise rp) {
  const auto* c = find_claim(self->state.volume, ctx.alloc);
  auto reply = [self, rp, repeated = ctx.repeat](std::string path) mutable {
    v1::ClaimResult r;
    *r.mutable_volume() = self->state.volume;
    r.set_published_path(std::move(path));
    r.set_repeated(repeated);
    rp.deliver(wrap(std::move(r)));
  };
  if (c == nullptr || !ctx.target) {
    reply("");  // no berth client on that node: the claim is recorded only
    return;
  }
  auto unwind = [self, ctx, rp](caf::error cause) mutable {
    if (ctx.repeat) {
      auto f = to_failure(cause);
      const auto& v = self->state.volume;
      f.message +=
          "; the claim stays taken as an earlier request committed it (this one "
          "repeated it): send it again, or release it (berth --namespace " +
          v.namespace_() + " volume release " + v.id() + " --alloc " + ctx.alloc + ")";
      rp.deliver(to_error(f));
      return;
    }
    release_ctx rc{ctx.alloc, "publish failed", ctx.plugin, ctx.plugin_handle, ctx.target,
                   ctx.controller, false, ctx.node_unmounts_pending, std::nullopt};
    release_steps(self, rc, [self, rp, cause, alloc = ctx.alloc](std::optional<caf::error> err) mutable {
      auto f = to_failure(cause);
      const auto& v = self->state.volume;
      // The unwind may have stopped before its first commit (a leader
      // change): the claim is then still taken, not in release.
      if (err)
        f.message += "; unwinding it also failed (" + to_failure(*err).message +
                     "): the claim is left taken or in release; release it (berth "
                     "--namespace " + v.namespace_() + " volume release " + v.id() +
                     " --alloc " + alloc + ")";
      else
        f.message += "; the claim was released again";
      rp.deliver(to_error(f));
    });
  };
  auto plan = plan_publish(self->state.volume, *c, *ctx.plugin, ctx.mount_flags);
  // An expansion waiting for the volume's next stage: the node runs
  // NodeExpandVolume after it, and the step is committed before the answer.
  auto support = expansion_support_of(*ctx.plugin);
  if (publish_expands(self->state.volume, support)) {
    plan.publish.set_expand_required_bytes(self->state.volume.expansion().required_bytes());
    plan.publish.set_expand_limit_bytes(self->state.volume.expansion().limit_bytes());
  }
  auto node_publish = [self, ctx, reply, unwind, support,
                       node = c->node_id()](v1::NodeVolumeRequest req) mutable {
    self->state.published_ms[node] = steady_ms();
    csi_step(
        self, ctx.target, publish_atom::value, std::move(req),
        [self, reply, support, node](v1::NodeVolumeResult r) mutable {
          if (!r.expanded()) {
            reply(r.target_path());
            return;
          }
          auto next = after_node_expand(self->state.volume, node, r.capacity_bytes());
          if (next_expansion_step(next, support).action == expansion_action::finish)
            next = expansion_finished(std::move(next));
          persist(self, std::move(next), false,
                  [reply, path = r.target_path()](std::optional<caf::error>) mutable {
                    reply(path);  // published either way; a lost step runs again
                  });
        },
        [unwind](std::optional<caf::error> e) mutable { unwind(std::move(*e)); });
  };
  if (!plan.controller_publish) {
    node_publish(std::move(plan.publish));
    return;
  }
  if (!ctx.controller) {
    unwind(make_error(errc::unavailable,
                      "plugin '" + ctx.plugin->id() +
                          "' requires ControllerPublishVolume and no node with a berth client "
                          "runs a healthy controller instance"));
    return;
  }
  controller_step(self, ctx.plugin_handle, ctx.controller, ctrl_publish_atom::value,
                  std::move(plan.attach),
                  [node_publish, req = std::move(plan.publish)](v1::NodeVolumeResult r) mutable {
                    *req.mutable_publish_context() = r.publish_context();
                    node_publish(std::move(req));
                  },
                  [unwind](std::optional<caf::error> e) mutable { unwind(std::move(*e)); });
}

// The plugin as the leader committed it (empty: unknown to the leader).
std::optional<v1::Plugin> known_plugin(pb<v1::Plugin>& p) {
  if (p.msg.id().empty()) return std::nullopt;
  return std::move(p.msg);
}

// One step of the volume's expansion (control/expansion's next step, on
// the committed volume and the plugin as the leader has it), committed
// before the answer: ControllerExpandVolume through the controller node,
// NodeExpandVolume through the target node, or finishing.
// A claim taken on `node` that the node has not published (its publish
// failed and nobody asked again, or its leader was deposed first):
// published now, the expansion's NodeExpandVolume running after the stage;
// a failure leaves the claim as it was (the leader retries the step).
void publish_for_expansion(self_ptr self, const v1::Plugin& p, plugin_actor plugin_handle,
                           node_actor controller, node_actor target, const std::string& node,
                           volume_promise rp) {
  const auto& vol = self->state.volume;
  const v1::Claim* c = nullptr;
  for (const auto& cl : vol.claims())
    if (cl.node_id() == node && cl.state() == v1::CLAIM_TAKEN) {
      c = &cl;
      break;
    }
  auto fail = [rp](std::optional<caf::error> e) mutable { rp.deliver(std::move(*e)); };
  if (c == nullptr || !target) {
    fail(make_error(errc::unavailable, "volume '" + vol.id() + "' has no claim to publish on node '" +
                                           node + "' (the leader retries)"));
    return;
  }
  auto plan = plan_publish(vol, *c, p, {});
  plan.publish.set_expand_required_bytes(vol.expansion().required_bytes());
  plan.publish.set_expand_limit_bytes(vol.expansion().limit_bytes());
  // The node may refuse for good (a claim made before its lease last ran
  // out, or one its fence undid): say which claim holds the expansion up.
  auto refused = [rp, what = "volume '" + vol.id() + "': its expansion needs the claim of alloc '" +
                             c->alloc_id() + "' published on node '" + node +
                             "' again, and that failed (",
                  fix = "); the leader retries; if the node keeps refusing, release that claim "
                        "(berth --namespace " + vol.namespace_() + " volume release " + vol.id() +
                        " --alloc " + c->alloc_id() + ")"](std::optional<caf::error> e) mutable {
    auto f = to_failure(*e);
    f.message = what + f.message + fix;
    rp.deliver(to_error(f));
  };
  auto node_publish = [self, rp, refused, target, node](v1::NodeVolumeRequest req) mutable {
    self->state.published_ms[node] = steady_ms();
    csi_step(
        self, target, publish_atom::value, std::move(req),
        [self, rp, node](v1::NodeVolumeResult r) mutable {
          if (!r.expanded()) {
            rp.deliver(make_error(errc::unavailable,
                                  "volume '" + self->state.volume.id() + "' published on node '" +
                                      node + "', its NodeExpandVolume failed (the leader retries)"));
            return;
          }
          persist(self, after_node_expand(self->state.volume, node, r.capacity_bytes()), false,
                  answer(self, rp));
        },
        refused);
  };
  if (!plan.controller_publish) {
    node_publish(std::move(plan.publish));
    return;
  }
  if (!controller) {
    fail(make_error(errc::unavailable, "volume '" + vol.id() +
                                           "': no healthy controller to publish it on node '" +
                                           node + "' (the leader retries)"));
    return;
  }
  controller_step(self, plugin_handle, controller, ctrl_publish_atom::value, std::move(plan.attach),
                  [node_publish, req = std::move(plan.publish)](v1::NodeVolumeResult r) mutable {
                    *req.mutable_publish_context() = r.publish_context();
                    node_publish(std::move(req));
                  },
                  fail);
}

void expansion_steps(self_ptr self, std::optional<v1::Plugin> p, plugin_actor plugin_handle,
                     node_actor controller, node_actor target, std::string target_node,
                     volume_promise rp) {
  const auto& vol = self->state.volume;
  if (!p) {
    rp.deliver(make_error(errc::unavailable,
                          "volume '" + vol.id() + "': plugin '" + vol.plugin_id() +
                              "' is not known right now; its expansion waits for it (the "
                              "leader retries)"));
    return;
  }
  auto s = expansion_support_of(*p);
  auto step = next_expansion_step(vol, s);
  auto fail = [rp](std::optional<caf::error> e) mutable { rp.deliver(std::move(*e)); };
  v1::NodeVolumeRequest req;
  req.set_plugin_id(vol.plugin_id());
  *req.mutable_volume() = node_view(vol);
  req.set_expand_required_bytes(vol.expansion().required_bytes());
  req.set_expand_limit_bytes(vol.expansion().limit_bytes());
  switch (step.action) {
    case expansion_action::none:
      rp.deliver(wrap(vol));
      return;
    case expansion_action::finish:
      persist(self, expansion_finished(vol), false, answer(self, rp));
      return;
    case expansion_action::wait_for_unpublish:
    case expansion_action::wait_for_stage:
      rp.deliver(to_error(expansion_waits(vol, step)));
      return;
    case expansion_action::controller_expand:
      if (!controller) {
        rp.deliver(make_error(errc::unavailable,
                              "volume '" + vol.id() + "': plugin '" + vol.plugin_id() +
                                  "' has no healthy controller advertising EXPAND_VOLUME on a "
                                  "node with a berth client; the expansion waits for one (the "
                                  "leader retries)"));
        return;
      }
      csi_step(
          self, controller, ctrl_expand_atom::value, std::move(req),
          [self, rp, s](v1::NodeVolumeResult r) mutable {
            auto next = after_controller_expand(self->state.volume, r.capacity_bytes(),
                                                r.node_expansion_required(), s);
            persist(self, std::move(next), false,
                    [self, rp](std::optional<caf::error> err) mutable {
                      // The controller step is committed; NodeExpandVolume
                      // has not run yet: a new leader must resume here.
                      if (!err) crashpoint("expand.controller_committed");
                      answer(self, rp)(std::move(err));
                    });
          },
          fail);
      return;
    case expansion_action::node_expand:
      if (!target || target_node != step.node_id) {
        rp.deliver(make_error(errc::unavailable,
                              "volume '" + vol.id() + "': the berth client of node '" +
                                  step.node_id +
                                  "' is not connected, so NodeExpandVolume waits for it (the "
                                  "leader retries)"));
        return;
      }
      csi_step(
          self, target, expand_atom::value, request_for(std::move(req), node_step::node_expand),
          [self, rp, node = step.node_id](v1::NodeVolumeResult r) mutable {
            persist(self, after_node_expand(self->state.volume, node, r.capacity_bytes()), false,
                    answer(self, rp));
          },
          [self, rp, fail, p = *p, plugin_handle, controller, target,
           node = step.node_id](std::optional<caf::error> e) mutable {
            // Not published there though its claim is taken (claim
            // simulation seed 2823): publish it, expanding at the stage.
            if (e && to_failure(*e).code == errc::not_found) {
              publish_for_expansion(self, p, plugin_handle, controller, target, node, rp);
              return;
            }
            fail(std::move(e));
          });
      return;
  }
}

}  // namespace

volume_actor::behavior_type volume(self_ptr self, replicated_log_actor log, v1::Volume initial,
                                   bool registered, uint64_t term, retired_nodes_ptr retired) {
  self->state.term = term;
  self->state.retired = std::move(retired);
  self->state.log = std::move(log);
  self->state.volume = std::move(initial);
  self->state.registered = registered;
  return {
      [self](register_atom, pb<v1::Volume>& incoming,
             pb<v1::Plugin>& plugin) -> caf::result<pb<v1::Volume>> {
        v1::Volume next;
        if (self->state.registered) {
          next = self->state.volume;
          if (auto f = reregister(next, incoming.msg)) return to_error(*f);
          // A larger capacity_min asks for an expansion (a smaller one than
          // the volume has is refused); the leader drives its steps.
          const auto* p = plugin.msg.id().empty() ? nullptr : &plugin.msg;
          if (auto f = reregistration_expansion(self->state.volume, next, p, wall_ms()))
            return to_error(*f);
        } else {
          next = std::move(incoming.msg);
          next.clear_expansion();
        }
        // (A promise takes over the reply: make it only once the checks
        // passed, or a returned error would go nowhere.)
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        persist(self, std::move(next), false, answer(self, rp));
        return rp;
      },
      [self](claim_atom, pb<v1::ClaimRequest>& req, pb<v1::Plugin>& committed,
             plugin_actor plugin, node_actor target,
             node_actor controller) -> caf::result<pb<v1::ClaimResult>> {
        if (!self->state.registered) return not_registered(self);
        auto p = known_plugin(committed);
        const auto& q = req.msg;
        auto r = claim_request_of(q, wall_ms());
        auto next = self->state.volume;
        if (auto f = claim(next, r, p ? &*p : nullptr)) return to_error(*f);
        if (!p)  // (claim() refuses without a plugin; never published without one)
          return make_error(errc::unavailable, "volume '" + self->state.volume.id() +
                                                   "': its plugin is not known right now; retry");
        auto rp = self->make_response_promise<pb<v1::ClaimResult>>();
        claim_ctx ctx{r.alloc_id, std::make_shared<const v1::Plugin>(std::move(*p)), plugin, target, controller,
                      {q.mount_flags().begin(), q.mount_flags().end()},
                      q.node_unmounts_pending()};
        std::vector<v1::Change> also;
        if (q.has_alloc()) also.push_back(alloc_volume_claimed_change(q.alloc(), q.volume_id()));
        // A repeat of a committed claim: its commit brought the alloc's
        // record along (alloc_volume_claimed), so nothing is written again.
        if (next.SerializeAsString() == self->state.volume.SerializeAsString()) {
          ctx.repeat = true;
          publish_steps(self, std::move(ctx), rp);  // a repeat: CSI calls are idempotent
          return rp;
        }
        persist(
            self, std::move(next), false,
            [self, ctx, rp](std::optional<caf::error> err) mutable {
              if (err)
                rp.deliver(std::move(*err));
              else
                publish_steps(self, std::move(ctx), rp);
            },
            std::move(also));
        return rp;
      },
      [self](release_atom, pb<v1::ReleaseRequest>& req, pb<v1::Plugin>& committed,
             plugin_actor plugin, node_actor target,
             node_actor controller) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        const auto& alloc = req.msg.alloc_id();
        if (alloc.empty()) return make_error(errc::invalid, "release needs an alloc id (--alloc)");
        const auto* held = find_claim(self->state.volume, alloc);
        if (held == nullptr)
          return make_error(errc::not_found, "volume '" + self->state.volume.id() +
                                                 "' has no claim of alloc '" + alloc + "'");
        if (release_judged_another(req.msg.judged_claimed_at_ms(), *held))
          return make_error(errc::not_found,
                            "volume '" + self->state.volume.id() + "': the claim of alloc '" +
                                alloc +
                                "' that the volume watcher asked to release was freed, "
                                "and the alloc claimed the volume again since; that "
                                "claim is kept");
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        auto reason = req.msg.reason().empty() ? std::string("released") : req.msg.reason();
        // Decided without the node: unless this actor published the volume
        // there since (the node is back).
        std::string node = find_claim(self->state.volume, alloc)->node_id();
        auto last = self->state.published_ms.find(node);
        bool detached =
            still_detached(req.msg.node_detached(), req.msg.detached_at_ms(),
                           last == self->state.published_ms.end() ? 0 : last->second);
        bool pending = req.msg.node_unmounts_pending();
        release_ctx ctx{alloc, reason,
                        std::make_shared<const v1::Plugin>(known_plugin(committed).value_or(v1::Plugin{})), plugin,
                        target, controller, detached, pending, std::nullopt};
        release_steps(self, std::move(ctx), answer(self, rp));
        return rp;
      },
      [self](deregister_atom, bool force) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        auto next = self->state.volume;
        if (!force) {
          if (auto f = can_deregister(next)) return to_error(*f);
        } else {
          if (auto f = can_force_deregister(next)) return to_error(*f);
          next.clear_claims();
        }
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        auto before = self->state.volume;
        persist(self, std::move(next), true, [self, rp, before](std::optional<caf::error> err) mutable {
          if (err) {
            rp.deliver(std::move(*err));
            return;
          }
          before.set_modify_index(self->state.volume.modify_index());
          rp.deliver(wrap(before));
          self->quit();
        });
        return rp;
      },
      [self](status_atom) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        return wrap(self->state.volume);
      },
      [self](snapshot_atom, pb<v1::SnapshotRequest>& req,
             node_actor controller) -> caf::result<pb<v1::Snapshot>> {
        if (!self->state.registered) return not_registered(self);
        const auto& v = self->state.volume;
        if (!controller)
          return make_error(errc::unavailable,
                            "volume '" + v.id() + "': plugin '" + v.plugin_id() +
                                "' has no healthy controller on a node with a berth client; "
                                "the snapshot cannot be taken now");
        auto r = std::move(req.msg);
        r.set_namespace_(v.namespace_());
        r.set_volume_id(v.id());
        r.set_plugin_id(v.plugin_id());
        r.set_source_external_id(v.external_id());
        *r.mutable_secrets() = call_secrets(v, r.secrets());
        auto rp = self->make_response_promise<pb<v1::Snapshot>>();
        // await: the volume's claims and releases wait until it is taken.
        self->request(controller, csi_step_timeout, snapshot_atom::value, wrap(std::move(r)),
                      self->state.term)
            .await(
                [self, rp](pb<v1::Snapshot>& s) mutable {
                  s.msg.set_namespace_(self->state.volume.namespace_());
                  s.msg.set_source_volume_id(self->state.volume.id());
                  rp.deliver(std::move(s));
                },
                [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [self](modify_atom, pb<v1::VolumeModifyRequest>& req,
             node_actor controller) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        const auto& v = self->state.volume;
        if (!controller)
          return make_error(errc::unavailable,
                            "volume '" + v.id() + "': plugin '" + v.plugin_id() +
                                "' has no healthy controller on a node with a berth client; "
                                "the volume cannot be modified now");
        // What the plugin is sent: only the parameters to set, and the secrets.
        auto call = v;
        *call.mutable_modified_parameters() = req.msg.parameters();
        *call.mutable_secrets() = call_secrets(v, req.msg.secrets());
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        self->request(controller, csi_step_timeout, modify_atom::value, wrap(std::move(call)),
                      self->state.term)
            .await(
                [self, rp, r = std::move(req.msg)](bool) mutable {
                  // Committed only once the plugin accepted them.
                  persist(self, modified(self->state.volume, r), false, answer(self, rp));
                },
                [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
      [self](availability_atom,
             pb<v1::VolumeAvailabilityRequest>& req) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        auto to = req.msg.availability();
        if (!availability_changes(self->state.volume, to))
          return wrap(self->state.volume);  // so already: nothing to commit
        auto next = self->state.volume;
        next.set_availability(to);
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        persist(self, std::move(next), false, answer(self, rp));
        return rp;
      },
      [self](condition_atom, pb<v1::VolumeCondition>& to) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        if (!condition_differs(self->state.volume.condition(), to.msg))
          return wrap(self->state.volume);  // so already: nothing to commit
        auto next = self->state.volume;
        *next.mutable_condition() = std::move(to.msg);
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        persist(self, std::move(next), false, answer(self, rp));
        return rp;
      },
      [self](expand_atom, pb<v1::VolumeExpandRequest>& req,
             pb<v1::Plugin>& plugin) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        const auto* p = plugin.msg.id().empty() ? nullptr : &plugin.msg;
        auto d = decide_expand(self->state.volume, req.msg.required_bytes(), p, wall_ms());
        if (auto* f = std::get_if<failure>(&d)) return to_error(*f);
        auto& dec = std::get<expand_decision>(d);
        if (!dec.start) return wrap(self->state.volume);  // that size already: nothing to commit
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        persist(self, std::move(dec.next), false, answer(self, rp));
        return rp;
      },
      [self](expand_step_atom, pb<v1::Plugin>& committed, plugin_actor plugin,
             node_actor controller, node_actor target,
             std::string target_node) -> caf::result<pb<v1::Volume>> {
        if (!self->state.registered) return not_registered(self);
        if (!expanding(self->state.volume)) return wrap(self->state.volume);
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        expansion_steps(self, known_plugin(committed), plugin, controller, target, target_node,
                        rp);
        return rp;
      },
      [self](stop_atom) -> caf::result<uint64_t> {
        // Every change of this actor was awaited, so nothing is in flight.
        auto rp = self->make_response_promise<uint64_t>();
        rp.deliver(static_cast<uint64_t>(self->state.volume.modify_index()));
        self->quit();
        return rp;
      },
  };
}

}  // namespace berth
