// The leader actor: the leader's node and plugin flows: fingerprints, heartbeats, mark-down, plugin
// GC.
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <random>

#include "actors/clock.hpp"
#include "actors/leader_flows.hpp"
#include "actors/node_call.hpp"
#include "control/allocs.hpp"
#include "control/drain.hpp"
#include "control/entries.hpp"
#include "control/gc.hpp"
#include "control/nodes.hpp"
#include "control/placement.hpp"
#include "control/release.hpp"
#include "control/views.hpp"
#include "log/log.hpp"
#include "messages/failure.hpp"

namespace berth::leader_flows {

// --- nodes and plugins ------------------------------------------------------------

void fingerprint(const self_ptr& self, v1::Fingerprint f, response_promise rp) {
  auto problems = validate_fingerprint(f);
  if (!problems.empty()) {
    deliver(rp, failure{errc::invalid, describe("plugin fingerprint", problems)});
    return;
  }
  if (fingerprint_withheld(self->state.cat, f)) {
    // A drained node's instances stay withdrawn until it is enabled.
    v1::Response r;
    r.set_message("node " + quote_name(f.node_id()) +
                  " is drained and its plugin instances withdrawn; not applied until: berth "
                  "node eligibility " +
                  f.node_id() + " --enable");
    deliver(rp, std::move(r));
    return;
  }
  if (f.remove() && !self->state.plugin_actors.count(f.plugin_id())) {
    deliver(rp,
            failure{errc::not_found, "plugin " + quote_name(f.plugin_id()) + " is not registered"});
    return;
  }
  self->request(ensure_plugin_actor(self, f.plugin_id()), caf::infinite, fingerprint_atom::value,
                wrap(f))
      .then(
          [self, f, rp](pb<v1::Plugin>& p) mutable {
            v1::Response r;
            *r.add_plugins() = p.msg;
            r.set_message("plugin " + quote_name(p.msg.id()) +
                          (f.remove() ? " instance removed from" : " instance reported on") +
                          " node " + quote_name(f.node_id()));
            write(
                self,
                [f, p = std::move(p.msg)](
                    const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
                  auto next = node_after_fingerprint(c, f, p);
                  if (!next) return std::vector<v1::Change>{};
                  return std::vector<v1::Change>{upsert_change(*next)};
                },
                [rp, r](std::optional<failure> err) mutable {
                  if (err)
                    deliver(rp, *err);
                  else
                    deliver(rp, r);
                });
          },
          [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); });
}

void unmount_on_return(const self_ptr& self, const std::string& node_id, node_actor node);

namespace {

// The answer (or the silence) of a ping on the way back to a client.
void reach_answered(const self_ptr& self, const std::string& node_id, const caf::actor_addr& addr,
                    int64_t asked_ms, bool answered) {
  auto& st = self->state;
  auto it = st.paths.find(node_id);
  if (it == st.paths.end() || it->second.addr != addr) return;  // another client since
  bool was = reachable(it->second.reach);
  it->second.reach = reach_after_ping(it->second.reach, asked_ms, answered, steady_ms());
  bool is = reachable(it->second.reach);
  if (was == is) return;
  if (is) {
    logging::info("leader", "node's client answers the leader again", {{"node", node_id}});
    return;
  }
  logging::warn("leader",
                "node's client does not answer the leader: its heartbeats arrive but a ping "
                "sent back went unanswered for " +
                    std::to_string(node_ping_timeout.count()) +
                    " s; it is sent nothing and granted no lease until it answers (it "
                    "reconnects through another server)",
                {{"node", node_id}});
  if (auto n = st.node_actors.find(node_id);
      n != st.node_actors.end() && n->second.address() == addr) {
    st.node_actors.erase(n);
    st.stats->actors("node", st.node_actors.size());
  }
  // A round of unmounts on return sent this way is lost with it: the next
  // heartbeat that finds the way back starts a new one at once, instead of
  // after the lost round's 60 s (partition-client, proxies, seed 5: a
  // release waited a minute for it).
  st.unmounting.erase(node_id);
}

// Pings the client when one is due (control/lease.hpp, reach_ping_due);
// whether the way back to it holds.
bool check_way_back(const self_ptr& self, const std::string& node_id, const node_actor& node) {
  auto& path = self->state.paths[node_id];
  if (path.addr != node.address()) path = {node.address(), node_reach{}};
  auto now = steady_ms();
  if (reach_ping_due(
          path.reach, now,
          std::chrono::duration_cast<std::chrono::milliseconds>(node_ping_interval).count())) {
    path.reach.asked_ms = now;
    self->request(node, node_ping_timeout, ping_atom::value)
        .then([self, node_id, addr = node.address(),
               now](bool) { reach_answered(self, node_id, addr, now, true); },
              [self, node_id, addr = node.address(), now](caf::error&) {
                reach_answered(self, node_id, addr, now, false);
              });
  }
  return reachable(path.reach);
}

}  // namespace

