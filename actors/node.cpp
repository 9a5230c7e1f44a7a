#include "actors/node.hpp"

#include <filesystem>

#include <set>

#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>

#include "actors/csi_plugin.hpp"
#include "csi/client.hpp"

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

// Runs a job on a plugin's connection and answers the promise with its
// outcome.
template <class Promise, class OnOk>
void run(self_ptr self, const std::string& plugin_id, csi_job job, Promise rp, OnOk on_ok) {
  auto it = self->state.connections.find(plugin_id);
  if (it == self->state.connections.end()) {
    rp.deliver(make_error(errc::refused, "node '" + self->state.config.node_id +
                                             "' runs no plugin '" + plugin_id +
                                             "' (configure it with --plugin)"));
    return;
  }
  self->request(it->second, caf::infinite, csi_atom::value, std::move(job))
      .then(
          [rp, on_ok](csi_outcome& out) mutable {
            if (out.error)
              rp.deliver(to_error(*out.error));
            else
              on_ok(rp, out);
          },
          [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
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

node_actor::behavior_type node(self_ptr self, node_config config, api_actor api,
                               std::shared_ptr<metrics> stats) {
  auto& st = self->state;
  st.stats = std::move(stats);
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
  return {
      [self](publish_atom, pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        const auto& r = req.msg;
        auto& st = self->state;
        bool stage = st.instances.count(r.plugin_id()) && st.instances[r.plugin_id()].stage_unstage();
        auto root = fs::path(st.config.csi_root) / r.plugin_id();
        auto staging = root / "staging" / r.volume().namespace_() / r.volume().id() / mode_dir(r);
        auto target = root / "per-alloc" / r.alloc_id() / r.volume().namespace_() /
                      r.volume().id() / mode_dir(r);
        auto at = where(self, r.plugin_id());
        csi_job job{[r, stage, staging, target, at](csi::client& c) {
          csi_outcome out;
          std::error_code ec;
          fs::create_directories(staging, ec);
          fs::create_directories(target.parent_path(), ec);
          if (ec) {
            out.error = failure{errc::internal, at + ": cannot create " +
                                                    target.parent_path().string() + ": " +
                                                    ec.message()};
            return out;
          }
          if (stage) {
            csi::node_stage_request s;
            s.volume_id = r.volume().external_id();
            s.publish_context = to_map(r.publish_context());
            s.staging_target_path = staging.string();
            s.capability = capability(r);
            s.secrets = to_map(r.volume().secrets());
            s.volume_context = to_map(r.volume().context());
            if ((out.error = check(at, csi::method::node_stage_volume, c.node_stage_volume(s).status)))
              return out;
          }
          csi::node_publish_request p;
          p.volume_id = r.volume().external_id();
          p.publish_context = to_map(r.publish_context());
          p.staging_target_path = stage ? staging.string() : "";
          p.target_path = target.string();
          p.capability = capability(r);
          p.readonly = r.read_only();
          p.secrets = to_map(r.volume().secrets());
          p.volume_context = to_map(r.volume().context());
          if ((out.error = check(at, csi::method::node_publish_volume, c.node_publish_volume(p).status)))
            return out;
          out.target_path = target.string();
          return out;
        }};
        auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
        run(self, r.plugin_id(), std::move(job), rp, deliver_result);
        return rp;
      },
      [self](unpublish_atom, pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        const auto& r = req.msg;
        auto& st = self->state;
        bool stage = st.instances.count(r.plugin_id()) && st.instances[r.plugin_id()].stage_unstage();
        auto root = fs::path(st.config.csi_root) / r.plugin_id();
        auto staging = root / "staging" / r.volume().namespace_() / r.volume().id() / mode_dir(r);
        auto target = root / "per-alloc" / r.alloc_id() / r.volume().namespace_() /
                      r.volume().id() / mode_dir(r);
        auto at = where(self, r.plugin_id());
        bool unstage = stage && r.unstage();
        csi_job job{[r, unstage, staging, target, at](csi::client& c) {
          csi_outcome out;
          auto id = r.volume().external_id();
          if ((out.error = check(at, csi::method::node_unpublish_volume,
                                 c.node_unpublish_volume(id, target.string()).status)))
            return out;
          std::error_code ec;
          // The per-alloc directories are the CO's: remove them once empty.
          for (auto d = target.parent_path(); d.filename() != "per-alloc"; d = d.parent_path())
            if (!fs::remove(d, ec)) break;
          if (unstage) {
            if ((out.error = check(at, csi::method::node_unstage_volume,
                                   c.node_unstage_volume(id, staging.string()).status)))
              return out;
            fs::remove(staging, ec);
          }
          return out;
        }};
        auto rp = self->make_response_promise<pb<v1::NodeVolumeResult>>();
        run(self, r.plugin_id(), std::move(job), rp, deliver_result);
        return rp;
      },
      [self](ctrl_publish_atom, pb<v1::NodeVolumeRequest>& req) -> caf::result<pb<v1::NodeVolumeResult>> {
        const auto& r = req.msg;
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
      [self](tick_atom) {
        auto& st = self->state;
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
