// The leader actor: the leader's alloc flows: run (claim each volume, then start it), stop, exit
// reports.
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <random>

#include "actors/clock.hpp"
#include "messages/failure.hpp"
#include "log/log.hpp"
#include "actors/leader_flows.hpp"
#include "control/allocs.hpp"
#include "control/entries.hpp"
#include "control/nodes.hpp"
#include "control/placement.hpp"
#include "control/release.hpp"
#include "control/views.hpp"

namespace berth::leader_flows {

// --- allocs -----------------------------------------------------------------------

// The answer to a run: to the shell's request, or to the group run that
// ran it as one of its members.
using reply_fn = std::function<void(v1::Response)>;

// (Static, beside leader_flows' deliver for a response promise: in an
// anonymous namespace they would hide those.)
static void deliver(const reply_fn& reply, const failure& f) { reply(error_response(f)); }
static void deliver(const reply_fn& reply, v1::Response r) { reply(std::move(r)); }

std::string new_alloc_id() {
  static std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id;
  auto x = rng();
  for (int i = 0; i < 12; ++i, x >>= 4) id += hex[x & 15];
  return id;
}

void set_alloc_state(const self_ptr& self, const std::string& id, v1::AllocState to,
                     std::string why, int32_t exit_code, then_fn then,
                     std::optional<v1::Alloc> fallback) {
  write(
      self,
      [id, to, why, exit_code,
       fallback](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        const auto* a = find_alloc(c, id);
        if (a == nullptr && !fallback)
          return failure{errc::not_found, "alloc " + quote_name(id) + " does not exist"};
        const auto& base = a != nullptr ? *a : *fallback;
        if (a != nullptr && !alloc_may_become(a->state(), to))
          return failure{errc::refused, "alloc " + quote_name(id) + " is " +
                                            std::string(name_of(a->state())) + " already"};
        return std::vector<v1::Change>{
            upsert_change(alloc_in_state(base, to, why, wall_ms(), exit_code))};
      },
      std::move(then));
}

// Calls `done(freed)` once every claim of the alloc is freed, or with false
// once options.release_wait passed.
void when_released(const self_ptr& self, const std::string& id, std::function<void(bool)> done) {
  when(
      self, [self, id] { return claims_freed(self->state.cat, id); }, std::move(done),
      steady_ms() + self->state.options.release_wait.count());
}

void fail_alloc(const self_ptr& self, v1::Alloc a, std::string why, reply_fn rp) {
  auto id = a.id();
  set_alloc_state(
      self, id, v1::ALLOC_FAILED, why, 0,
      [self, id, why, rp](std::optional<failure> f) mutable {
        if (f && f->code != errc::refused) {
          deliver(rp, *f);
          return;
        }
        when_released(self, id, [self, id, why, rp](bool freed) mutable {
          auto r = error_response(failure{
              errc::refused, "alloc " + quote_name(id) + " failed: " + why +
                                 (freed ? "; every claim it took was released"
                                        : "; the claims it took are still being released (see "
                                          "berth alloc status " +
                                              id + ")")});
          if (const auto* a = find_alloc(self->state.cat, id)) *r.add_allocs() = *a;
          deliver(rp, std::move(r));
        });
      },
      a);
}

// alloc run, once its volumes are published: commits it running, then has
// the node run it.
void start_alloc(const self_ptr& self, std::shared_ptr<v1::Alloc> a, reply_fn rp) {
  auto node = node_of(self, a->node_id());
  if (!node) {
    fail_alloc(self, *a, "the berth client of node " + quote_name(a->node_id()) + " disconnected", rp);
    return;
  }
  auto why = a->command().empty() ? "volumes published; no command (stop it with berth alloc stop)"
                                  : "volumes published; command started";
  write(
      self,
      [a, why](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        const auto* known = find_alloc(c, a->id());
        if (known == nullptr || !alloc_may_become(known->state(), v1::ALLOC_RUNNING))
          return failure{errc::refused,
                         "alloc " + quote_name(a->id()) + " is " +
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
        // Every lookup after a hop finds the alloc again, or learns that it
        // is gone: entries applied meanwhile may have ended or deleted it
        // (a command-less alloc whose last claim was released is deleted).
        auto id = a->id();
        const auto* committed = find_alloc(self->state.cat, id);
        if (committed == nullptr) {
          deliver(rp, failure{errc::refused, "alloc " + quote_name(id) +
                                                 " was removed while starting (its claims were "
                                                 "released meanwhile); run it again"});
          return;
        }
        auto running = *committed;
        self->request(node, std::chrono::seconds(60), run_atom::value, wrap(running))
            .then(
                [self, id, running, rp](bool) mutable {
                  const auto* now = find_alloc(self->state.cat, id);
                  const auto& a = now != nullptr ? *now : running;
                  std::string text =
                      "alloc " + quote_name(id) + " running on node " + quote_name(a.node_id());
                  for (const auto& v : a.volumes())
                    text += "\n  " + volume_env_name(v.name()) + "=" + v.published_path();
                  if (now == nullptr)
                    text += "\n(it was removed since: its last claim was released meanwhile)";
                  deliver(rp, alloc_response(a, text));
                },
                [self, running, rp](caf::error& e) mutable {
                  fail_alloc(self, running, "the node could not start it: " + to_failure(e).message,
                             rp);
                });
      });
}

// alloc run: claims the volumes one after the other (each published on the
// node); the first claim commits together with the pending alloc.
void claim_alloc_volumes(const self_ptr& self, std::shared_ptr<v1::Alloc> a, int next,
                         reply_fn rp, bool allow_abnormal) {
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
  c.set_allow_abnormal(allow_abnormal);
  if (next == 0) *c.mutable_alloc() = *a;
  claim_volume(
      self, std::move(c),
      [self, a, next, rp, allow_abnormal](std::optional<failure> f, v1::ClaimResult r) mutable {
        auto vol = a->volumes(next).volume_id();
        if (f) {
          fail_alloc(self, *a, "claim of volume " + quote_name(vol) + ": " + f->message, rp);
          return;
        }
        a->mutable_volumes(next)->set_published_path(r.published_path());
        claim_alloc_volumes(self, a, next + 1, rp, allow_abnormal);
      });
}

// alloc run sent again with the same id, volumes and command (its answer
// was lost): the answer is the alloc the first request made, once it is
// no longer pending; nothing runs twice.
void answer_repeated_run(const self_ptr& self, const std::string& id, reply_fn rp) {
  auto settled = [self, id] {
    const auto* a = find_alloc(self->state.cat, id);
    return a != nullptr && a->state() != v1::ALLOC_PENDING;
  };
  when(
      self, settled,
      [self, id, rp](bool ready) mutable {
        if (!ready) {
          deliver(rp, failure{errc::unavailable,
                              "alloc " + quote_name(id) +
                                  " is still being started by an earlier request; check with: "
                                  "berth alloc status " + id});
          return;
        }
        self->state.starting_allocs.erase(id);
        const auto& a = *find_alloc(self->state.cat, id);
        // A run that failed answers its failure again, never success.
        if (auto failed = repeated_run_failure(a)) {
          auto r = error_response(*failed);
          *r.add_allocs() = a;
          deliver(rp, std::move(r));
          return;
        }
        deliver(rp, alloc_response(a, "alloc " + quote_name(id) +
                                          " exists already: this request was applied before "
                                          "(nothing was done again); it is " +
                                          std::string(name_of(a.state()))));
      },
      steady_ms() + 60'000);
}

namespace {

// The placement as the shell shows it (Response.placement).
void add_placement(v1::Response& r, const placement& p) {
  for (const auto& fit : p.nodes) {
    auto* v = r.add_placement();
    v->set_node_id(fit.node_id);
    v->set_reason(fit.reason);
    v->set_allocs(fit.allocs);
    v->set_chosen(p.chosen && *p.chosen == fit.node_id);
  }
}

// An alloc run (its node set) admitted: claims its volumes, then runs it.
void run_on_node(const self_ptr& self, v1::Alloc a, bool allow_abnormal, reply_fn rp) {
  auto& st = self->state;
  if (auto f = admit_alloc_run(st.cat, a, static_cast<bool>(node_of(self, a.node_id())))) {
    deliver(rp, *f);
    return;
  }
  if (auto it = st.starting_allocs.find(a.id()); it != st.starting_allocs.end()) {
    deliver(rp, failure{errc::refused, "alloc " + quote_name(a.id()) +
                                           " is being started with another node, volumes or "
                                           "command; run with another id"});
    return;
  }
  st.starting_allocs.emplace(a.id(), a);
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
  claim_alloc_volumes(self, shared, 0, rp, allow_abnormal);
}

// alloc run without --node (control/placement): runs the alloc on the node
// placement chose, or answers why none fits; --explain answers the table.
// The first claim commits the alloc with its node, and the volume actor
// checks the claim again in turn with every other claim of the volume, so
// two runs placed at once never both take the last writer slot: the
// second's claim is refused and its alloc fails with why.
void place_and_run(const self_ptr& self, v1::Alloc a, const v1::AllocRunRequest& req,
                   reply_fn rp, bool waited = false) {
  auto& st = self->state;
  if (auto f = admit_alloc_request(st.cat, a)) {
    deliver(rp, *f);
    return;
  }
  placement_facts facts;
  facts.connected = [self](const std::string& n) { return static_cast<bool>(node_of(self, n)); };
  facts.marking_down = [self](const std::string& n) {
    return self->state.marking_down.count(n) > 0;
  };
  facts.claiming = &st.claiming;
  facts.starting = &st.starting_allocs;
  facts.now_ms = wall_ms();
  facts.allow_abnormal = req.allow_abnormal();
  auto p = place_alloc(st.cat, a, facts);
  if (req.explain()) {
    st.stats->placement("explained");
    v1::Response r;
    add_placement(r, p);
    r.set_message(p.chosen ? "alloc " + quote_name(a.id()) + " would run on node " +
                                 quote_name(*p.chosen) + "; nothing was run"
                           : "no node can run alloc " + quote_name(a.id()) +
                                 " now; nothing was run");
    deliver(rp, std::move(r));
    return;
  }
  if (!p.chosen && !waited) {
    // Its volumes' holders that ended are being released: placed again
    // once they are freed (bounded), not refused meanwhile (issue 59).
    auto releasing = releases_in_placements_way(st.cat, a);
    if (!releasing.empty()) {
      logging::info("leader", "a placement waits for the releases of ended allocs' claims",
                    {{"alloc", a.id()}, {"waits_for", releasing[0].second}});
      when(
          self,
          [self, releasing] {
            for (const auto& [key, id] : releasing)
              if (auto v = find_volume(self->state.cat, key); v && find_claim(*v, id)) return false;
            return true;
          },
          [self, a, req, rp](bool) { place_and_run(self, a, req, rp, true); },
          steady_ms() + st.options.claim_release_wait.count());
      return;
    }
  }
  if (!p.chosen) {
    st.stats->placement("none");
    logging::info("leader", "no node can run an alloc",
                  {{"alloc", a.id()}, {"nodes", static_cast<uint64_t>(p.nodes.size())}});
    auto r = error_response(no_node_fits(a, p));
    add_placement(r, p);
    deliver(rp, std::move(r));
    return;
  }
  st.stats->placement("placed");
  logging::info("leader", "alloc placed", {{"alloc", a.id()}, {"node", *p.chosen}});
  a.set_node_id(*p.chosen);
  a.set_placed(true);
  run_on_node(self, std::move(a), req.allow_abnormal(), rp);
}

// One alloc run (alone, or a member of a group).
void run_one(const self_ptr& self, const v1::AllocRunRequest& req, reply_fn rp) {
  auto a = pending_alloc(req, req.id().empty() ? new_alloc_id() : req.id(), wall_ms());
  auto& st = self->state;
  if (req.explain()) {
    if (!a.node_id().empty()) {
      deliver(rp, failure{errc::invalid, "alloc run --explain places the alloc: leave out --node"});
      return;
    }
    place_and_run(self, std::move(a), req, rp);
    return;
  }
  const v1::Alloc* earlier = find_alloc(st.cat, a.id());
  if (earlier == nullptr)
    if (auto it = st.starting_allocs.find(a.id()); it != st.starting_allocs.end())
      earlier = &it->second;
  if (earlier != nullptr && same_alloc_run(*earlier, a)) {
    answer_repeated_run(self, a.id(), rp);
    return;
  }
  if (a.node_id().empty()) {
    place_and_run(self, std::move(a), req, rp);
    return;
  }
  run_on_node(self, std::move(a), req.allow_abnormal(), rp);
}

// alloc run --count N --group NAME: the members one after the other, each
// placed (or pinned) and run as alone, so each placement sees the members
// before it (a group spreads over the nodes).  A member that fails does
// not stop the others; the answer lists every member and is an error when
// one failed.  Sent again, each member answers as a repeated run does.
void run_members(const self_ptr& self, v1::AllocRunRequest req, int next,
                 std::shared_ptr<std::vector<v1::Response>> answers, response_promise rp) {
  if (next == static_cast<int>(req.count())) {
    deliver(rp, group_outcome(req, *answers));
    return;
  }
  auto member = group_member(req, next);
  run_one(self, member, [self, req, next, answers, rp](v1::Response r) mutable {
    answers->push_back(std::move(r));
    run_members(self, std::move(req), next + 1, answers, rp);
  });
}

}  // namespace

void drive_replacements(const self_ptr& self) {
  auto& st = self->state;
  auto now = steady_ms();
  for (auto it = st.replacing.begin(); it != st.replacing.end();) {
    const auto id = it->first;
    auto& d = it->second;
    if (d.in_flight || d.due_ms > now) {
      ++it;
      continue;
    }
    auto r = replace_lost_member(st.cat, id);
    if (r.what == replacement::drop) {
      if (!r.why.empty())
        logging::warn("leader", "a lost alloc is not replaced", {{"alloc", id}, {"reason", r.why}});
      it = st.replacing.erase(it);
      continue;
    }
    ++it;
    if (r.what == replacement::wait || st.starting_allocs.count(r.request.id())) continue;
    d.in_flight = true;
    auto next = r.request.id();
    logging::info("leader", "replacing a lost alloc", {{"alloc", id}, {"replacement", next}});
    run_one(self, r.request, [self, id, next](v1::Response resp) {
      auto& st = self->state;
      auto found = st.replacing.find(id);
      if (found == st.replacing.end()) return;
      auto& d = found->second;
      d.in_flight = false;
      if (!resp.has_error()) {
        d.attempts = 0;
        const auto* a = find_alloc(st.cat, next);
        logging::info("leader", "lost alloc replaced",
                      {{"alloc", id},
                       {"replacement", next},
                       {"node", a != nullptr ? a->node_id() : std::string("?")}});
        return;  // dropped on the next tick: the replacement exists
      }
      // Committed and failed (a claim refused, the node could not start
      // it): the replacement is a failed alloc, not replaced again.  Not
      // committed (no node fits now, the pinned node is away): tried again.
      if (find_alloc(st.cat, next) != nullptr) {
        logging::warn("leader", "the replacement of a lost alloc failed",
                      {{"alloc", id}, {"replacement", next}, {"error", resp.error().message()}});
        return;
      }
      ++d.attempts;
      d.due_ms = steady_ms() + std::min<int64_t>(30'000, int64_t{1000} << std::min(d.attempts, 5u));
      if (d.last_error != resp.error().message()) {
        d.last_error = resp.error().message();
        logging::warn("leader", "a lost alloc cannot be replaced now; trying again",
                      {{"alloc", id}, {"replacement", next}, {"error", d.last_error}});
      }
    });
  }
}

void alloc_run(const self_ptr& self, const v1::AllocRunRequest& shell_req, response_promise rp) {
  auto asked = shell_req;
  asked.clear_replaces();  // the leader's own, for a lost member's replacement
  if (is_group_run(asked)) {
    auto req = asked;
    if (req.count() == 0 && !req.group().empty()) req.set_count(1);  // a group of one
    if (auto f = admit_group_run(self->state.cat, req)) {
      deliver(rp, *f);
      return;
    }
    if (req.explain()) {
      deliver(rp, failure{errc::invalid, "alloc run --explain places one alloc: leave out "
                                         "--count and --group"});
      return;
    }
    run_members(self, req, 0, std::make_shared<std::vector<v1::Response>>(), rp);
    return;
  }
  run_one(self, asked, [rp](v1::Response r) mutable { rp.deliver(wrap(std::move(r))); });
}

void alloc_stop(const self_ptr& self, const std::string& id, response_promise rp) {
  // A claim of the alloc being made commits the alloc record with it: the
  // stop goes after it, so that neither undoes the other and the answer
  // counts that claim too.
  if (self->state.claims_in_flight.count(id)) {
    when(
        self, [self, id] { return self->state.claims_in_flight.count(id) == 0; },
        [self, id, rp](bool) { alloc_stop(self, id, rp); });
    return;
  }
  const auto* known = find_alloc(self->state.cat, id);
  if (known == nullptr) {
    deliver(rp,
            failure{errc::not_found, "alloc " + quote_name(id) +
                                         " does not exist (list allocs with: berth alloc status)"});
    return;
  }
  auto answer = [self, id, rp](std::string what) mutable {
    when_released(self, id, [self, id, what, rp](bool freed) mutable {
      const auto* a = find_alloc(self->state.cat, id);
      if (a == nullptr) {
        deliver(rp, failure{errc::not_found, "alloc " + quote_name(id) + " vanished"});
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
  // A lost member being replaced: the stop goes after its replacement
  // was committed or given up, and names it.
  if (auto r = self->state.replacing.find(id);
      r != self->state.replacing.end() && r->second.in_flight) {
    when(
        self,
        [self, id] {
          auto r = self->state.replacing.find(id);
          return r == self->state.replacing.end() || !r->second.in_flight;
        },
        [self, id, rp](bool) { alloc_stop(self, id, rp); });
    return;
  }
  if (alloc_terminal(known->state())) {
    auto already = "alloc " + quote_name(id) + " is already " + std::string(name_of(known->state()));
    if (alloc_kept_lost(self->state.cat, id, wall_ms())) {
      // A lost member not replaced yet: kept lost, never replaced.
      write(
          self,
          [id](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
            auto kept = alloc_kept_lost(c, id, wall_ms());
            if (!kept) return std::vector<v1::Change>{};
            return std::vector<v1::Change>{upsert_change(std::move(*kept))};
          },
          [self, id, already, answer, rp](std::optional<failure> f) mutable {
            if (f) {
              deliver(rp, *f);
              return;
            }
            self->state.replacing.erase(id);
            answer(already + "; it will not be replaced");
          });
      return;
    }
    // Complete while claims are still held (stopped here while its client
    // was away, or its stop at the reconnect failed): the release waits for
    // the client to confirm the stop, so ask it now rather than answer
    // "already complete" without reaching the node (issue 59).
    if (stop_awaits_client(self->state.cat, *known)) {
      if (auto node = node_of(self, known->node_id())) {
        auto node_id = known->node_id();
        self->request(node, std::chrono::seconds(60), stop_atom::value, id, false)
            .then(
                [self, node_id, id, already, answer](int32_t) mutable {
                  self->state.stops_confirmed[node_id].insert(id);
                  answer(already + "; its client confirmed the stop");
                },
                [rp, id, node_id](caf::error& e) mutable {
                  deliver(rp, failure{errc::unavailable,
                                      "alloc " + quote_name(id) +
                                          " is complete but the client of node " +
                                          quote_name(node_id) + " did not confirm its stop (" +
                                          to_failure(e).message +
                                          "); its claims stay held until it does; retry"});
                });
        return;
      }
    }
    if (known->state() == v1::ALLOC_LOST && !known->group().empty() &&
        self->state.cat.allocs.count(replacement_id(id)))
      already += "; it was replaced by " + quote_name(replacement_id(id)) +
                 " (stop that with: berth alloc stop " + replacement_id(id) + ")";
    answer(already);
    return;
  }
  auto node_id = known->node_id();
  auto node = node_of(self, node_id);
  if (!node) {
    // The client is not connected: the alloc is stopped here; the client
    // stops its command when it reconnects, and the claims are released
    // then, when the node is marked down, or by berth volume detach.
    set_alloc_state(
        self, id, v1::ALLOC_COMPLETE,
        "stopped by the operator while the client of node " + quote_name(node_id) +
            " was not connected",
        0, [self, id, node_id, rp](std::optional<failure> f) mutable {
          if (f) {
            deliver(rp, *f);
            return;
          }
          std::string text = "alloc " + quote_name(id) + " stopped; the client of node " +
                             quote_name(node_id) +
                             " is not connected, so its claims are released once it "
                             "reconnects, once the node is marked down, or now with: "
                             "berth volume detach VOLUME " +
                             node_id;
          const auto* a = find_alloc(self->state.cat, id);
          if (a == nullptr) {  // removed meanwhile (its last claim released)
            v1::Response r;
            r.set_message("alloc " + quote_name(id) + " stopped and since removed");
            deliver(rp, std::move(r));
            return;
          }
          deliver(rp, alloc_response(*a, text));
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
                              answer("alloc " + quote_name(id) + " stopped by the operator");
                            });
          },
          [rp, id](caf::error& e) mutable {
            deliver(rp, failure{errc::unavailable, "alloc " + quote_name(id) +
                                                       ": the node did not stop it: " +
                                                       to_failure(e).message + "; retry"});
          });
}

void alloc_update(const self_ptr& self, const v1::AllocUpdate& u, response_promise rp) {
  auto result = std::make_shared<v1::Response>();
  write(
      self,
      [u, result](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        auto next = alloc_after_update(c, u, wall_ms());
        if (next.error) return *next.error;
        if (!next.upsert) {
          if (const auto* a = find_alloc(c, u.id())) *result = alloc_response(*a, "unchanged");
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
        const auto* a = find_alloc(self->state.cat, u.id());
        if (a == nullptr) {  // removed by an entry applied meanwhile
          v1::Response r;
          r.set_message("alloc " + quote_name(u.id()) + " is gone (removed meanwhile)");
          deliver(rp, std::move(r));
          return;
        }
        deliver(rp, alloc_response(
                        *a, "alloc " + quote_name(a->id()) + " is " + std::string(name_of(a->state()))));
      });
}

}  // namespace berth::leader_flows