// A client that (re)connects stops what the servers stopped while it was
// away, before the watcher unpublishes its volumes; a stop that failed goes
// again with the next heartbeat (control/nodes: stops_due).
static void send_due_stops(const self_ptr& self, const std::string& node_id,
                           const node_actor& node) {
  auto& st = self->state;
  auto& confirmed = st.stops_confirmed[node_id];
  auto& in_flight = st.stops_in_flight[node_id];
  // Forget confirmations of allocs that no longer need a stop.
  auto needed = allocs_to_stop_on_reconnect(st.cat, node_id);
  std::set<std::string> still(needed.begin(), needed.end());
  for (auto it = confirmed.begin(); it != confirmed.end();)
    it = still.count(*it) ? std::next(it) : confirmed.erase(it);
  for (const auto& id : stops_due(st.cat, node_id, confirmed, in_flight)) {
    in_flight.insert(id);
    self->request(node, std::chrono::seconds(60), stop_atom::value, id, false)
        .then(
            [self, node_id, id, addr = node.address()](int32_t) {
              auto& st = self->state;
              auto known = st.node_actors.find(node_id);
              if (known == st.node_actors.end() || known->second.address() != addr) return;
              st.stops_in_flight[node_id].erase(id);
              st.stops_confirmed[node_id].insert(id);
            },
            [self, node_id, id, addr = node.address()](caf::error& e) {
              auto& st = self->state;
              logging::info("leader",
                            "a client did not confirm an alloc's stop; asked again "
                            "with its next heartbeat",
                            {{"node", node_id}, {"alloc", id}, {"error", to_failure(e).message}});
              auto known = st.node_actors.find(node_id);
              if (known == st.node_actors.end() || known->second.address() != addr) return;
              st.stops_in_flight[node_id].erase(id);
            });
  }
}

// A client's heartbeat (its node actor registering again).
bool heartbeat(const self_ptr& self, const std::string& node_id, node_actor node,
               std::function<void()> registered) {
  auto& st = self->state;
  if (!check_way_back(self, node_id, node)) return false;
  auto known = st.node_actors.find(node_id);
  bool fresh = known == st.node_actors.end() || known->second.address() != node.address();
  if (fresh) {
    logging::info("leader", "node's client connected", {{"node", node_id}});
    // Another process than the one known: the old node actor is gone, and
    // the steps queued or in flight for it fail at once (node_call.hpp).
    if (known != st.node_actors.end()) st.retired->retire(known->second.address());
    st.retired->restore(node.address());
    self->monitor(node);
    // A new connection: every stop is asked of it again.
    st.stops_confirmed.erase(node_id);
    st.stops_in_flight.erase(node_id);
  }
  send_due_stops(self, node_id, node);
  st.node_actors[node_id] = node;
  st.last_seen[node_id] = steady_ms();
  st.stats->actors("node", st.node_actors.size());
  const auto* n = find_node(st.cat, node_id);
  bool was_down = n != nullptr && n->status() == v1::NODE_DOWN;
  write(
      self,
      [node_id](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        auto next = node_after_heartbeat(c, node_id, wall_ms());
        if (!next) return std::vector<v1::Change>{};
        return std::vector<v1::Change>{upsert_change(*next)};
      },
      [registered](std::optional<failure>) { registered(); });
  // Its plugin instances were dropped when it went down: report again.  So
  // too a client that misses one (its report went to a deposed leader, the
  // removal landed after it, or the ask or the report was lost), on every
  // heartbeat until it is there.
  if (report_plugins_again(st.cat, node_id, was_down)) self->send(node, fingerprint_atom::value);
  unmount_on_return(self, node_id, node);
  return true;
}

