#include "actors/clock.hpp"
#include "actors/node.hpp"

#include <filesystem>

#include <set>

#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>

#include "actors/csi_plugin.hpp"
#include "actors/alloc_process.hpp"
#include "csi/client.hpp"

#include <signal.h>

namespace berth {

namespace {

namespace fs = std::filesystem;
using self_ptr = node_actor::stateful_pointer<node_state>;
using result_promise = caf::typed_response_promise<pb<v1::NodeVolumeResult>>;

// berth's access modes as CSI's (the wire numbers differ).
csi::access_mode to_csi(v1::AccessMode m) {
  switch (m) {
    case v1::SINGLE_NODE_READER_ONLY: return csi::access_mode::single_node_reader_only;
    case v1::SINGLE_NODE_WRITER: return csi::access_mode::single_node_writer;
    case v1::MULTI_NODE_READER_ONLY: return csi::access_mode::multi_node_reader_only;
    case v1::MULTI_NODE_SINGLE_WRITER: return csi::access_mode::multi_node_single_writer;
    case v1::MULTI_NODE_MULTI_WRITER: return csi::access_mode::multi_node_multi_writer;
    default: return csi::access_mode::unknown;
  }
}

csi::string_map to_map(const google::protobuf::Map<std::string, std::string>& m) {
  return csi::string_map(m.begin(), m.end());
}

csi::volume_capability capability(const v1::NodeVolumeRequest& r) {
  csi::volume_capability c;
  c.mode = to_csi(r.access_mode());
  c.block = r.attachment_mode() == v1::BLOCK_DEVICE;
  c.fs_type = r.volume().mount_options().fs_type();
  const auto& flags = r.volume().mount_options().mount_flags();
  c.mount_flags.assign(flags.begin(), flags.end());
  return c;
}

std::string mode_dir(const v1::NodeVolumeRequest& r) {
  return std::string(name_of(r.access_mode())) + "-" + std::string(name_of(r.attachment_mode()));
}

// The failure an operator sees for a CSI call that did not succeed, or
// nullopt when it did (or found its work already done).
std::optional<failure> check(const std::string& where, csi::method m, const csi::call_status& s) {
  if (s.kind == csi::outcome::done || s.kind == csi::outcome::already_done) return std::nullopt;
  std::string msg = where + ": " + std::string(csi::method_name(m)) + " failed: " +
                    csi::code_name(s.grpc_code) + ": " + s.message;
  if (s.kind == csi::outcome::retryable) return failure{errc::unavailable, msg + " (retry)"};
  if (s.grpc_code == csi::code::invalid_argument) return failure{errc::invalid, msg};
  return failure{errc::refused, msg};
}

std::string where(const self_ptr& self, const std::string& plugin) {
  return "plugin '" + plugin + "' on node '" + self->state.config.node_id + "'";
}



void start_polling(self_ptr self);

// Runs a job on a plugin's connection and answers the promise with its
// outcome.  Until the plugin was probed healthy once since this client
// started, the job waits (at most one CSI timeout): after a restart the
// plugin may not be back yet, and what it stages is only known then.
template <class Promise, class OnOk>
void run_with(self_ptr self, const std::string& plugin_id, std::function<csi_job()> make_job,
              Promise rp, OnOk on_ok) {
  auto it = self->state.connections.find(plugin_id);
  if (it == self->state.connections.end()) {
    rp.deliver(make_error(errc::refused, "node '" + self->state.config.node_id +
                                             "' runs no plugin '" + plugin_id +
                                             "' (configure it with --plugin)"));
    return;
  }
  auto go = [self, conn = it->second, make_job = std::move(make_job), rp, on_ok]() mutable {
    self->request(conn, caf::infinite, csi_atom::value, make_job())
        .then(
            [rp, on_ok](csi_outcome& out) mutable {
              if (out.error)
                rp.deliver(to_error(*out.error));
              else
                on_ok(rp, out);
            },
            [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
  };
  if (self->state.ready_plugins.count(plugin_id)) {
    go();
    return;
  }
  self->state.waiting.push_back({plugin_id,
                                 steady_ms() + self->state.config.csi_timeout.count(),
                                 std::move(go),
                                 [rp](caf::error e) mutable { rp.deliver(std::move(e)); }});
  start_polling(self);
}

template <class Promise, class OnOk>
void run(self_ptr self, const std::string& plugin_id, csi_job job, Promise rp, OnOk on_ok) {
  run_with(self, plugin_id, [job = std::move(job)] { return job; }, std::move(rp),
           std::move(on_ok));
}

// Like run, with a job that depends on whether the plugin stages volumes
// (known once it was probed, so decided when the job runs).
template <class Make, class Promise, class OnOk>
void run_staged(self_ptr self, const std::string& plugin_id, Make make, Promise rp, OnOk on_ok) {
  run_with(
      self, plugin_id,
      [self, plugin_id, make] {
        auto it = self->state.instances.find(plugin_id);
        return make(it != self->state.instances.end() && it->second.stage_unstage());
      },
      std::move(rp), std::move(on_ok));
}

void deliver_result(result_promise& rp, csi_outcome& out) {
  v1::NodeVolumeResult r;
  r.set_target_path(out.target_path);
  for (auto& [k, v] : out.publish_context) (*r.mutable_publish_context())[k] = v;
  rp.deliver(wrap(std::move(r)));
}

csi_outcome probe(csi::client& c, v1::PluginType type) {
  csi_outcome out;
  auto& inst = out.instance;
  auto fail = [&](csi::method m, const csi::call_status& s) {
    inst.set_healthy(false);
    inst.set_health_description(std::string(csi::method_name(m)) + ": " +
                                csi::code_name(s.grpc_code) + ": " + s.message);
    return out;
  };
  auto info = c.get_plugin_info();
  if (!info.ok()) return fail(csi::method::get_plugin_info, info.status);
  inst.set_provider(info.response.name);
  inst.set_provider_version(info.response.vendor_version);
  auto ready = c.probe();
  if (!ready.ok()) return fail(csi::method::probe, ready.status);
  if (!ready.response) {
    inst.set_healthy(false);
    inst.set_health_description("Probe: the plugin is not ready");
    return out;
  }
  if (type == v1::PLUGIN_CONTROLLER || type == v1::PLUGIN_MONOLITH) {
    auto caps = c.controller_get_capabilities();
    if (!caps.ok()) return fail(csi::method::controller_get_capabilities, caps.status);
    inst.set_publish_unpublish(caps.response.publish_unpublish_volume);
  }
  if (type == v1::PLUGIN_NODE || type == v1::PLUGIN_MONOLITH) {
    auto caps = c.node_get_capabilities();
    if (!caps.ok()) return fail(csi::method::node_get_capabilities, caps.status);
    inst.set_stage_unstage(caps.response.stage_unstage_volume);
    auto info = c.node_get_info();
    if (!info.ok()) return fail(csi::method::node_get_info, info.status);
    inst.set_csi_node_id(info.response.node_id);
    inst.set_max_volumes(info.response.max_volumes_per_node);
    for (const auto& [k, v] : info.response.accessible_topology)
      (*inst.mutable_accessible_topology()->mutable_segments())[k] = v;
  }
  inst.set_healthy(true);
  inst.set_health_description("healthy");
  return out;
}

void fingerprint(self_ptr self) {
  for (const auto& p : self->state.config.plugins) {
    auto type = p.type;
    csi_job job{[type](csi::client& c) { return probe(c, type); }};
    self->request(self->state.connections.at(p.id), caf::infinite, csi_atom::value, std::move(job))
        .then([self, p](csi_outcome& out) {
          auto& st = self->state;
          auto inst = std::move(out.instance);
          inst.set_node_id(st.config.node_id);
          if (!inst.healthy()) {
            // Keep what the plugin told us while it was healthy: its ids
            // and capabilities do not vanish because a probe failed.
            if (auto it = st.instances.find(p.id); it != st.instances.end()) {
              auto kept = it->second;
              kept.set_healthy(false);
              kept.set_health_description(inst.health_description());
              inst = std::move(kept);
            }
          }
          st.instances[p.id] = inst;
          if (inst.healthy() && st.ready_plugins.insert(p.id).second) {
            std::deque<node_state::waiting_call> still;
            for (auto& w : st.waiting) {
              if (w.plugin == p.id)
                w.go();
              else
                still.push_back(std::move(w));
            }
            st.waiting = std::move(still);
          }
          auto key = inst.SerializeAsString();
          if (st.reported[p.id] == key) return;
          v1::Request req;
          auto* f = req.mutable_plugin_fingerprint();
          f->set_plugin_id(p.id);
          f->set_node_id(st.config.node_id);
          f->set_type(p.type);
          *f->mutable_instance() = inst;
          if (!st.api) return;
          self->request(st.api, std::chrono::seconds(30), api_atom::value, wrap(std::move(req)))
              .then(
                  [self, p, key](pb<v1::Response>& r) {
                    // Remember only what the leader accepted; otherwise the
                    // next round reports again.
                    if (r.msg.error().code() == v1::OK) self->state.reported[p.id] = key;
                  },
                  [](caf::error&) {});
        });
  }
}

// Client mode: connect to the next server of the list (asynchronously).
void connect_server(self_ptr self) {
  auto& st = self->state;
  if (st.api || st.connecting || st.config.servers.empty()) return;
  auto [host, port] =
      split_address(st.config.servers[st.next_server++ % st.config.servers.size()]);
  st.connecting = true;
  self->request(self->system().middleman().actor_handle(), std::chrono::seconds(5),
                caf::connect_atom::value, host, port)
      .then(
          [self](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            self->state.connecting = false;
            if (!ptr) return;
            self->state.api = caf::actor_cast<api_actor>(ptr);
            self->monitor(self->state.api);
            // A new server may front a new leader: report everything again.
            self->state.reported.clear();
            self->send(self->state.api, node_atom::value, self->state.config.node_id,
                       caf::actor_cast<node_actor>(self));
          },
          [self](caf::error&) { self->state.connecting = false; });
}


// Where this node stages and publishes one claim (the CO's paths).
struct claim_paths {
  fs::path staging;
  fs::path target;
};

claim_paths paths_of(const self_ptr& self, const v1::NodeVolumeRequest& r) {
  auto root = fs::path(self->state.config.csi_root) / r.plugin_id();
  return {root / "staging" / r.volume().namespace_() / r.volume().id() / mode_dir(r),
          root / "per-alloc" / r.alloc_id() / r.volume().namespace_() / r.volume().id() /
              mode_dir(r)};
}

using mount_key = std::tuple<std::string, std::string, std::string>;

mount_key key_of(const v1::NodeVolumeRequest& r) {
  return {r.alloc_id(), r.volume().namespace_(), r.volume().id()};
}

// Whether another publication recorded on this node uses the staging path.
bool staging_in_use(const self_ptr& self, const std::string& staging, const mount_key& except) {
  for (const auto& [k, m] : self->state.mounts)
    if (k != except && m.staging_path == staging) return true;
  return false;
}

// The CSI calls that undo one publication: NodeUnpublishVolume, then
// NodeUnstageVolume when asked.  Already gone counts as done.
csi_job unpublish_job(const v1::NodeVolumeRequest& r, claim_paths paths, bool unstage,
                      std::string at) {
  return csi_job{[r, paths, unstage, at](csi::client& c) {
    csi_outcome out;
    auto id = r.volume().external_id();
    if ((out.error = check(at, csi::method::node_unpublish_volume,
                           c.node_unpublish_volume(id, paths.target.string()).status)))
      return out;
    std::error_code ec;
    // The per-alloc directories are the CO's: remove them once empty.
    for (auto d = paths.target.parent_path(); d.filename() != "per-alloc"; d = d.parent_path())
      if (!fs::remove(d, ec)) break;
    if (unstage) {
      if ((out.error = check(at, csi::method::node_unstage_volume,
                             c.node_unstage_volume(id, paths.staging.string()).status)))
        return out;
      fs::remove(paths.staging, ec);
    }
    return out;
  }};
}

// Reports an alloc's exit to the leader; forgets it once accepted.
void report_exit(self_ptr self, const std::string& id) {
  auto& st = self->state;
  auto it = st.allocs.find(id);
  if (it == st.allocs.end() || !st.api) return;
  v1::Request req;
  auto* u = req.mutable_alloc_update();
  u->set_id(id);
  u->set_node_id(st.config.node_id);
  u->set_state(it->second.exit_code == 0 ? v1::ALLOC_COMPLETE : v1::ALLOC_FAILED);
  u->set_exit_code(it->second.exit_code);
  u->set_message("the command " + it->second.alloc.message());
  self->request(st.api, std::chrono::seconds(30), api_atom::value, wrap(std::move(req)))
      .then(
          [self, id](pb<v1::Response>& r) {
            auto code = r.msg.error().code();
            if (code != v1::OK && code != v1::NOT_FOUND) return;  // retried on the next poll
            auto& st = self->state;
            if (st.allocs.count(id) && st.allocs[id].exited) {
              st.store->delete_alloc(id);
              st.allocs.erase(id);
            }
          },
          [](caf::error&) {});
}

// Polls alloc commands (exits, stops) and calls waiting for a plugin.
void poll(self_ptr self) {
  auto& st = self->state;
  auto now = steady_ms();
  for (auto& [id, a] : st.allocs) {
    if (a.exited || a.pid == 0) continue;
    auto ex = check_alloc_process(a.pid, a.exit_file);
    if (!ex.exited) continue;
    a.exited = true;
    a.exit_code = ex.exit_code;
    a.alloc.set_message(ex.how);
    st.store->put_alloc(a);
  }
  for (auto it = st.stops.begin(); it != st.stops.end();) {
    auto a = st.allocs.find(it->first);
    bool done = a == st.allocs.end() || a->second.pid == 0 || a->second.exited;
    if (!done) {
      for (auto& s : it->second)
        if (s.kill_at_ms <= now) {
          signal_alloc_process(a->second.pid, SIGKILL);
          s.kill_at_ms = now + 1000;
        }
      ++it;
      continue;
    }
    int32_t code = a == st.allocs.end() ? 0 : a->second.exit_code;
    auto id = it->first;
    auto waiting = std::move(it->second);
    it = st.stops.erase(it);
    bool unmount = false;
    for (auto& s : waiting) unmount |= s.unmount;
    // Stopped by the servers: they record its end themselves.
    if (a != st.allocs.end()) {
      st.store->delete_alloc(id);
      st.allocs.erase(a);
    }
    if (unmount) {
      // The servers released this alloc's claims while the node was away:
      // undo what this client still has published for it.
      for (auto m = st.mounts.begin(); m != st.mounts.end();) {
        if (std::get<0>(m->first) != id) {
          ++m;
          continue;
        }
        auto rec = m->second;
        auto key = m->first;
        bool unstage = !rec.staging_path.empty() && !staging_in_use(self, rec.staging_path, key);
        auto job = unpublish_job(rec.request, {rec.staging_path, rec.target_path}, unstage,
                                 where(self, rec.plugin_id));
        auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
        run(self, rec.plugin_id, std::move(job), rp,
            [self, key](caf::typed_response_promise<pb<v1::NodeVolumeResult>>& rp, csi_outcome&) {
              self->state.mounts.erase(key);
              self->state.store->delete_mount(std::get<0>(key), std::get<1>(key), std::get<2>(key));
              rp.deliver(wrap(v1::NodeVolumeResult{}));
            });
        ++m;
      }
    }
    for (auto& s : waiting) s.rp.deliver(code);
  }
  for (auto& [id, a] : st.allocs)
    if (a.exited) report_exit(self, id);
  std::deque<node_state::waiting_call> still;
  for (auto& w : st.waiting) {
    if (w.deadline_ms > now) {
      still.push_back(std::move(w));
      continue;
    }
    w.fail(make_error(errc::unavailable,
                      "plugin '" + w.plugin + "' on node '" + st.config.node_id +
                          "' has not been healthy since the client started (is it running?); "
                          "retry once it is"));
  }
  st.waiting = std::move(still);
}

void start_polling(self_ptr self) {
  if (self->state.polling) return;
  self->state.polling = true;
  self->delayed_send(self, std::chrono::milliseconds(200), run_atom::value);
}

bool needs_polling(const self_ptr& self) {
  const auto& st = self->state;
  if (!st.stops.empty() || !st.waiting.empty()) return true;
  for (const auto& [id, a] : st.allocs)
    if (a.pid != 0 || a.exited) return true;
  return false;
}

}  // namespace

std::variant<node_plugin, std::string> parse_plugin_flag(const std::string& flag) {
  auto eq = flag.find('=');
  auto colon = flag.find(':', eq == std::string::npos ? 0 : eq);
  if (eq == std::string::npos || colon == std::string::npos)
    return "--plugin '" + flag + "' is not ID=TYPE:SOCKET (e.g. hostpath=monolith:/run/csi.sock)";
  node_plugin p;
  p.id = flag.substr(0, eq);
  auto type = flag.substr(eq + 1, colon - eq - 1);
  auto socket = flag.substr(colon + 1);
  if (!valid_id(p.id)) return "--plugin '" + flag + "': '" + p.id + "' is not a valid plugin id";
  auto t = parse_plugin_type(type);
  if (!t) return "--plugin '" + flag + "': type '" + type + "' is not node, controller or monolith";
  p.type = *t;
  if (socket.rfind("unix://", 0) == 0) socket = socket.substr(7);
  if (socket.empty() || socket[0] != '/')
    return "--plugin '" + flag + "': the socket must be an absolute path";
  p.endpoint = "unix://" + socket;
  return p;
}

// The fence against deposed leaders: a request of a leader older than the
// newest this node took requests from is refused; a newer term is recorded
// (in client.db too) before anything runs.  0 means unfenced.
std::optional<caf::error> fence(const self_ptr& self, uint64_t term) {
  auto& st = self->state;
  auto verdict = berth::fence(st.leader_term, term);
  if (verdict == fence_verdict::accept) return std::nullopt;
  if (verdict == fence_verdict::refuse)
    return make_error(errc::refused, "node '" + st.config.node_id + "' refuses a request of a " +
                                         "deposed leader (term " + std::to_string(term) +
                                         "; it takes requests of term " +
                                         std::to_string(st.leader_term) + "; if the servers "
                                         "were rebuilt as a new cluster, restart this client "
                                         "with --forget-leader-term)");
  try {
    st.store->set_leader_term(term);
  } catch (const std::exception& e) {
    return make_error(errc::internal, std::string("the client could not record the leader's "
                                                  "term: ") + e.what());
  }
  st.leader_term = term;
  return std::nullopt;
}

node_actor::behavior_type node(self_ptr self, node_config config, api_actor api,
                               std::shared_ptr<metrics> stats, std::shared_ptr<client_store> store) {
  auto& st = self->state;
  st.stats = std::move(stats);
  st.store = std::move(store);
  // What this client published and runs, as of before a restart: kept as
  // it is (nothing is re-mounted); exits are reported, releases work.
  for (auto& m : st.store->mounts()) {
    mount_key k{m.alloc_id, m.ns, m.volume_id};
    st.mounts.emplace(std::move(k), std::move(m));
  }
  for (auto& a : st.store->allocs()) {
    auto id = a.alloc.id();
    st.allocs.emplace(std::move(id), std::move(a));
  }
  if (config.forget_leader_term) st.store->set_leader_term(0);
  st.leader_term = st.store->leader_term();
  st.config = std::move(config);
  st.api = std::move(api);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (self->state.api && self->state.api.address() == dm.source) self->state.api = nullptr;
  });
  for (const auto& p : st.config.plugins)
    st.connections.emplace(p.id, self->spawn<caf::detached + caf::linked>(
                                     csi_plugin, p.id, p.endpoint, st.config.csi_timeout,
                                     st.stats));
  self->send(self, tick_atom::value);
  if (needs_polling(self)) start_polling(self);
  return {
      [self](publish_atom, pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        const auto& r = req.msg;
        if (auto err = fence(self, r.leader_term())) return std::move(*err);
        auto& st = self->state;
        auto paths = paths_of(self, r);
        auto key = key_of(r);
        // Published already (recorded, and the target is there): a repeat
        // after a restart re-mounts nothing.
        if (auto m = st.mounts.find(key); m != st.mounts.end()) {
          std::error_code ec;
          if (m->second.target_path == paths.target.string() && fs::exists(paths.target, ec)) {
            v1::NodeVolumeResult res;
            res.set_target_path(m->second.target_path);
            return wrap(std::move(res));
          }
        }
        auto at = where(self, r.plugin_id());
        auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
        auto plugin_id = r.plugin_id();
        auto stage_of = [self, plugin_id] {
          auto it = self->state.instances.find(plugin_id);
          return it != self->state.instances.end() && it->second.stage_unstage();
        };
        auto publish = [r, paths, at](bool stage) {
          return csi_job{[r, paths, at, stage](csi::client& c) {
            csi_outcome out;
            std::error_code ec;
            if (stage) fs::create_directories(paths.staging, ec);
            fs::create_directories(paths.target.parent_path(), ec);
            if (ec) {
              out.error = failure{errc::internal, at + ": cannot create " +
                                                      paths.target.parent_path().string() + ": " +
                                                      ec.message()};
              return out;
            }
            if (stage) {
              csi::node_stage_request s;
              s.volume_id = r.volume().external_id();
              s.publish_context = to_map(r.publish_context());
              s.staging_target_path = paths.staging.string();
              s.capability = capability(r);
              s.secrets = to_map(r.volume().secrets());
              s.volume_context = to_map(r.volume().context());
              if ((out.error = check(at, csi::method::node_stage_volume,
                                     c.node_stage_volume(s).status)))
                return out;
            }
            csi::node_publish_request p;
            p.volume_id = r.volume().external_id();
            p.publish_context = to_map(r.publish_context());
            p.staging_target_path = stage ? paths.staging.string() : "";
            p.target_path = paths.target.string();
            p.capability = capability(r);
            p.readonly = r.read_only();
            p.secrets = to_map(r.volume().secrets());
            p.volume_context = to_map(r.volume().context());
            if ((out.error = check(at, csi::method::node_publish_volume,
                                   c.node_publish_volume(p).status)))
              return out;
            out.target_path = paths.target.string();
            return out;
          }};
        };
        auto record = [self, r, paths, key, stage_of](
                          caf::typed_response_promise<pb<v1::NodeVolumeResult>>& rp,
                          csi_outcome& out) {
          mount_record m;
          m.alloc_id = r.alloc_id();
          m.ns = r.volume().namespace_();
          m.volume_id = r.volume().id();
          m.plugin_id = r.plugin_id();
          m.staging_path = stage_of() ? paths.staging.string() : "";
          m.target_path = paths.target.string();
          m.request = r;
          m.request.mutable_volume()->clear_secrets();
          m.published_at_ms = wall_ms();
          try {
            self->state.store->put_mount(m);
          } catch (const std::exception& e) {
            rp.deliver(make_error(errc::internal, std::string("published, but the client could not "
                                                              "record it: ") + e.what()));
            return;
          }
          self->state.mounts[key] = std::move(m);
          deliver_result(rp, out);
        };
        run_staged(self, plugin_id, publish, rp, record);
        return rp;
      },
      [self](unpublish_atom, pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        const auto& r = req.msg;
        if (auto err = fence(self, r.leader_term())) return std::move(*err);
        auto paths = paths_of(self, r);
        auto key = key_of(r);
        auto at = where(self, r.plugin_id());
        auto plugin_id = r.plugin_id();
        // Unstage only when the servers say no other claim on this node is
        // published, and this client's own records agree.
        bool others = staging_in_use(self, paths.staging.string(), key);
        auto make = [r, paths, at, others](bool stage) {
          return unpublish_job(r, paths, stage && r.unstage() && !others, at);
        };
        auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
        run_staged(self, plugin_id, make, rp,
                   [self, key](caf::typed_response_promise<pb<v1::NodeVolumeResult>>& rp,
                               csi_outcome& out) {
                     self->state.mounts.erase(key);
                     self->state.store->delete_mount(std::get<0>(key), std::get<1>(key),
                                                     std::get<2>(key));
                     deliver_result(rp, out);
                   });
        return rp;
      },
      [self](ctrl_publish_atom, pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        const auto& r = req.msg;
        if (auto err = fence(self, r.leader_term())) return std::move(*err);
        auto at = where(self, r.plugin_id());
        csi_job job{[r, at](csi::client& c) {
          csi_outcome out;
          csi::controller_publish_request p;
          p.volume_id = r.volume().external_id();
          p.node_id = r.csi_node_id();
          p.capability = capability(r);
          p.readonly = r.read_only();
          p.secrets = to_map(r.volume().secrets());
          p.volume_context = to_map(r.volume().context());
          auto res = c.controller_publish_volume(p);
          if ((out.error = check(at, csi::method::controller_publish_volume, res.status))) return out;
          out.publish_context = res.response;
          return out;
        }};
        auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
        run(self, r.plugin_id(), std::move(job), rp, deliver_result);
        return rp;
      },
      [self](ctrl_unpublish_atom, pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        const auto& r = req.msg;
        if (auto err = fence(self, r.leader_term())) return std::move(*err);
        auto at = where(self, r.plugin_id());
        csi_job job{[r, at](csi::client& c) {
          csi_outcome out;
          out.error = check(at, csi::method::controller_unpublish_volume,
                            c.controller_unpublish_volume(r.volume().external_id(), r.csi_node_id(),
                                                          to_map(r.volume().secrets()))
                                .status);
          return out;
        }};
        auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
        run(self, r.plugin_id(), std::move(job), rp, deliver_result);
        return rp;
      },
      [self](create_atom, pb<v1::Volume>& req) -> caf::result<pb<v1::Volume>> {
        auto spec = std::move(req.msg);
        auto at = where(self, spec.plugin_id());
        auto plugin_id = spec.plugin_id();
        csi_job job{[spec, at](csi::client& c) {
          csi_outcome out;
          csi::create_volume_request cr;
          cr.name = spec.namespace_() + "-" + spec.id();
          cr.required_bytes = spec.capacity_min();
          cr.limit_bytes = spec.capacity_max();
          for (const auto& cap : spec.capabilities()) {
            csi::volume_capability vc;
            vc.mode = to_csi(cap.access_mode());
            vc.block = cap.attachment_mode() == v1::BLOCK_DEVICE;
            vc.fs_type = spec.mount_options().fs_type();
            cr.capabilities.push_back(vc);
          }
          cr.parameters = to_map(spec.parameters());
          cr.secrets = to_map(spec.secrets());
          for (const auto& t : spec.topology_request().required())
            cr.requisite.push_back(to_map(t.segments()));
          for (const auto& t : spec.topology_request().preferred())
            cr.preferred.push_back(to_map(t.segments()));
          auto res = c.create_volume(cr);
          if ((out.error = check(at, csi::method::create_volume, res.status))) return out;
          out.volume = spec;
          out.volume.set_external_id(res.response.volume_id);
          if (res.response.capacity_bytes > 0) out.volume.set_capacity_min(res.response.capacity_bytes);
          for (const auto& [k, v] : res.response.volume_context) (*out.volume.mutable_context())[k] = v;
          for (const auto& t : res.response.accessible_topology) {
            auto* topo = out.volume.add_accessible_topology();
            for (const auto& [k, v] : t) (*topo->mutable_segments())[k] = v;
          }
          return out;
        }};
        auto rp = self->make_response_promise<pb<v1::Volume>>();
        run(self, plugin_id, std::move(job), rp,
            [](caf::typed_response_promise<pb<v1::Volume>>& rp, csi_outcome& out) {
              rp.deliver(wrap(std::move(out.volume)));
            });
        return rp;
      },
      [self](validate_atom, pb<v1::Volume>& req) -> caf::result<std::string> {
        auto v = std::move(req.msg);
        auto at = where(self, v.plugin_id());
        auto plugin_id = v.plugin_id();
        csi_job job{[v, at](csi::client& c) {
          csi_outcome out;
          csi::validate_request vr;
          vr.volume_id = v.external_id();
          for (const auto& cap : v.capabilities()) {
            csi::volume_capability vc;
            vc.mode = to_csi(cap.access_mode());
            vc.block = cap.attachment_mode() == v1::BLOCK_DEVICE;
            vc.fs_type = v.mount_options().fs_type();
            vr.capabilities.push_back(vc);
          }
          vr.volume_context = to_map(v.context());
          vr.parameters = to_map(v.parameters());
          vr.secrets = to_map(v.secrets());
          auto res = c.validate_volume_capabilities(vr);
          if ((out.error = check(at, csi::method::validate_volume_capabilities, res.status)))
            return out;
          // The reason travels in target_path: "" = confirmed.
          out.target_path = res.response.confirmed
                                ? ""
                                : (res.response.message.empty() ? "not confirmed"
                                                                : res.response.message);
          return out;
        }};
        auto rp = self->make_response_promise<std::string>();
        run(self, plugin_id, std::move(job), rp,
            [](caf::typed_response_promise<std::string>& rp, csi_outcome& out) {
              rp.deliver(out.target_path);
            });
        return rp;
      },
      [self](deregister_atom, pb<v1::Volume>& req) -> caf::result<bool> {
        auto v = std::move(req.msg);
        auto at = where(self, v.plugin_id());
        auto plugin_id = v.plugin_id();
        csi_job job{[v, at](csi::client& c) {
          csi_outcome out;
          out.error = check(at, csi::method::delete_volume,
                            c.delete_volume(v.external_id(), to_map(v.secrets())).status);
          return out;
        }};
        auto rp = self->make_response_promise<bool>();
        run(self, plugin_id, std::move(job), rp,
            [](caf::typed_response_promise<bool>& rp, csi_outcome&) { rp.deliver(true); });
        return rp;
      },
      [self](run_atom, pb<v1::Alloc>& req) -> caf::result<bool> {
        auto& st = self->state;
        const auto& a = req.msg;
        if (st.allocs.count(a.id())) return true;  // running already
        alloc_record rec;
        rec.alloc = a;
        if (!a.command().empty()) {
          auto dir = (fs::path(st.config.alloc_dir) / a.id()).string();
          auto spawned = start_alloc_process(a, dir);
          if (!spawned.error.empty())
            return make_error(errc::internal, "node '" + st.config.node_id +
                                                  "' could not start alloc '" + a.id() +
                                                  "': " + spawned.error);
          rec.pid = spawned.pid;
          rec.exit_file = spawned.exit_file;
        }
        try {
          st.store->put_alloc(rec);
        } catch (const std::exception& e) {
          if (rec.pid) signal_alloc_process(rec.pid, SIGKILL);
          return make_error(errc::internal, std::string("the client could not record alloc '") +
                                                a.id() + "': " + e.what());
        }
        st.allocs[a.id()] = std::move(rec);
        start_polling(self);
        return true;
      },
      [self](stop_atom, const std::string& id, bool unmount) -> caf::result<int32_t> {
        auto& st = self->state;
        auto it = st.allocs.find(id);
        bool has_mounts = false;
        for (const auto& [k, m] : st.mounts) has_mounts |= std::get<0>(k) == id;
        if ((it == st.allocs.end() || it->second.pid == 0 || it->second.exited) &&
            !(unmount && has_mounts)) {
          int32_t code = it == st.allocs.end() ? 0 : it->second.exit_code;
          if (it != st.allocs.end()) {
            st.store->delete_alloc(id);
            st.allocs.erase(it);
          }
          return code;
        }
        if (it != st.allocs.end() && it->second.pid != 0 && !it->second.exited)
          signal_alloc_process(it->second.pid, SIGTERM);
        auto rp = self->make_response_promise<int32_t>();
        st.stops[id].push_back({rp, steady_ms() + st.config.kill_timeout.count(), unmount});
        start_polling(self);
        return rp;
      },
      [self](fingerprint_atom) { self->state.reported.clear(); },
      [self](run_atom) {
        self->state.polling = false;
        poll(self);
        if (needs_polling(self)) start_polling(self);
      },
      [self](tick_atom) {
        auto& st = self->state;
        st.stats->mailbox("node", self->mailbox().size());
        connect_server(self);
        // Registered again every round: a new leader learns this node.
        if (st.api)
          self->send(st.api, node_atom::value, st.config.node_id, caf::actor_cast<node_actor>(self));
        fingerprint(self);
        self->delayed_send(self, self->state.config.fingerprint_interval, tick_atom::value);
      },
  };
}

}  // namespace berth
