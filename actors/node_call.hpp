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
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
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

// The node actors the leader knows were replaced: a client that restarted
// (or reconnected as a new process) heartbeats with a new node actor, and
// the old one is gone.  A step sent to the old one waits for an answer that
// never comes: the leader reaches a client through the server it registered
// with, and CAF tells no one but that server when the client's connection
// closes, so the helper's monitor never fires and only its unanswered ping
// fails the step, 15 s later.  A volume's or a plugin's queue holds each
// request with the handles the leader chose when it routed it, so after a
// client restart every queued request of the volume waited out those 15 s in
// turn (fault suite, restart-client and drain-client, seed 13: the releases
// of a volume wedged for minutes; issue 59).  The leader retires the old
// handle when the new one heartbeats; a helper refuses a retired handle at
// once, and fails a step in flight to one at its next tick.  Written by the
// leader, read by the helpers on other threads.
class retired_nodes {
 public:
  void retire(const caf::actor_addr& a) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!set_.insert(a).second) return;
    order_.push_back(a);
    if (order_.size() > 10'000) {  // bounded: the oldest are long answered
      set_.erase(order_.front());
      order_.pop_front();
    }
  }
  // A handle that heartbeats again serves its node after all (a server
  // announced an older one to a new leader before it).
  void restore(const caf::actor_addr& a) {
    std::lock_guard<std::mutex> lock(mu_);
    set_.erase(a);
  }
  bool retired(const caf::actor_addr& a) const {
    std::lock_guard<std::mutex> lock(mu_);
    return set_.count(a) > 0;
  }

 private:
  mutable std::mutex mu_;
  std::set<caf::actor_addr> set_;
  std::deque<caf::actor_addr> order_;
};
using retired_nodes_ptr = std::shared_ptr<retired_nodes>;

namespace detail {

inline caf::error retired_error() {
  return make_error(errc::unavailable,
                    "the node's berth client was replaced by a newer process (it restarted) "
                    "before it answered; the step is retried");
}

template <class Result, class Atom, class Request>
caf::behavior node_call(caf::event_based_actor* self, node_actor node,
                        std::chrono::milliseconds timeout, retired_nodes_ptr retired) {
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
      [self, c, node, fail, retired](tick_atom) {
        if (c->answered) return;
        if (c->failure) {
          auto e = std::move(*c->failure);
          c->failure.reset();
          fail(std::move(e));
          return;
        }
        if (retired && retired->retired(node.address())) {
          fail(retired_error());
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
      [self, c, node, timeout, down_error, fail, retired](Atom atom, Request& req) {
        c->rp = self->make_response_promise();
        if (c->node_down || (retired && retired->retired(node.address()))) {
          c->answered = true;  // nothing sent: nothing can run
          c->rp.deliver(c->node_down ? down_error() : retired_error());
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
// helper that fails the request when the node actor goes down or is
// `retired` (may be null).  Returns the response handle of the request to
// the helper.
template <class Result, class Self, class Atom, class Request>
auto call_node(Self* self, const node_actor& node, std::chrono::milliseconds timeout, Atom atom,
               Request req, retired_nodes_ptr retired) {
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
                                                  timeout, std::move(retired));
  return self->request(helper, caf::infinite, atom, std::move(req));
}

}  // namespace berth