// A node back from down: every alloc of it that had ended may have had its
// claims released without the node, so the client stops each and unmounts
// what it still has of it from its own records (publications and stagings
// recorded before their calls).  One round at a time per node, asked again
// on the next heartbeat until every stop is confirmed; then the node's
// `down_at_ms` is cleared (committed, so a new leader asks too).
void unmount_on_return(const self_ptr& self, const std::string& node_id, node_actor node) {
  auto& st = self->state;
  const auto* n = find_node(st.cat, node_id);
  if (n == nullptr || !unmounts_pending(*n) || !st.unmounting.insert(node_id).second) return;
  auto down_at = n->down_at_ms();
  auto allocs = allocs_to_unmount_on_return(st.cat, node_id);
  auto left = std::make_shared<size_t>(allocs.size());
  auto all_done = std::make_shared<bool>(true);
  auto finish = [self, node_id, down_at, all_done] {
    if (!*all_done) {
      self->state.unmounting.erase(node_id);  // again on the next heartbeat
      return;
    }
    write(
        self,
        [node_id, down_at](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
          auto next = node_after_unmounts(c, node_id, down_at);
          if (!next) return std::vector<v1::Change>{};
          return std::vector<v1::Change>{upsert_change(std::move(*next))};
        },
        [self, node_id](std::optional<failure>) { self->state.unmounting.erase(node_id); });
  };
  if (allocs.empty()) {
    finish();
    return;
  }
  for (const auto& id : allocs)
    self->request(node, std::chrono::seconds(60), stop_atom::value, id, true)
        .then(
            [left, finish](int32_t) {
              if (--*left == 0) finish();
            },
            [left, all_done, finish](caf::error&) {
              *all_done = false;
              if (--*left == 0) finish();
            });
}

// Marks a silent node down (with its allocs lost, one entry), then removes
// its plugin instances through the plugin actors.
void node_down(const self_ptr& self, const std::string& node_id, int64_t silent_ms) {
  self->state.node_actors.erase(node_id);
  ++self->state.marking_down[node_id];
  write(
      self,
      [node_id, silent_ms](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        return mark_down(c, node_id, silent_ms, wall_ms());
      },
      [self, node_id](std::optional<failure> f) {
        auto& m = self->state.marking_down;
        if (auto it = m.find(node_id); it != m.end() && --it->second <= 0) m.erase(it);
        if (f) return;
        for (auto& fp : instances_of_down_node(self->state.cat, node_id)) {
          auto actor = ensure_plugin_actor(self, fp.plugin_id());
          // A client that came back meanwhile reported its instances
          // before this removal: it reports them again after it.
          self->request(actor, caf::infinite, fingerprint_atom::value, wrap(std::move(fp)))
              .then(
                  [self, node_id](pb<v1::Plugin>&) {
                    if (auto n = node_of(self, node_id)) self->send(n, fingerprint_atom::value);
                  },
                  [](caf::error&) {});
        }
      },
      true);  // built from everything on the node: refused when one of its allocs changed
}

// Plugins without any instance left are deleted by their actors (which
// check again, serialized with their fingerprints) and stopped.
void collect_plugins(const self_ptr& self) {
  for (const auto& id : plugins_to_collect(self->state.cat)) {
    auto actor = self->state.plugin_actors.find(id);
    if (actor == self->state.plugin_actors.end()) continue;
    // The plugin actor checks again (serialized with its fingerprints),
    // commits the deletion and quits; the catalog's apply forgets it.
    self->request(actor->second, caf::infinite, remove_atom::value)
        .then([](bool) {}, [](caf::error&) {});
  }
}

// --- drain and eligibility ----------------------------------------------------------

