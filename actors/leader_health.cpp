// The leader actor: volume health and usage (issue 14).  Every
// --volume-health-interval it asks, per plugin, a node running a capable
// controller (fenced with its term) for its volumes' condition, and has the
// actor of each volume whose condition changed commit it; clients' usage
// reports commit one node upsert when a value changed.  What to ask and
// what changed is control/health's.
#include <caf/typed_event_based_actor.hpp>

#include "actors/clock.hpp"
#include "messages/failure.hpp"
#include "actors/leader_flows.hpp"
#include "control/entries.hpp"
#include "control/health.hpp"
#include "control/placement.hpp"
#include "log/log.hpp"

namespace berth::leader_flows {

namespace {

// Has the volume's actor commit its new condition, and logs the change
// once it is committed (a check of the plugin runs only after the last one
// finished, so a change is logged once).
void commit_condition(const self_ptr& self, const condition_change& ch,
                      std::shared_ptr<size_t> left, std::string plugin) {
  auto done = [self, left, plugin]() {
    if (--*left == 0) self->state.health_checking.erase(plugin);
  };
  ask_volume_actor<pb<v1::Volume>>(
      self, ch.key,
      [ch, done, plugin](pb<v1::Volume>&) {
        if (ch.abnormal_now)
          logging::warn("leader", condition_log_line(ch),
                        {{"namespace", ch.key.first},
                         {"volume", ch.key.second},
                         {"plugin", plugin},
                         {"message", ch.to.message()}});
        else
          logging::info(
              "leader", condition_log_line(ch),
              {{"namespace", ch.key.first}, {"volume", ch.key.second}, {"plugin", plugin}});
        done();
      },
      [ch, done](caf::error& e) {
        logging::warn("leader", "volume condition not committed",
                      {{"namespace", ch.key.first},
                       {"volume", ch.key.second},
                       {"error", to_failure(e).message}});
        done();
      },
      condition_atom::value, wrap(ch.to));
}

void check_plugin(const self_ptr& self, const std::string& plugin_id) {
  auto& st = self->state;
  const auto* p = find_plugin(st.cat, plugin_id);
  if (p == nullptr) return;
  auto plan = plan_health_check(*p, controller_candidates(*p, [&](const std::string& n) {
    return static_cast<bool>(node_of(self, n));
  }));
  auto req = health_request(st.cat, plugin_id, plan.call);
  if (!req) return;
  auto chosen = next_in_turn(plan.controllers, st.controller_turn[plugin_id]);
  if (!chosen) return;
  auto node = node_of(self, *chosen);
  st.health_checking.insert(plugin_id);
  logging::debug("leader",
                 plan.call == health_call::list_volumes
                     ? "volume health check (ListVolumes)"
                     : "volume health check (ControllerGetVolume)",
                 {{"plugin", plugin_id}, {"node", *chosen}});
  self->request(node, std::chrono::seconds(75), health_atom::value, wrap(*req), st.options.term)
      .then(
          [self, plugin_id](pb<v1::VolumeHealthResult>& r) {
            auto changes = condition_changes(self->state.cat, plugin_id, r.msg, wall_ms());
            if (changes.empty()) {
              self->state.health_checking.erase(plugin_id);
              return;
            }
            auto left = std::make_shared<size_t>(changes.size());
            for (const auto& ch : changes) commit_condition(self, ch, left, plugin_id);
          },
          [self, plugin_id](caf::error& e) {
            self->state.health_checking.erase(plugin_id);
            logging::debug("leader", "volume health check failed",
                           {{"plugin", plugin_id}, {"error", to_failure(e).message}});
          });
}

}  // namespace

void check_volume_health(const self_ptr& self) {
  auto& st = self->state;
  auto now = steady_ms();
  if (!health_due(st.health_checked_ms, now, st.options.volume_health_ms)) return;
  st.health_checked_ms = now;
  for (const auto& [id, p] : st.cat.plugins)
    if (!st.health_checking.count(id)) check_plugin(self, id);
}

void volume_stats_report(const self_ptr& self, v1::VolumeStatsReport r, response_promise rp) {
  auto node = r.node_id();
  write(
      self,
      [r = std::move(r)](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        auto next = node_after_report(c, r);
        if (auto* f = std::get_if<failure>(&next)) return *f;
        auto& n = std::get<std::optional<v1::Node>>(next);
        if (!n) return std::vector<v1::Change>{};  // nothing changed: no entry
        return std::vector<v1::Change>{upsert_change(*n)};
      },
      [rp, node](std::optional<failure> f) mutable {
        if (f) {
          deliver(rp, *f);
          return;
        }
        v1::Response out;
        out.set_message("volume stats of node " + quote_name(node) + " taken");
        deliver(rp, std::move(out));
      });
}

void announce_volume_health(const self_ptr& self, const volume_key& key) {
  self->state.stats->volume_health(key.first, key.second, series_of(self->state.cat, key));
}

}  // namespace berth::leader_flows
