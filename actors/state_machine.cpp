#include "actors/state_machine.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "control/acl.hpp"
#include "control/events.hpp"
#include "control/views.hpp"

namespace berth {

namespace {

using self_ptr = state_machine_actor::stateful_pointer<state_machine_state>;

// The state tables cannot be read or written: nothing this server would
// answer from them can be trusted.  The log still holds every committed
// entry; a restart applies them again (fail-stop).
[[noreturn]] void stop(const char* what, const failure& f) {
  std::fprintf(stderr, "berthd: fatal: cannot %s: %s\n", what, f.message.c_str());
  std::_Exit(70);
}

template <class T>
T need(const char* what, expected<T> e) {
  if (!e) stop(what, e.error());
  return std::move(*e);
}

void need(const char* what, const std::optional<failure>& f) {
  if (f) stop(what, *f);
}

// The catalog of what the state tables hold, each volume decoded once into
// its row.
catalog catalog_of(state_store& store) {
  catalog out;
  auto c = need("load the state", store.load(false));
  out.applied_index = c.applied_index;
  out.volumes_index = out.plugins_index = c.applied_index;
  need("load the state", store.each_volume([&](const v1::Volume& v, const std::string& bytes) {
    add_volume(out, v, bytes);
  }));
  for (auto& p : c.plugins) out.plugins.emplace(p.id(), std::move(p));
  for (auto& n : c.nodes) out.nodes.emplace(n.id(), std::move(n));
  for (auto& a : c.allocs) out.allocs.emplace(a.id(), std::move(a));
  add_acl(out, std::move(c.acl_policies), std::move(c.acl_tokens), c.acl_bootstrap_index);
  return out;
}

// Reads the catalog again from the state tables (at start-up, after a
// restore or a snapshot installed), keeping its row exchange.
void reload(state_machine_state& st) {
  auto rows = st.cat.rows;
  st.cat = catalog_of(*st.store);
  st.cat.rows = std::move(rows);
  st.cat.party = row_exchange::machine;
}

// Applies the batch to the state tables and to the catalog, collecting the
// events.  A restore replaces the tables at its index: the catalog is read
// again from them there, before the entries after it.
std::vector<v1::Event> apply_entries(self_ptr self, const committed_batch& batch) {
  auto& st = self->state;
  std::vector<v1::Event> events;
  // Each entry was decoded once, by the replicated log, for the catalogs
  // and the state tables.
  const char* what = "apply committed entries";
  const auto& entries = batch.entries;
  auto start = entries.cbegin();
  for (auto it = entries.cbegin(); it != entries.cend(); ++it) {
    if (it->first <= st.cat.applied_index) {
      start = it + 1;
      continue;
    }
    for (auto& e : events_of(it->first, apply(st.cat, it->first, *it->second)))
      events.push_back(std::move(e));
    if (!st.cat.restored) continue;
    need(what, st.store->apply(start, it + 1));
    start = it + 1;
    reload(st);
  }
  need(what, st.store->apply(start, entries.cend()));
  return events;
}

}  // namespace

state_machine_actor::behavior_type state_machine(
    state_machine_actor::stateful_pointer<state_machine_state> self,
    std::shared_ptr<state_store> store, std::shared_ptr<metrics> stats,
    event_journal_actor journal, bool acl) {
  self->state.acl = acl;
  self->state.store = std::move(store);
  self->state.stats = std::move(stats);
  self->state.journal = std::move(journal);
  self->state.cat.rows = std::make_shared<row_exchange>();
  self->state.cat.rows->attach(row_exchange::machine);
  reload(self->state);
  return {
      [self](apply_atom, const committed_batch& batch) {
        self->state.stats->mailbox("state_machine", self->mailbox().size());
        auto events = apply_entries(self, batch);
        if (!batch.entries.empty()) self->state.stats->applied(batch.entries.back().first);
        self->send(self->state.journal, apply_atom::value,
                   event_batch{std::move(events), self->state.cat.applied_index, false});
      },
      [self](applied_atom) -> uint64_t {
        return need("read the applied index", self->state.store->applied_index());
      },
      [self](load_atom) -> catalog {
        // A copy: the rows (every volume) are shared, not copied.
        const auto& cat = self->state.cat;
        return cat.restored ? catalog_of(*self->state.store) : cat;
      },
      [self](read_atom, const pb<v1::Request>& req) -> pb<v1::Response> {
        acl::grant g;
        if (self->state.acl)
          if (auto f = acl::check(self->state.cat, req.msg, g)) return wrap(error_response(*f));
        auto r = answer_read(self->state.cat, req.msg,
                             [](const std::string&) { return int64_t{0}; });
        if (!r) return wrap(error_response(failure{errc::invalid, "not a read"}));
        if (self->state.acl) acl::filter_response(g, req.msg, *r);
        return wrap(std::move(*r));
      },
      [self](acl_atom, const pb<v1::Request>& req) -> pb<v1::Response> {
        acl::grant g;
        if (auto f = acl::check(self->state.cat, req.msg, g)) return wrap(error_response(*f));
        return wrap(v1::Response{});
      },
      [self](acl_atom, const pb<v1::Request>& req, pb<v1::Response>& resp) -> pb<v1::Response> {
        acl::grant g;
        if (auto f = acl::check(self->state.cat, req.msg, g)) return wrap(error_response(*f));
        acl::filter_response(g, req.msg, resp.msg);
        auto* events = resp.msg.mutable_events();
        events->erase(std::remove_if(events->begin(), events->end(),
                                     [&](const v1::Event& e) { return !acl::may_see(g, e); }),
                      events->end());
        return std::move(resp);
      },
      // A copy that cannot be made (a full disk, a path taken) changes no
      // state: it is answered as a failure, and this server serves on.
      [self](snapshot_atom) -> caf::result<uint64_t, std::string> {
        auto index = need("read the applied index", self->state.store->applied_index());
        auto bytes = self->state.store->snapshot();
        if (!bytes) return to_error(bytes.error());
        return {index, std::move(*bytes)};
      },
      [self](snapshot_atom, const std::string& path) -> caf::result<uint64_t> {
        if (auto f = self->state.store->snapshot_to(path)) return to_error(*f);
        return need("read the applied index", self->state.store->applied_index());
      },
      [self](install_atom, const std::string& snapshot_path) {
        need("install a snapshot", self->state.store->install_snapshot_file(snapshot_path));
        std::remove(snapshot_path.c_str());
        self->state.stats->applied(
            need("read the applied index", self->state.store->applied_index()));
        // The events up to the snapshot's index were never applied here.
        reload(self->state);
        self->send(self->state.journal, apply_atom::value,
                   event_batch{{}, self->state.cat.applied_index, true});
      },
      [self](digest_atom) -> std::tuple<uint64_t, std::string> {
        return {need("read the applied index", self->state.store->applied_index()),
                need("digest the state", self->state.store->digest())};
      },
  };
}

}  // namespace berth