// Stops one alloc through its node's client (a drain's), then commits it
// complete (failed if it never started: stopped_state); the watcher then
// releases its claims through the node.  Never before the client confirmed
// the stop, unless the node has no client (nothing runs there).
void stop_alloc(const self_ptr& self, const std::string& node_id, const std::string& alloc,
                std::string why) {
  auto& st = self->state;
  if (!st.drain_stops.insert(alloc).second) return;  // asked already
  auto done = [self, alloc](std::optional<failure>) { self->state.drain_stops.erase(alloc); };
  auto node = node_of(self, node_id);
  if (!node) {
    const auto* n = find_node(st.cat, node_id);
    if (n != nullptr && !n->has_client()) {
      // Nothing runs there: no client ever ran a command on it.
      const auto* a = find_alloc(st.cat, alloc);
      if (a == nullptr || alloc_terminal(a->state())) return done(std::nullopt);
      set_alloc_state(self, alloc, stopped_state(a->state()), why, 0, done);
      return;
    }
    // Its client is away: the drain waits for it (or for the node to be
    // marked down, or for the deadline).
    st.drain_stops.erase(alloc);
    return;
  }
  logging::info("leader", "drain stops alloc",
                {{"node", node_id}, {"alloc", alloc}, {"reason", why}});
  self->request(node, std::chrono::seconds(60), stop_atom::value, alloc, false)
      .then(
          [self, alloc, why, done](int32_t code) {
            // Looked up again: it may have ended or gone meanwhile.
            const auto* a = find_alloc(self->state.cat, alloc);
            if (a == nullptr || alloc_terminal(a->state())) return done(std::nullopt);
            set_alloc_state(self, alloc, stopped_state(a->state()), why, code, done);
          },
          [self, node_id, alloc](caf::error& e) {
            self->state.drain_stops.erase(alloc);
            logging::warn("leader", "drain could not stop alloc; retrying",
                          {{"node", node_id}, {"alloc", alloc}, {"error", to_failure(e).message}});
          });
}

namespace {

// Commits what `decide` returns for a node request and answers with the
// node (and its drain progress) as committed.
void commit_node_request(const self_ptr& self, const std::string& node_id,
                         std::function<node_update(const catalog&)> decide, response_promise rp,
                         std::function<void()> after = {}) {
  auto message = std::make_shared<std::string>();
  write(
      self,
      [decide, message](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        auto u = decide(c);
        if (u.error) return *u.error;
        *message = u.message;
        if (!u.upsert) return std::vector<v1::Change>{};
        return std::vector<v1::Change>{upsert_change(std::move(*u.upsert))};
      },
      [self, node_id, message, rp, after](std::optional<failure> f) mutable {
        if (f) {
          deliver(rp, *f);
          return;
        }
        v1::Request read;
        read.set_node_status(node_id);
        auto r = answer_read(self->state.cat, read, [](const std::string&) { return int64_t{0}; });
        if (!r) r = v1::Response{};
        r->set_message(*message);
        deliver(rp, std::move(*r));
        if (after) after();
      });
}

// Withdraws a drained node's plugin instances through the plugin actors.
void withdraw_plugins(const self_ptr& self, const std::string& node_id) {
  for (auto& fp : instances_to_withdraw(self->state.cat, node_id)) {
    logging::info("leader", "drain withdraws plugin instance",
                  {{"node", node_id}, {"plugin", fp.plugin_id()}});
    auto actor = ensure_plugin_actor(self, fp.plugin_id());
    self->request(actor, caf::infinite, fingerprint_atom::value, wrap(std::move(fp)))
        .then([](pb<v1::Plugin>&) {},
              [node_id](caf::error& e) {
                logging::warn("leader", "drain could not withdraw a plugin instance",
                              {{"node", node_id}, {"error", to_failure(e).message}});
              });
  }
}

// One step of every drain in progress: stop the running allocs, force at the
// deadline, finish (and withdraw the plugins) once nothing is left.
void drive_drains(const self_ptr& self) {
  auto& st = self->state;
  for (const auto& id : draining_nodes(st.cat)) {
    if (st.drain_writes.count(id)) continue;
    auto plan = plan_drain(st.cat, id, wall_ms());
    if (plan.force || plan.done) {
      st.drain_writes.insert(id);
      bool force = plan.force;
      write(
          self,
          [id, force](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
            return force ? force_drain(c, id, wall_ms()) : finish_drain(c, id, wall_ms());
          },
          [self, id, force](std::optional<failure> f) {
            self->state.drain_writes.erase(id);
            if (f) return;
            if (force) {
              // Its claims are still freed only after their writers stopped:
              // through the client, or fenced by its lease (issue 59).
              logging::warn("leader",
                            "drain deadline passed: every alloc left is stopped through the "
                            "client; claims are freed once their allocs stopped",
                            {{"node", id}});
              drive_drains(self);
              return;
            }
            const auto* n = find_node(self->state.cat, id);
            if (n == nullptr || n->has_drain()) return;
            logging::info("leader", "node drained", {{"node", id}});
            withdraw_plugins(self, id);
          },
          force);  // a forced drain is built from every alloc on the node
      continue;
    }
    const auto* n = find_node(st.cat, id);
    bool forced = n != nullptr && n->has_drain() && n->drain().forced();
    for (const auto& alloc : plan.stop)
      stop_alloc(
          self, id, alloc,
          "stopped by the drain of node " + quote_name(id) + (forced ? " at its deadline" : ""));
  }
}

}  // namespace

