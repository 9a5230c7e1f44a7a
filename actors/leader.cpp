#include "actors/leader.hpp"

#include <chrono>

#include <caf/typed_event_based_actor.hpp>

#include "actors/plugin.hpp"
#include "actors/volume.hpp"

namespace berth {

namespace {

using self_ptr = leader_actor::stateful_pointer<leader_state>;
using response_promise = caf::typed_response_promise<pb<v1::Response>>;
using volume_key = leader_state::volume_key;

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

std::string ns_or_default(const std::string& ns) { return ns.empty() ? "default" : ns; }

pb<v1::Response> error_response(const failure& f) {
  v1::Response r;
  r.mutable_error()->set_code(static_cast<v1::ErrorCode>(f.code));
  r.mutable_error()->set_message(f.message);
  return wrap(std::move(r));
}

pb<v1::Response> error_response(errc code, std::string message) {
  return error_response(failure{code, std::move(message)});
}

// Adds a redacted volume and its plugin (for health) to a response.
void add_volume(const self_ptr& self, v1::Response& r, const v1::Volume& v) {
  *r.add_volumes() = redacted(v);
  auto it = self->state.plugins.find(v.plugin_id());
  if (it == self->state.plugins.end()) return;
  for (const auto& p : r.plugins())
    if (p.id() == v.plugin_id()) return;
  *r.add_plugins() = it->second;
}

pb<v1::Response> volume_response(const self_ptr& self, const v1::Volume& v, std::string message) {
  v1::Response r;
  add_volume(self, r, v);
  r.set_message(std::move(message));
  return wrap(std::move(r));
}

void count_actors(const self_ptr& self) {
  self->state.stats->actors("volume", self->state.volume_actors.size());
  self->state.stats->actors("plugin", self->state.plugin_actors.size());
}

volume_actor spawn_volume(const self_ptr& self, v1::Volume v, bool registered) {
  return self->spawn<caf::linked>(volume, self->state.log,
                                  caf::actor_cast<leader_actor>(self), std::move(v), registered);
}

plugin_actor spawn_plugin(const self_ptr& self, v1::Plugin p) {
  return self->spawn<caf::linked>(plugin, self->state.log, caf::actor_cast<leader_actor>(self),
                                  std::move(p));
}

// The node actor of a node, or an invalid handle when no berth client
// serves it.
node_actor node_of(const self_ptr& self, const std::string& node_id) {
  auto it = self->state.node_actors.find(node_id);
  return it == self->state.node_actors.end() ? node_actor{} : it->second;
}

plugin_actor plugin_of(const self_ptr& self, const std::string& plugin_id) {
  auto it = self->state.plugin_actors.find(plugin_id);
  return it == self->state.plugin_actors.end() ? plugin_actor{} : it->second;
}

// A node with a berth client and a healthy controller instance of the
// plugin, round-robin across them (controller calls are load-balanced).
node_actor pick_controller(const self_ptr& self, const std::string& plugin_id) {
  auto it = self->state.plugins.find(plugin_id);
  if (it == self->state.plugins.end()) return {};
  std::vector<node_actor> candidates;
  for (const auto& c : it->second.controllers())
    if (c.healthy())
      if (auto n = node_of(self, c.node_id())) candidates.push_back(n);
  if (candidates.empty()) return {};
  return candidates[self->state.next_controller[plugin_id]++ % candidates.size()];
}

// Forwards a request to a volume actor and answers with the volume.
template <class... Ts>
void ask_volume(const self_ptr& self, volume_actor actor, response_promise rp,
                std::string message, Ts&&... xs) {
  self->request(actor, caf::infinite, std::forward<Ts>(xs)...)
      .then(
          [self, rp, message](pb<v1::Volume>& v) mutable {
            rp.deliver(volume_response(self, v.msg, message));
          },
          [rp](caf::error& e) mutable { rp.deliver(error_response(to_failure(e))); });
}

std::optional<volume_key> find_volume(const self_ptr& self, const std::string& ns,
                                      const std::string& id, response_promise& rp) {
  volume_key key{ns_or_default(ns), id};
  if (id.empty()) {
    rp.deliver(error_response(errc::invalid, "a volume id is required"));
    return std::nullopt;
  }
  if (!self->state.volume_actors.count(key) || !self->state.volumes.count(key)) {
    rp.deliver(error_response(errc::not_found,
                              "volume " + quoted(id) + " is not registered in namespace " +
                                  quoted(key.first) + " (list volumes with: berth volume status)"));
    return std::nullopt;
  }
  return key;
}

void register_volume(self_ptr self, v1::Volume v, response_promise rp,
                     std::string verb = "registered");

// deregister --force: releases every claim (each through the release
// workflow, one after the other), then deregisters.
void force_deregister(self_ptr self, volume_key key, std::vector<std::string> allocs,
                      response_promise rp) {
  auto actor_it = self->state.volume_actors.find(key);
  auto vol_it = self->state.volumes.find(key);
  if (actor_it == self->state.volume_actors.end() || vol_it == self->state.volumes.end()) {
    rp.deliver(error_response(errc::not_found, "volume " + quoted(key.second) + " vanished"));
    return;
  }
  if (allocs.empty()) {
    ask_volume(self, actor_it->second, rp,
               "volume " + quoted(key.second) + " deregistered after releasing its claims",
               deregister_atom::value, true);
    return;
  }
  auto alloc = allocs.back();
  allocs.pop_back();
  const auto* c = find_claim(vol_it->second, alloc);
  v1::ReleaseRequest r;
  r.set_namespace_(key.first);
  r.set_volume_id(key.second);
  r.set_alloc_id(alloc);
  const auto& plugin_id = vol_it->second.plugin_id();
  self->request(actor_it->second, caf::infinite, release_atom::value, wrap(std::move(r)),
                plugin_of(self, plugin_id), c ? node_of(self, c->node_id()) : node_actor{},
                pick_controller(self, plugin_id))
      .then(
          [self, key, allocs, rp](pb<v1::Volume>&) mutable {
            force_deregister(self, key, std::move(allocs), rp);
          },
          [self, key, allocs, rp](caf::error&) mutable {
            // A release that cannot finish now (plugin or node gone) is
            // dropped by --force; the volume actor still refuses a claim
            // that is taken.
            force_deregister(self, key, std::move(allocs), rp);
          });
}

// volume create: CreateVolume through a controller, then registration of
// what the plugin created.
void create_volume(self_ptr self, v1::Volume spec, response_promise rp) {
  apply_defaults(spec);
  bool placeholder = spec.external_id().empty();
  if (placeholder) spec.set_external_id("(to be created)");
  auto problems = validate_volume(spec);
  if (placeholder) spec.clear_external_id();
  if (!placeholder)
    problems.push_back({"external_id", "is chosen by the plugin on create; use volume register "
                                       "for an existing volume"});
  if (!spec.plugin_id().empty() && !self->state.plugins.count(spec.plugin_id()))
    problems.push_back({"plugin_id", "plugin " + quoted(spec.plugin_id()) +
                                         " is not registered by any node (see berth plugin status)"});
  if (!problems.empty()) {
    rp.deliver(error_response(errc::invalid, describe("volume " + quoted(spec.id()), problems)));
    return;
  }
  if (self->state.volumes.count({spec.namespace_(), spec.id()})) {
    rp.deliver(error_response(errc::refused, "volume " + quoted(spec.id()) +
                                                 " is already registered in namespace " +
                                                 quoted(spec.namespace_())));
    return;
  }
  auto controller = pick_controller(self, spec.plugin_id());
  if (!controller) {
    rp.deliver(error_response(errc::unavailable,
                              "plugin " + quoted(spec.plugin_id()) +
                                  " has no healthy controller on a node with a berth client; "
                                  "volumes of it cannot be created now"));
    return;
  }
  self->request(controller, caf::infinite, create_atom::value, wrap(std::move(spec)))
      .then([self, rp](pb<v1::Volume>& created) mutable {
              register_volume(self, std::move(created.msg), rp, "created");
            },
            [rp](caf::error& e) mutable { rp.deliver(error_response(to_failure(e))); });
}

void register_volume(self_ptr self, v1::Volume v, response_promise rp, std::string verb) {
  apply_defaults(v);
  auto problems = validate_volume(v);
  if (!v.plugin_id().empty() && !self->state.plugins.count(v.plugin_id()))
    problems.push_back({"plugin_id", "plugin " + quoted(v.plugin_id()) +
                                         " is not registered by any node (see berth plugin status)"});
  if (!problems.empty()) {
    rp.deliver(error_response(errc::invalid, describe("volume " + quoted(v.id()), problems)));
    return;
  }
  volume_key key{v.namespace_(), v.id()};
  auto& actors = self->state.volume_actors;
  bool fresh = !actors.count(key);
  if (fresh) actors.emplace(key, spawn_volume(self, v1::Volume{}, false));
  auto actor = actors[key];
  if (!fresh) verb = "updated";
  self->request(actor, caf::infinite, register_atom::value, wrap(std::move(v)))
      .then(
          [self, rp, verb](pb<v1::Volume>& stored) mutable {
            rp.deliver(volume_response(self, stored.msg,
                                       "volume " + quoted(stored.msg.id()) + " " + verb));
          },
          [self, rp, key, actor](caf::error& e) mutable {
            if (!self->state.volumes.count(key)) {
              // A first registration that failed leaves no actor behind.
              self->state.volume_actors.erase(key);
              self->send_exit(actor, caf::exit_reason::user_shutdown);
            }
            rp.deliver(error_response(to_failure(e)));
          });
}

// Records on the node that it runs (or stopped running) a plugin.
void update_node(self_ptr self, const v1::Fingerprint& f, const v1::Plugin& p,
                 response_promise rp) {
  auto& nodes = self->state.nodes;
  v1::Node next;
  if (auto it = nodes.find(f.node_id()); it != nodes.end()) next = it->second;
  next.set_id(f.node_id());
  bool runs = node_instance(p, f.node_id()) != nullptr;
  for (const auto& c : p.controllers()) runs |= c.node_id() == f.node_id();
  auto* ids = next.mutable_plugin_ids();
  auto pos = std::find(ids->begin(), ids->end(), p.id());
  bool listed = pos != ids->end();
  bool changed = false;
  if (runs && !listed) {
    ids->Add(std::string(p.id()));
    std::sort(ids->begin(), ids->end());
    changed = true;
  } else if (!runs && listed) {
    ids->erase(pos);
    changed = true;
  }
  if (!f.remove() && next.status() != v1::NODE_READY) {
    next.set_status(v1::NODE_READY);
    changed = true;
  }
  v1::Response r;
  *r.add_plugins() = p;
  r.set_message("plugin " + quoted(p.id()) + (f.remove() ? " instance removed from" : " instance reported on") +
                " node " + quoted(f.node_id()));
  if (!changed) {
    rp.deliver(wrap(std::move(r)));
    return;
  }
  next.set_last_heartbeat_ms(now_ms());
  v1::LogEntry entry;
  entry.set_format_version(1);
  *entry.add_changes()->mutable_node_upsert() = next;
  self->request(self->state.log, caf::infinite, propose_atom::value, wrap(std::move(entry)))
      .then(
          [self, next, rp, r](uint64_t index) mutable {
            v1::Change stamped;
            *stamped.mutable_node_upsert() = std::move(next);
            stamp(stamped, index);
            auto& node = *stamped.mutable_node_upsert();
            self->state.nodes[node.id()] = node;
            rp.deliver(wrap(std::move(r)));
          },
          [rp](caf::error& e) mutable { rp.deliver(error_response(to_failure(e))); });
}

void fingerprint(self_ptr self, v1::Fingerprint f, response_promise rp) {
  std::vector<problem> problems;
  if (!valid_id(f.plugin_id())) problems.push_back({"plugin_id", "is missing or not a valid id"});
  if (!valid_id(f.node_id())) problems.push_back({"node_id", "is missing or not a valid id"});
  if (f.type() == v1::PLUGIN_TYPE_UNKNOWN)
    problems.push_back({"type", "is required (node, controller or monolith)"});
  if (!problems.empty()) {
    rp.deliver(error_response(errc::invalid, describe("plugin fingerprint", problems)));
    return;
  }
  auto& actors = self->state.plugin_actors;
  if (!actors.count(f.plugin_id())) {
    if (f.remove()) {
      rp.deliver(error_response(errc::not_found, "plugin " + quoted(f.plugin_id()) + " is not registered"));
      return;
    }
    v1::Plugin p;
    p.set_id(f.plugin_id());
    actors.emplace(f.plugin_id(), spawn_plugin(self, std::move(p)));
  }
  self->request(actors[f.plugin_id()], caf::infinite, fingerprint_atom::value, wrap(f))
      .then(
          [self, f, rp](pb<v1::Plugin>& p) mutable {
            self->state.plugins[p.msg.id()] = p.msg;
            update_node(self, f, p.msg, rp);
          },
          [rp](caf::error& e) mutable { rp.deliver(error_response(to_failure(e))); });
}

void execute(self_ptr self, v1::Request& req, response_promise rp) {
  auto& st = self->state;
  switch (req.command_case()) {
    case v1::Request::kVolumeRegister:
      register_volume(self, std::move(*req.mutable_volume_register()), rp);
      return;
    case v1::Request::kVolumeStatus: {
      const auto& k = req.volume_status();
      if (auto key = find_volume(self, k.namespace_(), k.id(), rp))
        rp.deliver(volume_response(self, st.volumes.at(*key), ""));
      return;
    }
    case v1::Request::kVolumeList: {
      v1::Response r;
      const auto& ns = req.volume_list().namespace_();
      for (const auto& [key, v] : st.volumes)
        if (ns.empty() || key.first == ns) add_volume(self, r, v);
      rp.deliver(wrap(std::move(r)));
      return;
    }
    case v1::Request::kVolumeDeregister: {
      const auto& d = req.volume_deregister();
      if (auto key = find_volume(self, d.namespace_(), d.volume_id(), rp)) {
        if (!d.force()) {
          ask_volume(self, st.volume_actors.at(*key), rp,
                     "volume " + quoted(d.volume_id()) + " deregistered", deregister_atom::value,
                     false);
          return;
        }
        std::vector<std::string> allocs;
        for (const auto& c : st.volumes.at(*key).claims()) allocs.push_back(c.alloc_id());
        force_deregister(self, *key, std::move(allocs), rp);
      }
      return;
    }
    case v1::Request::kVolumeClaim: {
      auto c = req.volume_claim();
      if (auto key = find_volume(self, c.namespace_(), c.volume_id(), rp)) {
        const auto& plugin_id = st.volumes.at(*key).plugin_id();
        std::string msg = "volume " + quoted(c.volume_id()) + " claimed for " +
                          (c.read_only() ? "reading" : "writing") + " by alloc " +
                          quoted(c.alloc_id()) + " on node " + quoted(c.node_id());
        auto target = node_of(self, c.node_id());
        auto start = std::chrono::steady_clock::now();
        self->request(st.volume_actors.at(*key), caf::infinite, claim_atom::value, wrap(c),
                      plugin_of(self, plugin_id), target, pick_controller(self, plugin_id))
            .then(
                [self, rp, msg, target, start](pb<v1::ClaimResult>& r) mutable {
                  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
                  self->state.stats->claim_done(took.count());
                  auto text = msg;
                  if (!r.msg.published_path().empty())
                    text += "; published at " + r.msg.published_path();
                  else if (!target)
                    text += "; node has no berth client, so nothing was published";
                  auto resp = volume_response(self, r.msg.volume(), text);
                  resp.msg.set_published_path(r.msg.published_path());
                  rp.deliver(std::move(resp));
                },
                [rp](caf::error& e) mutable { rp.deliver(error_response(to_failure(e))); });
      }
      return;
    }
    case v1::Request::kVolumeRelease: {
      auto r = req.volume_release();
      if (auto key = find_volume(self, r.namespace_(), r.volume_id(), rp)) {
        const auto& vol = st.volumes.at(*key);
        const auto* c = find_claim(vol, r.alloc_id());
        ask_volume(self, st.volume_actors.at(*key), rp,
                   "claim of alloc " + quoted(r.alloc_id()) + " on volume " +
                       quoted(r.volume_id()) + " released",
                   release_atom::value, wrap(r), plugin_of(self, vol.plugin_id()),
                   c ? node_of(self, c->node_id()) : node_actor{},
                   pick_controller(self, vol.plugin_id()));
      }
      return;
    }
    case v1::Request::kVolumeCreate:
      create_volume(self, std::move(*req.mutable_volume_create()), rp);
      return;
    case v1::Request::kPluginStatus: {
      auto it = st.plugins.find(req.plugin_status());
      if (it == st.plugins.end()) {
        rp.deliver(error_response(errc::not_found, "plugin " + quoted(req.plugin_status()) +
                                                       " is not registered (list plugins with: "
                                                       "berth plugin status)"));
        return;
      }
      v1::Response r;
      *r.add_plugins() = it->second;
      rp.deliver(wrap(std::move(r)));
      return;
    }
    case v1::Request::kPluginList: {
      v1::Response r;
      for (const auto& [id, p] : st.plugins) *r.add_plugins() = p;
      rp.deliver(wrap(std::move(r)));
      return;
    }
    case v1::Request::kPluginFingerprint:
      fingerprint(self, std::move(*req.mutable_plugin_fingerprint()), rp);
      return;
    case v1::Request::kNodeStatus: {
      auto it = st.nodes.find(req.node_status());
      if (it == st.nodes.end()) {
        rp.deliver(error_response(errc::not_found, "node " + quoted(req.node_status()) +
                                                       " is not known (list nodes with: berth "
                                                       "node status)"));
        return;
      }
      v1::Response r;
      *r.add_nodes() = it->second;
      for (const auto& [key, v] : st.volumes)
        for (const auto& c : v.claims())
          if (c.node_id() == it->first) {
            add_volume(self, r, v);
            break;
          }
      rp.deliver(wrap(std::move(r)));
      return;
    }
    case v1::Request::kNodeList: {
      v1::Response r;
      for (const auto& [id, n] : st.nodes) *r.add_nodes() = n;
      rp.deliver(wrap(std::move(r)));
      return;
    }
    case v1::Request::kAgentStatus:
    case v1::Request::kRaftListPeers:
    case v1::Request::kRaftRemovePeer:
    case v1::Request::kRaftTransferLeadership:
    case v1::Request::kSnapshotSave:
    case v1::Request::kSnapshotRestore:
      // Answered by the server actor, which knows the replicated log.
      rp.deliver(error_response(errc::internal, "the server answers this request"));
      return;
    case v1::Request::COMMAND_NOT_SET:
      rp.deliver(error_response(errc::invalid,
                                "the request names no command this server knows; is the shell "
                                "newer than berthd?"));
      return;
  }
}

}  // namespace

leader_actor::behavior_type leader(self_ptr self, replicated_log_actor log,
                                   state_contents initial, std::shared_ptr<metrics> stats) {
  auto& st = self->state;
  st.log = std::move(log);
  st.stats = std::move(stats);
  for (auto& p : initial.plugins) {
    st.plugin_actors.emplace(p.id(), spawn_plugin(self, p));
    st.plugins.emplace(p.id(), std::move(p));
  }
  for (auto& v : initial.volumes) {
    volume_key key{v.namespace_(), v.id()};
    st.volume_actors.emplace(key, spawn_volume(self, v, true));
    st.volumes.emplace(key, std::move(v));
  }
  for (auto& n : initial.nodes) st.nodes.emplace(n.id(), std::move(n));
  st.stats->clear_state();
  for (const auto& [key, v] : st.volumes) st.stats->volume_changed(nullptr, &v);
  for (const auto& [id, p] : st.plugins) st.stats->plugin_changed(nullptr, &p);
  count_actors(self);
  // A node actor that stops (its client went away) publishes nothing more.
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& nodes = self->state.node_actors;
    for (auto it = nodes.begin(); it != nodes.end();)
      it = it->second.address() == dm.source ? nodes.erase(it) : std::next(it);
    self->state.stats->actors("node", nodes.size());
  });
  return {
      [self](api_atom, pb<v1::Request>& req) -> caf::result<pb<v1::Response>> {
        auto rp = self->make_response_promise<pb<v1::Response>>();
        execute(self, req.msg, rp);
        return rp;
      },
      [self](changed_atom, pb<v1::Volume>& v) {
        volume_key key{v.msg.namespace_(), v.msg.id()};
        auto& slot = self->state.volumes[key];
        self->state.stats->volume_changed(slot.id().empty() ? nullptr : &slot, &v.msg);
        slot = std::move(v.msg);
        count_actors(self);
      },
      [self](removed_atom, pb<v1::VolumeKey>& k) {
        volume_key key{k.msg.namespace_(), k.msg.id()};
        if (auto it = self->state.volumes.find(key); it != self->state.volumes.end()) {
          self->state.stats->volume_changed(&it->second, nullptr);
          self->state.volumes.erase(it);
        }
        self->state.volume_actors.erase(key);
        count_actors(self);
      },
      [self](changed_atom, pb<v1::Plugin>& p) {
        self->state.stats->plugin_changed(nullptr, &p.msg);
        self->state.plugins[p.msg.id()] = std::move(p.msg);
        count_actors(self);
      },
      [self](node_atom, const std::string& node_id, node_actor node) {
        self->monitor(node);
        self->state.node_actors[node_id] = std::move(node);
        self->state.stats->actors("node", self->state.node_actors.size());
      },
  };
}

}  // namespace berth
