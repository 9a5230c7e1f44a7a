#include "actors/raft_log.hpp"

#include "actors/raft_log_internal.hpp"

#include "raft/proposal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "log/log.hpp"
#include "persistence/crashpoint.hpp"
#include "persistence/durable_file.hpp"
#include "persistence/integrity.hpp"
#include "tls/caf_tls.hpp"

namespace berth {

using namespace raft_log_detail;

namespace {
std::string role_name(raft::role r);
}  // namespace

namespace raft_log_detail {

void fatal(const std::string& what) {
  // Nothing after this point could be made durable: stop at once rather
  // than acknowledge anything (fail-stop).  A restart recovers from disk.
  if (logging::enabled(logging::level::error))
    logging::error("raft", "stopping: cannot go on safely", {{"error", what}});
  else
    std::fprintf(stderr, "berthd: fatal: %s\n", what.c_str());
  std::_Exit(70);
}

void schedule_flush(const self_ptr& self) {
  if (self->state.flush_scheduled) return;
  self->state.flush_scheduled = true;
  self->send(self, flush_atom::value);
}

bool from_proven(const self_ptr& self) {
  if (!self->state.opts.identity) return true;
  auto sender = self->current_sender();
  if (!sender) return false;
  auto node = sender->node();
  return node == self->node() || self->state.proven.count(node) > 0;
}

}  // namespace raft_log_detail

namespace {

void prove_to(self_ptr self, const std::string& address);

// The replicated log of the server at `address`, connecting on demand
// (asynchronously, through the middleman).  Invalid until connected.
replicated_log_actor link(self_ptr self, const std::string& address) {
  auto& l = self->state.links[address];
  if (l.handle || l.connecting) return l.handle;
  // With TLS, two servers that connect to each other at the same moment
  // lose both connections in CAF 0.17 (each closes its outgoing one as
  // redundant and the other side had made it its route), again at every
  // retry.  So only the server with the smaller raft address connects; the
  // other one answers through the sender of what it receives (learn_link).
  if (tls::enabled(self->system()) && !(self->state.opts.self.raft_address() < address))
    return l.handle;
  auto now = std::chrono::steady_clock::now();
  if (now - l.last_attempt < std::chrono::milliseconds(250)) return {};
  l.connecting = true;
  l.last_attempt = now;
  auto [host, port] = split_address(address);
  self->request(tls::connector(self->system()), std::chrono::seconds(5), caf::connect_atom::value,
                host, port)
      .then(
          [self, address](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            auto& l = self->state.links[address];
            l.connecting = false;
            if (!ptr) return;
            l.handle = caf::actor_cast<replicated_log_actor>(ptr);
            l.proven_to = false;
            l.last_proof = {};
            self->monitor(l.handle);
            prove_to(self, address);
          },
          [self, address](caf::error&) { self->state.links[address].connecting = false; });
  return {};
}

const v1::ServerInfo* member_by_name(const self_ptr& self, const std::string& name) {
  for (const auto& [id, info] : self->state.members)
    if (info.name() == name) return &info;
  return nullptr;
}

// The raft address of a server: from the configuration, or, for a server
// that joined and has not applied the configuration yet, from discovery.
std::string address_of(const self_ptr& self, uint64_t id) {
  if (auto it = self->state.members.find(id); it != self->state.members.end())
    return it->second.raft_address();
  for (const auto& [name, info] : self->state.discovered)
    if (info.raft_id() == id) return info.raft_address();
  return {};
}

// The link to the server that sent the message being handled, when there
// is none yet (see link: with TLS the larger raft address never connects).
void learn_link(self_ptr self, uint64_t from) {
  auto sender = self->current_sender();
  if (!sender) return;
  auto address = address_of(self, from);
  if (address.empty()) return;
  auto& l = self->state.links[address];
  if (l.handle) return;
  l.handle = caf::actor_cast<replicated_log_actor>(sender);
  l.proven_to = false;
  l.last_proof = {};
  self->monitor(l.handle);
  prove_to(self, address);
}

// With TLS: whether the message being handled counts: from this process,
// or from a peer process whose server proof verified (tls/proof.hpp).

// With TLS: proves to the peer at `address`, over its link, that this
// server holds a server certificate: asks for a challenge, signs it, sends
// the certificate and the signature.  Once per link (again after it went
// down), retried every second while refused.
void prove_to(self_ptr self, const std::string& address) {
  auto& st = self->state;
  if (!st.opts.identity) return;
  auto& l = st.links[address];
  if (!l.handle || l.proven_to || l.proving) return;
  auto now = std::chrono::steady_clock::now();
  if (now - l.last_proof < std::chrono::seconds(1)) return;
  l.proving = true;
  l.last_proof = now;
  auto peer = l.handle;
  auto failed = [self, address, peer](const std::string& why) {
    auto& l = self->state.links[address];
    if (l.handle == peer) l.proving = false;
    logging::warn("raft", "a peer did not accept this server's certificate as a server's",
                  {{"peer", address}, {"error", why}});
  };
  self->request(peer, std::chrono::seconds(5), prove_atom::value)
      .then(
          [self, address, peer, failed](std::string& challenge) {
            auto proof = self->state.opts.identity->prove(challenge);
            if (auto* f = std::get_if<failure>(&proof)) {
              failed(f->message);
              return;
            }
            v1::ServerProof msg;
            *msg.mutable_server() = self->state.opts.self;
            msg.set_certificate(std::get<tls::server_proof>(proof).certificate);
            msg.set_signature(std::get<tls::server_proof>(proof).signature);
            self->request(peer, std::chrono::seconds(5), prove_atom::value, wrap(std::move(msg)))
                .then(
                    [self, address, peer](bool) {
                      auto& l = self->state.links[address];
                      if (l.handle != peer) return;
                      l.proving = false;
                      l.proven_to = true;
                      logging::debug("raft", "a peer accepted this server's certificate",
                                     {{"peer", address}});
                    },
                    [failed](caf::error& e) { failed(to_failure(e).message); });
          },
          [failed](caf::error& e) { failed(to_failure(e).message); });
}

// The raft link to member `id` (connected by this server, or learned from
// what the peer sent), for asking the peer something besides Raft: a
// second connection between two servers fails over CAF 0.17.6's TLS.
// Invalid while there is none (yet).
replicated_log_actor peer_link(self_ptr self, uint64_t id) {
  auto address = address_of(self, id);
  if (address.empty()) return {};
  return link(self, address);
}

std::string member_name(const self_ptr& self, uint64_t id) {
  if (auto it = self->state.members.find(id); it != self->state.members.end())
    return it->second.name();
  return std::to_string(id);
}

// Asks member `id`'s replicated log over the raft link and relays its answer.
template <class Reply, class... Ts>
caf::result<Reply> ask_peer(self_ptr self, uint64_t id, Ts... xs) {
  auto peer = peer_link(self, id);
  if (!peer)
    return make_error(errc::unavailable, "no raft connection to server '" + member_name(self, id) +
                                             "' yet (it is down or still connecting); retry");
  auto rp = self->make_response_promise<Reply>();
  self->request(peer, std::chrono::seconds(3), xs...)
      .then([rp](Reply& r) mutable { rp.deliver(std::move(r)); },
            [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

void send_messages(self_ptr self, std::vector<pbr::Message>& messages) {
  for (auto& m : messages) {
    auto address = address_of(self, m.to());
    if (address.empty()) continue;
    auto peer = link(self, address);
    bool snap = m.type() == pbr::MSG_SNAP;
    if (!peer) {
      if (snap) self->state.snapshots_sent.emplace_back(m.to(), false);
      // Raft copes with loss; tell it so it probes instead of streaming.
      self->state.unreachable.push_back(m.to());
      continue;
    }
    if (snap)  // the file in pieces first; the core hears how it went
      send_snapshot(self, peer, std::move(m));
    else
      self->send(peer, raft_atom::value, wrap(std::move(m)));
  }
}

// Whether the log on disk is what an install of the snapshot (`snap`) left
// half done: it has entries up to the snapshot's index but not the
// snapshot's last entry.  A complete install truncates the log, after which
// it starts right after the snapshot; a snapshot this server took keeps its
// last entry in the log.
bool interrupted_install(const std::vector<log_record>& log, const pbr::SnapshotMetadata& snap) {
  if (snap.index() == 0 || log.empty() || log.front().index > snap.index()) return false;
  for (const auto& r : log)
    if (r.index == snap.index()) return r.term != snap.term();
  return true;
}

// Tells the server whom this server follows (the leader's identity, or an
// empty one when none is known, and the term).
void announce_following(const self_ptr& self) {
  auto& st = self->state;
  v1::ServerInfo leader;
  if (auto it = st.members.find(st.soft.leader); it != st.members.end()) leader = it->second;
  // The term goes along so clients can fence off older leaders; it counts
  // only when a leader of it is known (soft.leader != 0).
  self->send(st.server, following_atom::value, st.soft.leader, wrap(std::move(leader)),
             st.node ? st.node->term() : uint64_t{0});
}

void learn_member(const self_ptr& self, const std::string& context) {
  v1::ServerInfo info;
  if (!context.empty() && info.ParseFromString(context)) raft_log_detail::learn_member(self, info);
}

}  // namespace

namespace raft_log_detail {

void learn_member(const self_ptr& self, const v1::ServerInfo& info) {
  auto& st = self->state;
  if (info.raft_id() == 0) return;
  bool news = !st.members.count(info.raft_id());
  st.members[info.raft_id()] = info;
  // A follower can hear from its leader before it has applied the entry
  // that names it (a new or restarted server, a busy one): its server was
  // told of a leader without an address, and would answer "no leader is
  // elected" to every forwarded request until the next election.  Tell it
  // again now that the address is known.
  if (news && st.server && st.soft.role != raft::role::leader && st.soft.leader == info.raft_id())
    announce_following(self);
}

}  // namespace raft_log_detail

namespace {

// Applies committed entries: to the state machine (all of them, so the
// applied index advances over configuration changes and empty entries
// too), to the address book, and to the proposals waiting for them.
// Whether a batch holds an operator restore (an entry replacing the state).
bool holds_restore(const committed_batch& batch) {
  for (const auto& [index, entry] : batch.entries)
    for (const auto& c : entry->changes())
      if (c.has_restore_state()) return true;
  return false;
}

void apply_committed(self_ptr self, const std::vector<pbr::Entry>& entries) {
  auto& st = self->state;
  if (entries.empty()) return;
  committed_batch batch;
  for (const auto& e : entries) {
    if (e.type() == pbr::ENTRY_CONF_CHANGE) {
      pbr::ConfChange cc;
      if (cc.ParseFromString(e.data())) {
        if (cc.type() == pbr::ADD_NODE) {
          learn_member(self, cc.context());
          auto it = st.members.find(cc.node_id());
          logging::info(
              "raft", "server added to the cluster",
              {{"server",
                it == st.members.end() ? std::to_string(cc.node_id()) : it->second.name()},
               {"raft_address", it == st.members.end() ? std::string() : it->second.raft_address()},
               {"index", e.index()}});
        }
        if (cc.type() == pbr::REMOVE_NODE) {
          auto it = st.members.find(cc.node_id());
          logging::info("raft", "server removed from the cluster",
                        {{"server", it == st.members.end() ? std::to_string(cc.node_id())
                                                           : it->second.name()},
                         {"index", e.index()}});
          st.members.erase(cc.node_id());
        }
      }
      batch.entries.emplace_back(e.index(), std::make_shared<const v1::LogEntry>());
    } else {
      // Decoded here, once for this server: the state machine and the
      // leader actor apply the same entry.  One that cannot be decoded
      // cannot be applied by anyone: the log is damaged (fail-stop; a
      // restart does not get past it either).
      auto entry = state_store::decode_entry(e.index(), e.data());
      if (!entry) fatal("cannot apply committed entries: " + entry.error().message);
      batch.entries.emplace_back(e.index(),
                                 std::make_shared<const v1::LogEntry>(std::move(*entry)));
      st.bytes_since_snapshot += e.data().size();
    }
    st.applied = e.index();
  }
  // The leader actor's catalog gets what the state machine gets, from the
  // state it was started with on.  An operator restore replaces the state
  // wholesale: the leader actor starts again from the restored tables.
  bool restore = false;
  if (st.soft.role == raft::role::leader && st.leading_announced) {
    restore = holds_restore(batch);
    if (st.forwarding)
      self->send(st.server, apply_atom::value, batch);
    else
      st.held.entries.insert(st.held.entries.end(), batch.entries.begin(), batch.entries.end());
  }
  // The state machine gets the entries before anyone hears they committed,
  // so whatever a proposer asks the state machine next sees them.
  self->send(st.machine, apply_atom::value, std::move(batch));
  for (const auto& e : entries) {
    auto it = st.proposals.find(e.index());
    if (it == st.proposals.end()) continue;
    if (it->second.term == e.term())
      it->second.promise.deliver(e.index());
    else
      it->second.promise.deliver(
          make_error(errc::unavailable, "the leader changed before the change committed; retry"));
    st.proposals.erase(it);
  }
  if (restore) st.leading_announced = false;
  // A new leader serves once the first entry of its term is applied: then
  // the state machine holds everything committed before it.
  if (st.soft.role == raft::role::leader && !st.leading_announced &&
      entries.back().term() == st.node->term()) {
    st.leading_announced = true;
    st.forwarding = false;
    st.held.entries.clear();
    auto announcement = ++st.announcement;
    self->request(st.machine, caf::infinite, load_atom::value)
        .then([self, term = st.node->term(), announcement](catalog& contents) {
          auto& st = self->state;
          if (st.soft.role != raft::role::leader || st.node->term() != term ||
              st.announcement != announcement)
            return;
          self->send(st.server, leading_atom::value, std::move(contents), term);
          // Applied after the load: the leader actor's catalog goes on from
          // the loaded state with these (the ones before are in it).
          if (!st.held.entries.empty())
            self->send(st.server, apply_atom::value, std::move(st.held));
          st.held.entries.clear();
          st.forwarding = true;
        },
        // The state machine cannot hand over its state: this server cannot
        // lead.  Ending the replicated log ends berthd (agent: vital
        // actors), and a supervisor's restart reloads from disk.
        [self](caf::error& e) {
          logging::error("raft", "the state machine could not load the state for a new leader",
                         {{"error", to_string(e)}});
          self->quit(e);
        });
  }
}

// Reads confirmed at an index that is applied now can be served.
void serve_reads(const self_ptr& self) {
  auto& st = self->state;
  while (!st.reads_waiting.empty() && st.reads_waiting.begin()->first <= st.applied) {
    st.reads_waiting.begin()->second.deliver(st.reads_waiting.begin()->first);
    st.reads_waiting.erase(st.reads_waiting.begin());
  }
}

// Pending proposals are in the log already: a next leader may still
// commit them, so their outcome is unknown (maybe applied); reads changed
// nothing and are safe to repeat.
void fail_proposals(const self_ptr& self, const std::string& why) {
  auto& st = self->state;
  for (auto& [index, p] : st.proposals)
    p.promise.deliver(to_error(failure{errc::unavailable,
                                       why + " before the change committed; a new leader may "
                                             "still commit it",
                                       false, true}));
  st.proposals.clear();
  for (auto& [ctx, p] : st.reads) p.deliver(make_error(errc::unavailable, why + "; retry"));
  st.reads.clear();
  for (auto& [index, p] : st.reads_waiting)
    p.deliver(make_error(errc::unavailable, why + "; retry"));
  st.reads_waiting.clear();
}

void on_soft_state(self_ptr self, const raft::soft_state& soft) {
  auto& st = self->state;
  bool was_leader = st.soft.role == raft::role::leader;
  if (soft.role != st.soft.role || soft.leader != st.soft.leader) {
    auto term = st.node->term();
    auto name_of_member = [&](uint64_t id) {
      auto it = st.members.find(id);
      return it == st.members.end() ? std::to_string(id) : it->second.name();
    };
    if (soft.role == raft::role::leader)
      logging::info("raft", "this server leads", {{"server", st.opts.self.name()}, {"term", term}});
    else if (was_leader)
      logging::warn("raft", "this server lost the leadership",
                    {{"server", st.opts.self.name()},
                     {"leader", soft.leader ? name_of_member(soft.leader) : std::string()},
                     {"term", term}});
    else if (soft.leader != 0)
      logging::info("raft", "following a new leader",
                    {{"leader", name_of_member(soft.leader)}, {"term", term}});
    else
      logging::debug("raft", "no leader known", {{"role", role_name(soft.role)}, {"term", term}});
  }
  st.soft = soft;
  if (was_leader && soft.role != raft::role::leader)
    fail_proposals(self, "this server lost the leadership");
  if (soft.role != raft::role::leader) {
    st.leading_announced = false;
    st.forwarding = false;
    st.held.entries.clear();
    announce_following(self);
  }
}

void flush(self_ptr self) {
  auto& st = self->state;
  st.flush_scheduled = false;
  if (!st.node) return;
  while (st.node->has_ready()) {
    auto rd = st.node->get_ready();
    log_write w;
    if (!rd.entries.empty()) w.truncate_from = rd.entries.front().index();
    if (rd.snapshot) {
      // The leader's snapshot replaces this server's log and state.
      place_received_snapshot(self, *rd.snapshot);
      w.truncate_from = 1;
    }
    for (const auto& e : rd.entries)
      w.entries.push_back({e.index(), e.term(), e.SerializeAsString()});
    // A hard state that only moved the commit index need not be synced
    // (it is learned again), but writing it with the entries is free.
    if (rd.hard_state && (rd.must_sync || !w.entries.empty()))
      w.meta["hard_state"] = rd.hard_state->SerializeAsString();
    // A leader sends its entries to the followers before writing them
    // itself, so the two fsyncs overlap instead of adding up (Raft thesis
    // 10.2.1). Safe: the leader counts its own copy, but the followers'
    // acknowledgements are handled only after this flush, i.e. after the
    // write below, and committed entries are applied after it too. Not
    // when this Ready changes the term or vote (a vote must be durable
    // before anyone hears of it), nor for a follower's or candidate's
    // messages (acknowledgements and votes promise what is on disk).
    const auto& persisted = st.storage.hard_state();
    bool send_first = (rd.soft_state ? rd.soft_state->role : st.soft.role) == raft::role::leader &&
                      !rd.snapshot &&
                      (!rd.hard_state || (rd.hard_state->term() == persisted.term() &&
                                          rd.hard_state->vote() == persisted.vote()));
    if (send_first) send_messages(self, rd.messages);
    if (!w.entries.empty() || !w.meta.empty()) {
      auto start = std::chrono::steady_clock::now();
      if (auto f = st.disk->write(w)) fatal("cannot write the log: " + f->message);
      std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      st.stats->log_written(w.entries.size(),
                            w.entries.empty() ? st.storage.last_index() : w.entries.back().index,
                            took.count());
    }
    if (rd.snapshot) {
      crashpoint("install.after_log_write");
      install_snapshot(self, *rd.snapshot);
    }
    st.storage.append(rd.entries);
    if (rd.hard_state) st.storage.set_hard_state(*rd.hard_state);
    if (!send_first) send_messages(self, rd.messages);
    if (rd.soft_state) on_soft_state(self, *rd.soft_state);
    for (auto& rs : rd.read_states) {
      auto it = st.reads.find(rs.context);
      if (it == st.reads.end()) continue;
      st.reads_waiting.emplace(rs.index, std::move(it->second));
      st.reads.erase(it);
    }
    apply_committed(self, rd.committed_entries);
    serve_reads(self);
    st.node->advance();
    maybe_snapshot(self);
    st.stats->raft_state(st.node->term(), st.soft.role == raft::role::leader,
                         st.storage.hard_state().commit(),
                         st.storage.last_index() + 1 - st.storage.first_index());
    for (auto id : st.unreachable) st.node->report_unreachable(id);
    st.unreachable.clear();
    for (auto [id, ok] : st.snapshots_sent) st.node->report_snapshot(id, ok);
    st.snapshots_sent.clear();
  }
}

std::string role_name(raft::role r) {
  switch (r) {
    case raft::role::leader:
      return "leader";
    case raft::role::candidate:
      return "candidate";
    case raft::role::pre_candidate:
      return "pre-candidate";
    default:
      return "follower";
  }
}

v1::ServerList known_servers(const self_ptr& self) {
  v1::ServerList out;
  out.set_bootstrapped(self->state.node && self->state.storage.last_index() > 0);
  if (out.bootstrapped())
    for (const auto& [id, info] : self->state.members) *out.add_servers() = info;
  else
    for (const auto& [name, info] : self->state.discovered) *out.add_servers() = info;
  return out;
}

void merge(const self_ptr& self, const v1::ServerList& list) {
  // A running cluster answered: this server waits to be added (or to hear
  // from the leader if it was among the initial members), never bootstraps.
  if (list.bootstrapped()) self->state.cluster_found = true;
  for (const auto& s : list.servers())
    if (!s.name().empty()) self->state.discovered[s.name()] = s;
}

// Before the cluster exists: announce ourselves to every server we know of
// and bootstrap once bootstrap_expect servers know each other.  A server
// that finds a bootstrapped cluster waits to be added by its leader.
void discover(self_ptr self) {
  auto& st = self->state;
  std::set<std::string> targets(st.opts.join.begin(), st.opts.join.end());
  for (const auto& [name, info] : st.discovered)
    if (name != st.opts.self.name()) targets.insert(info.raft_address());
  for (const auto& address : targets) {
    auto peer = link(self, address);
    if (!peer) continue;
    if (st.opts.identity && !st.links[address].proven_to) {
      prove_to(self, address);  // a hello counts only after the proof
      continue;
    }
    self->request(peer, std::chrono::seconds(2), hello_atom::value, wrap(known_servers(self)))
        .then([self](pb<v1::ServerList>& reply) { merge(self, reply.msg); }, [](caf::error&) {});
  }
  if (st.cluster_found || st.discovered.size() < st.opts.bootstrap_expect) return;
  std::vector<raft::peer> peers;
  for (const auto& [name, info] : st.discovered)
    peers.push_back({info.raft_id(), info.SerializeAsString()});
  auto r = st.node->bootstrap(peers);
  if (!r.ok()) fatal("cannot bootstrap the cluster: " + r.message());
  for (const auto& [name, info] : st.discovered) st.members[info.raft_id()] = info;
  schedule_flush(self);
}

// A server that announces itself to a running cluster's leader is added
// (one membership change at a time).
void maybe_add(self_ptr self, const v1::ServerList& list) {
  auto& st = self->state;
  if (st.soft.role != raft::role::leader || list.bootstrapped()) return;
  for (const auto& s : list.servers()) {
    if (s.raft_id() == 0 || st.members.count(s.raft_id())) continue;
    pbr::ConfChange cc;
    cc.set_type(pbr::ADD_NODE);
    cc.set_node_id(s.raft_id());
    cc.set_context(s.SerializeAsString());
    st.node->propose_conf_change(cc);
    schedule_flush(self);
    return;
  }
}

}  // namespace

uint64_t raft_id_of(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h == 0 ? 1 : h;
}

replicated_log_actor::behavior_type raft_log(self_ptr self, raft_options opts,
                                             std::shared_ptr<log_store> disk, uint64_t applied,
                                             state_machine_actor machine, server_actor server,
                                             std::shared_ptr<metrics> stats) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.opts.self.set_raft_id(raft_id_of(st.opts.self.name()));
  st.disk = std::move(disk);
  st.machine = std::move(machine);
  st.server = std::move(server);
  st.stats = std::move(stats);
  st.applied = applied;
  st.discovered[st.opts.self.name()] = st.opts.self;
  // Restart: the core's storage is what the disk holds: the snapshot, then
  // the entries after it.
  st.snapshot_path = snapshot_path_of(*st.disk);
  load_snapshot(self);
  std::vector<pbr::Entry> entries;
  auto read = st.disk->read(1, UINT64_MAX);
  if (!read) fatal(read.error().message);
  auto records = std::move(*read);
  if (interrupted_install(records, st.storage.snapshot().metadata())) {
    // A crash while installing a leader's snapshot, after its file was
    // written but before the log was truncated: the log does not lead up
    // to the snapshot.  Truncate it now, as the install would have, before
    // entries after the snapshot are appended behind a gap.
    log_write w;
    w.truncate_from = 1;
    if (auto f = st.disk->write(w)) fatal(f->message);
    records.clear();
  }
  for (auto& r : records) {
    pbr::Entry e;
    if (!e.ParseFromString(r.data))
      fatal(damage_message(st.disk->path(),
                           "entry " + std::to_string(r.index) + " cannot be decoded"));
    if (e.type() == pbr::ENTRY_CONF_CHANGE) {
      pbr::ConfChange cc;
      if (cc.ParseFromString(e.data()) && cc.type() == pbr::ADD_NODE)
        learn_member(self, cc.context());
    }
    entries.push_back(std::move(e));
  }
  st.storage.append(entries);
  auto hard_state = st.disk->meta("hard_state");
  if (!hard_state) fatal(hard_state.error().message);
  if (auto& bytes = *hard_state) {
    pbr::HardState hs;
    hs.ParseFromString(*bytes);
    st.storage.set_hard_state(hs);
  }
  raft::config cfg;
  cfg.id = st.opts.self.raft_id();
  cfg.applied = applied;
  cfg.seed =
      cfg.id ^ static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  st.node = std::make_unique<raft::node>(cfg, st.storage);
  self->set_down_handler([self](caf::down_msg& dm) {
    for (auto& [address, l] : self->state.links)
      if (l.handle && l.handle.address() == dm.source) {
        l.handle = nullptr;
        l.proven_to = false;
        l.proving = false;
      }
    // A new connection of that process proves itself again.
    self->state.proven.erase(dm.source.node());
    self->state.challenges.erase(dm.source.node());
  });
  self->send(self, tick_atom::value);
  return {
      [self](propose_atom, pb<v1::LogEntry>& entry, uint64_t term) -> caf::result<uint64_t> {
        auto& st = self->state;
        if (auto why = raft::proposal_refusal(
                st.soft.role == raft::role::leader && st.leading_announced, st.node->term(), term)) {
          std::string leader;
          if (auto it = st.members.find(st.soft.leader); it != st.members.end())
            leader = " (the leader is " + it->second.name() + ")";
          return make_error(errc::unavailable, *why + leader + "; retry");
        }
        auto r = st.node->propose(entry.msg.SerializeAsString());
        if (!r.ok()) return make_error(errc::unavailable, "cannot propose: " + r.message());
        auto promise = self->make_response_promise<uint64_t>();
        st.proposals.emplace(r.index, raft_log_state::pending{r.term, promise});
        schedule_flush(self);
        return promise;
      },
      [self](read_atom) -> caf::result<uint64_t> {
        auto& st = self->state;
        if (st.soft.role != raft::role::leader || !st.leading_announced)
          return make_error(errc::unavailable, "this server does not lead; retry");
        auto ctx = std::to_string(++st.next_read);
        auto r = st.node->read_index(ctx);
        if (!r.ok()) return make_error(errc::unavailable, "cannot read now: " + r.message());
        auto promise = self->make_response_promise<uint64_t>();
        st.reads.emplace(ctx, promise);
        schedule_flush(self);
        return promise;
      },
      [self](raft_atom, pb<pbr::Message>& m) {
        if (!from_proven(self)) return;  // (prove_atom logs why once)
        learn_link(self, m.msg.from());
        if (m.msg.type() == pbr::MSG_SNAP && !snapshot_arrived(self, m.msg)) return;
        self->state.node->step(m.msg);
        schedule_flush(self);
      },
      [self](snapshot_atom, uint64_t from, uint64_t term, uint64_t index, uint64_t offset,
             std::string& bytes, bool last) -> caf::result<uint64_t> {
        return receive_piece(self, from, term, index, offset, bytes, last);
      },
      [self](hello_atom, pb<v1::ServerList>& list) -> caf::result<pb<v1::ServerList>> {
        if (!from_proven(self))
          return make_error(errc::refused,
                            "this server has not seen a proof that the sender holds a server "
                            "certificate (tls/proof.hpp); it sends one first");
        if (self->state.storage.last_index() == 0)
          merge(self, list.msg);
        else
          maybe_add(self, list.msg);
        return wrap(known_servers(self));
      },
      [self](status_atom) -> pb<v1::RaftStatus> {
        auto& st = self->state;
        auto s = st.node->status();
        v1::RaftStatus out;
        *out.mutable_server() = st.opts.self;
        out.set_role(role_name(s.role));
        out.set_term(s.term);
        out.set_leader_id(s.leader);
        out.set_commit_index(s.commit);
        out.set_applied_index(st.applied);
        out.set_last_index(s.last_index);
        for (const auto& [id, info] : st.members) *out.add_members() = info;
        return wrap(std::move(out));
      },
      [self](prove_atom) -> std::string {
        auto sender = self->current_sender();
        auto challenge = tls::new_challenge();
        if (sender) self->state.challenges[sender->node()] = challenge;
        return challenge;
      },
      [self](prove_atom, pb<v1::ServerProof>& p) -> caf::result<bool> {
        auto& st = self->state;
        if (!st.opts.identity) return true;
        auto sender = self->current_sender();
        if (!sender) return make_error(errc::refused, "a server proof needs a sender");
        auto node = sender->node();
        auto it = st.challenges.find(node);
        if (it == st.challenges.end())
          return make_error(errc::refused, "no challenge was asked for this proof; ask first");
        auto challenge = std::move(it->second);
        st.challenges.erase(it);
        const auto& who = p.msg.server();
        auto r = tls::verify_server_proof(st.opts.identity->ca_pem(), challenge,
                                          {p.msg.certificate(), p.msg.signature()});
        if (auto* f = std::get_if<failure>(&r)) {
          if (st.refusal_logged.insert(node).second)
            logging::warn("raft", "ignoring a peer: it did not prove it holds a server certificate",
                          {{"peer", who.name()},
                           {"raft_address", who.raft_address()},
                           {"error", f->message}});
          return to_error(*f);
        }
        st.proven.insert(node);
        st.refusal_logged.erase(node);
        logging::debug("raft", "a peer proved it holds a server certificate",
                       {{"peer", who.name()}, {"certificate", std::get<std::string>(r)}});
        // The sender is the peer's replicated log: the link back to it.
        if (!who.raft_address().empty() && who.name() != st.opts.self.name()) {
          auto& l = st.links[who.raft_address()];
          if (!l.handle) {
            l.handle = caf::actor_cast<replicated_log_actor>(sender);
            l.proven_to = false;
            l.last_proof = {};
            self->monitor(l.handle);
          }
          prove_to(self, who.raft_address());
        }
        return true;
      },
      [self](status_atom, uint64_t id) -> caf::result<pb<v1::RaftStatus>> {
        return ask_peer<pb<v1::RaftStatus>>(self, id, status_atom::value);
      },
      [self](api_atom) -> api_actor { return self->state.server; },
      [self](api_atom, uint64_t id) -> caf::result<api_actor> {
        if (id == self->state.opts.self.raft_id()) return api_actor{self->state.server};
        return ask_peer<api_actor>(self, id, api_atom::value);
      },
      [self](remove_atom, const std::string& name) -> caf::result<std::string> {
        auto& st = self->state;
        const auto* m = member_by_name(self, name);
        if (m == nullptr)
          return make_error(errc::not_found, "server '" + name + "' is not a member");
        pbr::ConfChange cc;
        cc.set_type(pbr::REMOVE_NODE);
        cc.set_node_id(m->raft_id());
        auto r = st.node->propose_conf_change(cc);
        if (!r.ok())
          return make_error(errc::refused, "cannot remove '" + name + "': " + r.message());
        schedule_flush(self);
        return "removal of server '" + name + "' proposed";
      },
      [self](transfer_atom, const std::string& name) -> caf::result<std::string> {
        auto& st = self->state;
        uint64_t to = 0;
        if (name.empty()) {
          uint64_t best = 0;
          for (const auto& [id, pr] : st.node->status().progress)
            if (id != st.opts.self.raft_id() && pr.match >= best) {
              best = pr.match;
              to = id;
            }
        } else if (const auto* m = member_by_name(self, name)) {
          to = m->raft_id();
        }
        if (to == 0)
          return make_error(errc::not_found, "no server '" + name + "' to hand leadership to");
        auto r = st.node->transfer_leadership(to);
        if (!r.ok()) return make_error(errc::refused, "cannot transfer leadership: " + r.message());
        schedule_flush(self);
        return "leadership transfer to '" + st.members[to].name() + "' started";
      },
      [self](tick_atom) {
        auto& st = self->state;
        st.stats->mailbox("replicated_log", self->mailbox().size());
        if (st.storage.last_index() == 0) discover(self);
        // Keep a connection to every member at all times: a message to a
        // member without one is dropped, and followers talk to each other
        // only in an election, when a lost vote request costs a round.
        for (const auto& [id, info] : st.members)
          if (id != st.opts.self.raft_id() && !info.raft_address().empty())
            link(self, info.raft_address());
        if (st.opts.identity)
          for (auto& [address, l] : st.links) prove_to(self, address);
        st.node->tick();
        schedule_flush(self);
        self->delayed_send(self, st.opts.tick, tick_atom::value);
      },
      [self](flush_atom) { flush(self); },
  };
}

}  // namespace berth
