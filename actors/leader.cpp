#include "actors/clock.hpp"
#include "actors/leader.hpp"

#include <chrono>
#include <random>

#include <caf/typed_event_based_actor.hpp>

#include "actors/plugin.hpp"
#include "actors/volume.hpp"
#include "actors/watcher.hpp"

namespace berth {

namespace {

using self_ptr = leader_actor::stateful_pointer<leader_state>;
using response_promise = caf::typed_response_promise<pb<v1::Response>>;
using volume_key = leader_state::volume_key;


std::string quoted(const std::string& s) { return "'" + s + "'"; }

std::string ns_or_default(const std::string& ns) { return ns.empty() ? "default" : ns; }

pb<v1::Response> error_response(const failure& f) {
  v1::Response r;
  r.mutable_error()->set_code(static_cast<v1::ErrorCode>(f.code));
  r.mutable_error()->set_message(f.message);
  return wrap(std::move(r));
}

pb<v1::Response> error_response(errc code, std::string message) {
  return error_response(failure{code, std::move(message)});
}

// Adds a redacted volume and its plugin (for health) to a response.
void add_volume(const self_ptr& self, v1::Response& r, const v1::Volume& v) {
  *r.add_volumes() = redacted(v);
  auto it = self->state.plugins.find(v.plugin_id());
  if (it == self->state.plugins.end()) return;
  for (const auto& p : r.plugins())
    if (p.id() == v.plugin_id()) return;
  *r.add_plugins() = it->second;
}

pb<v1::Response> volume_response(const self_ptr& self, const v1::Volume& v, std::string message) {
  v1::Response r;
  add_volume(self, r, v);
  r.set_message(std::move(message));
  return wrap(std::move(r));
}

void count_actors(const self_ptr& self) {
  self->state.stats->actors("volume", self->state.volume_actors.size());
  self->state.stats->actors("plugin", self->state.plugin_actors.size());
}

volume_actor spawn_volume(const self_ptr& self, v1::Volume v, bool registered) {
  return self->spawn<caf::linked>(volume, self->state.log,
                                  caf::actor_cast<leader_actor>(self), std::move(v), registered,
                                  self->state.options.term);
}

plugin_actor spawn_plugin(const self_ptr& self, v1::Plugin p) {
  return self->spawn<caf::linked>(plugin, self->state.log, caf::actor_cast<leader_actor>(self),
                                  std::move(p));
}

// The node actor of a node, or an invalid handle when no berth client
// serves it.
node_actor node_of(const self_ptr& self, const std::string& node_id) {
  auto it = self->state.node_actors.find(node_id);
  return it == self->state.node_actors.end() ? node_actor{} : it->second;
}

plugin_actor plugin_of(const self_ptr& self, const std::string& plugin_id) {
  auto it = self->state.plugin_actors.find(plugin_id);
  return it == self->state.plugin_actors.end() ? plugin_actor{} : it->second;
}

// A node with a berth client and a healthy controller instance of the
// plugin, round-robin across them (controller calls are load-balanced).
// For CreateVolume with a required topology, only controllers on nodes
// whose node instance lies in it.
node_actor pick_controller(const self_ptr& self, const std::string& plugin_id,
                           const v1::TopologyRequest* topology = nullptr) {
  auto it = self->state.plugins.find(plugin_id);
  if (it == self->state.plugins.end()) return {};
  auto in_topology = [&](const std::string& node) {
    if (topology == nullptr || topology->required().empty()) return true;
    const auto* inst = node_instance(it->second, node);
    if (inst == nullptr) return false;
    for (const auto& t : topology->required()) {
      bool all = true;
      for (const auto& [k, v] : t.segments()) {
        auto seg = inst->accessible_topology().segments().find(k);
        all &= seg != inst->accessible_topology().segments().end() && seg->second == v;
      }
      if (all) return true;
    }
    return false;
  };
  std::vector<node_actor> candidates;
  for (const auto& c : it->second.controllers())
    if (c.healthy() && in_topology(c.node_id()))
      if (auto n = node_of(self, c.node_id())) candidates.push_back(n);
  if (candidates.empty()) return {};
  return candidates[self->state.next_controller[plugin_id]++ % candidates.size()];
}

// Forwards a request to a volume actor and answers with the volume.
template <class... Ts>
void ask_volume(const self_ptr& self, volume_actor actor, response_promise rp,
                std::string message, Ts&&... xs) {
  self->request(actor, caf::infinite, std::forward<Ts>(xs)...)
      .then(
          [self, rp, message](pb<v1::Volume>& v) mutable {
            rp.deliver(volume_response(self, v.msg, message));
          },
          [rp](caf::error& e) mutable { rp.deliver(error_response(to_failure(e))); });
}

std::optional<volume_key> find_volume(const self_ptr& self, const std::string& ns,
                                      const std::string& id, response_promise& rp) {
  volume_key key{ns_or_default(ns), id};
  if (id.empty()) {
    rp.deliver(error_response(errc::invalid, "a volume id is required"));
    return std::nullopt;
  }
  if (!self->state.volume_actors.count(key) || !self->state.volumes.count(key)) {
    rp.deliver(error_response(errc::not_found,
                              "volume " + quoted(id) + " is not registered in namespace " +
                                  quoted(key.first) + " (list volumes with: berth volume status)"));
    return std::nullopt;
  }
  return key;
}

// --- allocs, nodes, the volume watcher -----------------------------------


std::string new_alloc_id() {
  static std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id;
  auto x = rng();
  for (int i = 0; i < 12; ++i, x >>= 4) id += hex[x & 15];
  return id;
}

using then_fn = std::function<void(std::optional<caf::error>)>;

void count_allocs_and_nodes(const self_ptr& self) {
  std::map<std::string, size_t> by_state;
  for (auto s : {v1::ALLOC_PENDING, v1::ALLOC_RUNNING, v1::ALLOC_COMPLETE, v1::ALLOC_FAILED,
                 v1::ALLOC_LOST})
    by_state[std::string(name_of(s))] = 0;
  for (const auto& [id, a] : self->state.allocs) ++by_state[std::string(name_of(a.state()))];
  for (const auto& [state, n] : by_state) self->state.stats->allocs(state, n);
  size_t ready = 0, down = 0;
  for (const auto& [id, n] : self->state.nodes) (n.status() == v1::NODE_DOWN ? down : ready)++;
  self->state.stats->nodes("ready", ready);
  self->state.stats->nodes("down", down);
}

// Proposes one change; the in-memory record was updated already (the
// leader is the only writer of allocs and nodes, so the next change builds
// on this one even before it commits).
void propose_change(self_ptr self, v1::Change change, then_fn then,
                    std::function<void(uint64_t)> committed = nullptr) {
  v1::LogEntry entry;
  entry.set_format_version(1);
  *entry.add_changes() = std::move(change);
  self->request(self->state.log, caf::infinite, propose_atom::value, wrap(std::move(entry)))
      .then(
          [then, committed](uint64_t index) mutable {
            if (committed) committed(index);
            then(std::nullopt);
          },
          [then](caf::error& e) mutable { then(std::move(e)); });
}

// The indexes the state tables give a committed record, on the leader's
// copy (when no later change replaced it meanwhile).
template <class T>
void stamp_copy(T* x, uint64_t index) {
  if (x == nullptr || x->modify_index() >= index) return;
  if (x->create_index() == 0) x->set_create_index(index);
  x->set_modify_index(index);
}

void put_alloc(self_ptr self, v1::Alloc a, then_fn then) {
  a.set_modified_at_ms(wall_ms());
  self->state.allocs[a.id()] = a;
  count_allocs_and_nodes(self);
  self->send(self->state.watcher, changed_atom::value, wrap(a));
  auto id = a.id();
  v1::Change c;
  *c.mutable_alloc_upsert() = std::move(a);
  propose_change(self, std::move(c), std::move(then), [self, id](uint64_t index) {
    auto it = self->state.allocs.find(id);
    stamp_copy(it == self->state.allocs.end() ? nullptr : &it->second, index);
  });
}

void delete_alloc(self_ptr self, const std::string& id, then_fn then) {
  self->state.allocs.erase(id);
  count_allocs_and_nodes(self);
  self->send(self->state.watcher, removed_atom::value, id);
  v1::Change c;
  c.set_alloc_delete(id);
  propose_change(self, std::move(c), std::move(then));
}

void put_node(self_ptr self, v1::Node n, then_fn then) {
  self->state.nodes[n.id()] = n;
  count_allocs_and_nodes(self);
  auto id = n.id();
  v1::Change c;
  *c.mutable_node_upsert() = std::move(n);
  propose_change(self, std::move(c), std::move(then), [self, id](uint64_t index) {
    auto it = self->state.nodes.find(id);
    stamp_copy(it == self->state.nodes.end() ? nullptr : &it->second, index);
  });
}

then_fn ignore_result() {
  return [](std::optional<caf::error>) {};
}

// The volumes an alloc holds claims on (taken or in release).
std::vector<std::string> claimed_volumes(const self_ptr& self, const v1::Alloc& a) {
  std::vector<std::string> out;
  for (const auto& av : a.volumes()) {
    auto it = self->state.volumes.find({a.namespace_(), av.volume_id()});
    if (it != self->state.volumes.end() && find_claim(it->second, a.id()))
      out.push_back(av.volume_id());
  }
  return out;
}

// Calls `done(true)` once every claim of the alloc is freed, or
// `done(false)` when options.release_wait passes first.
void when_released(self_ptr self, const std::string& alloc, std::function<void(bool)> done) {
  auto it = self->state.allocs.find(alloc);
  if (it == self->state.allocs.end() || claimed_volumes(self, it->second).empty()) {
    done(true);
    return;
  }
  self->state.waiters.push_back(
      {alloc, steady_ms() + self->state.options.release_wait.count(), std::move(done)});
}

void check_waiters(self_ptr self, bool expire) {
  auto& ws = self->state.waiters;
  auto now = steady_ms();
  std::vector<leader_state::waiter> ready;
  for (auto it = ws.begin(); it != ws.end();) {
    auto a = self->state.allocs.find(it->alloc);
    bool freed = a == self->state.allocs.end() || claimed_volumes(self, a->second).empty();
    if (freed || (expire && it->deadline_ms <= now)) {
      ready.push_back(std::move(*it));
      ready.back().deadline_ms = freed ? 1 : 0;
      it = ws.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& w : ready) w.done(w.deadline_ms == 1);
}

// How a claim's release finds its node: the node actor when the client is
// connected; node_detached when the node is down, unknown or never had a
// berth client (nothing was published there).
// With `operator_detach` (berth volume detach), a node whose client is not
// connected counts as detached too: the operator says it is gone.
void add_release_handles(const self_ptr& self, v1::ReleaseRequest& r, const v1::Volume& vol,
                         node_actor& target, bool operator_detach = false) {
  const auto* c = find_claim(vol, r.alloc_id());
  if (c == nullptr) return;
  target = node_of(self, c->node_id());
  auto n = self->state.nodes.find(c->node_id());
  bool detached = n == self->state.nodes.end() || !n->second.has_client() ||
                  n->second.status() == v1::NODE_DOWN || operator_detach;
  r.set_node_detached(detached && !target);
}

// Releases one claim through its volume actor (the watcher, detach and
// force-deregister all come here).
void release_claim(self_ptr self, v1::ReleaseRequest r,
                   std::function<void(std::optional<failure>, v1::Volume)> done) {
  volume_key key{ns_or_default(r.namespace_()), r.volume_id()};
  auto actor = self->state.volume_actors.find(key);
  auto vol = self->state.volumes.find(key);
  if (actor == self->state.volume_actors.end() || vol == self->state.volumes.end()) {
    done(failure{errc::not_found, "volume " + quoted(r.volume_id()) + " is not registered"}, {});
    return;
  }
  node_actor target;
  add_release_handles(self, r, vol->second, target, r.reason() == "detach");
  const auto& plugin_id = vol->second.plugin_id();
  self->request(actor->second, caf::infinite, release_atom::value, wrap(std::move(r)),
                plugin_of(self, plugin_id), target, pick_controller(self, plugin_id))
      .then([done](pb<v1::Volume>& v) mutable { done(std::nullopt, std::move(v.msg)); },
            [done](caf::error& e) mutable { done(to_failure(e), {}); });
}

// Counts the volumes of a plugin published (or being claimed) on a node,
// other than `except`: what max volumes per node limits.
int64_t node_volume_count(const self_ptr& self, const std::string& node,
                          const std::string& plugin, const volume_key& except) {
  std::set<volume_key> seen;
  for (const auto& [key, v] : self->state.volumes) {
    if (key == except || v.plugin_id() != plugin) continue;
    for (const auto& c : v.claims())
      if (c.node_id() == node) {
        seen.insert(key);
        break;
      }
  }
  if (auto it = self->state.claiming.find({node, plugin}); it != self->state.claiming.end())
    for (const auto& k : it->second)
      if (k != except) seen.insert(k);
  return static_cast<int64_t>(seen.size());
}

// Claims one volume (and has the node publish it); the caller gets the
// result or the failure.
void claim_volume(self_ptr self, v1::ClaimRequest c,
                  std::function<void(std::optional<failure>, v1::ClaimResult)> done) {
  volume_key key{ns_or_default(c.namespace_()), c.volume_id()};
  auto& st = self->state;
  auto actor = st.volume_actors.find(key);
  auto vol = st.volumes.find(key);
  if (actor == st.volume_actors.end() || vol == st.volumes.end()) {
    done(failure{errc::not_found, "volume " + quoted(c.volume_id()) +
                                      " is not registered in namespace " + quoted(key.first) +
                                      " (list volumes with: berth volume status)"},
         {});
    return;
  }
  const auto plugin_id = vol->second.plugin_id();
  c.set_node_volume_count(node_volume_count(self, c.node_id(), plugin_id, key));
  std::pair<std::string, std::string> slot{c.node_id(), plugin_id};
  st.claiming[slot].insert(key);
  auto start = std::chrono::steady_clock::now();
  self->request(actor->second, caf::infinite, claim_atom::value, wrap(c), plugin_of(self, plugin_id),
                node_of(self, c.node_id()), pick_controller(self, plugin_id))
      .then(
          [self, done, slot, key, start](pb<v1::ClaimResult>& r) mutable {
            self->state.claiming[slot].erase(key);
            std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
            self->state.stats->claim_done(took.count());
            done(std::nullopt, std::move(r.msg));
          },
          [self, done, slot, key](caf::error& e) mutable {
            self->state.claiming[slot].erase(key);
            done(to_failure(e), {});
          });
}

pb<v1::Response> alloc_response(const v1::Alloc& a, std::string message) {
  v1::Response r;
  *r.add_allocs() = a;
  r.set_message(std::move(message));
  return wrap(std::move(r));
}

// A claim taken by `volume claim` (not by alloc run) belongs to an alloc
// record too, so that every claim has an alloc the watcher can judge: the
// alloc is created (running, no command) or the volume added to it.
void ensure_alloc_for_claim(self_ptr self, const v1::ClaimRequest& c, then_fn then) {
  auto& st = self->state;
  auto ns = ns_or_default(c.namespace_());
  v1::Alloc a;
  if (auto it = st.allocs.find(c.alloc_id()); it != st.allocs.end()) {
    a = it->second;
    if (alloc_terminal(a.state())) {
      then(make_error(errc::refused, "alloc " + quoted(a.id()) + " is " +
                                         std::string(name_of(a.state())) +
                                         "; a terminal alloc claims nothing (use a new alloc id)"));
      return;
    }
    if (a.node_id() != c.node_id()) {
      then(make_error(errc::refused, "alloc " + quoted(a.id()) + " runs on node " +
                                         quoted(a.node_id()) + ", not " + quoted(c.node_id())));
      return;
    }
    for (const auto& v : a.volumes())
      if (v.volume_id() == c.volume_id()) {
        then(std::nullopt);
        return;
      }
  } else {
    if (!valid_id(c.alloc_id()) || !valid_id(c.node_id())) {
      then(std::nullopt);  // the claim rules report the bad id
      return;
    }
    a.set_id(c.alloc_id());
    a.set_namespace_(ns);
    a.set_node_id(c.node_id());
    a.set_state(v1::ALLOC_RUNNING);
    a.set_created_at_ms(wall_ms());
    a.set_message("claims made with berth volume claim");
  }
  auto* v = a.add_volumes();
  v->set_name(c.volume_id());
  v->set_volume_id(c.volume_id());
  v->set_read_only(c.read_only());
  put_alloc(self, std::move(a), std::move(then));
}

// After `volume release` freed a claim: the volume leaves its alloc; an
// alloc without a command and without volumes left is deleted.
void forget_released_volume(self_ptr self, const std::string& alloc_id, const std::string& ns,
                            const std::string& volume_id) {
  auto it = self->state.allocs.find(alloc_id);
  if (it == self->state.allocs.end()) return;
  auto vol = self->state.volumes.find({ns, volume_id});
  if (vol != self->state.volumes.end() && find_claim(vol->second, alloc_id)) return;  // not freed
  auto a = it->second;
  if (!a.command().empty() || a.namespace_() != ns) return;
  auto* vs = a.mutable_volumes();
  auto pos = std::find_if(vs->begin(), vs->end(),
                          [&](const v1::AllocVolume& v) { return v.volume_id() == volume_id; });
  if (pos == vs->end()) return;
  vs->erase(pos);
  if (a.volumes().empty())
    delete_alloc(self, a.id(), ignore_result());
  else
    put_alloc(self, std::move(a), ignore_result());
}

void fail_alloc(self_ptr self, const std::string& id, std::string why, response_promise rp) {
  auto it = self->state.allocs.find(id);
  if (it == self->state.allocs.end()) {
    rp.deliver(error_response(errc::refused, why));
    return;
  }
  auto a = it->second;
  a.set_state(v1::ALLOC_FAILED);
  a.set_message(why);
  put_alloc(self, std::move(a), [self, id, why, rp](std::optional<caf::error> err) mutable {
    if (err) {
      rp.deliver(error_response(to_failure(*err)));
      return;
    }
    when_released(self, id, [self, id, why, rp](bool freed) mutable {
      auto text = "alloc " + quoted(id) + " failed: " + why +
                  (freed ? "; every claim it took was released"
                         : "; the claims it took are still being released (see berth alloc status " +
                               id + ")");
      auto r = error_response(errc::refused, text);
      if (auto a = self->state.allocs.find(id); a != self->state.allocs.end())
        *r.msg.add_allocs() = a->second;
      rp.deliver(std::move(r));
    });
  });
}

// alloc run, after the alloc was committed pending: claims its volumes one
// after the other (each published on the node), then has the node run it.
void run_alloc_claims(self_ptr self, std::string id, int next, response_promise rp) {
  auto& st = self->state;
  auto it = st.allocs.find(id);
  if (it == st.allocs.end()) {
    rp.deliver(error_response(errc::internal, "alloc " + quoted(id) + " vanished while starting"));
    return;
  }
  const auto& a = it->second;
  if (next == a.volumes_size()) {
    auto running = a;
    running.set_state(v1::ALLOC_RUNNING);
    running.set_message(a.command().empty() ? "volumes published; no command (stop it with berth alloc stop)"
                                            : "volumes published; command started");
    auto node = node_of(self, a.node_id());
    if (!node) {
      fail_alloc(self, id, "the berth client of node " + quoted(a.node_id()) + " disconnected", rp);
      return;
    }
    put_alloc(self, running, [self, id, node, running, rp](std::optional<caf::error> err) mutable {
      if (err) {
        rp.deliver(error_response(to_failure(*err)));
        return;
      }
      self->request(node, std::chrono::seconds(60), run_atom::value, wrap(running))
          .then(
              [self, id, rp](bool) mutable {
                auto a = self->state.allocs[id];
                std::string text = "alloc " + quoted(id) + " running on node " +
                                   quoted(a.node_id());
                for (const auto& v : a.volumes())
                  text += "\n  " + volume_env_name(v.name()) + "=" + v.published_path();
                rp.deliver(alloc_response(a, text));
              },
              [self, id, rp](caf::error& e) mutable {
                fail_alloc(self, id, "the node could not start it: " + to_failure(e).message, rp);
              });
    });
    return;
  }
  const auto& av = a.volumes(next);
  v1::ClaimRequest c;
  c.set_namespace_(a.namespace_());
  c.set_volume_id(av.volume_id());
  c.set_alloc_id(a.id());
  c.set_node_id(a.node_id());
  c.set_read_only(av.read_only());
  *c.mutable_mount_flags() = av.mount_flags();
  claim_volume(self, std::move(c),
               [self, id, next, rp](std::optional<failure> f, v1::ClaimResult r) mutable {
                 auto it = self->state.allocs.find(id);
                 if (it == self->state.allocs.end()) {
                   rp.deliver(error_response(errc::internal, "alloc " + quoted(id) + " vanished"));
                   return;
                 }
                 auto vol = it->second.volumes(next).volume_id();
                 if (f) {
                   fail_alloc(self, id, "claim of volume " + quoted(vol) + ": " + f->message, rp);
                   return;
                 }
                 it->second.mutable_volumes(next)->set_published_path(r.published_path());
                 run_alloc_claims(self, id, next + 1, rp);
               });
}

void alloc_run(self_ptr self, v1::AllocRunRequest req, response_promise rp) {
  auto& st = self->state;
  v1::Alloc a;
  a.set_id(req.id().empty() ? new_alloc_id() : req.id());
  a.set_namespace_(ns_or_default(req.namespace_()));
  a.set_node_id(req.node_id());
  *a.mutable_volumes() = req.volumes();
  *a.mutable_command() = req.command();
  a.set_state(v1::ALLOC_PENDING);
  a.set_created_at_ms(wall_ms());
  auto problems = validate_alloc(a);
  if (!problems.empty()) {
    rp.deliver(error_response(errc::invalid, describe("alloc " + quoted(a.id()), problems)));
    return;
  }
  if (st.allocs.count(a.id())) {
    rp.deliver(error_response(errc::refused, "alloc " + quoted(a.id()) +
                                                 " exists already; run with another id"));
    return;
  }
  auto n = st.nodes.find(a.node_id());
  if (n == st.nodes.end() || !n->second.has_client()) {
    rp.deliver(error_response(errc::not_found, "node " + quoted(a.node_id()) +
                                                   " has no berth client (list nodes with: berth "
                                                   "node status)"));
    return;
  }
  if (n->second.status() == v1::NODE_DOWN) {
    rp.deliver(error_response(errc::refused, "node " + quoted(a.node_id()) +
                                                 " is down (its client stopped heartbeating); "
                                                 "run the alloc on another node"));
    return;
  }
  if (!node_of(self, a.node_id())) {
    auto r = error_response(errc::unavailable, "the berth client of node " + quoted(a.node_id()) +
                                                   " is not connected to this leader yet; retry");
    r.msg.mutable_error()->set_retry(true);
    rp.deliver(std::move(r));
    return;
  }
  for (const auto& v : a.volumes())
    if (!st.volumes.count({a.namespace_(), v.volume_id()})) {
      rp.deliver(error_response(errc::not_found, "volume " + quoted(v.volume_id()) +
                                                     " is not registered in namespace " +
                                                     quoted(a.namespace_()) +
                                                     " (list volumes with: berth volume status)"));
      return;
    }
  auto id = a.id();
  put_alloc(self, std::move(a), [self, id, rp](std::optional<caf::error> err) mutable {
    if (err) {
      rp.deliver(error_response(to_failure(*err)));
      return;
    }
    run_alloc_claims(self, id, 0, rp);
  });
}

void alloc_stop(self_ptr self, const std::string& id, response_promise rp) {
  auto& st = self->state;
  auto it = st.allocs.find(id);
  if (it == st.allocs.end()) {
    rp.deliver(error_response(errc::not_found, "alloc " + quoted(id) +
                                                   " does not exist (list allocs with: berth alloc "
                                                   "status)"));
    return;
  }
  auto answer = [self, id, rp](std::string what) mutable {
    when_released(self, id, [self, id, what, rp](bool freed) mutable {
      auto a = self->state.allocs[id];
      auto left = claimed_volumes(self, a);
      std::string text = what;
      if (freed)
        text += "; its claims are released";
      else {
        text += "; releases still in progress for:";
        for (const auto& v : left) text += " " + v;
        text += " (see berth volume status)";
      }
      rp.deliver(alloc_response(a, text));
    });
  };
  if (alloc_terminal(it->second.state())) {
    answer("alloc " + quoted(id) + " is already " + std::string(name_of(it->second.state())));
    return;
  }
  auto finish = [self, id, answer](int32_t code, std::string how) mutable {
    auto a = self->state.allocs[id];
    a.set_state(v1::ALLOC_COMPLETE);
    a.set_exit_code(code);
    a.set_message(how);
    put_alloc(self, std::move(a), [id, how, answer](std::optional<caf::error> err) mutable {
      if (err) return;  // the leader is going away; the shell retries
      answer("alloc " + quoted(id) + " " + how);
    });
  };
  auto node = node_of(self, it->second.node_id());
  if (!node) {
    // The client is not connected: the alloc is stopped here; the client
    // stops its command when it reconnects, and the claims are released
    // then, when the node is marked down, or by berth volume detach.
    auto a = it->second;
    auto node_id = a.node_id();
    a.set_state(v1::ALLOC_COMPLETE);
    a.set_message("stopped by the operator while the client of node " + quoted(node_id) +
                  " was not connected");
    put_alloc(self, a, [self, id, node_id, rp](std::optional<caf::error> err) mutable {
      if (err) {
        rp.deliver(error_response(to_failure(*err)));
        return;
      }
      rp.deliver(alloc_response(
          self->state.allocs[id],
          "alloc " + quoted(id) + " stopped; the client of node " + quoted(node_id) +
              " is not connected, so its claims are released once it reconnects, once the node "
              "is marked down, or now with: berth volume detach VOLUME " + node_id));
    });
    return;
  }
  self->request(node, std::chrono::seconds(60), stop_atom::value, id, false)
      .then([finish](int32_t code) mutable { finish(code, "stopped by the operator"); },
            [rp, id](caf::error& e) mutable {
              rp.deliver(error_response(errc::unavailable, "alloc " + quoted(id) +
                                                               ": the node did not stop it: " +
                                                               to_failure(e).message + "; retry"));
            });
}

void alloc_update(self_ptr self, const v1::AllocUpdate& u, response_promise rp) {
  auto it = self->state.allocs.find(u.id());
  if (it == self->state.allocs.end()) {
    rp.deliver(error_response(errc::not_found, "alloc " + quoted(u.id()) + " does not exist"));
    return;
  }
  if (alloc_terminal(it->second.state()) || it->second.node_id() != u.node_id()) {
    rp.deliver(alloc_response(it->second, "unchanged"));
    return;
  }
  auto a = it->second;
  a.set_state(u.state());
  a.set_exit_code(u.exit_code());
  a.set_message(u.message());
  put_alloc(self, a, [a, rp](std::optional<caf::error> err) mutable {
    if (err)
      rp.deliver(error_response(to_failure(*err)));
    else
      rp.deliver(alloc_response(a, "alloc " + quoted(a.id()) + " is " +
                                       std::string(name_of(a.state()))));
  });
}

// volume detach VOLUME NODE: releases the claims on that node of allocs
// that are terminal or vanished (or of any alloc when the node is down).
void volume_detach(self_ptr self, const v1::VolumeDetachRequest& d, response_promise rp) {
  auto key = find_volume(self, d.namespace_(), d.volume_id(), rp);
  if (!key) return;
  auto& st = self->state;
  const auto& vol = st.volumes.at(*key);
  auto n = st.nodes.find(d.node_id());
  bool node_down = n != st.nodes.end() && n->second.status() == v1::NODE_DOWN;
  std::vector<std::string> release, kept;
  for (const auto& c : vol.claims()) {
    if (c.node_id() != d.node_id()) continue;
    auto a = st.allocs.find(c.alloc_id());
    bool live = a != st.allocs.end() && !alloc_terminal(a->second.state());
    if (live && !node_down && c.state() == v1::CLAIM_TAKEN)
      kept.push_back(c.alloc_id());
    else
      release.push_back(c.alloc_id());
  }
  if (release.empty() && kept.empty()) {
    rp.deliver(volume_response(self, vol, "volume " + quoted(d.volume_id()) +
                                              " has no claims on node " + quoted(d.node_id()) +
                                              "; nothing to detach"));
    return;
  }
  if (release.empty()) {
    std::string text = "volume " + quoted(d.volume_id()) + " is still used on node " +
                       quoted(d.node_id()) + " by running alloc(s):";
    for (const auto& k : kept) text += " " + k;
    text += "; stop them first (berth alloc stop ID), or wait until the node is marked down";
    rp.deliver(error_response(errc::refused, text));
    return;
  }
  auto results = std::make_shared<std::vector<std::string>>();
  auto remaining = std::make_shared<std::vector<std::string>>(release.rbegin(), release.rend());
  auto k = *key;
  auto step = std::make_shared<std::function<void()>>();
  std::weak_ptr<std::function<void()>> weak = step;
  *step = [self, k, d, results, remaining, kept, rp, weak]() mutable {
    if (remaining->empty()) {
      std::string text = "volume " + quoted(d.volume_id()) + " detached from node " +
                         quoted(d.node_id()) + ":";
      for (const auto& r : *results) text += "\n  " + r;
      for (const auto& k2 : kept)
        text += "\n  claim of alloc " + quoted(k2) + " kept: the alloc is running";
      auto vol = self->state.volumes.find(k);
      v1::Volume shown = vol != self->state.volumes.end() ? vol->second : v1::Volume{};
      rp.deliver(volume_response(self, shown, text));
      return;
    }
    auto alloc = remaining->back();
    remaining->pop_back();
    v1::ReleaseRequest r;
    r.set_namespace_(k.first);
    r.set_volume_id(k.second);
    r.set_alloc_id(alloc);
    r.set_reason("detach");
    auto again = weak.lock();
    release_claim(self, std::move(r),
                  [results, alloc, again](std::optional<failure> f, v1::Volume) mutable {
                    results->push_back(f ? "claim of alloc " + quoted(alloc) +
                                               " not released yet: " + f->message +
                                               " (the volume watcher retries)"
                                         : "claim of alloc " + quoted(alloc) + " released");
                    (*again)();
                  });
  };
  (*step)();
}

// volume delete: DeleteVolume through a controller, then deregistration.
void volume_delete(self_ptr self, const v1::VolumeDeleteRequest& d, response_promise rp) {
  auto key = find_volume(self, d.namespace_(), d.volume_id(), rp);
  if (!key) return;
  const auto vol = self->state.volumes.at(*key);
  if (auto f = can_deregister(vol)) {
    rp.deliver(error_response(*f));
    return;
  }
  auto controller = pick_controller(self, vol.plugin_id());
  if (!controller) {
    rp.deliver(error_response(errc::unavailable,
                              "plugin " + quoted(vol.plugin_id()) +
                                  " has no healthy controller on a node with a berth client; "
                                  "volume " + quoted(vol.id()) + " cannot be deleted now"));
    return;
  }
  auto k = *key;
  self->request(controller, csi_step_timeout, deregister_atom::value, wrap(vol),
                self->state.options.term)
      .then(
          [self, k, rp](bool) mutable {
            auto actor = self->state.volume_actors.find(k);
            if (actor == self->state.volume_actors.end()) {
              rp.deliver(error_response(errc::not_found, "volume " + quoted(k.second) + " vanished"));
              return;
            }
            ask_volume(self, actor->second, rp,
                       "volume " + quoted(k.second) + " deleted (DeleteVolume) and deregistered",
                       deregister_atom::value, false);
          },
          [rp](caf::error& e) mutable { rp.deliver(error_response(to_failure(e))); });
}

// A client's heartbeat (its node actor registering again).
void heartbeat(self_ptr self, const std::string& node_id, node_actor node) {
  auto& st = self->state;
  auto known = st.node_actors.find(node_id);
  bool fresh = known == st.node_actors.end() || known->second.address() != node.address();
  if (fresh) {
    self->monitor(node);
    // A client that (re)connects stops what the servers stopped while it
    // was away, before the watcher unpublishes its volumes.
    for (const auto& [id, a] : st.allocs)
      if (a.node_id() == node_id && a.state() == v1::ALLOC_COMPLETE &&
          !claimed_volumes(self, a).empty())
        self->request(node, std::chrono::seconds(60), stop_atom::value, id, false)
            .then([](int32_t) {}, [](caf::error&) {});
  }
  st.node_actors[node_id] = node;
  st.last_seen[node_id] = steady_ms();
  st.stats->actors("node", st.node_actors.size());
  auto it = st.nodes.find(node_id);
  if (it != st.nodes.end() && it->second.has_client() && it->second.status() == v1::NODE_READY)
    return;
  bool was_down = it != st.nodes.end() && it->second.status() == v1::NODE_DOWN;
  v1::Node next = it != st.nodes.end() ? it->second : v1::Node{};
  next.set_id(node_id);
  next.set_has_client(true);
  next.set_status(v1::NODE_READY);
  next.set_last_heartbeat_ms(wall_ms());
  put_node(self, std::move(next), ignore_result());
  if (was_down) {
    // Its plugin instances were dropped when it went down: report again.
    // Allocs lost meanwhile were released without it: stop them there and
    // unmount what the client still has of them.
    self->send(node, fingerprint_atom::value);
    for (const auto& [id, a] : st.allocs)
      if (a.node_id() == node_id && a.state() == v1::ALLOC_LOST)
        self->request(node, std::chrono::seconds(60), stop_atom::value, id, true)
            .then([](int32_t) {}, [](caf::error&) {});
  }
}

// Marks a node down: its allocs are lost (the watcher releases their
// claims without it) and its plugin instances leave the plugins' counts.
void mark_down(self_ptr self, const std::string& node_id, int64_t silent_ms) {
  auto& st = self->state;
  auto next = st.nodes[node_id];
  next.set_status(v1::NODE_DOWN);
  put_node(self, next, ignore_result());
  st.node_actors.erase(node_id);
  auto why = "node " + quoted(node_id) + " is down (no heartbeat for " +
             std::to_string(silent_ms / 1000) + " s)";
  for (const auto& [id, a] : std::map<std::string, v1::Alloc>(st.allocs))
    if (a.node_id() == node_id && !alloc_terminal(a.state())) {
      auto lost = a;
      lost.set_state(v1::ALLOC_LOST);
      lost.set_message(why);
      put_alloc(self, std::move(lost), ignore_result());
    }
  for (const auto& plugin_id : next.plugin_ids()) {
    auto actor = plugin_of(self, plugin_id);
    if (!actor) continue;
    v1::Fingerprint f;
    f.set_plugin_id(plugin_id);
    f.set_node_id(node_id);
    f.set_type(v1::PLUGIN_MONOLITH);  // both its controller and node instance
    f.set_remove(true);
    self->request(actor, caf::infinite, fingerprint_atom::value, wrap(std::move(f)))
        .then([self](pb<v1::Plugin>& p) { self->state.plugins[p.msg.id()] = p.msg; },
              [](caf::error&) {});
  }
}

// Plugins without any instance left are deleted (Nomad's zombie plugins).
void gc_plugins(self_ptr self) {
  auto& st = self->state;
  std::vector<std::string> empty;
  for (const auto& [id, p] : st.plugins)
    if (plugin_is_empty(p)) empty.push_back(id);
  for (const auto& id : empty) {
    if (auto a = st.plugin_actors.find(id); a != st.plugin_actors.end()) {
      self->send_exit(a->second, caf::exit_reason::user_shutdown);
      st.plugin_actors.erase(a);
    }
    st.stats->plugin_changed(&st.plugins[id], nullptr);
    st.plugins.erase(id);
    v1::Change c;
    c.set_plugin_delete(id);
    propose_change(self, std::move(c), ignore_result());
  }
  if (!empty.empty()) count_actors(self);
}

void leader_tick(self_ptr self) {
  auto& st = self->state;
  auto now = steady_ms();
  for (const auto& [id, n] : std::map<std::string, v1::Node>(st.nodes)) {
    if (!n.has_client() || n.status() != v1::NODE_READY) continue;
    auto seen = st.last_seen.find(id);
    if (seen == st.last_seen.end()) {
      st.last_seen[id] = now;  // a new leader gives every node a full timeout
      continue;
    }
    if (now - seen->second > st.options.node_down_timeout.count())
      mark_down(self, id, now - seen->second);
  }
  check_waiters(self, true);
  if (++st.ticks % 10 == 0) gc_plugins(self);
}

// Adds the watcher's progress to the claims of the volumes in a response.
void add_progress(self_ptr self, pb<v1::Response> r, response_promise rp) {
  bool releasing = false;
  for (const auto& v : r.msg.volumes())
    for (const auto& c : v.claims()) releasing |= c.state() != v1::CLAIM_TAKEN;
  if (!releasing) {
    rp.deliver(std::move(r));
    return;
  }
  self->request(self->state.watcher, std::chrono::seconds(5), status_atom::value)
      .then(
          [r, rp](pb<v1::WatcherStatus>& s) mutable {
            for (auto& v : *r.msg.mutable_volumes())
              for (auto& c : *v.mutable_claims())
                for (const auto& p : s.msg.releases())
                  if (p.namespace_() == v.namespace_() && p.volume_id() == v.id() &&
                      p.alloc_id() == c.alloc_id()) {
                    c.set_release_attempts(p.attempts());
                    c.set_release_error(p.last_error());
                    c.set_release_next_retry_ms(p.next_retry_ms());
                  }
            rp.deliver(std::move(r));
          },
          [r, rp](caf::error&) mutable { rp.deliver(std::move(r)); });
}

void register_volume(self_ptr self, v1::Volume v, response_promise rp,
                     std::string verb = "registered");

// deregister --force: releases every claim (each through the release
// workflow, one after the other), then deregisters.
void force_deregister(self_ptr self, volume_key key, std::vector<std::string> allocs,
                      response_promise rp) {
  auto actor_it = self->state.volume_actors.find(key);
  auto vol_it = self->state.volumes.find(key);
  if (actor_it == self->state.volume_actors.end() || vol_it == self->state.volumes.end()) {
    rp.deliver(error_response(errc::not_found, "volume " + quoted(key.second) + " vanished"));
    return;
  }
  if (allocs.empty()) {
    ask_volume(self, actor_it->second, rp,
               "volume " + quoted(key.second) + " deregistered after releasing its claims",
               deregister_atom::value, true);
    return;
  }
  auto alloc = allocs.back();
  allocs.pop_back();
  v1::ReleaseRequest r;
  r.set_namespace_(key.first);
  r.set_volume_id(key.second);
  r.set_alloc_id(alloc);
  r.set_reason("deregister --force");
  // A release that cannot finish now (plugin or node gone) is dropped by
  // --force; the volume actor still refuses a claim that is taken.
  release_claim(self, std::move(r),
                [self, key, allocs, rp](std::optional<failure>, v1::Volume) mutable {
                  force_deregister(self, key, std::move(allocs), rp);
                });
}

// volume create: CreateVolume through a controller, then registration of
// what the plugin created.
void create_volume(self_ptr self, v1::Volume spec, response_promise rp) {
  apply_defaults(spec);
  bool placeholder = spec.external_id().empty();
  if (placeholder) spec.set_external_id("(to be created)");
  auto problems = validate_volume(spec);
  if (placeholder) spec.clear_external_id();
  if (!placeholder)
    problems.push_back({"external_id", "is chosen by the plugin on create; use volume register "
                                       "for an existing volume"});
  if (!spec.plugin_id().empty() && !self->state.plugins.count(spec.plugin_id()))
    problems.push_back({"plugin_id", "plugin " + quoted(spec.plugin_id()) +
                                         " is not registered by any node (see berth plugin status)"});
  if (!problems.empty()) {
    rp.deliver(error_response(errc::invalid, describe("volume " + quoted(spec.id()), problems)));
    return;
  }
  if (self->state.volumes.count({spec.namespace_(), spec.id()})) {
    rp.deliver(error_response(errc::refused, "volume " + quoted(spec.id()) +
                                                 " is already registered in namespace " +
                                                 quoted(spec.namespace_())));
    return;
  }
  auto controller = pick_controller(self, spec.plugin_id(), &spec.topology_request());
  if (!controller) {
    rp.deliver(error_response(
        errc::unavailable,
        "plugin " + quoted(spec.plugin_id()) +
            " has no healthy controller on a node with a berth client" +
            (spec.topology_request().required().empty()
                 ? std::string()
                 : " in the volume's required topology") +
            "; volumes of it cannot be created now"));
    return;
  }
  self->request(controller, csi_step_timeout, create_atom::value, wrap(std::move(spec)),
                self->state.options.term)
      .then([self, rp](pb<v1::Volume>& created) mutable {
              register_volume(self, std::move(created.msg), rp, "created");
            },
            [rp](caf::error& e) mutable { rp.deliver(error_response(to_failure(e))); });
}

void register_volume(self_ptr self, v1::Volume v, response_promise rp, std::string verb) {
  apply_defaults(v);
  auto problems = validate_volume(v);
  if (!v.plugin_id().empty() && !self->state.plugins.count(v.plugin_id()))
    problems.push_back({"plugin_id", "plugin " + quoted(v.plugin_id()) +
                                         " is not registered by any node (see berth plugin status)"});
  if (!problems.empty()) {
    rp.deliver(error_response(errc::invalid, describe("volume " + quoted(v.id()), problems)));
    return;
  }
  volume_key key{v.namespace_(), v.id()};
  auto& actors = self->state.volume_actors;
  bool fresh = !actors.count(key);
  // A new registration of an existing volume is checked with the plugin
  // (ValidateVolumeCapabilities) when a controller of it is reachable.
  if (fresh && verb == "registered") {
    if (auto controller = pick_controller(self, v.plugin_id())) {
      auto id = v.id(), plugin = v.plugin_id(), ext = v.external_id();
      self->request(controller, csi_step_timeout, validate_atom::value, wrap(v),
                    self->state.options.term)
          .then(
              [self, v, rp, id, plugin, ext](std::string& why) mutable {
                if (!why.empty()) {
                  rp.deliver(error_response(
                      errc::invalid, "volume " + quoted(id) + ": plugin " + quoted(plugin) +
                                         " does not confirm its capabilities for external_id " +
                                         quoted(ext) + ": " + why));
                  return;
                }
                register_volume(self, std::move(v), rp, "registered (validated by the plugin)");
              },
              [rp, id, plugin, ext](caf::error& e) mutable {
                auto f = to_failure(e);
                f.message = "volume " + quoted(id) + ": plugin " + quoted(plugin) +
                            " could not validate external_id " + quoted(ext) + ": " + f.message;
                rp.deliver(error_response(f));
              });
      return;
    }
  }
  if (fresh) actors.emplace(key, spawn_volume(self, v1::Volume{}, false));
  auto actor = actors[key];
  if (!fresh) verb = "updated";
  self->request(actor, caf::infinite, register_atom::value, wrap(std::move(v)))
      .then(
          [self, rp, verb](pb<v1::Volume>& stored) mutable {
            rp.deliver(volume_response(self, stored.msg,
                                       "volume " + quoted(stored.msg.id()) + " " + verb));
          },
          [self, rp, key, actor](caf::error& e) mutable {
            if (!self->state.volumes.count(key)) {
              // A first registration that failed leaves no actor behind.
              self->state.volume_actors.erase(key);
              self->send_exit(actor, caf::exit_reason::user_shutdown);
            }
            rp.deliver(error_response(to_failure(e)));
          });
}

// Records on the node that it runs (or stopped running) a plugin.
void update_node(self_ptr self, const v1::Fingerprint& f, const v1::Plugin& p,
                 response_promise rp) {
  auto& nodes = self->state.nodes;
  v1::Node next;
  if (auto it = nodes.find(f.node_id()); it != nodes.end()) next = it->second;
  next.set_id(f.node_id());
  bool runs = node_instance(p, f.node_id()) != nullptr;
  for (const auto& c : p.controllers()) runs |= c.node_id() == f.node_id();
  auto* ids = next.mutable_plugin_ids();
  auto pos = std::find(ids->begin(), ids->end(), p.id());
  bool listed = pos != ids->end();
  bool changed = false;
  if (runs && !listed) {
    ids->Add(std::string(p.id()));
    std::sort(ids->begin(), ids->end());
    changed = true;
  } else if (!runs && listed) {
    ids->erase(pos);
    changed = true;
  }
  if (!f.remove() && !next.has_client() && next.status() != v1::NODE_READY) {
    next.set_status(v1::NODE_READY);
    changed = true;
  }
  v1::Response r;
  *r.add_plugins() = p;
  r.set_message("plugin " + quoted(p.id()) + (f.remove() ? " instance removed from" : " instance reported on") +
                " node " + quoted(f.node_id()));
  if (!changed) {
    rp.deliver(wrap(std::move(r)));
    return;
  }
  put_node(self, std::move(next), [rp, r](std::optional<caf::error> err) mutable {
    if (err)
      rp.deliver(error_response(to_failure(*err)));
    else
      rp.deliver(wrap(std::move(r)));
  });
}

void fingerprint(self_ptr self, v1::Fingerprint f, response_promise rp) {
  std::vector<problem> problems;
  if (!valid_id(f.plugin_id())) problems.push_back({"plugin_id", "is missing or not a valid id"});
  if (!valid_id(f.node_id())) problems.push_back({"node_id", "is missing or not a valid id"});
  if (f.type() == v1::PLUGIN_TYPE_UNKNOWN)
    problems.push_back({"type", "is required (node, controller or monolith)"});
  if (!problems.empty()) {
    rp.deliver(error_response(errc::invalid, describe("plugin fingerprint", problems)));
    return;
  }
  auto& actors = self->state.plugin_actors;
  if (!actors.count(f.plugin_id())) {
    if (f.remove()) {
      rp.deliver(error_response(errc::not_found, "plugin " + quoted(f.plugin_id()) + " is not registered"));
      return;
    }
    v1::Plugin p;
    p.set_id(f.plugin_id());
    actors.emplace(f.plugin_id(), spawn_plugin(self, std::move(p)));
  }
  self->request(actors[f.plugin_id()], caf::infinite, fingerprint_atom::value, wrap(f))
      .then(
          [self, f, rp](pb<v1::Plugin>& p) mutable {
            self->state.plugins[p.msg.id()] = p.msg;
            update_node(self, f, p.msg, rp);
          },
          [rp](caf::error& e) mutable { rp.deliver(error_response(to_failure(e))); });
}

void execute(self_ptr self, v1::Request& req, response_promise rp) {
  auto& st = self->state;
  switch (req.command_case()) {
    case v1::Request::kVolumeRegister:
      register_volume(self, std::move(*req.mutable_volume_register()), rp);
      return;
    case v1::Request::kVolumeStatus: {
      const auto& k = req.volume_status();
      if (auto key = find_volume(self, k.namespace_(), k.id(), rp))
        add_progress(self, volume_response(self, st.volumes.at(*key), ""), rp);
      return;
    }
    case v1::Request::kVolumeList: {
      v1::Response r;
      const auto& ns = req.volume_list().namespace_();
      for (const auto& [key, v] : st.volumes)
        if (ns.empty() || key.first == ns) add_volume(self, r, v);
      add_progress(self, wrap(std::move(r)), rp);
      return;
    }
    case v1::Request::kVolumeDeregister: {
      const auto& d = req.volume_deregister();
      if (auto key = find_volume(self, d.namespace_(), d.volume_id(), rp)) {
        if (!d.force()) {
          ask_volume(self, st.volume_actors.at(*key), rp,
                     "volume " + quoted(d.volume_id()) + " deregistered", deregister_atom::value,
                     false);
          return;
        }
        std::vector<std::string> allocs;
        for (const auto& c : st.volumes.at(*key).claims()) allocs.push_back(c.alloc_id());
        force_deregister(self, *key, std::move(allocs), rp);
      }
      return;
    }
    case v1::Request::kVolumeClaim: {
      auto c = req.volume_claim();
      c.clear_node_volume_count();
      if (auto key = find_volume(self, c.namespace_(), c.volume_id(), rp)) {
        std::string msg = "volume " + quoted(c.volume_id()) + " claimed for " +
                          (c.read_only() ? "reading" : "writing") + " by alloc " +
                          quoted(c.alloc_id()) + " on node " + quoted(c.node_id());
        ensure_alloc_for_claim(self, c, [self, c, msg, rp](std::optional<caf::error> err) mutable {
          if (err) {
            rp.deliver(error_response(to_failure(*err)));
            return;
          }
          bool client = static_cast<bool>(node_of(self, c.node_id()));
          claim_volume(self, c, [self, msg, rp, client](std::optional<failure> f,
                                                        v1::ClaimResult r) mutable {
            if (f) {
              rp.deliver(error_response(*f));
              return;
            }
            auto text = msg;
            if (!r.published_path().empty())
              text += "; published at " + r.published_path();
            else if (!client)
              text += "; node has no berth client, so nothing was published";
            auto resp = volume_response(self, r.volume(), text);
            resp.msg.set_published_path(r.published_path());
            rp.deliver(std::move(resp));
          });
        });
      }
      return;
    }
    case v1::Request::kVolumeRelease: {
      auto r = req.volume_release();
      r.clear_node_detached();
      r.set_reason("released by the operator");
      if (auto key = find_volume(self, r.namespace_(), r.volume_id(), rp)) {
        if (!find_claim(st.volumes.at(*key), r.alloc_id())) {
          rp.deliver(error_response(errc::not_found, "volume " + quoted(r.volume_id()) +
                                                         " has no claim of alloc " +
                                                         quoted(r.alloc_id())));
          return;
        }
        auto k = *key;
        auto text = "claim of alloc " + quoted(r.alloc_id()) + " on volume " +
                    quoted(r.volume_id()) + " released";
        release_claim(self, r, [self, k, r, text, rp](std::optional<failure> f,
                                                       v1::Volume v) mutable {
          if (f) {
            rp.deliver(error_response(*f));
            return;
          }
          forget_released_volume(self, r.alloc_id(), k.first, k.second);
          rp.deliver(volume_response(self, v, text));
        });
      }
      return;
    }
    case v1::Request::kAllocRun:
      alloc_run(self, std::move(*req.mutable_alloc_run()), rp);
      return;
    case v1::Request::kAllocStop:
      alloc_stop(self, req.alloc_stop(), rp);
      return;
    case v1::Request::kAllocUpdate:
      alloc_update(self, req.alloc_update(), rp);
      return;
    case v1::Request::kAllocStatus: {
      auto it = st.allocs.find(req.alloc_status());
      if (it == st.allocs.end()) {
        rp.deliver(error_response(errc::not_found, "alloc " + quoted(req.alloc_status()) +
                                                       " does not exist (list allocs with: berth "
                                                       "alloc status)"));
        return;
      }
      v1::Response r;
      *r.add_allocs() = it->second;
      for (const auto& av : it->second.volumes())
        if (auto v = st.volumes.find({it->second.namespace_(), av.volume_id()});
            v != st.volumes.end())
          add_volume(self, r, v->second);
      add_progress(self, wrap(std::move(r)), rp);
      return;
    }
    case v1::Request::kAllocList: {
      v1::Response r;
      const auto& ns = req.alloc_list().namespace_();
      for (const auto& [id, a] : st.allocs)
        if (ns.empty() || a.namespace_() == ns) *r.add_allocs() = a;
      rp.deliver(wrap(std::move(r)));
      return;
    }
    case v1::Request::kVolumeDetach:
      volume_detach(self, req.volume_detach(), rp);
      return;
    case v1::Request::kVolumeDelete:
      volume_delete(self, req.volume_delete(), rp);
      return;
    case v1::Request::kVolumeCreate:
      create_volume(self, std::move(*req.mutable_volume_create()), rp);
      return;
    case v1::Request::kPluginStatus: {
      auto it = st.plugins.find(req.plugin_status());
      if (it == st.plugins.end()) {
        rp.deliver(error_response(errc::not_found, "plugin " + quoted(req.plugin_status()) +
                                                       " is not registered (list plugins with: "
                                                       "berth plugin status)"));
        return;
      }
      v1::Response r;
      *r.add_plugins() = it->second;
      rp.deliver(wrap(std::move(r)));
      return;
    }
    case v1::Request::kPluginList: {
      v1::Response r;
      for (const auto& [id, p] : st.plugins) *r.add_plugins() = p;
      rp.deliver(wrap(std::move(r)));
      return;
    }
    case v1::Request::kPluginFingerprint:
      fingerprint(self, std::move(*req.mutable_plugin_fingerprint()), rp);
      return;
    case v1::Request::kNodeStatus: {
      auto it = st.nodes.find(req.node_status());
      if (it == st.nodes.end()) {
        rp.deliver(error_response(errc::not_found, "node " + quoted(req.node_status()) +
                                                       " is not known (list nodes with: berth "
                                                       "node status)"));
        return;
      }
      v1::Response r;
      *r.add_nodes() = it->second;
      if (auto seen = st.last_seen.find(it->first); seen != st.last_seen.end())
        r.mutable_nodes(0)->set_last_seen_ms(wall_ms() - (steady_ms() - seen->second));
      for (const auto& [id, a] : st.allocs)
        if (a.node_id() == it->first) *r.add_allocs() = a;
      for (const auto& [key, v] : st.volumes)
        for (const auto& c : v.claims())
          if (c.node_id() == it->first) {
            add_volume(self, r, v);
            break;
          }
      rp.deliver(wrap(std::move(r)));
      return;
    }
    case v1::Request::kNodeList: {
      v1::Response r;
      for (const auto& [id, n] : st.nodes) {
        *r.add_nodes() = n;
        if (auto seen = st.last_seen.find(id); seen != st.last_seen.end())
          r.mutable_nodes(r.nodes_size() - 1)->set_last_seen_ms(wall_ms() - (steady_ms() - seen->second));
      }
      rp.deliver(wrap(std::move(r)));
      return;
    }
    case v1::Request::kAgentStatus:
    case v1::Request::kRaftListPeers:
    case v1::Request::kRaftRemovePeer:
    case v1::Request::kRaftTransferLeadership:
    case v1::Request::kSnapshotSave:
    case v1::Request::kSnapshotRestore:
      // Answered by the server actor, which knows the replicated log.
      rp.deliver(error_response(errc::internal, "the server answers this request"));
      return;
    case v1::Request::COMMAND_NOT_SET:
      rp.deliver(error_response(errc::invalid,
                                "the request names no command this server knows; is the shell "
                                "newer than berthd?"));
      return;
  }
}

}  // namespace

leader_actor::behavior_type leader(self_ptr self, replicated_log_actor log,
                                   state_contents initial, std::shared_ptr<metrics> stats,
                                   leader_options options) {
  auto& st = self->state;
  st.log = std::move(log);
  st.stats = std::move(stats);
  st.options = options;
  st.watcher = self->spawn<caf::linked>(watcher, caf::actor_cast<leader_actor>(self), st.stats);
  for (auto& p : initial.plugins) {
    st.plugin_actors.emplace(p.id(), spawn_plugin(self, p));
    st.plugins.emplace(p.id(), std::move(p));
  }
  for (auto& v : initial.volumes) {
    volume_key key{v.namespace_(), v.id()};
    st.volume_actors.emplace(key, spawn_volume(self, v, true));
    self->send(st.watcher, changed_atom::value, wrap(v));
    st.volumes.emplace(key, std::move(v));
  }
  for (auto& n : initial.nodes) st.nodes.emplace(n.id(), std::move(n));
  std::vector<v1::Alloc> interrupted;
  for (auto& a : initial.allocs) {
    if (a.state() == v1::ALLOC_PENDING) interrupted.push_back(a);
    self->send(st.watcher, changed_atom::value, wrap(a));
    st.allocs.emplace(a.id(), std::move(a));
  }
  // An alloc still pending was being started by the previous leader: it
  // failed, and the watcher releases whatever it claimed.
  for (auto& a : interrupted) {
    a.set_state(v1::ALLOC_FAILED);
    a.set_message("the leader changed while the alloc was starting; run it again");
    put_alloc(self, std::move(a), ignore_result());
  }
  st.stats->clear_state();
  for (const auto& [key, v] : st.volumes) st.stats->volume_changed(nullptr, &v);
  for (const auto& [id, p] : st.plugins) st.stats->plugin_changed(nullptr, &p);
  count_actors(self);
  count_allocs_and_nodes(self);
  // A node actor that stops (its client went away) publishes nothing more.
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& nodes = self->state.node_actors;
    for (auto it = nodes.begin(); it != nodes.end();)
      it = it->second.address() == dm.source ? nodes.erase(it) : std::next(it);
    self->state.stats->actors("node", nodes.size());
  });
  self->send(self, tick_atom::value);
  return {
      [self](api_atom, pb<v1::Request>& req) -> caf::result<pb<v1::Response>> {
        auto rp = self->make_response_promise<pb<v1::Response>>();
        execute(self, req.msg, rp);
        return rp;
      },
      [self](release_atom, pb<v1::ReleaseRequest>& req) -> caf::result<pb<v1::Volume>> {
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        release_claim(self, std::move(req.msg),
                      [rp](std::optional<failure> f, v1::Volume v) mutable {
                        if (f)
                          rp.deliver(to_error(*f));
                        else
                          rp.deliver(wrap(std::move(v)));
                      });
        return rp;
      },
      [self](tick_atom) {
        self->state.stats->mailbox("leader", self->mailbox().size());
        leader_tick(self);
        self->delayed_send(self, std::chrono::milliseconds(500), tick_atom::value);
      },
      [self](changed_atom, pb<v1::Volume>& v) {
        volume_key key{v.msg.namespace_(), v.msg.id()};
        auto& slot = self->state.volumes[key];
        self->state.stats->volume_changed(slot.id().empty() ? nullptr : &slot, &v.msg);
        self->send(self->state.watcher, changed_atom::value, v);
        slot = std::move(v.msg);
        count_actors(self);
        check_waiters(self, false);
      },
      [self](removed_atom, pb<v1::VolumeKey>& k) {
        volume_key key{k.msg.namespace_(), k.msg.id()};
        if (auto it = self->state.volumes.find(key); it != self->state.volumes.end()) {
          self->state.stats->volume_changed(&it->second, nullptr);
          self->state.volumes.erase(it);
        }
        self->state.volume_actors.erase(key);
        self->send(self->state.watcher, removed_atom::value, k);
        count_actors(self);
        check_waiters(self, false);
      },
      [self](changed_atom, pb<v1::Plugin>& p) {
        self->state.stats->plugin_changed(nullptr, &p.msg);
        self->state.plugins[p.msg.id()] = std::move(p.msg);
        count_actors(self);
      },
      [self](node_atom, const std::string& node_id, node_actor node) {
        heartbeat(self, node_id, std::move(node));
      },
  };
}

}  // namespace berth
