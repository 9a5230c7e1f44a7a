// The leader actor: the leader's node and plugin flows: fingerprints, heartbeats, mark-down, plugin
// GC.
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <random>

#include "actors/clock.hpp"
#include "actors/leader_flows.hpp"
#include "log/log.hpp"
#include "control/allocs.hpp"
#include "control/entries.hpp"
#include "control/nodes.hpp"
#include "control/placement.hpp"
#include "control/release.hpp"
#include "control/views.hpp"

namespace berth::leader_flows {

// --- nodes and plugins ------------------------------------------------------------

void fingerprint(const self_ptr& self, v1::Fingerprint f, response_promise rp) {
  auto problems = validate_fingerprint(f);
  if (!problems.empty()) {
    deliver(rp, failure{errc::invalid, describe("plugin fingerprint", problems)});
    return;
  }
  if (f.remove() && !self->state.plugin_actors.count(f.plugin_id())) {
    deliver(rp, failure{errc::not_found, "plugin " + quoted(f.plugin_id()) + " is not registered"});
    return;
  }
  self->request(ensure_plugin_actor(self, f.plugin_id()), caf::infinite, fingerprint_atom::value,
                wrap(f))
      .then(
          [self, f, rp](pb<v1::Plugin>& p) mutable {
            v1::Response r;
            *r.add_plugins() = p.msg;
            r.set_message("plugin " + quoted(p.msg.id()) +
                          (f.remove() ? " instance removed from" : " instance reported on") +
                          " node " + quoted(f.node_id()));
            write(
                self, "node/" + f.node_id(),
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

// A client's heartbeat (its node actor registering again).
void heartbeat(const self_ptr& self, const std::string& node_id, node_actor node) {
  auto& st = self->state;
  auto known = st.node_actors.find(node_id);
  bool fresh = known == st.node_actors.end() || known->second.address() != node.address();
  if (fresh) {
    logging::info("leader", "node's client connected", {{"node", node_id}});
    self->monitor(node);
    // A client that (re)connects stops what the servers stopped while it
    // was away, before the watcher unpublishes its volumes.
    for (const auto& id : allocs_to_stop_on_reconnect(st.cat, node_id))
      self->request(node, std::chrono::seconds(60), stop_atom::value, id, false)
          .then([](int32_t) {}, [](caf::error&) {});
  }
  st.node_actors[node_id] = node;
  st.last_seen[node_id] = steady_ms();
  st.stats->actors("node", st.node_actors.size());
  const auto* n = find_node(st.cat, node_id);
  bool was_down = n != nullptr && n->status() == v1::NODE_DOWN;
  write(
      self, "node/" + node_id,
      [node_id](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        auto next = node_after_heartbeat(c, node_id, wall_ms());
        if (!next) return std::vector<v1::Change>{};
        return std::vector<v1::Change>{upsert_change(*next)};
      },
      ignore_result());
  if (was_down) {
    // Its plugin instances were dropped when it went down: report again.
    // Allocs lost meanwhile were released without it: stop them there and
    // unmount what the client still has of them.
    self->send(node, fingerprint_atom::value);
    for (const auto& id : lost_allocs_of(st.cat, node_id))
      self->request(node, std::chrono::seconds(60), stop_atom::value, id, true)
          .then([](int32_t) {}, [](caf::error&) {});
  }
}

// Marks a silent node down (with its allocs lost, one entry), then removes
// its plugin instances through the plugin actors.
void node_down(const self_ptr& self, const std::string& node_id, int64_t silent_ms) {
  self->state.node_actors.erase(node_id);
  write(
      self, "*",
      [node_id, silent_ms](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        return mark_down(c, node_id, silent_ms, wall_ms());
      },
      [self, node_id](std::optional<failure> f) {
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
      });
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

void leader_tick(const self_ptr& self) {
  auto& st = self->state;
  for (const auto& n :
       silent_nodes(st.cat, st.last_seen, steady_ms(), st.options.node_down_timeout.count()))
    node_down(self, n.id, n.silent_ms);
  check_waiters(self);
  if (++st.ticks % 10 == 0) collect_plugins(self);
  // alloc runs that settled (committed, no longer pending) need no guard.
  for (auto it = st.starting_allocs.begin(); it != st.starting_allocs.end();) {
    const auto* a = find_alloc(st.cat, it->first);
    it = a != nullptr && a->state() != v1::ALLOC_PENDING ? st.starting_allocs.erase(it)
                                                          : std::next(it);
  }
}

}  // namespace berth::leader_flows
