#include "actors/watcher.hpp"

#include <chrono>

#include "actors/clock.hpp"
#include "log/log.hpp"
#include "messages/model.hpp"

namespace berth {

namespace {

using self_ptr = watcher_actor::stateful_pointer<watcher_state>;
using volume_key = watcher_state::volume_key;
using claim_key = watcher_state::claim_key;

constexpr auto tick_interval = std::chrono::milliseconds(100);



void schedule(self_ptr self) {
  auto& st = self->state;
  st.stats->watcher_pending(st.pending.size());
  if (st.ticking || st.pending.empty()) return;
  st.ticking = true;
  self->delayed_send(self, tick_interval, tick_atom::value);
}

// Recomputes which claims of one volume need releasing.
void rescan(self_ptr self, const volume_key& key) {
  auto& st = self->state;
  auto it = st.volumes.find(key);
  std::set<std::string> wanted;
  if (it != st.volumes.end()) {
    auto ids = claims_to_release(it->second, [&](const std::string& alloc)
                                                 -> std::optional<v1::AllocState> {
      auto a = st.allocs.find(alloc);
      if (a == st.allocs.end()) return std::nullopt;
      return a->second;
    });
    wanted.insert(ids.begin(), ids.end());
  }
  // Drop work whose claim no longer needs it (freed, or its alloc is live
  // again), unless a release of it is running.
  for (auto p = st.pending.lower_bound({key.first, key.second, ""});
       p != st.pending.end() && std::get<0>(p->first) == key.first &&
       std::get<1>(p->first) == key.second;) {
    if (!wanted.count(std::get<2>(p->first)) && !p->second.in_flight)
      p = st.pending.erase(p);
    else
      ++p;
  }
  for (const auto& alloc : wanted) {
    auto [p, fresh] = st.pending.try_emplace({key.first, key.second, alloc});
    if (fresh) p->second.due_ms = steady_ms();
  }
  schedule(self);
}

void start_release(self_ptr self, const claim_key& key) {
  v1::ReleaseRequest r;
  r.set_namespace_(std::get<0>(key));
  r.set_volume_id(std::get<1>(key));
  r.set_alloc_id(std::get<2>(key));
  // The claim judged, so that a new claim of the alloc made after it was
  // freed (waiting ahead of this release in the volume's actor) is kept.
  auto& st = self->state;
  if (auto v = st.volumes.find({std::get<0>(key), std::get<1>(key)}); v != st.volumes.end())
    if (const auto* c = find_claim(v->second, std::get<2>(key)))
      r.set_judged_claimed_at_ms(c->claimed_at_ms());
  self->state.pending[key].in_flight = true;
  self->request(self->state.leader, caf::infinite, release_atom::value, wrap(std::move(r)))
      .then(
          [self, key](pb<v1::Volume>&) {
            auto& st = self->state;
            st.pending.erase(key);
            rescan(self, {std::get<0>(key), std::get<1>(key)});
          },
          [self, key](caf::error& e) {
            auto& st = self->state;
            auto it = st.pending.find(key);
            if (it == st.pending.end()) return;
            auto f = to_failure(e);
            // The claim judged or the volume is gone; another claim of the
            // alloc taken since may need its own release: judged afresh.
            if (f.code == errc::not_found) {
              st.pending.erase(it);
              rescan(self, {std::get<0>(key), std::get<1>(key)});
              return;
            }
            auto& w = it->second;
            w.in_flight = false;
            ++w.attempts;
            w.last_error = f.message;
            std::uniform_real_distribution<double> jitter(0.0, 1.0);
            auto delay = retry_delay_ms(w.attempts, jitter(st.rng));
            w.due_ms = steady_ms() + delay;
            w.next_retry_ms = wall_ms() + delay;
            st.stats->watcher_retry();
            logging::warn("watcher", "claim release failed, retrying",
                          {{"namespace", std::get<0>(key)}, {"volume", std::get<1>(key)},
                           {"alloc", std::get<2>(key)}, {"attempts", w.attempts},
                           {"retry_in_ms", delay}, {"error", f.message}});
            schedule(self);
          });
}

}  // namespace

watcher_actor::behavior_type watcher(self_ptr self, leader_actor leader,
                                     std::shared_ptr<metrics> stats) {
  self->state.leader = std::move(leader);
  self->state.stats = std::move(stats);
  return {
      [self](changed_atom, pb<v1::Volume>& v) {
        auto& st = self->state;
        volume_key key{v.msg.namespace_(), v.msg.id()};
        if (auto old = st.volumes.find(key); old != st.volumes.end())
          for (const auto& c : old->second.claims()) st.volumes_of_alloc[c.alloc_id()].erase(key);
        for (const auto& c : v.msg.claims()) st.volumes_of_alloc[c.alloc_id()].insert(key);
        if (v.msg.claims().empty())
          st.volumes.erase(key);
        else
          st.volumes[key] = std::move(v.msg);
        rescan(self, key);
      },
      [self](removed_atom, pb<v1::VolumeKey>& k) {
        volume_key key{k.msg.namespace_(), k.msg.id()};
        self->state.volumes.erase(key);
        rescan(self, key);
      },
      [self](changed_atom, pb<v1::Alloc>& a) {
        auto& st = self->state;
        st.allocs[a.msg.id()] = a.msg.state();
        auto keys = st.volumes_of_alloc[a.msg.id()];
        for (const auto& key : keys) rescan(self, key);
      },
      [self](removed_atom, const std::string& alloc) {
        auto& st = self->state;
        st.allocs.erase(alloc);
        auto keys = st.volumes_of_alloc[alloc];
        for (const auto& key : keys) rescan(self, key);
      },
      [self](tick_atom) {
        auto& st = self->state;
        st.stats->mailbox("watcher", self->mailbox().size());
        st.ticking = false;
        auto now = steady_ms();
        std::vector<claim_key> due;
        for (const auto& [key, w] : st.pending)
          if (!w.in_flight && w.due_ms <= now) due.push_back(key);
        for (const auto& key : due) start_release(self, key);
        schedule(self);
      },
      [self](status_atom) -> pb<v1::WatcherStatus> {
        v1::WatcherStatus s;
        for (const auto& [key, w] : self->state.pending) {
          auto* r = s.add_releases();
          r->set_namespace_(std::get<0>(key));
          r->set_volume_id(std::get<1>(key));
          r->set_alloc_id(std::get<2>(key));
          r->set_attempts(w.attempts);
          r->set_last_error(w.last_error);
          r->set_next_retry_ms(w.in_flight ? 0 : w.next_retry_ms);
        }
        return wrap(std::move(s));
      },
  };
}

}  // namespace berth
