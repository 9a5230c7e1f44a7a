#include "actors/server.hpp"

#include <chrono>
#include <set>

#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>

#include "actors/leader.hpp"
#include "actors/log_monitor.hpp"
#include "actors/propose.hpp"
#include "control/views.hpp"
#include "log/log.hpp"
#include "tls/caf_tls.hpp"

namespace berth {

namespace {

using self_ptr = server_actor::stateful_pointer<server_state>;
using promise = server_state::promise;

pb<v1::Response> failure_response(errc code, std::string message) {
  v1::Response r;
  r.mutable_error()->set_code(static_cast<v1::ErrorCode>(code));
  r.mutable_error()->set_message(std::move(message));
  return wrap(std::move(r));
}

// A failure with its flags (retry, maybe applied: control/views).
pb<v1::Response> failure_response(const failure& f) { return wrap(error_response(f)); }

// The leader's answer was lost: the change may or may not have been made.
pb<v1::Response> maybe_applied_response(std::string message) {
  auto r = failure_response(errc::unavailable, std::move(message));
  r.msg.mutable_error()->set_maybe_applied(true);
  return r;
}

// A failure before anything was executed: safe to send again.
pb<v1::Response> retry_response(std::string message) {
  auto r = failure_response(errc::unavailable, std::move(message));
  r.msg.mutable_error()->set_retry(true);
  return r;
}

std::string command_name(const v1::Request& r) {
  auto* field = v1::Request::descriptor()->FindFieldByNumber(r.command_case());
  return field ? field->name() : "unknown";
}

std::string outcome_name(const v1::Response& r) {
  switch (r.error().code()) {
    case v1::OK: return "ok";
    case v1::INVALID: return "invalid";
    case v1::NOT_FOUND: return "not_found";
    case v1::REFUSED: return "refused";
    case v1::UNAVAILABLE: return "unavailable";
    case v1::FORBIDDEN: return "forbidden";
    default: return "internal";
  }
}

// Connects (asynchronously) to the server at `address` and hands the
// handle, or an error, to `then`.
template <class Handle, class Then>
void connect(const self_ptr& self, const std::string& address, Then then) {
  auto [host, port] = split_address(address);
  self->request(tls::connector(self->system()), std::chrono::seconds(5), caf::connect_atom::value,
                host, port)
      .then(
          [then](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) mutable {
            then(caf::actor_cast<Handle>(ptr));
          },
          [then](caf::error&) mutable { then(Handle{}); });
}

void forward(self_ptr self, v1::Request req, promise rp);
void run_on_leader(self_ptr self, v1::Request req, promise rp);

void flush_waiting(self_ptr self) {
  auto waiting = std::move(self->state.waiting);
  self->state.waiting.clear();
  for (auto& [req, rp] : waiting) forward(self, std::move(req), rp);
}

// Connects to the leader's server (this one does not lead): then tells it
// every client that registered here and forwards the waiting requests.
// The handle comes over the raft link the two servers have (asked of the
// leader's replicated log), not from a second connection to its shell
// port: over CAF 0.17.6's TLS, requests on a second connection between two
// servers time out.
void connect_leader(self_ptr self) {
  auto& st = self->state;
  if (st.remote || st.connecting || st.leader_info.api_address().empty()) return;
  st.connecting = true;
  auto address = st.leader_info.api_address();
  auto connected = [self, address](api_actor handle) {
    auto& st = self->state;
    st.connecting = false;
    if (handle && st.leader_info.api_address() == address) {
      st.remote = handle;
      self->monitor(st.remote);
      // (anon: the reply, a term, is for the client, not for this server.)
      for (const auto& [id, node] : st.nodes)
        caf::anon_send(st.remote, node_atom::value, id, st.node_secrets[id], st.node_kill_ms[id],
                       node);
      flush_waiting(self);
      return;
    }
    auto waiting = std::move(st.waiting);
    st.waiting.clear();
    for (auto& [r, p] : waiting)
      p.deliver(retry_response("cannot reach the leader at " + address + "; retry"));
  };
  if (!st.log) {
    connect<api_actor>(self, address, connected);  // (not yet told its log: at start only)
    return;
  }
  // A leader of an older berth does not answer api_atom (a rolling
  // upgrade): in plain text, its shell port then, as before (over TLS a
  // second connection would not serve either).
  self->request(st.log, std::chrono::seconds(5), api_atom::value, st.leader_id)
      .then([connected](api_actor& handle) mutable { connected(std::move(handle)); },
            [self, address, connected](caf::error&) mutable {
              if (tls::enabled(self->system()))
                connected(api_actor{});
              else
                connect<api_actor>(self, address, connected);
            });
}

// Hands a request to the leader's server (this one does not lead).
void forward(self_ptr self, v1::Request req, promise rp) {
  auto& st = self->state;
  if (req.hops() >= 2 || st.leader_info.api_address().empty()) {
    rp.deliver(retry_response("no leader is elected right now (elections take a few seconds "
                              "after a server fails); retry"));
    return;
  }
  if (!st.remote) {
    st.waiting.emplace_back(std::move(req), rp);
    connect_leader(self);
    return;
  }
  req.set_hops(req.hops() + 1);
  // Tracked so that the leader's death answers them at once (see the down
  // handler) instead of after the timeout.
  auto id = st.next_inflight++;
  st.inflight.emplace(id, rp);
  self->request(st.remote, std::chrono::seconds(60), api_atom::value, wrap(std::move(req)))
      .then(
          [self, id](pb<v1::Response>& r) {
            auto it = self->state.inflight.find(id);
            if (it == self->state.inflight.end()) return;
            it->second.deliver(std::move(r));
            self->state.inflight.erase(it);
          },
          [self, id](caf::error& e) {
            self->state.remote = nullptr;
            auto it = self->state.inflight.find(id);
            if (it == self->state.inflight.end()) return;
            it->second.deliver(maybe_applied_response(
                "the leader did not answer (" + to_failure(e).message +
                "): the change may or may not have been made; check, then retry"));
            self->state.inflight.erase(it);
          });
}

// operator raft list-peers: every member's own view of the log.
void list_peers(self_ptr self, promise rp) {
  self->request(self->state.log, std::chrono::seconds(5), status_atom::value)
      .then(
          [self, rp](pb<v1::RaftStatus>& mine) mutable {
            struct gather {
              v1::Response response;
              size_t missing = 0;
              promise rp;
            };
            auto g = std::make_shared<gather>();
            g->rp = rp;
            *g->response.add_raft() = mine.msg;
            std::vector<v1::ServerInfo> others;
            for (const auto& m : mine.msg.members())
              if (m.name() != mine.msg.server().name()) others.push_back(m);
            g->missing = others.size();
            if (others.empty()) {
              g->rp.deliver(wrap(std::move(g->response)));
              return;
            }
            for (const auto& m : others) {
              auto done = [g, m](std::optional<v1::RaftStatus> s, std::string why) {
                if (s) {
                  *g->response.add_raft() = std::move(*s);
                } else {
                  auto* r = g->response.add_raft();
                  *r->mutable_server() = m;
                  r->set_role("unreachable");
                  r->set_error(why);
                }
                if (--g->missing == 0) g->rp.deliver(wrap(std::move(g->response)));
              };
              // Over the raft link, through this server's replicated log.
              self->request(self->state.log, std::chrono::seconds(5), status_atom::value,
                            m.raft_id())
                  .then([done](pb<v1::RaftStatus>& s) { done(std::move(s.msg), ""); },
                        [done](caf::error& e) { done(std::nullopt, to_failure(e).message); });
            }
          },
          [rp](caf::error& e) mutable { rp.deliver(failure_response(errc::internal, to_failure(e).message)); });
}

// Requests about the replicated log itself, run on the leader's log.
template <class Atom>
void raft_command(self_ptr self, Atom atom, std::string name, promise rp) {
  self->request(self->state.log, std::chrono::seconds(10), atom, std::move(name))
      .then(
          [rp](std::string& what) mutable {
            v1::Response r;
            r.set_message(std::move(what));
            rp.deliver(wrap(std::move(r)));
          },
          [rp](caf::error& e) mutable {
            auto f = to_failure(e);
            rp.deliver(failure_response(f));
          });
}

// --stale: any read, answered from this server's own catalog (as of what
// it applied), with filters and pages, without asking the leader.
void stale_read(self_ptr self, v1::Request req, promise rp) {
  self->request(self->state.machine, std::chrono::seconds(30), read_atom::value,
                wrap(std::move(req)))
      .then([rp](pb<v1::Response>& r) mutable { rp.deliver(std::move(r)); },
            [rp](caf::error& e) mutable {
              auto f = to_failure(e);
              rp.deliver(failure_response(f));
            });
}

// berth status: who this server is and who leads.
void agent_status(self_ptr self, promise rp) {
  self->request(self->state.log, std::chrono::seconds(5), status_atom::value)
      .then(
          [self, rp](pb<v1::RaftStatus>& s) mutable {
            auto& st = self->state;
            v1::Response r;
            auto* a = r.mutable_agent();
            a->set_node_name(st.self.name());
            a->set_leader(static_cast<bool>(st.leader));
            a->set_leader_address(st.leader ? st.self.api_address() : st.leader_info.api_address());
            a->set_applied_index(s.msg.applied_index());
            a->set_version(BERTH_VERSION);
            rp.deliver(wrap(std::move(r)));
          },
          [rp](caf::error& e) mutable {
            rp.deliver(failure_response(errc::internal, to_failure(e).message));
          });
}

// berth monitor: this process's recent log lines (a node's are asked of
// its client through the leader).
void monitor(self_ptr self, const v1::MonitorRequest& m, promise rp) {
  auto lm = log_monitor_of(self->system());
  if (!lm) {
    rp.deliver(failure_response(errc::unavailable, "this berthd keeps no log lines"));
    return;
  }
  self->request(lm, std::chrono::milliseconds(m.wait_ms()) + std::chrono::seconds(10),
                monitor_atom::value, wrap(m))
      .then(
          [rp](pb<v1::MonitorResult>& r) mutable {
            v1::Response resp;
            *resp.mutable_monitor() = std::move(r.msg);
            rp.deliver(wrap(std::move(resp)));
          },
          [rp](caf::error& e) mutable {
            auto f = to_failure(e);
            rp.deliver(failure_response(f));
          });
}

// event stream: a long poll on this server's event journal.
void stream_events(self_ptr self, v1::EventStreamRequest req, std::string token, promise rp) {
  for (auto t : req.topics())
    if (t == v1::EVENT_TOPIC_UNKNOWN || !v1::EventTopic_IsValid(t)) {
      rp.deliver(failure_response(errc::invalid, "unknown event topic; the topics are volume, "
                                                 "claim, alloc, node, plugin"));
      return;
    }
  std::chrono::milliseconds wait{req.wait_ms()};
  self->request(self->state.journal, wait + std::chrono::seconds(10), stream_atom::value,
                wrap(req))
      .then([self, token, rp](pb<v1::Response>& r) mutable {
              if (!self->state.options.acl) {
                rp.deliver(std::move(r));
                return;
              }
              // ACLs: only the events the token may see.
              v1::Request asked;
              asked.mutable_event_stream();
              asked.set_token(token);
              self->request(self->state.machine, std::chrono::seconds(10), acl_atom::value,
                            wrap(std::move(asked)), std::move(r))
                  .then([rp](pb<v1::Response>& filtered) mutable { rp.deliver(std::move(filtered)); },
                        [rp](caf::error& e) mutable {
                          auto f = to_failure(e);
                          rp.deliver(failure_response(f));
                        });
            },
            [rp](caf::error& e) mutable {
              auto f = to_failure(e);
              rp.deliver(failure_response(f));
            });
}

// The requests this server answers itself, without the leader actor:
// with ACLs on, their token is checked against this server's catalog
// (the state machine's) first.
bool answered_here(const v1::Request& req) {
  return (req.has_monitor() && req.monitor().node_id().empty()) || req.has_raft_list_peers() ||
         req.has_event_stream() || req.has_raft_remove_peer() ||
         req.has_raft_transfer_leadership() || req.has_snapshot_save() ||
         req.command_case() == v1::Request::kSnapshotRestore || (req.stale() && is_read(req));
}

void execute_checked(self_ptr self, v1::Request req, promise rp);

void execute(self_ptr self, v1::Request req, promise rp) {
  // A stale read is checked by the state machine as it answers it.
  if (!self->state.options.acl || !answered_here(req) ||
      (req.stale() && is_read(req))) {
    execute_checked(self, std::move(req), rp);
    return;
  }
  auto check = req;
  // The check needs no snapshot's bytes.
  if (req.command_case() == v1::Request::kSnapshotRestore) check.set_snapshot_restore("");
  self->request(self->state.machine, std::chrono::seconds(10), acl_atom::value, wrap(std::move(check)))
      .then(
          [self, req = std::move(req), rp](pb<v1::Response>& r) mutable {
            if (r.msg.error().code() != v1::OK) {
              rp.deliver(std::move(r));
              return;
            }
            execute_checked(self, std::move(req), rp);
          },
          [rp](caf::error& e) mutable {
            auto f = to_failure(e);
            rp.deliver(failure_response(f));
          });
}

void execute_checked(self_ptr self, v1::Request req, promise rp) {
  auto& st = self->state;
  if (req.has_monitor() && req.monitor().node_id().empty()) {
    monitor(self, req.monitor(), rp);
    return;
  }
  if (req.has_agent_status()) {
    agent_status(self, rp);
    return;
  }
  if (req.has_raft_list_peers()) {
    list_peers(self, rp);
    return;
  }
  // Events come from this server's own journal, leader or not: every server
  // applies the same entries, so a consumer streams on through a leader
  // change.
  if (req.has_event_stream()) {
    stream_events(self, std::move(*req.mutable_event_stream()), req.token(), rp);
    return;
  }
  if (req.stale() && is_read(req)) {
    stale_read(self, std::move(req), rp);
    return;
  }
  if (!st.leader) {
    forward(self, std::move(req), rp);
    return;
  }
  if (req.has_raft_remove_peer()) {
    raft_command(self, remove_atom::value, req.raft_remove_peer(), rp);
    return;
  }
  if (req.has_raft_transfer_leadership()) {
    raft_command(self, transfer_atom::value, req.raft_transfer_leadership(), rp);
    return;
  }
  // Reads are linearizable: the leader first confirms it still leads
  // (ReadIndex), then answers from what it committed.
  if (is_read(req)) {
    self->request(st.log, std::chrono::seconds(10), read_atom::value)
        .then(
            [self, req, rp](uint64_t) mutable { run_on_leader(self, std::move(req), rp); },
            [rp](caf::error& e) mutable { rp.deliver(retry_response(to_failure(e).message)); });
    return;
  }
  run_on_leader(self, std::move(req), rp);
}

// Starts the leader actor on the committed state (replacing a running one).
void start_leader(self_ptr self, catalog contents) {
  auto& st = self->state;
  auto options = st.options;
  options.term = st.term;
  if (st.leader) {
    self->unlink_from(st.leader);
    self->send_exit(st.leader, caf::exit_reason::user_shutdown);
  }
  st.leader =
      self->spawn<caf::linked>(leader, st.log, std::move(contents), st.stats, options);
  st.remote = nullptr;
  // (anon: the reply, a lease, is for the client, not for this server.)
  for (const auto& [id, node] : st.nodes)
    caf::anon_send(st.leader, node_atom::value, id, st.node_secrets[id], st.node_kill_ms[id], node);
}

// operator snapshot save: a consistent copy of the state, as of a
// linearizable read.
void snapshot_save(self_ptr self, promise rp) {
  self->request(self->state.log, std::chrono::seconds(10), read_atom::value)
      .then(
          [self, rp](uint64_t) mutable {
            self->request(self->state.machine, std::chrono::minutes(5), snapshot_atom::value)
                .then([rp](uint64_t index, std::string& bytes) mutable {
                  v1::Response r;
                  r.set_snapshot(std::move(bytes));
                  r.set_snapshot_index(index);
                  r.set_message("snapshot of the state at index " + std::to_string(index));
                  rp.deliver(wrap(std::move(r)));
                },
                // Without this handler CAF 0.17 would end this actor (and
                // its linked leader) on a timeout or error: berthd serving
                // nobody.
                [rp](caf::error& e) mutable {
                  auto f = to_failure(e);
                  rp.deliver(failure_response(
                      f.code, "the state machine made no snapshot: " + f.message +
                                  " (try again; if it fails again, see this server's log)"));
                });
          },
          [rp](caf::error& e) mutable { rp.deliver(retry_response(to_failure(e).message)); });
}

// operator snapshot restore: one committed entry replaces the state tables
// on every server; then the leader actor starts again from them.
void snapshot_restore(self_ptr self, std::string bytes, promise rp) {
  static const std::string magic = "SQLite format 3";
  if (bytes.compare(0, magic.size(), magic) != 0) {
    rp.deliver(failure_response(errc::invalid, "the file is not a berth snapshot (made by "
                                               "berth operator snapshot save)"));
    return;
  }
  // Once committed, the replicated log starts the leader actor again from
  // the restored state (the same way as when this server began to lead).
  propose(self, self->state.log, self->state.term, {restore_change(std::move(bytes))})
      .then(
          [self, rp](uint64_t index) mutable { self->state.restoring.emplace_back(index, rp); },
          [rp](caf::error& e) mutable {
            auto f = to_failure(e);
            rp.deliver(failure_response(f));
          });
}

void run_on_leader(self_ptr self, v1::Request req, promise rp) {
  auto& st = self->state;
  if (!st.leader) {
    forward(self, std::move(req), rp);
    return;
  }
  if (req.has_snapshot_save()) {
    snapshot_save(self, rp);
    return;
  }
  if (req.command_case() == v1::Request::kSnapshotRestore) {
    snapshot_restore(self, std::move(*req.mutable_snapshot_restore()), rp);
    return;
  }
  // Requests are counted and timed where they execute: on the leader.
  auto start = std::chrono::steady_clock::now();
  auto command = command_name(req);
  auto done = [self, start, command](const v1::Response& r) {
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    self->state.stats->request_done(command, outcome_name(r), took.count());
    logging::debug("server", "request done",
                   {{"command", command}, {"outcome", outcome_name(r)},
                    {"ms", static_cast<int64_t>(took.count() * 1000)}});
  };
  bool read = is_read(req);
  self->request(st.leader, caf::infinite, api_atom::value, wrap(std::move(req)))
      .then(
          [rp, done](pb<v1::Response>& r) mutable {
            done(r.msg);
            rp.deliver(std::move(r));
          },
          [rp, done, read](caf::error& e) mutable {
            // The leader actor stopped (it stepped down) before answering:
            // a change may have been committed.
            auto f = to_failure(e);
            auto r = read ? failure_response(f)
                          : maybe_applied_response(
                                "the leader stopped while handling the request (" + f.message +
                                "): the change may or may not have been made; check, then retry");
            done(r.msg);
            rp.deliver(std::move(r));
          });
}

}  // namespace

server_actor::behavior_type server(self_ptr self, state_machine_actor machine,
                                   event_journal_actor journal, std::shared_ptr<metrics> stats,
                                   leader_options options) {
  self->state.options = options;
  self->state.machine = std::move(machine);
  self->state.journal = std::move(journal);
  self->state.stats = std::move(stats);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    // A client's node actor registered here is gone (its connection to
    // this server closed): it is not announced to a new leader again,
    // where it would stand for its node instead of the newer one.
    for (auto it = st.nodes.begin(); it != st.nodes.end(); ++it)
      if (it->second.address() == dm.source) {
        st.node_secrets.erase(it->first);
        st.node_kill_ms.erase(it->first);
        st.nodes.erase(it);
        return;
      }
    if (!st.remote || st.remote.address() != dm.source) return;
    st.remote = nullptr;
    for (auto& [id, rp] : st.inflight)
      rp.deliver(maybe_applied_response(
          "the leader's server stopped while handling the request: the change may or may not "
          "have been made; check, then retry"));
    st.inflight.clear();
  });
  return {
      [self](api_atom, pb<v1::Request>& req) -> caf::result<pb<v1::Response>> {
        auto rp = self->make_response_promise<pb<v1::Response>>();
        execute(self, std::move(req.msg), rp);
        return rp;
      },
      [self](node_atom, const std::string& id, const std::string& secret, int64_t kill_ms,
             node_actor node) -> caf::result<uint64_t, int64_t, uint64_t> {
        auto& st = self->state;
        if (auto known = st.nodes.find(id);
            node && (known == st.nodes.end() || known->second.address() != node.address()))
          self->monitor(node);
        st.nodes[id] = node;
        st.node_secrets[id] = secret;
        st.node_kill_ms[id] = kill_ms;
        if (!st.leader && !st.remote) {
          // After a leader change nothing may be forwarded through this
          // server for a while: connect now (it tells the new leader every
          // client here), or the leader would mark these nodes down.  No
          // lease meanwhile: the client renews through a leader only.
          connect_leader(self);
          return caf::result<uint64_t, int64_t, uint64_t>(st.leader_term, int64_t{0},
                                                           uint64_t{0});
        }
        // The leader answers with its term and the lease once it confirmed
        // that it still leads; the client gets the newest term this server
        // knows either way, and a lease only from a leader that is not
        // older than that term.
        auto rp = self->make_response_promise<uint64_t, int64_t, uint64_t>();
        auto relay = [self, rp](uint64_t term, int64_t lease_ms, uint64_t index) mutable {
          auto known = self->state.leader_term;
          rp.deliver(std::max(term, known), term >= known ? lease_ms : int64_t{0}, index);
        };
        // A configuration the leader refuses (the client's --kill-timeout)
        // reaches the client; any other error is no lease.
        auto none = [self, rp](caf::error& e) mutable {
          if (to_failure(e).code == errc::invalid) {
            rp.deliver(std::move(e));
            return;
          }
          rp.deliver(self->state.leader_term, int64_t{0}, uint64_t{0});
        };
        if (st.leader)
          self->request(st.leader, std::chrono::seconds(10), node_atom::value, id, secret, kill_ms,
                        node)
              .then(relay, none);
        else
          self->request(st.remote, std::chrono::seconds(10), node_atom::value, id, secret, kill_ms,
                        node)
              .then(relay, none);
        return rp;
      },
      [self](leading_atom, catalog& contents, uint64_t term) {
        // (Again after an operator restore: the leader starts over from
        // the restored state.)
        auto& st = self->state;
        st.term = term;
        auto applied = contents.applied_index;
        auto volumes = contents.volumes.size();
        st.leader_term = newest_leader_term(st.leader_term, term, true);
        start_leader(self, std::move(contents));
        for (auto it = st.restoring.begin(); it != st.restoring.end();) {
          if (it->first > applied) {
            ++it;
            continue;
          }
          v1::Response r;
          r.set_snapshot_index(it->first);
          r.set_message("state restored at index " + std::to_string(it->first) + " (" +
                        std::to_string(volumes) + " volumes)");
          it->second.deliver(wrap(std::move(r)));
          it = st.restoring.erase(it);
        }
      },
      [self](apply_atom, committed_batch& batch) {
        if (self->state.leader) self->send(self->state.leader, apply_atom::value, std::move(batch));
      },
      [self](following_atom, uint64_t leader_id, pb<v1::ServerInfo>& info, uint64_t term) {
        auto& st = self->state;
        st.leader_term = newest_leader_term(st.leader_term, term, leader_id != 0);
        if (st.leader) {
          // Stop serving as leader at once: the volume and plugin actors
          // (linked to it) go too; their pending proposals already failed.
          self->unlink_from(st.leader);
          self->send_exit(st.leader, caf::exit_reason::user_shutdown);
          st.leader = nullptr;
        }
        for (auto& [index, rp] : st.restoring)
          rp.deliver(failure_response(errc::unavailable,
                                      "the restore at index " + std::to_string(index) +
                                          " committed, but this server lost the leadership "
                                          "before serving it; check with berth volume status"));
        st.restoring.clear();
        if (st.leader_info.api_address() != info.msg.api_address()) st.remote = nullptr;
        // Only the leader counts volumes, claims and plugins.
        st.stats->clear_state();
        st.leader_id = leader_id;
        st.leader_info = std::move(info.msg);
      },
      [self](replicated_log_actor log, pb<v1::ServerInfo>& info) {
        self->state.log = std::move(log);
        self->state.self = std::move(info.msg);
      },
  };
}

}  // namespace berth