void node_drain(const self_ptr& self, const v1::NodeDrainRequest& r, response_promise rp) {
  commit_node_request(
      self, r.node_id(), [r](const catalog& c) { return drain_request(c, r, wall_ms()); }, rp,
      [self] { drive_drains(self); });
}

void node_eligibility(const self_ptr& self, const v1::NodeEligibilityRequest& r,
                      response_promise rp) {
  auto id = r.node_id();
  commit_node_request(
      self, id, [r](const catalog& c) { return eligibility_request(c, r); }, rp,
      [self, id] {
        // Enabled again: its client reports the instances the drain withdrew.
        const auto* n = find_node(self->state.cat, id);
        if (n != nullptr && !n->ineligible())
          if (auto node = node_of(self, id)) self->send(node, fingerprint_atom::value);
      });
}

// Timed collections run every 30 s, or every half of the smaller threshold
// when that is shorter (ticks are 500 ms).
uint64_t gc_period_ticks(const gc_thresholds& t) {
  int64_t shortest = 30'000;
  for (auto ms : {t.alloc_ms, t.node_ms})
    if (ms >= 0) shortest = std::min(shortest, ms / 2);
  return static_cast<uint64_t>(std::max<int64_t>(1, shortest / 500));
}

// Commits what plan_gc allows at `t`, planned on the catalog as committed:
// refused at apply, and planned again, when an alloc it deletes changed or a
// node it deletes gained an alloc since (compare-and-set); `done` gets the
// summary.
void collect_garbage(const self_ptr& self, gc_thresholds t,
                     std::function<void(std::optional<failure>, std::string)> done) {
  auto summary = std::make_shared<std::string>();
  write(
      self,
      [self, t, summary](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        std::set<std::string> replacing;
        for (const auto& [id, drive] : self->state.replacing) replacing.insert(id);
        auto plan = plan_gc(c, wall_ms(), t, replacing);
        *summary = gc_summary(plan);
        return gc_changes(plan);
      },
      [summary, done](std::optional<failure> f) { done(std::move(f), *summary); });
}

void system_gc(const self_ptr& self, response_promise rp) {
  collect_garbage(self, gc_thresholds{0, 0},
                  [rp](std::optional<failure> f, std::string summary) mutable {
                    if (f) {
                      deliver(rp, *f);
                      return;
                    }
                    logging::info("leader", "garbage collected on request", {{"summary", summary}});
                    v1::Response r;
                    r.set_message(summary);
                    deliver(rp, std::move(r));
                  });
}

void leader_tick(const self_ptr& self) {
  drive_drains(self);
  drive_volume_drains(self);
  check_volume_health(self);
  drive_expansions(self);
  drive_replacements(self);
  auto& st = self->state;
  for (const auto& n :
       silent_nodes(st.cat, st.last_seen, steady_ms(), st.options.node_down_timeout.count()))
    node_down(self, n.id, n.silent_ms);
  check_waiters(self);
  stop_idle_volume_actors(self);
  if (++st.ticks % 10 == 0) collect_plugins(self);
  if (st.ticks % gc_period_ticks(st.options.gc) == 0 && !st.gc_running &&
      !plan_gc(st.cat, wall_ms(), st.options.gc).empty()) {
    st.gc_running = true;
    collect_garbage(self, st.options.gc, [self](std::optional<failure> f, std::string summary) {
      self->state.gc_running = false;
      if (f)
        logging::warn("leader", "garbage collection failed", {{"error", f->message}});
      else
        logging::info("leader", "garbage collected", {{"summary", summary}});
    });
  }
  // alloc runs that settled (committed, no longer pending) need no guard.
  for (auto it = st.starting_allocs.begin(); it != st.starting_allocs.end();) {
    const auto* a = find_alloc(st.cat, it->first);
    it = a != nullptr && a->state() != v1::ALLOC_PENDING ? st.starting_allocs.erase(it)
                                                         : std::next(it);
  }
}

}  // namespace berth::leader_flows
