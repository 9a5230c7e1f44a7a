#include "actors/node.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "actors/clock.hpp"
#include "actors/log_monitor.hpp"
#include "actors/node_plugins.hpp"
#include "log/log.hpp"
#include "persistence/crashpoint.hpp"
#include "tls/caf_tls.hpp"

namespace berth {

namespace {

using self_ptr = node_actor::stateful_pointer<node_state>;
template <class T>
using promise = caf::typed_response_promise<T>;
using result_promise = promise<pb<v1::NodeVolumeResult>>;

// A client.db problem nobody waits for an answer on (polls, heartbeats):
// printed once, so an operator sees it without a line every poll.
void report_problem(node_state& st, const failure& f) {
  if (st.last_problem == f.message) return;
  st.last_problem = f.message;
  std::fprintf(stderr, "berthd: node '%s': %s\n", st.config.node_id.c_str(), f.message.c_str());
}

void start_polling(self_ptr self);

// client.db's group commit (issue 28).  A publication's record is written
// before its CSI call is sent and again before the answer (and forgotten
// before an unpublish is answered); each was one transaction and one fsync
// on this actor's thread.  Now a write is applied to the table at once (the
// decisions of the messages that follow see it, as before), queued, and
// written with every other write queued before the flush this sends to the
// node reaches it: one transaction, one fsync.  What needs it durable (the
// call, the answer) is `then`, run only after the commit, with its failure
// (none of the batch is on disk then, and the table is as it was before
// it).  Calls the node is asked for later wait for the writes queued before
// them (after_mount_writes), so the plugin gets them in the order asked.
void write_mount(self_ptr self, mount_write w,
                 std::function<void(const std::optional<failure>&)> then) {
  auto& st = self->state;
  apply_mount_write(st.mounts, w);
  if (st.mount_writes.empty()) self->send(self, flush_atom::value);
  st.mount_writes.emplace_back(std::move(w), std::move(then));
}

// Runs `then` once every mount write queued now is durable (at once when
// none is waiting): an answer read from the table must not get ahead of it.
void after_mount_writes(self_ptr self, std::function<void()> then) {
  if (self->state.mount_writes.empty()) return then();
  self->state.mount_writes.emplace_back(std::nullopt,
                                        [then](const std::optional<failure>&) { then(); });
}

void flush_mount_writes(self_ptr self) {
  auto& st = self->state;
  auto batch = std::move(st.mount_writes);
  st.mount_writes.clear();
  std::vector<mount_write> writes;
  for (const auto& [w, then] : batch)
    if (w) writes.push_back(*w);
  auto start = std::chrono::steady_clock::now();  // for the metric only
  auto f = commit_mount_writes(*st.store, st.mounts, writes);
  if (!f && !writes.empty())
    st.stats->client_db_written(
        writes.size(),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  for (auto& [w, then] : batch) then(f);
}

// Runs a job on a plugin's connection (see run_csi) and hands its outcome
// to on_ok, its error to the promise.
// Who sent a step: the source of its response promise.  Not
// current_sender(): making the promise takes the sender out of the
// message (CAF 0.17), so every step handler, which makes its promise
// first, noted nobody, the pings of every step's helper were answered
// "never arrived", and every CSI step that took over two pings (10 s: a
// slow NodeStage, a cloud ControllerPublish) failed and was retried or
// unwound as lost.
template <class T>
caf::actor_addr sender_of(promise<T>& rp) {
  return caf::actor_cast<caf::actor_addr>(static_cast<caf::response_promise&>(rp).source());
}

// Notes that `sender` got a CSI step here (see node_state::step_senders):
// the pings of its helper (actors/node_call.hpp) are answered yes.
void note_step_sender(self_ptr self, const caf::actor_addr& sender) {
  auto& st = self->state;
  if (!sender || !st.step_senders.insert(sender).second) return;
  st.step_sender_order.push_back(sender);
  if (st.step_sender_order.size() > 10000) {
    st.step_senders.erase(st.step_sender_order.front());
    st.step_sender_order.pop_front();
  }
}

// The job of a step whose sender asked to confirm its start
// (NodeVolumeRequest.confirm_start): the plugin's connection asks `sender`
// right before the call is sent (actors/node_call.hpp).
std::function<csi_job(bool)> confirmed_by(std::function<csi_job(bool)> make_job,
                                          bool confirm_start, const caf::actor_addr& sender) {
  if (!confirm_start) return make_job;
  return [make_job = std::move(make_job), sender](bool stages) {
    auto job = make_job(stages);
    job.confirm = sender;
    return job;
  };
}

template <class Promise, class OnOk>
void run(self_ptr self, const std::string& plugin_id, std::function<csi_job(bool)> make_job,
         Promise rp, OnOk on_ok, bool confirm_start) {
  auto sender = sender_of(rp);
  note_step_sender(self, sender);
  make_job = confirmed_by(std::move(make_job), confirm_start, sender);
  auto done = [rp, on_ok](csi_outcome& out) mutable {
    if (out.error)
      rp.deliver(to_error(*out.error));
    else
      on_ok(rp, out);
  };
  auto fail = [rp](caf::error e) mutable { rp.deliver(std::move(e)); };
  if (run_csi(self, plugin_id, std::move(make_job), done, fail)) start_polling(self);
}

// Which of a volume's steps reached this node, and whether its request
// carried the volume's secrets (how many keys: never their names or
// values), so that an operator (and integration.secrets) can see that only
// the calls that send them to the plugin bring them here.
void log_request(const char* step, const v1::NodeVolumeRequest& r) {
  logging::debug("node", "volume step received",
                 {{"step", step},
                  {"namespace", r.volume().namespace_()},
                  {"volume", r.volume().id()},
                  {"alloc", r.alloc_id()},
                  {"secrets", r.volume().secrets_size()}});
}

// The promise of a NodeUnpublish request: forgets that it is in flight
// (node_state::unpublishing) when it is answered, whichever way.
struct unpublish_promise {
  self_ptr self;
  mount_key key;
  result_promise rp;
  template <class T>
  void deliver(T&& x) {
    self->state.unpublishing.erase(key);
    rp.deliver(std::forward<T>(x));
  }
};

caf::actor_addr sender_of(unpublish_promise& p) {
  return sender_of(p.rp);
}

void deliver_result(result_promise& rp, csi_outcome& out) {
  v1::NodeVolumeResult r;
  r.set_target_path(out.target_path);
  for (auto& [k, v] : out.publish_context) (*r.mutable_publish_context())[k] = v;
  r.set_capacity_bytes(out.capacity_bytes);
  r.set_node_expansion_required(out.node_expansion_required);
  r.set_expanded(out.expanded);
  rp.deliver(wrap(std::move(r)));
}

// After an unpublish that left the staging to other publications: when
// none uses it now (their unpublishes ran first), this one is the last out
// and unstages it before `then` (which forgets the record and answers); a
// failed unstage keeps the record, so that the retry unstages.
void unstage_if_last(self_ptr self, const mount_key& key, const v1::NodeVolumeRequest& r,
                     const claim_paths& paths, bool unstaged, uint64_t leader_term,
                     const caf::actor_addr& sender, std::function<void(csi_outcome&)> then) {
  auto& st = self->state;
  csi_outcome none;
  if (paths.staging.empty() ||
      !unstage_last_out(unstaged, staging_in_use(st.mounts, paths.staging, key))) {
    then(none);
    return;
  }
  auto make = [r, paths, leader_term, at = where(st.config.node_id, r.plugin_id())](bool stages) {
    return csi_job{[=](csi::client& c) { return unstage_claim(c, r, paths, stages, at); },
                   call_kind::node, r.volume().external_id(), leader_term};
  };
  if (run_csi(self, r.plugin_id(), confirmed_by(make, r.confirm_start(), sender), then,
              [then](caf::error e) {
        csi_outcome out;
        out.error = to_failure(e);
        then(out);
      }))
    start_polling(self);
}

// The lease as the allocs' supervisors read it (control/lease: the guard
// that outlives the agent): written whenever the lease changes, through a
// temporary file and a rename, so a supervisor reads the old or the new
// one.  Not fsynced: it means something only within this boot (a host
// crash ends every command with it), and a supervisor that finds no file
// or a torn one fences.  A file that cannot be written leaves the old end,
// so the supervisors stop their commands then: the safe side.
void write_lease_file(node_state& st) {
  int64_t until = st.lease.length_ms > 0 ? st.lease.until_ms : 0;
  if (until == st.lease_file_until_ms) return;
  auto tmp = st.config.lease_file + ".tmp";
  auto text = lease_file_text(st.boot_id, until);
  bool ok = false;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ok = ::close(fd) == 0 && ok;
  }
  if (ok && std::rename(tmp.c_str(), st.config.lease_file.c_str()) == 0) {
    st.lease_file_until_ms = until;
    return;
  }
  report_problem(st, failure{errc::internal, "node '" + st.config.node_id +
                                                 "' cannot write its lease file " +
                                                 st.config.lease_file + ": " +
                                                 std::strerror(errno) +
                                                 " (its allocs' supervisors fence at the lease "
                                                 "they last read; check the data directory)"});
}

// The lease now held: the guard thread and the supervisors' file follow it.
void hold_lease(node_state& st, const lease& l) {
  st.lease = l;
  st.guard->set_lease(l.length_ms > 0 ? l.until_ms : 0);
  write_lease_file(st);
}

// Registers with the server again (a new leader learns this node) and
// raises the fence to the newest term the server knows a leader in: a
// deposed leader is then refused even before the new one calls here.  An
// older term (a server behind the others) changes nothing.
//
// The answer also carries the lease (control/lease.hpp), counted from when
// this heartbeat was sent; none when no leader confirmed it.  After two
// heartbeats in a row without a lease, a client drops its server and tries
// the next one (that server may be cut off from the leader).
void heartbeat(self_ptr self) {
  auto& st = self->state;
  if (!st.api) return;
  auto sent = steady_ms();
  // An answer is useful until the lease it would renew has run out.
  auto timeout = st.lease.length_ms > 0 ? std::max<int64_t>(st.lease.length_ms, 1000) : 10000;
  auto missed = [self] {
    auto& st = self->state;
    if (++st.missed_heartbeats < 2 || st.config.servers.empty() || !st.api) return;
    logging::warn("node", "no lease through this server; trying the next",
                  {{"node", st.config.node_id}});
    self->demonitor(st.api.address());
    st.api = nullptr;
    st.missed_heartbeats = 0;
  };
  self->request(st.api, std::chrono::milliseconds(timeout), node_atom::value, st.config.node_id,
                st.config.node_secret, static_cast<int64_t>(st.config.kill_timeout.count()),
                caf::actor_cast<node_actor>(self))
      .then(
          [self, sent, missed](uint64_t term, int64_t lease_ms, uint64_t index) {
            auto& st = self->state;
            if (auto f = st.fence.heard(*st.store, term)) report_problem(st, *f);
            if (lease_ms <= 0) {
              missed();
              return;
            }
            st.missed_heartbeats = 0;
            bool first = st.lease.length_ms == 0;
            hold_lease(st, renew(st.lease, sent, lease_ms));
            if (!expired(st.lease, steady_ms()))
              st.publish_floor->store(floor_after_renewal(st.publish_floor->load(), index, first));
            // The publishes that waited for this first lease: asked again.
            for (auto& w : std::exchange(st.awaiting_lease, {}))
              w.rp.delegate(caf::actor_cast<node_actor>(self), publish_atom::value,
                            std::move(w.req));
            // Kept for a restart (control/lease: lease_at_start,
            // lease_record_due); an older record only ends the lease sooner.
            auto renewed_wall = wall_ms() - (steady_ms() - sent);
            if (!lease_record_due(st.lease_recorded_wall_ms, renewed_wall, lease_ms)) return;
            auto f = st.store->set_meta("lease_ms", lease_ms);
            if (!f) f = st.store->set_meta("lease_renewed_wall_ms", renewed_wall);
            if (f)
              report_problem(st, store_failure(*st.store, "record its lease", *f));
            else
              st.lease_recorded_wall_ms = renewed_wall;
          },
          [self, missed](caf::error& e) {
            // The servers refuse this client's configuration (its
            // --kill-timeout, control/lease check_client_fence): it exits
            // with their message instead of running on without a lease.
            if (auto f = to_failure(e); f.code == errc::invalid) {
              report_problem(self->state, f);
              self->quit(std::move(e));
              return;
            }
            missed();
          });
}

// Publishes that waited for the first lease longer than a heartbeat's
// answer may take are refused: the leader's claim fails with a reason
// instead of waiting out its step.
void refuse_unleased_publishes(node_state& st) {
  auto now = steady_ms();
  auto& waiting = st.awaiting_lease;
  auto late = std::stable_partition(waiting.begin(), waiting.end(), [&](const auto& w) {
    return !first_lease_wait_over(w.since_ms, now);
  });
  for (auto it = late; it != waiting.end(); ++it)
    it->rp.deliver(make_error(errc::unavailable,
                              "node '" + st.config.node_id +
                                  "' has no lease from a leader yet (its heartbeats are not "
                                  "confirmed) and publishes nothing until it has one; retry "
                                  "once the node reaches the servers"));
  waiting.erase(late, waiting.end());
}

// Client mode: connect to the next server of the list (asynchronously).
void connect_server(self_ptr self) {
  auto& st = self->state;
  if (st.api || st.connecting || st.config.servers.empty()) return;
  auto [host, port] = split_address(st.config.servers[st.next_server++ % st.config.servers.size()]);
  st.connecting = true;
  self->request(tls::connector(self->system()), std::chrono::seconds(5), caf::connect_atom::value,
                host, port)
      .then(
          [self](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            self->state.connecting = false;
            if (!ptr) return;
            self->state.api = caf::actor_cast<api_actor>(ptr);
            self->monitor(self->state.api);
            // A new server may front a new leader: report everything again.
            self->state.reported.clear();
            heartbeat(self);
          },
          [self](caf::error&) { self->state.connecting = false; });
}

// Reports an alloc's exit to the leader; forgets it once accepted.
void report_exit(self_ptr self, const std::string& id) {
  auto& st = self->state;
  auto it = st.allocs.find(id);
  if (it == st.allocs.end() || !st.api) return;
  auto report = exit_report(it->second, st.config.node_id, st.config.node_secret);
  if (st.fenced.count(id) || st.guard->signalled().count(id))
    report.mutable_alloc_update()->set_message(
        "stopped by its node's fence (no lease from a leader); " +
        report.alloc_update().message());
  self->request(st.api, std::chrono::seconds(30), api_atom::value, wrap(std::move(report)))
      .then(
          [self, id](pb<v1::Response>& r) {
            if (!exit_report_taken(r.msg.error().code())) return;  // again on the next poll
            auto& st = self->state;
            auto a = st.allocs.find(id);
            if (a == st.allocs.end() || !a->second.exited) return;
            if (auto f = forget_alloc(*st.store, st.allocs, id)) report_problem(st, *f);
          },
          [](caf::error&) {});
}

// Undoes publications from this client's own records (an ended alloc's,
// which the servers released while this node was away, or what the fence
// takes); `done` gets whether every unpublish (and unstage) succeeded.  A
// publication whose unmount is under way already counts as not done: the
// caller asks again (the leader on the next heartbeat, the fence on its
// next check).
void unmount_all(self_ptr self, std::vector<unmount> unmounts, std::function<void(bool)> done) {
  auto& st = self->state;
  if (unmounts.empty()) {
    done(true);
    return;
  }
  // A publish whose record is still being written sends its call once it
  // is: these unpublishes go after it, in the order the node was asked.
  if (!st.mount_writes.empty()) {
    after_mount_writes(self, [self, unmounts = std::move(unmounts), done]() mutable {
      unmount_all(self, std::move(unmounts), std::move(done));
    });
    return;
  }
  auto left = std::make_shared<size_t>(unmounts.size());
  auto ok = std::make_shared<bool>(true);
  auto one_done = [left, ok, done](bool fine) {
    *ok = *ok && fine;
    if (--*left == 0) done(*ok);
  };
  for (auto& u : unmounts) {
    if (!st.unmounting.insert(u.key).second) {
      one_done(false);
      continue;
    }
    claim_paths paths{u.record.staging_path, u.record.target_path};
    auto at = where(st.config.node_id, u.record.plugin_id);
    auto make = [r = u.record.request, paths, unstage = u.unstage, at](bool stages) {
      return csi_job{[=](csi::client& c) {
                       return unpublish_claim(c, r, paths, unstage && stages, at);
                     },
                     call_kind::node, r.volume().external_id()};
    };
    bool waits = run_csi(
        self, u.record.plugin_id, make,
        [self, key = u.key, r = u.record.request, paths, unstaged = u.unstage,
         one_done](csi_outcome& out) {
          auto& st = self->state;
          if (out.error) {
            st.unmounting.erase(key);
            report_problem(st, *out.error);
            one_done(false);
            return;
          }
          unstage_if_last(self, key, r, paths, unstaged, 0, caf::actor_addr{},
                          [self, key, one_done](csi_outcome& out) {
            auto& st = self->state;
            st.unmounting.erase(key);
            if (out.error) {
              report_problem(st, *out.error);
              one_done(false);
              return;
            }
            write_mount(self, mount_write{key, std::nullopt, {}},
                        [self, one_done](const std::optional<failure>& f) {
                          if (f) report_problem(self->state, *f);
                          one_done(!f);
                        });
          });
        },
        [self, key = u.key, one_done](caf::error) {
          self->state.unmounting.erase(key);
          one_done(false);
        });
    if (waits) start_polling(self);
  }
}

void unmount_released(self_ptr self, const std::string& alloc_id, std::function<void(bool)> done) {
  unmount_all(self, unmounts_of(self->state.mounts, alloc_id), std::move(done));
}

// Answers the stops whose command exited; SIGKILLs those past their grace.
void finish_stops(self_ptr self, int64_t now) {
  auto& st = self->state;
  for (auto it = st.stops.begin(); it != st.stops.end();) {
    auto id = it->first;
    if (!stop_answers_at_once(st.allocs, id, false, false)) {
      for (auto& s : it->second)
        if (s.kill_at_ms <= now) {
          signal_alloc(st.allocs, id, true);
          s.kill_at_ms = now + 1000;
        }
      ++it;
      continue;
    }
    auto code = exit_code_of(st.allocs, id);
    auto waiting = std::move(it->second);
    it = st.stops.erase(it);
    // Stopped by the servers: they record its end themselves.
    if (auto f = forget_alloc(*st.store, st.allocs, id)) report_problem(st, *f);
    bool unmount = false;
    for (auto& s : waiting) unmount |= s.unmount;
    if (!unmount) {
      for (auto& s : waiting) s.rp.deliver(code);
      continue;
    }
    // Answered once unmounted: the servers ask again until it is.
    unmount_released(self, id, [id, code, waiting](bool ok) mutable {
      for (auto& s : waiting)
        if (ok)
          s.rp.deliver(code);
        else
          s.rp.deliver(make_error(errc::unavailable, "alloc '" + id +
                                                         "' stopped, but not everything it had "
                                                         "published could be unmounted yet"));
    });
  }
}

// --- the self-fence (control/lease.hpp) -----------------------------------------

// The fence's publications: what plan_fence decides on.
std::vector<publication_fact> publication_facts(const mount_table& mounts) {
  std::vector<publication_fact> out;
  for (const auto& [key, m] : mounts)
    out.push_back({m.alloc_id, m.request.access_mode(), m.request.read_only()});
  return out;
}

// The allocs the lease guard stops when the lease runs out: those whose
// command runs and writes a single-writer volume here (plan_fence's stop).
std::map<std::string, int64_t> guarded_writers(const node_state& st) {
  std::set<std::string> running;
  for (const auto& [id, a] : st.allocs)
    if (command_running(a)) running.insert(id);
  std::map<std::string, int64_t> out;
  for (const auto& id : plan_fence(publication_facts(st.mounts), running).stop)
    out[id] = st.allocs.at(id).pid;
  return out;
}

void guard_writers(node_state& st) {
  st.guard->update([&st] { return guarded_writers(st); });
}

// How the supervisor of alloc `id` guards its command: fenced (the lease
// file) when it writes a single-writer volume here (plan_fence's stop).
alloc_supervision supervision_of(const node_state& st, const std::string& id) {
  alloc_supervision s;
  s.binary = st.config.alloc_supervisor;
  s.kill_timeout_ms = st.config.kill_timeout.count();
  if (plan_fence(publication_facts(st.mounts), {id}).stop.count(id))
    s.lease_file = st.config.lease_file;
  return s;
}

// Stops an alloc on this node's own account (recorded first, so a restart
// finishes it): SIGTERM now, SIGKILL after the kill timeout (in poll).
void fence_alloc(self_ptr self, const std::string& id) {
  auto& st = self->state;
  // The writer first (the lease guard may have signalled it already): the
  // record below waits for client.db, and a restart fences again anyway
  // while its lease is out.
  if (!st.fence_kill_at.count(id)) {
    signal_alloc(st.allocs, id, false);
    st.fence_kill_at[id] = steady_ms() + st.config.kill_timeout.count();
  }
  if (!st.fenced.count(id)) {
    auto at = wall_ms();
    // Stopped all the same when it cannot be recorded: writing on without
    // a lease is the worse harm.
    if (auto f = st.store->put_fenced(id, at))
      report_problem(st, store_failure(*st.store, "record the fence of alloc '" + id + "'", *f));
    st.fenced[id] = at;
    logging::warn("node", "lease ran out: stopping alloc that writes a single-writer volume",
                  {{"node", st.config.node_id}, {"alloc", id}});
  }
}

// The lease ran out: stop every alloc that writes a single-writer volume
// here and unmount what they and command-less claims publish for writing.
// Checked again on every lease tick while the lease stays out, so a
// failed unmount is retried.
void fence(self_ptr self) {
  auto& st = self->state;
  std::set<std::string> running;
  for (const auto& [id, a] : st.allocs)
    if (command_running(a)) running.insert(id);
  // Those the lease guard stopped already count as the fence's too.
  for (const auto& id : st.guard->signalled())
    if (st.allocs.count(id)) running.insert(id);
  auto plan = plan_fence(publication_facts(st.mounts), running);
  if (plan.empty()) return;
  for (const auto& id : plan.stop) fence_alloc(self, id);
  auto now = unmounts_where(st.mounts, [&](const mount_record& m) {
    return plan.unmount.count(m.alloc_id) &&
           fenced_publication(m.request.access_mode(), m.request.read_only());
  });
  for (const auto& u : now)
    if (!st.unmounting.count(u.key))
      logging::warn("node",
                    "lease ran out: unmounting a single-writer volume claimed without a command "
                    "(release the claim with berth volume release once the node is back)",
                    {{"node", st.config.node_id},
                     {"alloc", u.record.alloc_id},
                     {"volume", u.record.volume_id}});
  unmount_all(self, std::move(now), [](bool) {});
  start_polling(self);
}

// The fenced allocs' progress on each poll: SIGKILL past the grace; once
// the command exited, unmount all of the alloc's publications; once those
// are gone and its exit was reported (the alloc forgotten), the fence of
// it is done and forgotten.
void drive_fence(self_ptr self, int64_t now) {
  auto& st = self->state;
  for (auto it = st.fenced.begin(); it != st.fenced.end();) {
    const auto& id = it->first;
    auto a = st.allocs.find(id);
    bool running = a != st.allocs.end() && command_running(a->second);
    if (running) {
      auto& kill_at = st.fence_kill_at[id];
      if (kill_at == 0) {  // a fence recorded before a restart: SIGTERM first
        signal_alloc(st.allocs, id, false);
        kill_at = now + st.config.kill_timeout.count();
      } else if (kill_at <= now) {
        signal_alloc(st.allocs, id, true);
        kill_at = now + 1000;
      }
      ++it;
      continue;
    }
    if (has_mounts(st.mounts, id)) {
      unmount_released(self, id, [](bool) {});
      ++it;
      continue;
    }
    if (a != st.allocs.end()) {  // its exit not reported yet
      ++it;
      continue;
    }
    if (auto f = st.store->delete_fenced(id)) {
      report_problem(st, store_failure(*st.store, "forget the fence of alloc '" + id + "'", *f));
      ++it;
      continue;
    }
    logging::info("node", "fence of alloc done: stopped, unmounted, exit reported",
                  {{"node", st.config.node_id}, {"alloc", id}});
    st.fence_kill_at.erase(id);
    it = st.fenced.erase(it);
  }
}

// Polls alloc commands (exits, stops) and calls waiting for a plugin.
void poll(self_ptr self) {
  auto& st = self->state;
  auto now = steady_ms();
  // Exits are reaped under the guard's lock (no signal to a reaped pid).
  st.guard->update([&st] {
    if (auto f = collect_exits(*st.store, st.allocs)) report_problem(st, *f);
    return guarded_writers(st);
  });
  finish_stops(self, now);
  drive_fence(self, now);
  for (auto& [id, a] : st.allocs)
    if (a.exited) report_exit(self, id);
  expire_waiting(self, now);
  auto& held = st.held_run_answers;
  for (auto it = held.begin(); it != held.end();) {
    if (it->first > now) {
      ++it;
      continue;
    }
    it->second.deliver(true);
    it = held.erase(it);
  }
}

bool polling_needed(const node_state& st) {
  return needs_polling(st.allocs, !st.stops.empty() || !st.fenced.empty(), !st.waiting.empty()) ||
         !st.held_run_answers.empty();
}

void start_polling(self_ptr self) {
  if (self->state.polling) return;
  self->state.polling = true;
  self->delayed_send(self, std::chrono::milliseconds(200), run_atom::value);
}

// The refusal of a publish or an attach below the publish floor
// (control/lease): `nothing` what the node does without a lease, `it` what
// it does not do for this claim.
caf::error below_floor(const std::string& node_id, uint64_t floor, const std::string& nothing,
                       const std::string& it) {
  return make_error(errc::unavailable,
                    "node '" + node_id + "'" +
                        (floor == floor_lapsed
                             ? " has no lease from a leader (its heartbeats are not confirmed) "
                               "and " +
                                   nothing +
                                   " until it has one; retry once the node reaches the servers"
                             : " lost its lease after this claim was made (the servers may have "
                               "released it meanwhile) and does not " +
                                   it + "; claim again"));
}

// Runs a controller call (no paths, nothing recorded) once fenced.
// `volume`: the CSI volume id (or, before CreateVolume, berth's key of it).
template <class T, class Call, class OnOk>
caf::result<T> controller_call(self_ptr self, const std::string& plugin_id, uint64_t term,
                               std::string volume, Call call, OnOk on_ok,
                               bool confirm_start = false) {
  if (auto f = self->state.fence.admit(*self->state.store, term)) return to_error(*f);
  auto rp = self->make_response_promise<T>();
  auto make = [call, at = where(self->state.config.node_id, plugin_id), volume, term](bool) {
    return csi_job{[call, at](csi::client& c) { return call(c, at); }, call_kind::controller,
                   volume, term};
  };
  run(self, plugin_id, make, rp, on_ok, confirm_start);
  return rp;
}

// --volume-stats-interval: NodeGetVolumeStats of the volumes published
// here (one per volume, whatever the allocs using it), one job per plugin
// that has GET_VOLUME_STATS, then one report to the leader with them all.
// A measure still running skips the next one.
void measure_published(self_ptr self) {
  auto& st = self->state;
  if (st.measuring || !st.api) return;
  std::map<std::string, std::map<std::pair<std::string, std::string>, volume_measure>> by_plugin;
  for (const auto& [key, m] : st.mounts) {
    if (m.published_at_ms == 0) continue;  // asked, not confirmed published
    if (st.unpublishing.count(key) || st.unmounting.count(key)) continue;  // going away
    auto inst = st.instances.find(m.plugin_id);
    if (inst == st.instances.end() || !inst->second.get_volume_stats()) continue;
    by_plugin[m.plugin_id].emplace(
        std::pair{m.ns, m.volume_id},
        volume_measure{m.ns, m.volume_id, m.request.volume().external_id(), m.target_path,
                       m.staging_path});
  }
  auto report = std::make_shared<v1::VolumeStatsReport>();
  report->set_node_id(st.config.node_id);
  report->set_measured_at_ms(wall_ms());
  auto left = std::make_shared<size_t>(by_plugin.size());
  auto send = [self, report]() {
    auto& st = self->state;
    st.measuring = false;
    if (!st.api) return;
    v1::Request r;
    *r.mutable_volume_stats_report() = *report;
    r.set_node_secret(st.config.node_secret);
    self->request(st.api, std::chrono::seconds(30), api_atom::value, wrap(std::move(r)))
        .then([](pb<v1::Response>&) {}, [](caf::error&) {});  // again on the next measure
  };
  st.measuring = true;
  if (by_plugin.empty()) {
    send();  // nothing published: the node's usage is emptied (once)
    return;
  }
  // One job per volume, under the volume's key: it runs in order with that
  // volume's publish and unpublish calls, never beside them (a
  // NodeGetVolumeStats that ran just after a NodeUnpublish it overtook
  // failed with NOT_FOUND: integration.foreign_plugin under load).
  *left = 0;
  for (const auto& [plugin, volumes] : by_plugin) *left += volumes.size();
  for (auto& [plugin, volumes] : by_plugin)
    for (auto& [k, m] : volumes) {
      std::vector<volume_measure> list{m};
      auto make = [list, at = where(st.config.node_id, plugin)](bool) {
        return csi_job{[list, at](csi::client& c) { return measure_volumes(c, list, at); },
                       call_kind::node, list.front().external_id};
      };
      auto one_done = [left, send]() {
        if (--*left == 0) send();
      };
      auto done = [report, one_done](csi_outcome& out) {
        for (auto& u : out.usage) *report->add_usage() = std::move(u);
        one_done();
      };
      auto fail = [one_done](caf::error) { one_done(); };
      if (run_csi(self, plugin, make, done, fail)) start_polling(self);
    }
}

}  // namespace

node_actor::behavior_type node(self_ptr self, node_config config, api_actor api,
                               std::shared_ptr<metrics> stats,
                               std::shared_ptr<client_store> store) {
  auto& st = self->state;
  st.stats = std::move(stats);
  st.store = std::move(store);
  st.config = std::move(config);
  st.api = std::move(api);
  st.guard = std::make_shared<lease_guard>(st.config.node_id, st.config.kill_timeout);
  if (st.config.alloc_supervisor.empty()) st.config.alloc_supervisor = default_alloc_supervisor();
  if (st.config.lease_file.empty())
    st.config.lease_file =
        (std::filesystem::path(st.config.alloc_dir).parent_path() / "lease").string();
  st.boot_id = boot_id_text();
  // What this client published and runs, as of before a restart: kept as
  // it is (nothing is re-mounted); exits are reported, releases work.
  auto loaded = load_mounts(*st.store, st.mounts);
  if (!loaded) loaded = load_allocs(*st.store, st.allocs);
  if (!loaded) loaded = forget_previous_boot(*st.store, st.allocs, current_boot());
  st.fence = leader_fence(st.config.node_id);
  if (!loaded) loaded = st.fence.load(*st.store, st.config.forget_leader_term);
  if (!loaded) {
    // The fence a restart finishes, and what is left of the lease.
    auto fenced = st.store->fenced();
    auto length = st.store->meta("lease_ms");
    auto renewed = st.store->meta("lease_renewed_wall_ms");
    const char* what = "read its lease and fence";
    if (!fenced) {
      loaded = store_failure(*st.store, what, fenced.error());
    } else if (!length || !renewed) {
      loaded = store_failure(*st.store, what, !length ? length.error() : renewed.error());
    } else {
      st.fenced = std::move(*fenced);
      std::ifstream file(st.config.lease_file, std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
      hold_lease(st, lease_at_start_in_boot(
                         lease_at_start(*length, *renewed, wall_ms(), steady_ms()), text,
                         st.boot_id));
      st.publish_floor->store(floor_at_start(st.lease, steady_ms()));
      guard_writers(st);
    }
  }
  if (loaded) {
    report_problem(st, *loaded);
    self->quit(to_error(*loaded));
  } else {
    self->set_down_handler([self](caf::down_msg& dm) {
      if (self->state.api && self->state.api.address() == dm.source) self->state.api = nullptr;
    });
    connect_plugins(self);
    self->send(self, tick_atom::value);
    self->send(self, lease_atom::value);
    if (st.config.volume_stats_interval.count() >= 0)
      self->delayed_send(self, st.config.volume_stats_interval, stats_atom::value);
    if (polling_needed(st)) start_polling(self);
  }
  return {
      [self](publish_atom,
             pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        log_request("publish", req.msg);
        auto& st = self->state;
        const auto& r = req.msg;
        if (auto f = st.fence.admit(*st.store, r.leader_term())) return to_error(*f);
        auto paths = paths_of(st.config.csi_root, r);
        std::error_code ec;
        if (published_already(st.mounts, r, paths, std::filesystem::exists(paths.target, ec))) {
          v1::NodeVolumeResult res;
          res.set_target_path(paths.target);
          // Its record may be one still being written: answer once it is on
          // disk (at once when nothing is queued).
          auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
          after_mount_writes(self, [rp, res]() mutable { rp.deliver(wrap(std::move(res))); });
          return rp;
        }
        // control/lease: the publish floor.
        auto floor = st.publish_floor->load();
        if (publish_waits_for_lease(st.lease, floor)) {
          auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
          st.awaiting_lease.push_back({rp, std::move(req), steady_ms()});
          return rp;
        }
        if (!publish_allowed(r.volume().modify_index(), floor))
          return below_floor(st.config.node_id, floor, "publishes nothing", "publish it");
        // Recorded before the call (published_at_ms 0: not confirmed), with
        // the staging path: a NodeStage done before a failed NodePublish, or
        // before the client died, is then unstaged when the claim is undone.
        // (Not for a plugin this client does not run: the call is refused
        // unsent, and nothing could ever undo the record.)
        auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
        auto call = [self, r, paths](result_promise rp) {
          auto& st = self->state;
          auto staged = std::make_shared<bool>(false);
          auto make = [r, paths, at = where(st.config.node_id, r.plugin_id()), staged](bool stage) {
            *staged = stage;
            csi_job job{[=](csi::client& c) { return publish_claim(c, r, paths, stage, at); },
                        call_kind::node, r.volume().external_id(), r.leader_term()};
            job.publish = true;
            job.claim_index = r.volume().modify_index();
            return job;
          };
          run(
              self, r.plugin_id(), make, rp,
              [self, r, paths, staged](result_promise& rp, csi_outcome& out) {
                write_mount(self,
                            mount_write{key_of(r), record_of(r, paths, *staged, wall_ms()), {}},
                            [rp, out](const std::optional<failure>& f) mutable {
                              if (f)
                                rp.deliver(to_error(*f));
                              else
                                deliver_result(rp, out);
                            });
              },
              r.confirm_start());
        };
        if (st.connections.count(r.plugin_id()) == 0) {
          call(rp);
          return rp;
        }
        write_mount(self, mount_write{key_of(r), intent_of(r, paths), {}},
                    [rp, call](const std::optional<failure>& f) mutable {
                      if (f)
                        rp.deliver(to_error(*f));
                      else
                        call(rp);
                    });
        return rp;
      },
      [self](unpublish_atom,
             pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        log_request("unpublish", req.msg);
        auto& st = self->state;
        const auto& r = req.msg;
        if (auto f = st.fence.admit(*st.store, r.leader_term())) return to_error(*f);
        if (auto f = refuse_unpublish_under_command(st.allocs, r.alloc_id(), st.config.node_id)) {
          logging::warn("node", "unpublish refused: the alloc's command still runs",
                        {{"node", st.config.node_id},
                         {"alloc", r.alloc_id()},
                         {"volume", r.volume().id()}});
          return to_error(*f);
        }
        auto paths = paths_of(st.config.csi_root, r);
        auto key = key_of(r);
        bool others = staging_in_use(st.mounts, paths.staging, key);
        auto make = [r, paths, at = where(st.config.node_id, r.plugin_id()), others](bool stages) {
          bool unstage = unstage_after_unpublish(stages, others);
          return csi_job{[=](csi::client& c) { return unpublish_claim(c, r, paths, unstage, at); },
                         call_kind::node, r.volume().external_id(), r.leader_term()};
        };
        auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
        st.unpublishing.insert(key);
        // A publish of this claim whose record is still being written sends
        // its call once it is: this unpublish goes after it, never before.
        after_mount_writes(self, [self, r, paths, others, key, make, rp]() mutable {
          run(
              self, r.plugin_id(), make, unpublish_promise{self, key, rp},
              [self, key, r, paths, others](unpublish_promise& rp, csi_outcome&) {
                unstage_if_last(
                    self, key, r, paths, !others, r.leader_term(), sender_of(rp),
                    [self, key, rp](csi_outcome& out) mutable {
                      if (out.error) {
                        rp.deliver(to_error(*out.error));
                        return;
                      }
                      write_mount(self, mount_write{key, std::nullopt, {}},
                                  [self, key, rp, out](const std::optional<failure>& f) mutable {
                                    if (f) {
                                      rp.deliver(to_error(*f));
                                    } else {
                                      self->state.unpublishing.erase(key);
                                      deliver_result(rp.rp, out);
                                    }
                                  });
                    });
              },
              r.confirm_start());
        });
        return rp;
      },
      [self](ctrl_publish_atom,
             pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        log_request("controller_publish", req.msg);
        // control/lease: an attach is judged against the publish floor too.
        auto& st = self->state;
        auto floor = st.publish_floor->load();
        if (!controller_publish_allowed(st.lease, floor, req.msg.volume().modify_index()))
          return below_floor(st.config.node_id, floor, "attaches nothing as the controller",
                             "attach its volume");
        auto call = [r = req.msg](csi::client& c, const std::string& at) {
          return controller_publish(c, r, at);
        };
        return controller_call<pb<v1::NodeVolumeResult>>(
            self, req.msg.plugin_id(), req.msg.leader_term(), req.msg.volume().external_id(), call,
            deliver_result, req.msg.confirm_start());
      },
      [self](ctrl_unpublish_atom,
             pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        log_request("controller_unpublish", req.msg);
        auto call = [r = req.msg](csi::client& c, const std::string& at) {
          return controller_unpublish(c, r, at);
        };
        return controller_call<pb<v1::NodeVolumeResult>>(
            self, req.msg.plugin_id(), req.msg.leader_term(), req.msg.volume().external_id(), call,
            deliver_result, req.msg.confirm_start());
      },
      [self](create_atom, pb<v1::Volume>& req, uint64_t term) -> caf::result<pb<v1::Volume>> {
        auto call = [v = req.msg](csi::client& c, const std::string& at) {
          return create_volume(c, v, at);
        };
        return controller_call<pb<v1::Volume>>(
            self, req.msg.plugin_id(), term, "create " + req.msg.namespace_() + "/" + req.msg.id(),
            call,
            [](promise<pb<v1::Volume>>& rp, csi_outcome& out) { rp.deliver(wrap(out.volume)); });
      },
      [self](validate_atom, pb<v1::Volume>& req, uint64_t term) -> caf::result<std::string> {
        auto call = [v = req.msg](csi::client& c, const std::string& at) {
          return validate_volume(c, v, at);
        };
        return controller_call<std::string>(
            self, req.msg.plugin_id(), term, req.msg.external_id(), call,
            [](promise<std::string>& rp, csi_outcome& out) { rp.deliver(out.validation); });
      },
      [self](deregister_atom, pb<v1::Volume>& req, uint64_t term) -> caf::result<bool> {
        auto call = [v = req.msg](csi::client& c, const std::string& at) {
          return delete_volume(c, v, at);
        };
        return controller_call<bool>(self, req.msg.plugin_id(), term, req.msg.external_id(), call,
                                     [](promise<bool>& rp, csi_outcome&) { rp.deliver(true); });
      },
      [self](snapshot_atom, pb<v1::SnapshotRequest>& req,
             uint64_t term) -> caf::result<pb<v1::Snapshot>> {
        auto call = [r = req.msg](csi::client& c, const std::string& at) {
          return create_snapshot(c, r, at);
        };
        // Serialized with the source volume's other calls on this connection.
        return controller_call<pb<v1::Snapshot>>(
            self, req.msg.plugin_id(), term, req.msg.source_external_id(), call,
            [](promise<pb<v1::Snapshot>>& rp, csi_outcome& out) {
              rp.deliver(wrap(out.snapshots.snapshots().empty() ? v1::Snapshot{}
                                                                : out.snapshots.snapshots(0)));
            });
      },
      [self](snapshot_delete_atom, pb<v1::SnapshotRequest>& req,
             uint64_t term) -> caf::result<bool> {
        auto call = [r = req.msg](csi::client& c, const std::string& at) {
          return delete_snapshot(c, r, at);
        };
        return controller_call<bool>(self, req.msg.plugin_id(), term,
                                     "snapshot " + req.msg.snapshot_id(), call,
                                     [](promise<bool>& rp, csi_outcome& out) { rp.deliver(out.found); });
      },
      [self](group_snapshot_atom, pb<v1::SnapshotRequest>& req,
             uint64_t term) -> caf::result<pb<v1::SnapshotList>> {
        auto call = [r = req.msg](csi::client& c, const std::string& at) {
          return create_group_snapshot(c, r, at);
        };
        // No volume key: a group snapshot is taken while the members' other
        // calls go on (the plugin holds their writes for the point in time).
        return controller_call<pb<v1::SnapshotList>>(
            self, req.msg.plugin_id(), term, "", call,
            [](promise<pb<v1::SnapshotList>>& rp, csi_outcome& out) {
              rp.deliver(wrap(std::move(out.snapshots)));
            });
      },
      [self](group_snapshot_delete_atom, pb<v1::SnapshotRequest>& req,
             uint64_t term) -> caf::result<bool> {
        auto call = [r = req.msg](csi::client& c, const std::string& at) {
          return delete_group_snapshot(c, r, at);
        };
        return controller_call<bool>(
            self, req.msg.plugin_id(), term, "group snapshot " + req.msg.group_snapshot_id(), call,
            [](promise<bool>& rp, csi_outcome& out) { rp.deliver(out.found); });
      },
      [self](snapshot_list_atom, pb<v1::SnapshotRequest>& req,
             uint64_t term) -> caf::result<pb<v1::SnapshotList>> {
        auto call = [r = req.msg](csi::client& c, const std::string& at) {
          return list_snapshots(c, r, at);
        };
        // A read: no volume key, so it never waits behind a volume's calls.
        return controller_call<pb<v1::SnapshotList>>(
            self, req.msg.plugin_id(), term, "", call,
            [](promise<pb<v1::SnapshotList>>& rp, csi_outcome& out) {
              rp.deliver(wrap(std::move(out.snapshots)));
            });
      },
      [self](list_volumes_atom, pb<v1::ExternalVolumeListRequest>& req,
             uint64_t term) -> caf::result<pb<v1::ExternalVolumeList>> {
        auto call = [r = req.msg](csi::client& c, const std::string& at) {
          return list_external_volumes(c, r, at);
        };
        // A read: no volume key, so it never waits behind a volume's calls.
        return controller_call<pb<v1::ExternalVolumeList>>(
            self, req.msg.plugin_id(), term, "", call,
            [](promise<pb<v1::ExternalVolumeList>>& rp, csi_outcome& out) {
              rp.deliver(wrap(std::move(out.external)));
            });
      },
      [self](modify_atom, pb<v1::Volume>& req, uint64_t term) -> caf::result<bool> {
        auto call = [v = req.msg](csi::client& c, const std::string& at) {
          return modify_volume(c, v, at);
        };
        return controller_call<bool>(self, req.msg.plugin_id(), term, req.msg.external_id(), call,
                                     [](promise<bool>& rp, csi_outcome&) { rp.deliver(true); });
      },
      [self](health_atom, pb<v1::VolumeHealthRequest>& req,
             uint64_t term) -> caf::result<pb<v1::VolumeHealthResult>> {
        auto call = [r = req.msg](csi::client& c, const std::string& at) {
          return check_volume_health(c, r, at);
        };
        // A read: no volume key, so it never waits behind a volume's calls.
        return controller_call<pb<v1::VolumeHealthResult>>(
            self, req.msg.plugin_id(), term, "", call,
            [](promise<pb<v1::VolumeHealthResult>>& rp, csi_outcome& out) {
              rp.deliver(wrap(std::move(out.health)));
            });
      },
      [self](ping_atom) {
        return self->state.step_senders.count(
                   caf::actor_cast<caf::actor_addr>(self->current_sender())) > 0;
      },
      [self](stats_atom) {
        measure_published(self);
        if (self->state.config.volume_stats_interval.count() >= 0)
          self->delayed_send(self, self->state.config.volume_stats_interval, stats_atom::value);
      },
      [self](ctrl_expand_atom,
             pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        log_request("controller_expand", req.msg);
        auto call = [r = req.msg](csi::client& c, const std::string& at) {
          return controller_expand(c, r, at);
        };
        return controller_call<pb<v1::NodeVolumeResult>>(
            self, req.msg.plugin_id(), req.msg.leader_term(), req.msg.volume().external_id(), call,
            deliver_result, req.msg.confirm_start());
      },
      [self](expand_atom, pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        log_request("node_expand", req.msg);
        auto& st = self->state;
        const auto& r = req.msg;
        if (auto f = st.fence.admit(*st.store, r.leader_term())) return to_error(*f);
        // Where this client published the volume (any of its claims: they
        // share the staging path, and one NodeExpandVolume grows it).
        const mount_record* found = nullptr;
        for (const auto& [key, m] : st.mounts)
          if (m.published_at_ms != 0 && m.ns == r.volume().namespace_() &&
              m.volume_id == r.volume().id()) {
            found = &m;
            break;
          }
        if (found == nullptr)
          return make_error(errc::not_found, "volume '" + r.volume().id() +
                                                 "' is not published on node '" +
                                                 st.config.node_id + "'");
        claim_paths paths{found->staging_path, found->target_path};
        bool staged = !found->staging_path.empty();
        auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
        auto make = [r, paths, staged, at = where(st.config.node_id, r.plugin_id())](bool) {
          return csi_job{[=](csi::client& c) { return node_expand(c, r, paths, staged, at); },
                         call_kind::node, r.volume().external_id(), r.leader_term()};
        };
        run(self, r.plugin_id(), make, rp, deliver_result, r.confirm_start());
        return rp;
      },
      [self](run_atom, pb<v1::Alloc>& req) -> caf::result<bool> {
        auto& st = self->state;
        if (st.allocs.count(req.msg.id())) return true;  // running already
        // Stopped before its start arrived (a stop sent by a leader after it
        // committed the alloc running, before its run request got here; or
        // by a newer leader): never started, so nothing runs unowned.
        if (st.stopped_before_start.erase(req.msg.id()))
          return make_error(errc::refused, "alloc '" + req.msg.id() + "' was stopped on node '" +
                                               st.config.node_id + "' before it started");
        if (!start_allowed(expired(st.lease, steady_ms()), req.msg))
          return make_error(errc::refused,
                            "alloc '" + req.msg.id() + "' writes a volume and node '" +
                                st.config.node_id +
                                "' lost its lease (it could not reach a leader): its command is "
                                "not started; run it again once the node is back");
        if (auto gone = unpublished_volumes(st.mounts, st.unmounting, req.msg); !gone.empty())
          return make_error(errc::refused,
                            "alloc '" + req.msg.id() + "' is not started: volume '" + gone[0] +
                                "' is no longer published for it on node '" + st.config.node_id +
                                "' (the node's lease ran out after the publish and it was "
                                "unmounted); run the alloc again");
        if (auto f =
                start_alloc(*st.store, st.allocs, req.msg, st.config.alloc_dir, st.config.node_id,
                            supervision_of(st, req.msg.id())))
          return to_error(*f);
        guard_writers(st);
        start_polling(self);
        // A test stages the leader's race with this answer (issue 59, item
        // 2: the alloc removed while its run's answer was on the way).
        if (auto hold = hold_ms("node.run-answer"); hold > 0) {
          auto rp = self->make_response_promise<bool>();
          st.held_run_answers.emplace_back(steady_ms() + hold, rp);
          return rp;
        }
        return true;
      },
      [self](stop_atom, const std::string& id, bool unmount) -> caf::result<int32_t> {
        auto& st = self->state;
        if (!st.allocs.count(id)) {
          // Remembered (the latest 10,000) so that a run request arriving
          // after this stop does not start it.
          st.stopped_before_start.insert(id);
          st.stopped_order.push_back(id);
          if (st.stopped_order.size() > 10000) {
            st.stopped_before_start.erase(st.stopped_order.front());
            st.stopped_order.pop_front();
          }
        }
        if (stop_answers_at_once(st.allocs, id, unmount, has_mounts(st.mounts, id))) {
          auto code = exit_code_of(st.allocs, id);
          if (auto f = forget_alloc(*st.store, st.allocs, id)) return to_error(*f);
          return code;
        }
        signal_alloc(st.allocs, id, false);
        auto rp = self->make_response_promise<int32_t>();
        st.stops[id].push_back({rp, steady_ms() + st.config.kill_timeout.count(), unmount});
        start_polling(self);
        return rp;
      },
      [self](fingerprint_atom) { self->state.reported.clear(); },
      [self](run_atom) {
        self->state.polling = false;
        poll(self);
        if (polling_needed(self->state)) start_polling(self);
      },
      [self](flush_atom) { flush_mount_writes(self); },
      [self](tick_atom) {
        auto& st = self->state;
        st.stats->mailbox("node", self->mailbox().size());
        connect_server(self);
        fingerprint(self);
        self->delayed_send(self, st.config.fingerprint_interval, tick_atom::value);
      },
      [self](lease_atom) {
        auto& st = self->state;
        refuse_unleased_publishes(st);
        if (expired(st.lease, steady_ms())) {
          st.publish_floor->store(floor_lapsed);
          fence(self);
        }
        guard_writers(st);
        connect_server(self);
        heartbeat(self);
        auto period = heartbeat_period_ms(st.lease.length_ms, st.config.fingerprint_interval.count());
        self->delayed_send(self, std::chrono::milliseconds(period), lease_atom::value);
      },
      [self](monitor_atom, pb<v1::MonitorRequest>& req) -> caf::result<pb<v1::MonitorResult>> {
        auto lm = log_monitor_of(self->system());
        if (!lm) return make_error(errc::unavailable, "this client keeps no log lines");
        auto rp = self->make_response_promise<pb<v1::MonitorResult>>();
        auto wait = std::chrono::milliseconds(req.msg.wait_ms()) + std::chrono::seconds(5);
        self->request(lm, wait, monitor_atom::value, std::move(req))
            .then([rp](pb<v1::MonitorResult>& r) mutable { rp.deliver(std::move(r)); },
                  [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
  };
}

}  // namespace berth
