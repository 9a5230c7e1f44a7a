#include "actors/leader.hpp"
#include "messages/failure.hpp"

#include "control/acl.hpp"

#include <caf/typed_event_based_actor.hpp>
#include <algorithm>
#include <chrono>
#include <random>

#include "actors/change_log.hpp"
#include "actors/clock.hpp"
#include "log/log.hpp"
#include "actors/leader_flows.hpp"
#include "actors/plugin.hpp"
#include "actors/propose.hpp"
#include "actors/volume.hpp"
#include "actors/watcher.hpp"
#include "control/allocs.hpp"
#include "control/entries.hpp"
#include "control/lease.hpp"
#include "control/nodes.hpp"
#include "control/placement.hpp"
#include "control/release.hpp"
#include "control/views.hpp"

namespace berth::leader_flows {

// --- waiting for the catalog ------------------------------------------------

// Runs `run(true)` once `ready()` holds for the catalog (now, or after a
// later apply), or `run(false)` when a deadline is given and passes first.
void when(const self_ptr& self, std::function<bool()> ready, std::function<void(bool)> run,
          int64_t deadline_ms) {
  if (ready()) {
    run(true);
    return;
  }
  self->state.waiters.push_back({std::move(ready), std::move(run), deadline_ms});
}

void when_applied(const self_ptr& self, uint64_t index, std::function<void()> run) {
  when(
      self, [self, index] { return self->state.cat.applied_index >= index; },
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
  propose(self, self->state.log, self->state.options.term, std::move(changes))
      .then([self,
             then](uint64_t index) { when_applied(self, index, [then] { then(std::nullopt); }); },
            [then](caf::error& e) { then(to_failure(e)); });
}

// The leader's own writes (allocs, nodes, ACLs): built by `build` from the
// catalog as committed now, and committed with the versions of what they
// change (compare-and-set, control/catalog expectations_of).  An entry
// refused at apply because one of them changed since (another write, a
// claim) is built again from the catalog that applied that change, so no
// write is lost to another built on the same old state, and writes to
// different objects never wait for each other.
void write(const self_ptr& self, build_fn build, then_fn then, bool node_allocs, uint32_t attempt) {
  auto& st = self->state;
  auto built = build(st.cat);
  if (auto* f = std::get_if<failure>(&built)) {
    then(*f);
    return;
  }
  auto changes = std::move(std::get<std::vector<v1::Change>>(built));
  if (changes.empty()) {
    then(std::nullopt);
    return;
  }
  auto expect = expectations_of(st.cat, changes, node_allocs);
  // Named in the failure, the first few: a collection may change thousands.
  std::string objects;
  for (size_t i = 0; i < expect.size() && i < 5; ++i)
    objects += (i == 0 ? "" : ", ") + expectation_key(expect[i]);
  if (expect.size() > 5) objects += " and " + std::to_string(expect.size() - 5) + " more";
  propose(self, st.log, st.options.term, std::move(changes), std::move(expect))
      .then(
          [self, build, then, node_allocs, attempt, objects](uint64_t index) {
            when_applied(self, index, [self, build, then, node_allocs, attempt, objects, index] {
              if (!take_refused(self->state.cat, index)) {
                then(std::nullopt);
                return;
              }
              self->state.stats->write_refused();
              if (attempt >= write_attempts) {
                then(failure{errc::unavailable,
                             "the leader's write of " + objects + " was refused " +
                                 std::to_string(attempt) +
                                 " times in a row: they kept changing while it was built; "
                                 "send the request again",
                             true});
                return;
              }
              write(self, build, then, node_allocs, attempt + 1);
            });
          },
          [then](caf::error& e) { then(to_failure(e)); });
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
      announce_volume_health(self, {c.volume_upsert().namespace_(), c.volume_upsert().id()});
      self->send(st.watcher, changed_atom::value, wrap(c.volume_upsert()));
      break;
    case v1::Change::kVolumeDelete:
      if (before.has_volume_upsert()) st.stats->volume_changed(&before.volume_upsert(), nullptr);
      announce_volume_health(self, {c.volume_delete().namespace_(), c.volume_delete().id()});
      // Its actor quits once it committed the deregistration.
      forget_volume_actor(self, {c.volume_delete().namespace_(), c.volume_delete().id()});
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
    case v1::Change::kNodeUpsert:
    case v1::Change::kNodeDelete: {
      // The usage it reported (before and after) is part of its volumes'
      // series.
      std::set<volume_key> keys;
      for (const auto* n : {before.has_node_upsert() ? &before.node_upsert() : nullptr,
                            c.has_node_upsert() ? &c.node_upsert() : nullptr})
        if (n != nullptr)
          for (const auto& u : n->volume_usage()) keys.insert({u.namespace_(), u.volume_id()});
      for (const auto& k : keys) announce_volume_health(self, k);
      break;
    }
    case v1::Change::kAllocUpsert: {
      const auto& a = c.alloc_upsert();
      if (a.state() == v1::ALLOC_LOST && !a.group().empty() && !a.no_replace())
        st.replacing.try_emplace(a.id());
      self->send(st.watcher, changed_atom::value, wrap(a));
      break;
    }
    case v1::Change::kAllocDelete:
      self->send(st.watcher, removed_atom::value, c.alloc_delete());
      break;
    default:
      break;
  }
}

void apply_batch(const self_ptr& self, const committed_batch& batch) {
  auto& st = self->state;
  for (const auto& [index, entry] : batch.entries) {
    if (index <= st.cat.applied_index) continue;
    auto changes = apply(st.cat, index, *entry);
    alloc_upserts_first(changes);
    for (const auto& a : changes) {
      announce(self, a);
      log_change(a, index);
    }
  }
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

pb<v1::Plugin> committed_plugin(const self_ptr& self, const std::string& plugin_id) {
  const auto* p = find_plugin(self->state.cat, plugin_id);
  return wrap(p != nullptr ? *p : v1::Plugin{});
}

// --- volume actors on demand (control/activation) -----------------------------

namespace {

void forget_if_done(const self_ptr& self, const volume_key& key) {
  auto& slots = self->state.volume_actors;
  auto it = slots.find(key);
  if (it == slots.end()) return;
  const auto& slot = it->second;
  if (can_forget(slot.activity, static_cast<bool>(slot.actor), !slot.waiting.empty(),
                 self->state.cat.applied_index))
    slots.erase(it);
}

// Runs the requests that waited for the stop or the catalog, in order.
void run_waiting(const self_ptr& self, const volume_key& key) {
  auto it = self->state.volume_actors.find(key);
  if (it == self->state.volume_actors.end()) return;
  auto waiting = std::move(it->second.waiting);
  it->second.waiting.clear();
  for (auto& w : waiting) w();
  forget_if_done(self, key);
}

void stop_volume_actor(const self_ptr& self, const volume_key& key) {
  auto& slot = self->state.volume_actors.at(key);
  auto actor = std::move(slot.actor);
  slot.actor = volume_actor{};
  if (actor) --self->state.running_volume_actors;
  slot.stop_when_free = false;
  stop_sent(slot.activity);
  self->state.stats->volume_actor_event("stopped");
  auto finished = [self, key](uint64_t index) {
    auto it = self->state.volume_actors.find(key);
    if (it == self->state.volume_actors.end()) return;
    stop_done(it->second.activity, index);
    self->state.stats->actors("volume", count_volume_actors(self));
    run_waiting(self, key);
  };
  self->request(actor, std::chrono::seconds(10), stop_atom::value)
      .then([finished](uint64_t index) { finished(index); },
            [self, actor, finished](caf::error&) {
              // Gone already (it quit after a deregistration), or stuck: it
              // must not take another request either way.  Every change it
              // committed was answered, so min_index already covers them.
              self->send_exit(actor, caf::exit_reason::kill);
              finished(0);
            });
}

}  // namespace

namespace {

void report_lane(const self_ptr& self, const std::string& kind, const std::string& plugin) {
  const auto& a = self->state.admitted;
  auto lane = kind == "claim" ? claim_lane(plugin) : release_lane(plugin);
  self->state.stats->plugin_operations(plugin, kind, a.running(lane), a.queued(lane));
}

}  // namespace

void admit(const self_ptr& self, const std::string& kind, const std::string& plugin_id,
           std::function<void(std::function<void()>)> run) {
  auto& st = self->state;
  auto r = st.admitted.add(kind == "claim" ? claim_lane(plugin_id) : release_lane(plugin_id));
  auto ticket = r.ticket;
  auto turn = [self, ticket, kind, plugin_id, run = std::move(run)] {
    run([self, ticket, kind, plugin_id] {
      auto& st = self->state;
      if (auto next = st.admitted.finish(ticket)) st.admission_ready.push_back(*next);
      report_lane(self, kind, plugin_id);
      if (st.admission_running) return;  // the loop below runs it
      st.admission_running = true;
      while (!st.admission_ready.empty()) {
        auto t = st.admission_ready.front();
        st.admission_ready.pop_front();
        auto it = st.admission_waiting.find(t);
        if (it == st.admission_waiting.end()) continue;
        auto work = std::move(it->second);
        st.admission_waiting.erase(it);
        work();
      }
      st.admission_running = false;
    });
  };
  if (r.start) {
    report_lane(self, kind, plugin_id);
    turn();
  } else {
    st.admission_waiting.emplace(ticket, std::move(turn));
    report_lane(self, kind, plugin_id);
  }
}

void with_volume_actor(const self_ptr& self, const volume_key& key, volume_use use) {
  auto& st = self->state;
  auto& slot = st.volume_actors[key];
  bool ready = slot.actor || can_spawn(slot.activity, st.cat.applied_index);
  if (!slot.waiting.empty() || slot.activity.stopping || !ready) {
    if (slot.activity.stopping) st.stats->volume_actor_event("waited");
    slot.waiting.push_back([self, key, use] { with_volume_actor(self, key, use); });
    if (!slot.activity.stopping && !slot.actor) {
      // Waiting for the catalog to apply what the last actor committed.
      when_applied(self, slot.activity.min_index, [self, key] {
        auto it = self->state.volume_actors.find(key);
        if (it != self->state.volume_actors.end() && !it->second.activity.stopping &&
            !it->second.actor)
          run_waiting(self, key);
      });
    }
    return;
  }
  if (!slot.actor) {
    auto v = find_volume(st.cat, key);
    // Not linked: a link is an attachable on the leader, which CAF 0.17
    // looks up in a list when the volume actor stops, so 100,000 volume
    // actors stopping cost O(n^2) (minutes in the scale benchmark, until
    // the leader lost its leadership).  ~leader_state stops the ones left.
    bool registered = v.has_value();
    slot.actor = self->spawn(volume, st.log, v ? std::move(*v) : v1::Volume{}, registered,
                             st.options.term, st.retired);
    ++st.running_volume_actors;
    slot.activity.idle_since_ms = steady_ms();
    st.stats->actors("volume", count_volume_actors(self));
    st.stats->volume_actor_event("started");
  }
  request_sent(slot.activity);
  use(slot.actor, [self, key](uint64_t index) {
    auto it = self->state.volume_actors.find(key);
    if (it == self->state.volume_actors.end()) return;
    auto& s = it->second;
    request_done(s.activity, steady_ms(), index);
    if (s.stop_when_free && should_stop(s.activity, static_cast<bool>(s.actor), 0, 0, true))
      stop_volume_actor(self, key);
  });
}

// --- leases (control/lease.hpp) ---------------------------------------------------

namespace {

// Answers the heartbeats waiting for their lease after one ReadIndex round
// that started after every one of them arrived: a lease is granted only by
// a leader that a quorum still follows, so no newer leader was elected
// before the heartbeat it answers was received.
void confirm_leases(const self_ptr& self) {
  auto& st = self->state;
  if (st.lease_reading || st.lease_waiting.empty()) return;
  st.lease_reading = true;
  auto batch = std::make_shared<std::vector<std::pair<std::string, lease_promise>>>(
      std::move(st.lease_waiting));
  st.lease_waiting.clear();
  self->request(st.log, std::chrono::seconds(5), read_atom::value)
      .then(
          [self, batch](uint64_t) {
            auto& st = self->state;
            for (auto& [node_id, rp] : *batch) {
              bool grant =
                  lease_grantable(find_node(st.cat, node_id), st.marking_down.count(node_id) > 0);
              rp.deliver(st.options.term, grant ? st.options.node_lease.count() : int64_t{0},
                         st.cat.applied_index);
            }
            st.lease_reading = false;
            confirm_leases(self);
          },
          [self, batch](caf::error& e) {
            for (auto& [node_id, rp] : *batch) rp.deliver(e);
            self->state.lease_reading = false;
            confirm_leases(self);
          });
}

}  // namespace

void grant_lease(const self_ptr& self, const std::string& node_id, lease_promise rp) {
  self->state.lease_waiting.emplace_back(node_id, std::move(rp));
  confirm_leases(self);
}

}  // namespace berth::leader_flows

namespace berth {
leader_state::~leader_state() {
  if (cat.rows) cat.rows->detach(row_exchange::leader);
  for (auto& [key, slot] : volume_actors)
    if (slot.actor) caf::anon_send_exit(slot.actor, caf::exit_reason::user_shutdown);
}
}  // namespace berth

namespace berth::leader_flows {

void stop_idle_volume_actors(const self_ptr& self) {
  auto& st = self->state;
  auto now = steady_ms();
  std::vector<std::pair<int64_t, volume_key>> stoppable;  // nothing in flight, whatever its idle time
  std::vector<volume_key> done;
  for (const auto& [key, slot] : st.volume_actors) {
    if (should_stop(slot.activity, static_cast<bool>(slot.actor), now, 0, true))
      stoppable.emplace_back(slot.activity.idle_since_ms, key);
    else if (!slot.actor)
      done.push_back(key);
  }
  for (const auto& key :
       actors_to_stop(std::move(stoppable), st.running_volume_actors, now,
                      st.options.volume_idle_ms, st.options.volume_actors_max))
    stop_volume_actor(self, key);
  for (const auto& key : done) forget_if_done(self, key);
}

void stop_volume_actor_when_free(const self_ptr& self, const volume_key& key) {
  auto it = self->state.volume_actors.find(key);
  if (it == self->state.volume_actors.end()) return;
  auto& slot = it->second;
  if (should_stop(slot.activity, static_cast<bool>(slot.actor), 0, 0, true))
    stop_volume_actor(self, key);
  else
    slot.stop_when_free = static_cast<bool>(slot.actor);
}

void forget_volume_actor(const self_ptr& self, const volume_key& key) {
  auto it = self->state.volume_actors.find(key);
  if (it == self->state.volume_actors.end()) return;
  // It quit after committing the deletion; a request for the volume that
  // comes later finds no volume (a new actor answers "not registered").
  if (it->second.actor) --self->state.running_volume_actors;
  it->second.actor = volume_actor{};
  self->state.stats->actors("volume", count_volume_actors(self));
  if (!it->second.waiting.empty() && !it->second.activity.stopping)
    run_waiting(self, key);
  else
    forget_if_done(self, key);
}

size_t count_volume_actors(const self_ptr& self) { return self->state.running_volume_actors; }

plugin_actor spawn_plugin(const self_ptr& self, v1::Plugin p) {
  return self->spawn<caf::linked>(plugin, self->state.log, std::move(p), self->state.options.term,
                                  self->state.retired);
}

node_actor pick_controller(const self_ptr& self, const std::string& plugin_id,
                           const v1::TopologyRequest* topology) {
  const auto* p = find_plugin(self->state.cat, plugin_id);
  if (p == nullptr) return {};
  auto candidates = controller_candidates(
      *p, [&](const std::string& n) { return static_cast<bool>(node_of(self, n)); }, topology);
  auto chosen = next_in_turn(candidates, self->state.controller_turn[plugin_id]);
  return chosen ? node_of(self, *chosen) : node_actor{};
}

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

}  // namespace berth::leader_flows

namespace berth {

namespace {

using namespace leader_flows;

// berth monitor --node: the log lines of the process running that node's
// client, asked of its node actor.
void monitor_node(const self_ptr& self, const v1::MonitorRequest& m, response_promise rp) {
  auto node = node_of(self, m.node_id());
  if (!node) {
    deliver(rp, failure{errc::not_found, "node '" + m.node_id() +
                                             "' has no connected berth client (berth node status "
                                             "lists the nodes)"});
    return;
  }
  self->request(node, std::chrono::milliseconds(m.wait_ms()) + std::chrono::seconds(10),
                monitor_atom::value, wrap(m))
      .then(
          [rp](pb<v1::MonitorResult>& r) mutable {
            v1::Response resp;
            *resp.mutable_monitor() = std::move(r.msg);
            rp.deliver(wrap(std::move(resp)));
          },
          [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); });
}

void execute(const self_ptr& self, v1::Request& req, response_promise rp) {
  auto& st = self->state;
  // An operator restore replaced the state: the server starts this leader
  // again from it; until then nothing is answered from the old catalog.
  if (st.cat.restored) {
    deliver(rp, failure{errc::unavailable, "the state is being restored; retry", true});
    return;
  }
  auto last_seen = [self](const std::string& node) -> int64_t {
    auto it = self->state.last_seen.find(node);
    return it == self->state.last_seen.end() ? 0 : wall_ms() - (steady_ms() - it->second);
  };
  // ACLs: the request's token must allow it before anything happens.
  acl::grant g;
  if (st.options.acl) {
    if (auto f = acl::check(st.cat, req, g)) {
      deliver(rp, *f);
      return;
    }
    // A node's own report: from the client bound to that node id (bound
    // by its first report, then the report runs).
    if (acl::is_node_request(req) &&
        acl::node_refusal(st.cat, acl::node_of(req), req.node_secret())) {
      with_node_identity(self, acl::node_of(req), req.node_secret(),
                         [self, req, rp](std::optional<failure> f) mutable {
                           if (f)
                             deliver(rp, *f);
                           else
                             execute(self, req, rp);
                         });
      return;
    }
  } else if (acl::is_acl_command(req)) {
    deliver(rp, failure{errc::refused, "ACLs are off on this cluster: start every server with "
                                       "--acl to use berth acl"});
    return;
  }
  if (auto r = answer_read(st.cat, req, last_seen)) {
    if (st.options.acl) acl::filter_response(g, req, *r);
    add_progress(self, std::move(*r), rp);
    return;
  }
  if (acl::is_acl_command(req)) {
    acl_command(self, req, g, rp);
    return;
  }
  switch (req.command_case()) {
    case v1::Request::kVolumeRegister: {
      // snapshot_id and clone_id are for volume create only.
      auto problems = content_source_problems(req.volume_register(), false);
      if (!problems.empty()) {
        deliver(rp, failure{errc::invalid,
                            describe("volume " + quote_name(req.volume_register().id()), problems)});
        return;
      }
      register_volume(self, std::move(*req.mutable_volume_register()), rp);
      return;
    }
    case v1::Request::kSnapshotCreate:
      snapshot_create(self, std::move(*req.mutable_snapshot_create()), rp);
      return;
    case v1::Request::kSnapshotDelete:
      snapshot_delete(self, std::move(*req.mutable_snapshot_delete()), rp);
      return;
    case v1::Request::kSnapshotList:
      snapshot_list(self, std::move(*req.mutable_snapshot_list()), rp);
      return;
    case v1::Request::kVolumeListExternal:
      volume_list_external(self, std::move(*req.mutable_volume_list_external()), rp);
      return;
    case v1::Request::kVolumeModify:
      volume_modify(self, std::move(*req.mutable_volume_modify()), rp);
      return;
    case v1::Request::kVolumeCreate:
      create_volume(self, std::move(*req.mutable_volume_create()), rp);
      return;
    case v1::Request::kVolumeDeregister:
      deregister_volume(self, req.volume_deregister(), rp);
      return;
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
    case v1::Request::kMonitor:
      monitor_node(self, req.monitor(), rp);
      return;
    case v1::Request::kNodeDrain:
      node_drain(self, req.node_drain(), rp);
      return;
    case v1::Request::kNodeEligibility:
      node_eligibility(self, req.node_eligibility(), rp);
      return;
    case v1::Request::kSystemGc:
      system_gc(self, rp);
      return;
    case v1::Request::kVolumeAvailability:
      volume_availability(self, req.volume_availability(), rp);
      return;
    case v1::Request::kVolumeStatsReport:
      volume_stats_report(self, std::move(*req.mutable_volume_stats_report()), rp);
      return;
    case v1::Request::kVolumeExpand:
      volume_expand(self, req.volume_expand(), rp);
      return;
    case v1::Request::COMMAND_NOT_SET:
      deliver(rp, failure{errc::invalid,
                          "the request names no command this server knows; is the "
                          "shell newer than berthd?"});
      return;
    default:
      // agent status, raft and snapshot requests: the server answers them.
      deliver(rp, failure{errc::internal, "the server answers this request"});
      return;
  }
}

}  // namespace

leader_actor::behavior_type leader(self_ptr self, replicated_log_actor log, catalog initial,
                                   std::shared_ptr<metrics> stats, leader_options options) {
  auto& st = self->state;
  st.log = std::move(log);
  st.stats = std::move(stats);
  st.options = options;
  st.admitted = admission(options.plugin_window);
  st.watcher = self->spawn<caf::linked>(watcher, caf::actor_cast<leader_actor>(self), st.stats);
  st.stats->clear_state();
  for (auto s :
       {v1::ALLOC_PENDING, v1::ALLOC_RUNNING, v1::ALLOC_COMPLETE, v1::ALLOC_FAILED, v1::ALLOC_LOST})
    st.stats->allocs(std::string(name_of(s)), 0);
  st.stats->nodes("ready", 0);
  st.stats->nodes("down", 0);
  st.cat = std::move(initial);
  // Its rows are the state machine's: each entry's new rows are built once
  // for both catalogs (control/catalog's row_exchange).
  st.cat.party = row_exchange::leader;
  if (st.cat.rows) st.cat.rows->attach(row_exchange::leader);
  for (const auto& [id, p] : st.cat.plugins) st.plugin_actors.emplace(id, spawn_plugin(self, p));
  // No volume actor yet: each is spawned when a request for their volume
  // arrives (the watcher's resumed releases among them).
  // What the catalog holds, told as if it had just been applied, the
  // allocs first: the watcher releases a taken claim whose alloc it does
  // not know, so it must know every alloc before it sees their claims
  // (with many volumes, its tick comes between the messages).  Only the
  // volumes with claims are decoded (claimed_on): the watcher keeps only
  // those (the releases it may have to resume); the others count as
  // unclaimed.
  for (const auto& [id, a] : st.cat.allocs) announce(self, {upsert_change(a), {}});
  auto claimed = claimed_volumes(st.cat);
  for (const auto& key : claimed) {
    auto v = volume_at(st.cat, key);
    st.stats->volume_changed(nullptr, &v);
    self->send(st.watcher, changed_atom::value, wrap(v));
  }
  st.stats->volumes_unclaimed(static_cast<int64_t>(st.cat.volumes.size() - claimed.size()));
  for (const auto& [id, p] : st.cat.plugins) announce(self, {upsert_change(p), {}});
  for (const auto& [id, n] : st.cat.nodes) announce(self, {upsert_change(n), {}});
  // A volume's health series (control/health's series_of) exist only for
  // a volume with a claim or an abnormal condition.
  for (const auto& key : claimed) announce_volume_health(self, key);
  for (const auto& key : st.cat.abnormal)
    if (!claimed.count(key)) announce_volume_health(self, key);
  st.stats->actors("volume", 0);
  st.stats->actors("plugin", st.plugin_actors.size());
  // An alloc still pending was being started by the previous leader: it
  // failed, and the watcher releases whatever it claimed.
  write(
      self,
      [](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        return fail_interrupted_allocs(c, wall_ms());
      },
      ignore_result());
  // A node actor that stops (its client went away) publishes nothing more.
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& nodes = self->state.node_actors;
    for (auto it = nodes.begin(); it != nodes.end();) {
      if (it->second.address() != dm.source) {
        ++it;
        continue;
      }
      logging::info("leader", "node's client disconnected", {{"node", it->first}});
      it = nodes.erase(it);
    }
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
        // The watcher's view may be behind the catalog (a claim's alloc not
        // heard of yet): a taken claim whose alloc is live is not its to
        // release.  Answered with the volume as it is; the watcher drops
        // the work once it hears of the alloc (rescan).
        const auto& st = self->state;
        if (auto v = find_volume(st.cat, {req.msg.namespace_(), req.msg.volume_id()}))
          if (claim_alloc_is_live(*v, req.msg.alloc_id(), [&](const std::string& id) {
                const auto* a = find_alloc(st.cat, id);
                return a == nullptr ? std::optional<v1::AllocState>{}
                                    : std::optional<v1::AllocState>{a->state()};
              })) {
            logging::debug("leader", "the watcher asked to release a live alloc's claim; kept",
                           {{"volume", req.msg.volume_id()}, {"alloc", req.msg.alloc_id()}});
            return wrap(std::move(*v));
          }
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
      [self](apply_atom, const committed_batch& batch) { apply_batch(self, batch); },
      [self](tick_atom) {
        self->state.stats->mailbox("leader", self->mailbox().size());
        leader_tick(self);
        self->delayed_send(self, std::chrono::milliseconds(500), tick_atom::value);
      },
      [self](node_atom, const std::string& node_id, const std::string& secret, int64_t kill_ms,
             node_actor node) -> caf::result<uint64_t, int64_t, uint64_t> {
        const auto& o = self->state.options;
        if (auto f = check_client_fence(node_id, kill_ms, o.node_lease.count(),
                                        o.node_down_timeout.count(), o.fence)) {
          // Not heard: no lease, and the node is marked down as if silent.
          logging::warn("leader", "a client's --kill-timeout is refused",
                        {{"node", node_id}, {"kill_timeout_ms", std::to_string(kill_ms)}});
          return to_error(*f);
        }
        auto rp = self->make_response_promise<uint64_t, int64_t, uint64_t>();
        if (!self->state.options.acl) {
          if (!heartbeat(self, node_id, std::move(node),
                         [self, node_id, rp] { grant_lease(self, node_id, rp); }))
            rp.deliver(self->state.options.term, int64_t{0}, self->state.cat.applied_index);
          return rp;
        }
        // ACLs: only the client bound to this node id serves it; another
        // is ignored, so no CSI call and no volume secret goes to it.
        with_node_identity(self, node_id, secret,
                           [self, node_id, node, rp](std::optional<failure> f) mutable {
                             if (f) {
                               rp.deliver(to_error(*f));
                               return;
                             }
                             if (!heartbeat(self, node_id, std::move(node), [self, node_id, rp] {
                                   grant_lease(self, node_id, rp);
                                 }))
                               rp.deliver(self->state.options.term, int64_t{0},
                                          self->state.cat.applied_index);
                           });
        return rp;
      },
  };
}

}  // namespace berth
