#include "actors/node_plugins.hpp"

#include <chrono>

#include "actors/clock.hpp"
#include "actors/csi_plugin.hpp"

namespace berth {

namespace {

void on_probed(node_self self, const node_plugin& p, v1::PluginInstance inst) {
  auto& st = self->state;
  auto known = st.instances.find(p.id);
  inst = probed_instance(known == st.instances.end() ? nullptr : &known->second, std::move(inst),
                         st.config.node_id);
  if (p.type != v1::PLUGIN_NODE) inst.set_max_calls(p.max_controller_calls);
  st.instances[p.id] = inst;
  if (inst.healthy() && st.ready_plugins.insert(p.id).second)
    for (auto& w : st.waiting.ready(p.id)) w.go();
  auto key = inst.SerializeAsString();
  if (st.reported[p.id] == key || !st.api) return;
  self->request(st.api, std::chrono::seconds(30), api_atom::value,
                wrap(fingerprint_report(p, st.config.node_id, st.config.node_secret, inst)))
      .then(
          [self, id = p.id, key](pb<v1::Response>& r) {
            // Remember only what the leader accepted; otherwise the next
            // round reports again.
            if (r.msg.error().code() == v1::OK) self->state.reported[id] = key;
          },
          [](caf::error&) {});
}

}  // namespace

void connect_plugins(node_self self) {
  auto& st = self->state;
  for (const auto& p : st.config.plugins)
    st.connections.emplace(
        p.id, self->spawn<caf::linked>(csi_plugin, p, st.config.csi_timeout, st.stats,
                                       st.fence.published(), st.publish_floor));
}

void fingerprint(node_self self) {
  for (const auto& p : self->state.config.plugins) {
    if (!self->state.probing.insert(p.id).second) continue;  // its last probe still runs
    csi_job job{[type = p.type](csi::client& c) { return probe_plugin(c, type); },
                call_kind::identity, ""};
    self->request(self->state.connections.at(p.id), caf::infinite, csi_atom::value, std::move(job))
        .then(
            [self, p](csi_outcome& out) {
              self->state.probing.erase(p.id);
              on_probed(self, p, std::move(out.instance));
            },
            // The connection ended (it is restarted): the next tick probes again.
            [self, id = p.id](caf::error&) { self->state.probing.erase(id); });
  }
}

bool run_csi(node_self self, const std::string& plugin_id, std::function<csi_job(bool)> make_job,
             std::function<void(csi_outcome&)> done, std::function<void(caf::error)> fail) {
  auto& st = self->state;
  auto it = st.connections.find(plugin_id);
  if (it == st.connections.end()) {
    fail(make_error(errc::refused, "node '" + st.config.node_id + "' runs no plugin '" + plugin_id +
                                       "' (configure it with --plugin)"));
    return false;
  }
  auto go = [self, plugin_id, conn = it->second, make_job = std::move(make_job), done, fail] {
    auto inst = self->state.instances.find(plugin_id);
    bool stages = inst != self->state.instances.end() && inst->second.stage_unstage();
    self->request(conn, caf::infinite, csi_atom::value, make_job(stages))
        .then([done](csi_outcome& out) { done(out); }, [fail](caf::error& e) { fail(e); });
  };
  if (st.ready_plugins.count(plugin_id)) {
    go();
    return false;
  }
  st.waiting.add(
      {plugin_id, steady_ms() + st.config.csi_timeout.count(), std::move(go), std::move(fail)});
  return true;
}

void expire_waiting(node_self self, int64_t now_ms) {
  auto& st = self->state;
  for (auto& w : st.waiting.expired(now_ms))
    w.fail(make_error(errc::unavailable, where(st.config.node_id, w.plugin) +
                                             " has not been healthy since the client started "
                                             "(is it running?); retry once it is"));
}

}  // namespace berth
