// One request to a node actor that fails as soon as the node actor goes
// down, instead of waiting out its timeout.
//
// A node actor lives in a berth client, usually on another host.  When that
// client dies (SIGKILL, crash, reboot) while a CSI step is in flight, its
// answer never comes; CAF kills the local proxy as soon as the connection
// closes, but a plain request would still wait for its full timeout (75 s
// for a CSI step), holding up the volume's release and, for a controller
// RPC, every other controller RPC of the plugin queued behind it.
//
// call_node spawns a small helper actor that monitors the node actor, sends
// the request, and answers with the node's result, the timeout error, or an
// `unavailable` error on the node actor's down message, whichever comes
// first.  Callers chain .then or .await on the returned handle exactly as on
// a direct request.  A step failed this way is retried by its caller (the
// watcher retries releases; a failed claim is unwound), and every step is
// idempotent, so a step the client did finish before dying succeeds again.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>

#include "actors/actors.hpp"

namespace berth {

namespace detail {

template <class Result, class Atom, class Request>
caf::behavior node_call(caf::event_based_actor* self, node_actor node,
                        std::chrono::milliseconds timeout) {
  struct call {
    bool node_down = false;
    bool answered = false;
    caf::response_promise rp;
  };
  auto c = std::make_shared<call>();
  auto down_error = [] {
    return make_error(errc::unavailable,
                      "the node's berth client disconnected before it answered; the step is retried");
  };
  self->set_down_handler([self, c, down_error](caf::down_msg&) {
    c->node_down = true;
    if (c->rp.pending() && !c->answered) {
      c->answered = true;
      c->rp.deliver(down_error());
      self->quit();
    }
  });
  self->monitor(node);
  return {
      [self, c, node, timeout, down_error](Atom atom, Request& req) {
        c->rp = self->make_response_promise();
        if (c->node_down) {
          c->answered = true;
          c->rp.deliver(down_error());
          self->quit();
          return;
        }
        self->request(node, timeout, atom, std::move(req))
            .then(
                [self, c](Result& r) {
                  if (c->answered) return;
                  c->answered = true;
                  c->rp.deliver(std::move(r));
                  self->quit();
                },
                [self, c](caf::error& e) {
                  if (c->answered) return;
                  c->answered = true;
                  c->rp.deliver(std::move(e));
                  self->quit();
                });
      },
  };
}

}  // namespace detail

// Requests `atom, req` from `node` (answered with a Result) through a
// helper that fails the request when the node actor goes down.  Returns the
// response handle of the request to the helper.
template <class Result, class Self, class Atom, class Request>
auto call_node(Self* self, const node_actor& node, std::chrono::milliseconds timeout, Atom atom,
               Request req) {
  auto helper = self->spawn(detail::node_call<Result, Atom, Request>, node, timeout);
  return self->request(helper, caf::infinite, atom, std::move(req));
}

}  // namespace berth
