#include "actors/leader.hpp"

#include <chrono>
#include <random>

#include <caf/typed_event_based_actor.hpp>

#include "actors/clock.hpp"
#include "actors/plugin.hpp"
#include "actors/propose.hpp"
#include "actors/volume.hpp"
#include "actors/watcher.hpp"
#include "control/allocs.hpp"
#include "control/nodes.hpp"
#include "control/placement.hpp"
#include "control/release.hpp"
#include "control/views.hpp"

namespace berth {

namespace {

using self_ptr = leader_actor::stateful_pointer<leader_state>;
using response_promise = caf::typed_response_promise<pb<v1::Response>>;
using then_fn = std::function<void(std::optional<failure>)>;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

void deliver(response_promise& rp, const failure& f) { rp.deliver(wrap(error_response(f))); }

void deliver(response_promise& rp, v1::Response r) { rp.deliver(wrap(std::move(r))); }

// --- waiting for the catalog ------------------------------------------------

// Runs `run(true)` once `ready()` holds for the catalog (now, or after a
// later apply), or `run(false)` when a deadline is given and passes first.
void when(const self_ptr& self, std::function<bool()> ready, std::function<void(bool)> run,
          int64_t deadline_ms = 0) {
  if (ready()) {
    run(true);
    return;
  }
  self->state.waiters.push_back({std::move(ready), std::move(run), deadline_ms});
}

void when_applied(const self_ptr& self, uint64_t index, std::function<void()> run) {
  when(self, [self, index] { return self->state.cat.applied_index >= index; },
       [run](bool) { run(); });
}

void check_waiters(const self_ptr& self) {
  auto& ws = self->state.waiters;
  auto now = steady_ms();
  std::vector<std::pair<std::function<void(bool)>, bool>> due;
  for (auto it = ws.begin(); it != ws.end();) {
    bool ready = it->ready();
    if (ready || (it->deadline_ms != 0 && it->deadline_ms <= now)) {
      due.emplace_back(std::move(it->run), ready);
      it = ws.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [run, ready] : due) run(ready);
}

// --- the commit path ----------------------------------------------------------

// Commits changes as one entry and continues once the catalog applied it.
void commit(const self_ptr& self, std::vector<v1::Change> changes, then_fn then) {
  if (changes.empty()) {
    then(std::nullopt);
    return;
  }
  propose(self, self->state.log, std::move(changes))
      .then([self, then](uint64_t index) { when_applied(self, index, [then] { then(std::nullopt); }); },
            [then](caf::error& e) { then(to_failure(e)); });
}

void next_write(const self_ptr& self) {
  auto& q = self->state.writes[""];
  if (q.empty()) return;
  auto job = q.front();
  job();
}

// The leader's own writes (allocs and nodes) run one at a time, each built
// by `build` from the catalog as committed by the one before, so no write
// is lost to another built on the same old state.
void write(const self_ptr& self,
           std::function<std::variant<failure, std::vector<v1::Change>>(const catalog&)> build,
           then_fn then) {
  auto& q = self->state.writes[""];
  q.push_back([self, build, then] {
    auto done = [self, then](std::optional<failure> f) {
      then(std::move(f));
      self->state.writes[""].pop_front();
      next_write(self);
    };
    auto built = build(self->state.cat);
    if (auto* f = std::get_if<failure>(&built)) {
      done(*f);
      return;
    }
    commit(self, std::move(std::get<std::vector<v1::Change>>(built)), done);
  });
  if (q.size() == 1) next_write(self);
}

then_fn ignore_result() {
  return [](std::optional<failure>) {};
}

// --- applying committed entries -------------------------------------------------

// Keeps the metrics' alloc and node counts from what each change replaced
// and wrote (never by scanning the catalog).
void count(const self_ptr& self, const v1::Change& c, int delta) {
  auto& st = self->state;
  if (c.has_alloc_upsert()) {
    auto state = std::string(name_of(c.alloc_upsert().state()));
    st.stats->allocs(state, static_cast<size_t>(st.alloc_counts[state] += delta));
  }
  if (c.has_node_upsert()) {
    std::string status = c.node_upsert().status() == v1::NODE_DOWN ? "down" : "ready";
    st.stats->nodes(status, static_cast<size_t>(st.node_counts[status] += delta));
  }
}

// Tells the watcher and the metrics what one applied change did.
void announce(const self_ptr& self, const applied_change& a) {
  auto& st = self->state;
  const auto& c = a.change;
  const auto& before = a.before;
  count(self, before, -1);
  count(self, c, +1);
  switch (c.change_case()) {
    case v1::Change::kVolumeUpsert:
      st.stats->volume_changed(before.has_volume_upsert() ? &before.volume_upsert() : nullptr,
                               &c.volume_upsert());
      self->send(st.watcher, changed_atom::value, wrap(c.volume_upsert()));
      break;
    case v1::Change::kVolumeDelete:
      if (before.has_volume_upsert()) st.stats->volume_changed(&before.volume_upsert(), nullptr);
      // Its actor quits once it committed the deregistration.
      st.volume_actors.erase({c.volume_delete().namespace_(), c.volume_delete().id()});
      self->send(st.watcher, removed_atom::value, wrap(c.volume_delete()));
      break;
    case v1::Change::kPluginUpsert:
      st.stats->plugin_changed(before.has_plugin_upsert() ? &before.plugin_upsert() : nullptr,
                               &c.plugin_upsert());
      break;
    case v1::Change::kPluginDelete:
      if (before.has_plugin_upsert()) st.stats->plugin_changed(&before.plugin_upsert(), nullptr);
      // Its actor quits once it committed the deletion.
      st.plugin_actors.erase(c.plugin_delete());
      break;
    case v1::Change::kAllocUpsert:
      self->send(st.watcher, changed_atom::value, wrap(c.alloc_upsert()));
      break;
    case v1::Change::kAllocDelete:
      self->send(st.watcher, removed_atom::value, c.alloc_delete());
      break;
    default:
      break;
  }
}

void apply_batch(const self_ptr& self, const committed_batch& batch) {
  auto& st = self->state;
  for (const auto& [index, bytes] : batch.entries) {
    v1::LogEntry entry;
    if (index <= st.cat.applied_index) continue;
    if (bytes.empty() || !entry.ParseFromString(bytes)) {
      st.cat.applied_index = index;  // a configuration change or an empty entry
      continue;
    }
    for (const auto& a : apply(st.cat, index, entry)) announce(self, a);
  }
  st.stats->actors("volume", st.volume_actors.size());
  st.stats->actors("plugin", st.plugin_actors.size());
  check_waiters(self);
}

// --- routing --------------------------------------------------------------------

node_actor node_of(const self_ptr& self, const std::string& node_id) {
  auto it = self->state.node_actors.find(node_id);
  return it == self->state.node_actors.end() ? node_actor{} : it->second;
}

plugin_actor plugin_of(const self_ptr& self, const std::string& plugin_id) {
  auto it = self->state.plugin_actors.find(plugin_id);
  return it == self->state.plugin_actors.end() ? plugin_actor{} : it->second;
}

volume_actor spawn_volume(const self_ptr& self, v1::Volume v, bool registered) {
  return self->spawn<caf::linked>(volume, self->state.log, std::move(v), registered,
                                  self->state.options.term);
}

plugin_actor spawn_plugin(const self_ptr& self, v1::Plugin p) {
  return self->spawn<caf::linked>(plugin, self->state.log, std::move(p));
}

node_actor pick_controller(const self_ptr& self, const std::string& plugin_id,
                           const v1::TopologyRequest* topology = nullptr) {
  const auto* p = find_plugin(self->state.cat, plugin_id);
  if (p == nullptr) return {};
  auto candidates = controller_candidates(
      *p, [&](const std::string& n) { return static_cast<bool>(node_of(self, n)); }, topology);
  auto chosen = next_in_turn(candidates, self->state.controller_turn[plugin_id]);
  return chosen ? node_of(self, *chosen) : node_actor{};
}

// Claims one volume through its actor (which has the node publish it).
void claim_volume(const self_ptr& self, v1::ClaimRequest c,
                  std::function<void(std::optional<failure>, v1::ClaimResult)> done) {
  auto& st = self->state;
  auto found = lookup_volume(st.cat, c.namespace_(), c.volume_id());
  auto actor = st.volume_actors.find(found.key);
  if (found.error || actor == st.volume_actors.end()) {
    done(found.error.value_or(failure{errc::not_found, "volume " + quoted(c.volume_id()) + " vanished"}), {});
    return;
  }
  const auto key = found.key;
  const auto plugin_id = st.cat.volumes.at(key).plugin_id();
  std::pair<std::string, std::string> slot{c.node_id(), plugin_id};
  c.set_node_volume_count(node_volume_count(st.cat, c.node_id(), plugin_id, key, st.claiming[slot]));
  st.claiming[slot].insert(key);
  auto start = std::chrono::steady_clock::now();
  self->request(actor->second, caf::infinite, claim_atom::value, wrap(c),
                plugin_of(self, plugin_id), node_of(self, c.node_id()),
                pick_controller(self, plugin_id))
      .then(
          [self, done, slot, key, start](pb<v1::ClaimResult>& r) {
            self->state.claiming[slot].erase(key);
            std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
            self->state.stats->claim_done(took.count());
            auto index = r.msg.volume().modify_index();
            when_applied(self, index, [done, r = std::move(r.msg)] { done(std::nullopt, r); });
          },
          [self, done, slot, key](caf::error& e) {
            self->state.claiming[slot].erase(key);
            done(to_failure(e), {});
          });
}

// Releases one claim through its volume actor (the watcher, detach, volume
// release and force-deregister all come here).
void release_claim(const self_ptr& self, v1::ReleaseRequest r,
                   std::function<void(std::optional<failure>, v1::Volume)> done) {
  auto& st = self->state;
  volume_key key{ns_or_default(r.namespace_()), r.volume_id()};
  auto actor = st.volume_actors.find(key);
  const auto* vol = find_volume(st.cat, key);
  if (actor == st.volume_actors.end() || vol == nullptr) {
    done(failure{errc::not_found, "volume " + quoted(r.volume_id()) + " is not registered"}, {});
    return;
  }
  node_actor target;
  if (const auto* c = find_claim(*vol, r.alloc_id())) {
    target = node_of(self, c->node_id());
    r.set_node_detached(release_without_node(st.cat, *c, static_cast<bool>(target), r.operator_detach()));
  }
  const auto plugin_id = vol->plugin_id();
  self->request(actor->second, caf::infinite, release_atom::value, wrap(std::move(r)),
                plugin_of(self, plugin_id), target, pick_controller(self, plugin_id))
      .then(
          [self, done](pb<v1::Volume>& v) {
            when_applied(self, v.msg.modify_index(),
                         [done, v = std::move(v.msg)] { done(std::nullopt, v); });
          },
          [done](caf::error& e) { done(to_failure(e), {}); });
}

// Forwards a request to a volume actor and answers with the volume.
template <class... Ts>
void ask_volume(const self_ptr& self, const volume_actor& actor, response_promise rp,
                std::string message, Ts&&... xs) {
  self->request(actor, caf::infinite, std::forward<Ts>(xs)...)
      .then(
          [self, rp, message](pb<v1::Volume>& v) mutable {
            when_applied(self, v.msg.modify_index(), [self, rp, message, v = std::move(v.msg)]() mutable {
              deliver(rp, volume_response(self->state.cat, v, message));
            });
          },
          [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); });
}

// Adds the watcher's progress to the claims of the volumes in a response.
void add_progress(const self_ptr& self, v1::Response r, response_promise rp) {
  bool releasing = false;
  for (const auto& v : r.volumes())
    for (const auto& c : v.claims()) releasing |= c.state() != v1::CLAIM_TAKEN;
  if (!releasing) {
    deliver(rp, std::move(r));
    return;
  }
  self->request(self->state.watcher, std::chrono::seconds(5), status_atom::value)
      .then(
          [r, rp](pb<v1::WatcherStatus>& s) mutable {
            for (auto& v : *r.mutable_volumes())
              for (auto& c : *v.mutable_claims())
                for (const auto& p : s.msg.releases())
                  if (p.namespace_() == v.namespace_() && p.volume_id() == v.id() &&
                      p.alloc_id() == c.alloc_id()) {
                    c.set_release_attempts(p.attempts());
                    c.set_release_error(p.last_error());
                    c.set_release_next_retry_ms(p.next_retry_ms());
                  }
            deliver(rp, std::move(r));
          },
          [r, rp](caf::error&) mutable { deliver(rp, std::move(r)); });
}

// --- allocs -----------------------------------------------------------------------

std::string new_alloc_id() {
  static std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id;
  auto x = rng();
  for (int i = 0; i < 12; ++i, x >>= 4) id += hex[x & 15];
  return id;
}

// Commits an alloc in a new state, if its lifecycle allows it from the
// committed one (`fallback` when it was never committed).
void set_alloc_state(const self_ptr& self, const std::string& id, v1::AllocState to,
                     std::string why, int32_t exit_code, then_fn then,
                     std::optional<v1::Alloc> fallback = std::nullopt) {
  write(self,
        [id, to, why, exit_code, fallback](const catalog& c)
            -> std::variant<failure, std::vector<v1::Change>> {
          const auto* a = find_alloc(c, id);
          if (a == nullptr && !fallback)
            return failure{errc::not_found, "alloc " + quoted(id) + " does not exist"};
          const auto& base = a != nullptr ? *a : *fallback;
          if (a != nullptr && !alloc_may_become(a->state(), to))
            return failure{errc::refused, "alloc " + quoted(id) + " is " +
                                              std::string(name_of(a->state())) + " already"};
          return std::vector<v1::Change>{
              upsert_change(alloc_in_state(base, to, why, wall_ms(), exit_code))};
        },
        std::move(then));
}

// Calls `done(freed)` once every claim of the alloc is freed, or with false
// once options.release_wait passed.
void when_released(const self_ptr& self, const std::string& id, std::function<void(bool)> done) {
  when(self, [self, id] { return claims_freed(self->state.cat, id); }, std::move(done),
       steady_ms() + self->state.options.release_wait.count());
}

void fail_alloc(const self_ptr& self, v1::Alloc a, std::string why, response_promise rp) {
  auto id = a.id();
  set_alloc_state(self, id, v1::ALLOC_FAILED, why, 0,
                  [self, id, why, rp](std::optional<failure> f) mutable {
                    if (f && f->code != errc::refused) {
                      deliver(rp, *f);
                      return;
                    }
                    when_released(self, id, [self, id, why, rp](bool freed) mutable {
                      auto r = error_response(failure{
                          errc::refused,
                          "alloc " + quoted(id) + " failed: " + why +
                              (freed ? "; every claim it took was released"
                                     : "; the claims it took are still being released (see "
                                       "berth alloc status " + id + ")")});
                      if (const auto* a = find_alloc(self->state.cat, id)) *r.add_allocs() = *a;
                      deliver(rp, std::move(r));
                    });
                  },
                  a);
}

// alloc run, once its volumes are published: commits it running, then has
// the node run it.
void start_alloc(const self_ptr& self, std::shared_ptr<v1::Alloc> a, response_promise rp) {
  auto node = node_of(self, a->node_id());
  if (!node) {
    fail_alloc(self, *a, "the berth client of node " + quoted(a->node_id()) + " disconnected", rp);
    return;
  }
  auto why = a->command().empty() ? "volumes published; no command (stop it with berth alloc stop)"
                                  : "volumes published; command started";
  write(self,
        [a, why](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
          const auto* known = find_alloc(c, a->id());
          if (known == nullptr || !alloc_may_become(known->state(), v1::ALLOC_RUNNING))
            return failure{errc::refused,
                           "alloc " + quoted(a->id()) + " is " +
                               (known ? std::string(name_of(known->state())) : "gone") +
                               " (it changed while starting)"};
          auto running = alloc_in_state(*known, v1::ALLOC_RUNNING, why, wall_ms());
          *running.mutable_volumes() = a->volumes();  // with the published paths
          return std::vector<v1::Change>{upsert_change(std::move(running))};
        },
        [self, a, node, rp](std::optional<failure> f) mutable {
          if (f) {
            deliver(rp, *f);
            return;
          }
          auto id = a->id();
          auto running = self->state.cat.allocs.at(id);
          self->request(node, std::chrono::seconds(60), run_atom::value, wrap(running))
              .then(
                  [self, id, rp](bool) mutable {
                    const auto& a = self->state.cat.allocs.at(id);
                    std::string text = "alloc " + quoted(id) + " running on node " + quoted(a.node_id());
                    for (const auto& v : a.volumes())
                      text += "\n  " + volume_env_name(v.name()) + "=" + v.published_path();
                    deliver(rp, alloc_response(a, text));
                  },
                  [self, running, rp](caf::error& e) mutable {
                    fail_alloc(self, running, "the node could not start it: " + to_failure(e).message, rp);
                  });
        });
}

// alloc run: claims the volumes one after the other (each published on the
// node); the first claim commits together with the pending alloc.
void claim_alloc_volumes(const self_ptr& self, std::shared_ptr<v1::Alloc> a, int next,
                         response_promise rp) {
  if (next == a->volumes_size()) {
    start_alloc(self, a, rp);
    return;
  }
  const auto& av = a->volumes(next);
  v1::ClaimRequest c;
  c.set_namespace_(a->namespace_());
  c.set_volume_id(av.volume_id());
  c.set_alloc_id(a->id());
  c.set_node_id(a->node_id());
  c.set_read_only(av.read_only());
  *c.mutable_mount_flags() = av.mount_flags();
  if (next == 0) *c.mutable_alloc() = *a;
  claim_volume(self, std::move(c),
               [self, a, next, rp](std::optional<failure> f, v1::ClaimResult r) mutable {
                 auto vol = a->volumes(next).volume_id();
                 if (f) {
                   fail_alloc(self, *a, "claim of volume " + quoted(vol) + ": " + f->message, rp);
                   return;
                 }
                 a->mutable_volumes(next)->set_published_path(r.published_path());
                 claim_alloc_volumes(self, a, next + 1, rp);
               });
}

void alloc_run(const self_ptr& self, const v1::AllocRunRequest& req, response_promise rp) {
  auto a = pending_alloc(req, req.id().empty() ? new_alloc_id() : req.id(), wall_ms());
  if (auto f = admit_alloc_run(self->state.cat, a, static_cast<bool>(node_of(self, a.node_id())))) {
    deliver(rp, *f);
    return;
  }
  auto shared = std::make_shared<v1::Alloc>(std::move(a));
  if (shared->volumes().empty()) {
    commit(self, {upsert_change(*shared)}, [self, shared, rp](std::optional<failure> f) mutable {
      if (f)
        deliver(rp, *f);
      else
        start_alloc(self, shared, rp);
    });
    return;
  }
  claim_alloc_volumes(self, shared, 0, rp);
}

void alloc_stop(const self_ptr& self, const std::string& id, response_promise rp) {
  const auto* known = find_alloc(self->state.cat, id);
  if (known == nullptr) {
    deliver(rp, failure{errc::not_found, "alloc " + quoted(id) +
                                             " does not exist (list allocs with: berth alloc status)"});
    return;
  }
  auto answer = [self, id, rp](std::string what) mutable {
    when_released(self, id, [self, id, what, rp](bool freed) mutable {
      const auto* a = find_alloc(self->state.cat, id);
      if (a == nullptr) {
        deliver(rp, failure{errc::not_found, "alloc " + quoted(id) + " vanished"});
        return;
      }
      std::string text = what;
      if (freed) {
        text += "; its claims are released";
      } else {
        text += "; releases still in progress for:";
        for (const auto& v : claimed_volumes(self->state.cat, *a)) text += " " + v;
        text += " (see berth volume status)";
      }
      deliver(rp, alloc_response(*a, text));
    });
  };
  if (alloc_terminal(known->state())) {
    answer("alloc " + quoted(id) + " is already " + std::string(name_of(known->state())));
    return;
  }
  auto node_id = known->node_id();
  auto node = node_of(self, node_id);
  if (!node) {
    // The client is not connected: the alloc is stopped here; the client
    // stops its command when it reconnects, and the claims are released
    // then, when the node is marked down, or by berth volume detach.
    set_alloc_state(self, id, v1::ALLOC_COMPLETE,
                    "stopped by the operator while the client of node " + quoted(node_id) +
                        " was not connected",
                    0, [self, id, node_id, rp](std::optional<failure> f) mutable {
                      if (f) {
                        deliver(rp, *f);
                        return;
                      }
                      deliver(rp, alloc_response(
                                      self->state.cat.allocs.at(id),
                                      "alloc " + quoted(id) + " stopped; the client of node " +
                                          quoted(node_id) +
                                          " is not connected, so its claims are released once it "
                                          "reconnects, once the node is marked down, or now with: "
                                          "berth volume detach VOLUME " + node_id));
                    });
    return;
  }
  self->request(node, std::chrono::seconds(60), stop_atom::value, id, false)
      .then(
          [self, id, answer, rp](int32_t code) mutable {
            set_alloc_state(self, id, v1::ALLOC_COMPLETE, "stopped by the operator", code,
                            [id, answer, rp](std::optional<failure> f) mutable {
                              // Refused: it ended meanwhile; answer with how it ended.
                              if (f && f->code != errc::refused) {
                                deliver(rp, *f);
                                return;
                              }
                              answer("alloc " + quoted(id) + " stopped by the operator");
                            });
          },
          [rp, id](caf::error& e) mutable {
            deliver(rp, failure{errc::unavailable, "alloc " + quoted(id) + ": the node did not stop it: " +
                                                       to_failure(e).message + "; retry"});
          });
}

void alloc_update(const self_ptr& self, const v1::AllocUpdate& u, response_promise rp) {
  auto result = std::make_shared<v1::Response>();
  write(self,
        [u, result](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
          auto next = alloc_after_update(c, u, wall_ms());
          if (next.error) return *next.error;
          if (!next.upsert) {
            *result = alloc_response(c.allocs.at(u.id()), "unchanged");
            return std::vector<v1::Change>{};
          }
          return std::vector<v1::Change>{upsert_change(*next.upsert)};
        },
        [self, u, result, rp](std::optional<failure> f) mutable {
          if (f) {
            deliver(rp, *f);
            return;
          }
          if (result->allocs_size() > 0) {
            deliver(rp, std::move(*result));
            return;
          }
          const auto& a = self->state.cat.allocs.at(u.id());
          deliver(rp, alloc_response(a, "alloc " + quoted(a.id()) + " is " + std::string(name_of(a.state()))));
        });
}

// --- volumes ----------------------------------------------------------------------

// volume detach VOLUME NODE: releases, one after the other, the claims that
// plan_detach picks.
void volume_detach(const self_ptr& self, const v1::VolumeDetachRequest& d, response_promise rp) {
  auto& st = self->state;
  auto found = lookup_volume(st.cat, d.namespace_(), d.volume_id());
  if (found.error) {
    deliver(rp, *found.error);
    return;
  }
  auto plan = plan_detach(st.cat, st.cat.volumes.at(found.key), d.node_id());
  if (plan.release.empty() && plan.kept.empty()) {
    deliver(rp, volume_response(st.cat, st.cat.volumes.at(found.key),
                                "volume " + quoted(d.volume_id()) + " has no claims on node " +
                                    quoted(d.node_id()) + "; nothing to detach"));
    return;
  }
  if (plan.release.empty()) {
    std::string text = "volume " + quoted(d.volume_id()) + " is still used on node " +
                       quoted(d.node_id()) + " by running alloc(s):";
    for (const auto& k : plan.kept) text += " " + k;
    text += "; stop them first (berth alloc stop ID), or wait until the node is marked down";
    deliver(rp, failure{errc::refused, text});
    return;
  }
  auto results = std::make_shared<std::vector<std::string>>();
  auto remaining = std::make_shared<std::vector<std::string>>(plan.release.rbegin(), plan.release.rend());
  auto key = found.key;
  auto kept = plan.kept;
  auto step = std::make_shared<std::function<void()>>();
  std::weak_ptr<std::function<void()>> weak = step;
  *step = [self, key, d, results, remaining, kept, rp, weak]() mutable {
    if (remaining->empty()) {
      std::string text = "volume " + quoted(d.volume_id()) + " detached from node " + quoted(d.node_id()) + ":";
      for (const auto& r : *results) text += "\n  " + r;
      for (const auto& k : kept) text += "\n  claim of alloc " + quoted(k) + " kept: the alloc is running";
      const auto* v = find_volume(self->state.cat, key);
      deliver(rp, volume_response(self->state.cat, v ? *v : v1::Volume{}, text));
      return;
    }
    auto alloc = remaining->back();
    remaining->pop_back();
    v1::ReleaseRequest r;
    r.set_namespace_(key.first);
    r.set_volume_id(key.second);
    r.set_alloc_id(alloc);
    r.set_reason("detached by the operator");
    r.set_operator_detach(true);
    auto again = weak.lock();
    release_claim(self, std::move(r), [results, alloc, again](std::optional<failure> f, v1::Volume) {
      results->push_back(f ? "claim of alloc " + quoted(alloc) + " not released yet: " + f->message +
                                 " (the volume watcher retries)"
                           : "claim of alloc " + quoted(alloc) + " released");
      (*again)();
    });
  };
  (*step)();
}

// volume delete: DeleteVolume through a controller, then deregistration.
void volume_delete(const self_ptr& self, const v1::VolumeDeleteRequest& d, response_promise rp) {
  auto& st = self->state;
  auto found = lookup_volume(st.cat, d.namespace_(), d.volume_id());
  if (found.error) {
    deliver(rp, *found.error);
    return;
  }
  const auto vol = st.cat.volumes.at(found.key);
  if (auto f = can_deregister(vol)) {
    deliver(rp, *f);
    return;
  }
  auto controller = pick_controller(self, vol.plugin_id());
  if (!controller) {
    deliver(rp, failure{errc::unavailable, "plugin " + quoted(vol.plugin_id()) +
                                               " has no healthy controller on a node with a berth "
                                               "client; volume " + quoted(vol.id()) +
                                               " cannot be deleted now"});
    return;
  }
  auto key = found.key;
  self->request(controller, csi_step_timeout, deregister_atom::value, wrap(vol))
      .then(
          [self, key, rp](bool) mutable {
            auto actor = self->state.volume_actors.find(key);
            if (actor == self->state.volume_actors.end()) {
              deliver(rp, failure{errc::not_found, "volume " + quoted(key.second) + " vanished"});
              return;
            }
            ask_volume(self, actor->second, rp,
                       "volume " + quoted(key.second) + " deleted (DeleteVolume) and deregistered",
                       deregister_atom::value, false);
          },
          [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); });
}

// deregister --force: releases every claim (each through the release
// workflow, one after the other), then deregisters.
void force_deregister(const self_ptr& self, volume_key key, std::vector<std::string> allocs,
                      response_promise rp) {
  auto actor = self->state.volume_actors.find(key);
  if (actor == self->state.volume_actors.end()) {
    deliver(rp, failure{errc::not_found, "volume " + quoted(key.second) + " vanished"});
    return;
  }
  if (allocs.empty()) {
    ask_volume(self, actor->second, rp,
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
  release_claim(self, std::move(r), [self, key, allocs, rp](std::optional<failure>, v1::Volume) mutable {
    force_deregister(self, key, std::move(allocs), rp);
  });
}

void register_volume(const self_ptr& self, v1::Volume v, response_promise rp,
                     std::string verb = "registered");

// volume create: CreateVolume through a controller, then registration of
// what the plugin created.
void create_volume(const self_ptr& self, v1::Volume spec, response_promise rp) {
  auto& st = self->state;
  apply_defaults(spec);
  bool placeholder = spec.external_id().empty();
  if (placeholder) spec.set_external_id("(to be created)");
  auto problems = validate_volume(spec);
  if (placeholder) spec.clear_external_id();
  if (!placeholder)
    problems.push_back({"external_id", "is chosen by the plugin on create; use volume register "
                                       "for an existing volume"});
  if (!spec.plugin_id().empty() && !find_plugin(st.cat, spec.plugin_id()))
    problems.push_back({"plugin_id", "plugin " + quoted(spec.plugin_id()) +
                                         " is not registered by any node (see berth plugin status)"});
  if (!problems.empty()) {
    deliver(rp, failure{errc::invalid, describe("volume " + quoted(spec.id()), problems)});
    return;
  }
  if (find_volume(st.cat, {spec.namespace_(), spec.id()})) {
    deliver(rp, failure{errc::refused, "volume " + quoted(spec.id()) +
                                           " is already registered in namespace " +
                                           quoted(spec.namespace_())});
    return;
  }
  auto controller = pick_controller(self, spec.plugin_id(), &spec.topology_request());
  if (!controller) {
    deliver(rp, failure{errc::unavailable,
                        "plugin " + quoted(spec.plugin_id()) +
                            " has no healthy controller on a node with a berth client" +
                            (spec.topology_request().required().empty()
                                 ? std::string()
                                 : " in the volume's required topology") +
                            "; volumes of it cannot be created now"});
    return;
  }
  self->request(controller, csi_step_timeout, create_atom::value, wrap(std::move(spec)))
      .then([self, rp](pb<v1::Volume>& created) mutable {
              register_volume(self, std::move(created.msg), rp, "created");
            },
            [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); });
}

void register_volume(const self_ptr& self, v1::Volume v, response_promise rp, std::string verb) {
  auto& st = self->state;
  apply_defaults(v);
  auto problems = validate_volume(v);
  if (!v.plugin_id().empty() && !find_plugin(st.cat, v.plugin_id()))
    problems.push_back({"plugin_id", "plugin " + quoted(v.plugin_id()) +
                                         " is not registered by any node (see berth plugin status)"});
  if (!problems.empty()) {
    deliver(rp, failure{errc::invalid, describe("volume " + quoted(v.id()), problems)});
    return;
  }
  volume_key key{v.namespace_(), v.id()};
  bool fresh = !st.volume_actors.count(key);
  // A new registration of an existing volume is checked with the plugin
  // (ValidateVolumeCapabilities) when a controller of it is reachable.
  if (fresh && verb == "registered") {
    if (auto controller = pick_controller(self, v.plugin_id())) {
      auto id = v.id(), plugin = v.plugin_id(), ext = v.external_id();
      self->request(controller, csi_step_timeout, validate_atom::value, wrap(v))
          .then(
              [self, v, rp, id, plugin, ext](std::string& why) mutable {
                if (!why.empty()) {
                  deliver(rp, failure{errc::invalid, "volume " + quoted(id) + ": plugin " + quoted(plugin) +
                                                         " does not confirm its capabilities for "
                                                         "external_id " + quoted(ext) + ": " + why});
                  return;
                }
                register_volume(self, std::move(v), rp, "registered (validated by the plugin)");
              },
              [rp, id, plugin, ext](caf::error& e) mutable {
                auto f = to_failure(e);
                f.message = "volume " + quoted(id) + ": plugin " + quoted(plugin) +
                            " could not validate external_id " + quoted(ext) + ": " + f.message;
                deliver(rp, f);
              });
      return;
    }
  }
  if (fresh) st.volume_actors.emplace(key, spawn_volume(self, v1::Volume{}, false));
  auto actor = st.volume_actors[key];
  if (!fresh) verb = "updated";
  self->request(actor, caf::infinite, register_atom::value, wrap(std::move(v)))
      .then(
          [self, rp, verb](pb<v1::Volume>& stored) mutable {
            when_applied(self, stored.msg.modify_index(), [self, rp, verb, v = std::move(stored.msg)]() mutable {
              deliver(rp, volume_response(self->state.cat, v, "volume " + quoted(v.id()) + " " + verb));
            });
          },
          [self, rp, key, actor](caf::error& e) mutable {
            if (!find_volume(self->state.cat, key)) {
              // A first registration that failed leaves no actor behind.
              self->state.volume_actors.erase(key);
              self->send_exit(actor, caf::exit_reason::user_shutdown);
            }
            deliver(rp, to_failure(e));
          });
}

// --- nodes and plugins ------------------------------------------------------------

// A plugin actor for the plugin, spawned on its committed state when there
// is none yet.
plugin_actor ensure_plugin_actor(const self_ptr& self, const std::string& id) {
  auto& actors = self->state.plugin_actors;
  if (auto it = actors.find(id); it != actors.end()) return it->second;
  v1::Plugin p;
  if (const auto* known = find_plugin(self->state.cat, id)) p = *known;
  p.set_id(id);
  return actors.emplace(id, spawn_plugin(self, std::move(p))).first->second;
}

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
  self->request(ensure_plugin_actor(self, f.plugin_id()), caf::infinite, fingerprint_atom::value, wrap(f))
      .then(
          [self, f, rp](pb<v1::Plugin>& p) mutable {
            v1::Response r;
            *r.add_plugins() = p.msg;
            r.set_message("plugin " + quoted(p.msg.id()) +
                          (f.remove() ? " instance removed from" : " instance reported on") +
                          " node " + quoted(f.node_id()));
            write(self,
                  [f, p = std::move(p.msg)](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
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
  write(self,
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
  write(self,
        [node_id, silent_ms](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
          return mark_down(c, node_id, silent_ms, wall_ms());
        },
        [self, node_id](std::optional<failure> f) {
          if (f) return;
          for (auto& fp : instances_of_down_node(self->state.cat, node_id)) {
            auto actor = ensure_plugin_actor(self, fp.plugin_id());
            self->request(actor, caf::infinite, fingerprint_atom::value, wrap(std::move(fp)))
                .then([](pb<v1::Plugin>&) {}, [](caf::error&) {});
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
  for (const auto& n : silent_nodes(st.cat, st.last_seen, steady_ms(), st.options.node_down_timeout.count()))
    node_down(self, n.id, n.silent_ms);
  check_waiters(self);
  if (++st.ticks % 10 == 0) collect_plugins(self);
}

// --- requests -----------------------------------------------------------------------

void volume_claim(const self_ptr& self, v1::ClaimRequest c, response_promise rp) {
  auto& st = self->state;
  c.clear_node_volume_count();
  c.clear_alloc();
  auto found = lookup_volume(st.cat, c.namespace_(), c.volume_id());
  if (found.error) {
    deliver(rp, *found.error);
    return;
  }
  auto alloc = alloc_of_claim(st.cat, c, wall_ms());
  if (alloc.error) {
    deliver(rp, *alloc.error);
    return;
  }
  if (alloc.upsert) *c.mutable_alloc() = *alloc.upsert;
  std::string msg = "volume " + quoted(c.volume_id()) + " claimed for " +
                    (c.read_only() ? "reading" : "writing") + " by alloc " + quoted(c.alloc_id()) +
                    " on node " + quoted(c.node_id());
  bool client = static_cast<bool>(node_of(self, c.node_id()));
  claim_volume(self, c, [self, msg, rp, client](std::optional<failure> f, v1::ClaimResult r) mutable {
    if (f) {
      deliver(rp, *f);
      return;
    }
    auto text = msg;
    if (!r.published_path().empty())
      text += "; published at " + r.published_path();
    else if (!client)
      text += "; node has no berth client, so nothing was published";
    auto resp = volume_response(self->state.cat, r.volume(), text);
    resp.set_published_path(r.published_path());
    deliver(rp, std::move(resp));
  });
}

void volume_release(const self_ptr& self, v1::ReleaseRequest r, response_promise rp) {
  auto& st = self->state;
  r.clear_node_detached();
  r.clear_operator_detach();
  r.set_reason("released by the operator");
  auto found = lookup_volume(st.cat, r.namespace_(), r.volume_id());
  if (found.error) {
    deliver(rp, *found.error);
    return;
  }
  if (!find_claim(st.cat.volumes.at(found.key), r.alloc_id())) {
    deliver(rp, failure{errc::not_found, "volume " + quoted(r.volume_id()) + " has no claim of alloc " +
                                             quoted(r.alloc_id())});
    return;
  }
  auto key = found.key;
  auto text = "claim of alloc " + quoted(r.alloc_id()) + " on volume " + quoted(r.volume_id()) + " released";
  auto alloc = r.alloc_id();
  release_claim(self, r, [self, key, alloc, text, rp](std::optional<failure> f, v1::Volume v) mutable {
    if (f) {
      deliver(rp, *f);
      return;
    }
    // The volume leaves a command-less alloc; an empty one is deleted.
    write(self,
          [alloc, key](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
            auto change = alloc_after_release(c, alloc, key);
            if (!change) return std::vector<v1::Change>{};
            return std::vector<v1::Change>{*change};
          },
          ignore_result());
    deliver(rp, volume_response(self->state.cat, v, text));
  });
}

void execute(const self_ptr& self, v1::Request& req, response_promise rp) {
  auto& st = self->state;
  auto last_seen = [self](const std::string& node) -> int64_t {
    auto it = self->state.last_seen.find(node);
    return it == self->state.last_seen.end() ? 0 : wall_ms() - (steady_ms() - it->second);
  };
  if (auto r = answer_read(st.cat, req, last_seen)) {
    add_progress(self, std::move(*r), rp);
    return;
  }
  switch (req.command_case()) {
    case v1::Request::kVolumeRegister:
      register_volume(self, std::move(*req.mutable_volume_register()), rp);
      return;
    case v1::Request::kVolumeCreate:
      create_volume(self, std::move(*req.mutable_volume_create()), rp);
      return;
    case v1::Request::kVolumeDeregister: {
      const auto& d = req.volume_deregister();
      auto found = lookup_volume(st.cat, d.namespace_(), d.volume_id());
      if (found.error) {
        deliver(rp, *found.error);
        return;
      }
      if (!d.force()) {
        ask_volume(self, st.volume_actors.at(found.key), rp,
                   "volume " + quoted(d.volume_id()) + " deregistered", deregister_atom::value, false);
        return;
      }
      std::vector<std::string> allocs;
      for (const auto& c : st.cat.volumes.at(found.key).claims()) allocs.push_back(c.alloc_id());
      force_deregister(self, found.key, std::move(allocs), rp);
      return;
    }
    case v1::Request::kVolumeClaim:
      volume_claim(self, req.volume_claim(), rp);
      return;
    case v1::Request::kVolumeRelease:
      volume_release(self, req.volume_release(), rp);
      return;
    case v1::Request::kVolumeDetach:
      volume_detach(self, req.volume_detach(), rp);
      return;
    case v1::Request::kVolumeDelete:
      volume_delete(self, req.volume_delete(), rp);
      return;
    case v1::Request::kAllocRun:
      alloc_run(self, req.alloc_run(), rp);
      return;
    case v1::Request::kAllocStop:
      alloc_stop(self, req.alloc_stop(), rp);
      return;
    case v1::Request::kAllocUpdate:
      alloc_update(self, req.alloc_update(), rp);
      return;
    case v1::Request::kPluginFingerprint:
      fingerprint(self, std::move(*req.mutable_plugin_fingerprint()), rp);
      return;
    case v1::Request::COMMAND_NOT_SET:
      deliver(rp, failure{errc::invalid, "the request names no command this server knows; is the "
                                         "shell newer than berthd?"});
      return;
    default:
      // agent status, raft and snapshot requests: the server answers them.
      deliver(rp, failure{errc::internal, "the server answers this request"});
      return;
  }
}

}  // namespace

leader_actor::behavior_type leader(self_ptr self, replicated_log_actor log, state_contents initial,
                                   std::shared_ptr<metrics> stats, leader_options options) {
  auto& st = self->state;
  st.log = std::move(log);
  st.stats = std::move(stats);
  st.options = options;
  st.watcher = self->spawn<caf::linked>(watcher, caf::actor_cast<leader_actor>(self), st.stats);
  st.stats->clear_state();
  for (auto s : {v1::ALLOC_PENDING, v1::ALLOC_RUNNING, v1::ALLOC_COMPLETE, v1::ALLOC_FAILED, v1::ALLOC_LOST})
    st.stats->allocs(std::string(name_of(s)), 0);
  st.stats->nodes("ready", 0);
  st.stats->nodes("down", 0);
  st.cat.applied_index = initial.applied_index;
  for (auto& p : initial.plugins) {
    st.plugin_actors.emplace(p.id(), spawn_plugin(self, p));
    st.cat.plugins.emplace(p.id(), std::move(p));
  }
  for (auto& v : initial.volumes) {
    volume_key key{v.namespace_(), v.id()};
    st.volume_actors.emplace(key, spawn_volume(self, v, true));
    st.cat.volumes.emplace(key, std::move(v));
  }
  for (auto& n : initial.nodes) st.cat.nodes.emplace(n.id(), std::move(n));
  for (auto& a : initial.allocs) st.cat.allocs.emplace(a.id(), std::move(a));
  // What the catalog holds, told as if it had just been applied.
  for (const auto& [key, v] : st.cat.volumes) announce(self, {upsert_change(v), {}});
  for (const auto& [id, p] : st.cat.plugins) announce(self, {upsert_change(p), {}});
  for (const auto& [id, n] : st.cat.nodes) announce(self, {upsert_change(n), {}});
  for (const auto& [id, a] : st.cat.allocs) announce(self, {upsert_change(a), {}});
  st.stats->actors("volume", st.volume_actors.size());
  st.stats->actors("plugin", st.plugin_actors.size());
  // An alloc still pending was being started by the previous leader: it
  // failed, and the watcher releases whatever it claimed.
  write(self,
        [](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
          return fail_interrupted_allocs(c, wall_ms());
        },
        ignore_result());
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
        release_claim(self, std::move(req.msg), [rp](std::optional<failure> f, v1::Volume v) mutable {
          if (f)
            rp.deliver(to_error(*f));
          else
            rp.deliver(wrap(std::move(v)));
        });
        return rp;
      },
      [self](apply_atom, const committed_batch& batch) { apply_batch(self, batch); },
      [self](tick_atom) {
        self->state.stats->mailbox("leader", self->mailbox().size());
        leader_tick(self);
        self->delayed_send(self, std::chrono::milliseconds(500), tick_atom::value);
      },
      [self](node_atom, const std::string& node_id, node_actor node) {
        heartbeat(self, node_id, std::move(node));
      },
  };
}

}  // namespace berth
