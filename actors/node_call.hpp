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
// A connection that goes silent instead of closing (a network partition
// that drops packets, a frozen client: TCP holds the connection for many
// minutes) brings no down message at all.  So while the request runs the
// helper pings the node actor every ping_interval; a ping unanswered for
// ping_timeout fails the step as `unavailable` (issue 27: a release waited
// out the whole 75 s this way, and every controller call queued behind it).
// And a step can be lost while the pings are answered: sent on a route that
// died, to a client that is reached again another way (it reconnected
// through another server).  The node answers each ping with whether a step
// from the pinging helper reached it; two such answers in a row saying no
// fail the step as `unavailable` too (issue 26, partition-client with
// proxies, seed 3: a release held its volume for the 75 s step timeout).
//
// And a step can arrive late: sent just before a partition, held in TCP
// while the helper gave up on it and its caller went on (another
// controller unpublished the volume, the volume was published again), then
// delivered after the heal.  Run then, it would undo what was done since.
// So the node asks the helper, right before the step's call is sent,
// whether it still waits for it (confirm_atom; the request's
// confirm_start), and sends nothing without a yes within
// step_confirm_timeout; a helper that gave up has quit and answers nothing
// (control/lease: step_failure_hold_ms).
//
// call_node spawns a small helper actor that monitors the node actor, sends
// the request, and answers with the node's result, the timeout error, an
// `unavailable` error on the node actor's down message or an unanswered
// ping, whichever comes first.  Callers chain .then or .await on the
// returned handle exactly as on
// a direct request.  A step failed this way is retried by its caller (the
// watcher retries releases; a failed claim is unwound), and every step is
// idempotent, so a step the client did finish before dying succeeds again.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>

#include "actors/actors.hpp"
#include "actors/clock.hpp"
#include "control/lease.hpp"

namespace berth {

// While a step runs on a node: how often its node actor is pinged, and how
// long a ping may go unanswered before the step fails.  A node actor
// answers at once (its CSI calls run on threads of their own), so only a
// lost connection or a stopped process leaves a ping unanswered this long.
inline constexpr std::chrono::seconds node_ping_interval{5};
inline constexpr std::chrono::seconds node_ping_timeout{10};

namespace detail {

template <class Result, class Atom, class Request>
caf::behavior node_call(caf::event_based_actor* self, node_actor node,
                        std::chrono::milliseconds timeout) {
  struct call {
    bool node_down = false;
    bool answered = false;
    step_watch watch;  // the pings' answers (control/lease.hpp)
    int64_t confirmed_ms = 0;  // the last yes to the node's confirm_atom
    std::optional<caf::error> failure;  // held until the call cannot start
    caf::response_promise rp;
  };
  auto c = std::make_shared<call>();
  // Fails the step once a call the node may have been told to send can no
  // longer start (control/lease: step_failure_hold_ms).
  auto fail = [self, c](caf::error e) {
    auto hold = step_failure_hold_ms(
        c->confirmed_ms,
        std::chrono::duration_cast<std::chrono::milliseconds>(step_confirm_timeout).count(),
        steady_ms());
    if (hold > 0) {
      c->failure = std::move(e);
      self->delayed_send(self, std::chrono::milliseconds(hold), tick_atom::value);
      return;
    }
    c->answered = true;
    c->rp.deliver(std::move(e));
    self->quit();
  };
  auto down_error = [] {
    return make_error(errc::unavailable,
                      "the node's berth client disconnected before it answered; the step is retried");
  };
  // At once, held failure or not: a closed connection delivers no yes
  // afterwards (a confirmation on the way died with it).
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
      // The node's question right before it sends the step's call.
      [c](confirm_atom) {
        if (c->answered || c->failure) return false;
        c->confirmed_ms = steady_ms();
        return true;
      },
      // The pings while the step runs; a failure held, once its hold ends.
      [self, c, node, fail](tick_atom) {
        if (c->answered) return;
        if (c->failure) {
          auto e = std::move(*c->failure);
          c->failure.reset();
          fail(std::move(e));
          return;
        }
        self->request(node, node_ping_timeout, ping_atom::value)
            .then(
                [self, c, fail](bool arrived) {
                  if (c->answered || c->failure) return;
                  // Twice in a row (5 s apart): the step was sent on a
                  // route that died, and the node, reached again another
                  // way, never got it.
                  c->watch = watch_after_ping(c->watch, arrived);
                  if (step_lost(c->watch)) {
                    fail(make_error(
                        errc::unavailable,
                        "the node's berth client answers, but the step sent to it never "
                        "arrived (its connection was replaced while the step was on the way); "
                        "the step is retried"));
                    return;
                  }
                  self->delayed_send(self, node_ping_interval, tick_atom::value);
                },
                [c, fail](caf::error& e) {
                  if (c->answered || c->failure) return;
                  fail(make_error(
                      errc::unavailable,
                      "the node's berth client did not answer for " +
                          std::to_string(node_ping_timeout.count()) +
                          " s while the step ran (a network partition, or a stopped "
                          "process: " + to_failure(e).message + "); the step is retried"));
                });
      },
      [self, c, node, timeout, down_error, fail](Atom atom, Request& req) {
        c->rp = self->make_response_promise();
        if (c->node_down) {
          c->answered = true;
          c->rp.deliver(down_error());
          self->quit();
          return;
        }
        self->delayed_send(self, node_ping_interval, tick_atom::value);
        self->request(node, timeout, atom, std::move(req))
            .then(
                [self, c](Result& r) {
                  if (c->answered) return;
                  c->answered = true;
                  c->rp.deliver(std::move(r));
                  self->quit();
                },
                [self, c, fail](caf::error& e) {
                  if (c->answered) return;
                  // The step's timeout is the helper's own verdict: held
                  // like the pings'.  Any other error is the node's answer
                  // (the call ended, or was never sent): at once, held
                  // failure or not (a plugin that fails fast must not wait
                  // out the hold: integration.ui's watcher retries).
                  if (e == caf::sec::request_timeout) {
                    if (!c->failure) fail(std::move(e));
                    return;
                  }
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
  static_assert(std::is_same_v<Request, pb<v1::NodeVolumeRequest>>,
                "a step to a node is a NodeVolumeRequest: its node confirms it with the helper");
  req.msg.set_confirm_start(true);
  // Linked: a helper whose caller stopped (a volume or plugin actor of a
  // leader that stepped down) stops too, so it confirms nothing any more
  // and a step of the deposed leader that arrives late is not sent (the
  // claim simulation's held partitions, seed 763 of a variant: a held
  // ControllerPublish of the old leader confirmed after the new leader had
  // released the claim through another node).  Its own end, normal, does
  // not stop the caller.
  auto helper = self->template spawn<caf::linked>(detail::node_call<Result, Atom, Request>, node,
                                                  timeout);
  return self->request(helper, caf::infinite, atom, std::move(req));
}

}  // namespace berth
