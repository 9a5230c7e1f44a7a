// The leader actor: snapshots (create, delete, list), volume modify, and
// what volume create adds for a content source (snapshot_id, clone_id).
// The rules are control/snapshots'; snapshots are not committed (the plugin
// keeps them), a modify is committed by the volume's actor.
#include <caf/typed_event_based_actor.hpp>
#include <chrono>

#include "actors/leader_flows.hpp"
#include "messages/failure.hpp"
#include "control/placement.hpp"
#include "control/snapshots.hpp"
#include "control/views.hpp"

namespace berth::leader_flows {

node_actor pick_capable_controller(const self_ptr& self, const std::string& plugin_id,
                                   controller_capability cap, const v1::TopologyRequest* topology) {
  const auto* p = find_plugin(self->state.cat, plugin_id);
  if (p == nullptr) return {};
  auto candidates = capable_controllers(
      *p,
      controller_candidates(
          *p, [&](const std::string& n) { return static_cast<bool>(node_of(self, n)); }, topology),
      cap);
  auto chosen = next_in_turn(candidates, self->state.controller_turn[plugin_id]);
  return chosen ? node_of(self, *chosen) : node_actor{};
}

namespace {

failure no_controller(const std::string& plugin_id, controller_capability cap,
                      const std::string& what) {
  return failure{errc::unavailable, what +
                                        ": no node with a connected berth client runs a "
                                        "healthy controller of plugin " +
                                        quote_name(plugin_id) + " that advertises " +
                                        capability_name(cap) + "; retry once one is back"};
}

std::optional<failure> request_problems(const v1::SnapshotRequest& r,
                                        v1::Request::CommandCase which, const std::string& object) {
  auto problems = snapshot_request_problems(r, which);
  if (problems.empty()) return std::nullopt;
  return failure{errc::invalid, describe(object, problems)};
}

// ListSnapshots through a controller of each plugin in turn, every page
// (or the one page asked for), into `out`.
void list_plugins(const self_ptr& self, v1::SnapshotRequest r, std::vector<std::string> plugins,
                  size_t at, int pages, std::shared_ptr<v1::Response> out, response_promise rp) {
  if (at == plugins.size()) {
    add_sources(self->state.cat, *out->mutable_snapshots());
    out->set_index(self->state.cat.applied_index);
    out->set_message(std::to_string(out->snapshots_size()) + " snapshot(s)");
    deliver(rp, std::move(*out));
    return;
  }
  const auto& plugin = plugins[at];
  auto controller = pick_capable_controller(self, plugin, controller_capability::list_snapshots);
  if (!controller) {
    deliver(rp, no_controller(plugin, controller_capability::list_snapshots,
                              "snapshots of plugin " + quote_name(plugin) + " cannot be listed"));
    return;
  }
  auto q = r;
  q.set_plugin_id(plugin);
  self->request(controller, csi_step_timeout, snapshot_list_atom::value, wrap(q),
                self->state.options.term)
      .then(
          [self, r, plugins, at, pages, out, rp](pb<v1::SnapshotList>& page) mutable {
            for (auto& s : *page.msg.mutable_snapshots()) *out->add_snapshots() = std::move(s);
            const auto& next = page.msg.next_token();
            // One page when one was asked for (--per-page): its token goes
            // back to the shell; else every page, up to a bound.
            if (r.per_page() != 0) {
              out->set_next_page_token(next);
            } else if (!next.empty() && pages < 1000) {
              r.set_page_token(next);
              list_plugins(self, std::move(r), std::move(plugins), at, pages + 1, out, rp);
              return;
            }
            r.set_page_token("");
            list_plugins(self, std::move(r), std::move(plugins), at + 1, 0, out, rp);
          },
          [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); });
}

// A group snapshot create (volume_ids): no volume actor is asked, as the
// call is the plugin's alone and changes nothing berth keeps.
void group_snapshot_create(const self_ptr& self, v1::SnapshotRequest r, response_promise rp) {
  auto& st = self->state;
  auto planned = plan_group_snapshot(st.cat, r);
  if (auto* f = std::get_if<failure>(&planned)) {
    deliver(rp, *f);
    return;
  }
  auto& plan = std::get<group_snapshot_plan>(planned);
  auto cap = controller_capability::group_snapshot;
  auto what = "group snapshot " + quote_name(r.name()) + " cannot be taken";
  if (auto f = capability_refusal(find_plugin(st.cat, plan.plugin_id), plan.plugin_id, cap, what)) {
    deliver(rp, *f);
    return;
  }
  auto controller = pick_capable_controller(self, plan.plugin_id, cap);
  if (!controller) {
    deliver(rp, no_controller(plan.plugin_id, cap, what));
    return;
  }
  r.set_plugin_id(plan.plugin_id);
  for (auto& id : plan.external_ids) r.add_source_external_ids(std::move(id));
  *r.mutable_secrets() = std::move(plan.secrets);
  auto name = r.name();
  auto count = r.volume_ids_size();
  self->request(controller, csi_step_timeout, group_snapshot_atom::value, wrap(std::move(r)),
                st.options.term)
      .then(
          [self, rp, name, count](pb<v1::SnapshotList>& members) mutable {
            v1::Response resp;
            auto group = members.msg.snapshots().empty()
                             ? std::string()
                             : members.msg.snapshots(0).group_snapshot_id();
            for (auto& m : *members.msg.mutable_snapshots()) *resp.add_snapshots() = std::move(m);
            add_sources(self->state.cat, *resp.mutable_snapshots());
            resp.set_message("group snapshot " + quote_name(group) + " (" + quote_name(name) + ") of " +
                             std::to_string(count) + " volume(s) created " +
                             "(CreateVolumeGroupSnapshot): " +
                             std::to_string(resp.snapshots_size()) + " member snapshot(s)");
            deliver(rp, std::move(resp));
          },
          [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); });
}

// A group snapshot delete (group_snapshot_id), with its members when given.
void group_snapshot_delete(const self_ptr& self, v1::SnapshotRequest r, response_promise rp) {
  auto& st = self->state;
  auto cap = controller_capability::group_snapshot;
  const auto* plugin = find_plugin(st.cat, r.plugin_id());
  auto what = "group snapshot " + quote_name(r.group_snapshot_id()) + " cannot be deleted";
  if (auto f = capability_refusal(plugin, r.plugin_id(), cap, what)) {
    deliver(rp, *f);
    return;
  }
  auto controller = pick_capable_controller(self, r.plugin_id(), cap);
  if (!controller) {
    deliver(rp, no_controller(r.plugin_id(), cap, what));
    return;
  }
  r.set_can_list(plugin_can(*plugin, controller_capability::list_snapshots));
  auto id = r.group_snapshot_id(), plugin_id = r.plugin_id();
  self->request(controller, csi_step_timeout, group_snapshot_delete_atom::value, wrap(std::move(r)),
                st.options.term)
      .then(
          [rp, id, plugin_id](bool found) mutable {
            v1::Response resp;
            auto object = "group snapshot " + quote_name(id) + " of plugin " + quote_name(plugin_id);
            resp.set_message(
                found ? object + " deleted with its members (DeleteVolumeGroupSnapshot)"
                      : object + " is already deleted (or never existed); nothing to do");
            deliver(rp, std::move(resp));
          },
          [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); });
}

}  // namespace

void snapshot_create(const self_ptr& self, v1::SnapshotRequest r, response_promise rp) {
  auto& st = self->state;
  auto object = r.volume_ids().empty() ? "snapshot of volume " + quote_name(r.volume_id())
                                       : "group snapshot " + quote_name(r.name());
  if (auto f = request_problems(r, v1::Request::kSnapshotCreate, object)) {
    deliver(rp, *f);
    return;
  }
  if (!r.volume_ids().empty()) {
    group_snapshot_create(self, std::move(r), rp);
    return;
  }
  auto found = lookup_volume(st.cat, r.namespace_(), r.volume_id());
  if (found.error) {
    deliver(rp, *found.error);
    return;
  }
  const auto& vol = volume_at(st.cat, found.key);
  auto cap = controller_capability::create_delete_snapshot;
  auto what = "volume " + quote_name(vol.id()) + " cannot be snapshotted";
  if (auto f =
          capability_refusal(find_plugin(st.cat, vol.plugin_id()), vol.plugin_id(), cap, what)) {
    deliver(rp, *f);
    return;
  }
  auto controller = pick_capable_controller(self, vol.plugin_id(), cap);
  if (!controller) {
    deliver(rp, no_controller(vol.plugin_id(), cap, what));
    return;
  }
  auto id = vol.id();
  ask_volume_actor<pb<v1::Snapshot>>(
      self, found.key,
      [rp, id](pb<v1::Snapshot>& s) mutable {
        v1::Response resp;
        resp.set_message("snapshot " + quote_name(s.msg.id()) + " of volume " + quote_name(id) +
                         " created (CreateSnapshot)");
        *resp.add_snapshots() = std::move(s.msg);
        deliver(rp, std::move(resp));
      },
      [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); }, snapshot_atom::value,
      wrap(std::move(r)), controller);
}

void snapshot_delete(const self_ptr& self, v1::SnapshotRequest r, response_promise rp) {
  auto& st = self->state;
  auto object = !r.group_snapshot_id().empty() ? "group snapshot " + quote_name(r.group_snapshot_id())
                : r.snapshot_id().empty()      ? std::string("snapshot delete")
                                               : "snapshot " + quote_name(r.snapshot_id());
  if (auto f = request_problems(r, v1::Request::kSnapshotDelete, object)) {
    deliver(rp, *f);
    return;
  }
  if (!r.group_snapshot_id().empty()) {
    group_snapshot_delete(self, std::move(r), rp);
    return;
  }
  auto cap = controller_capability::create_delete_snapshot;
  const auto* plugin = find_plugin(st.cat, r.plugin_id());
  auto what = "snapshot " + quote_name(r.snapshot_id()) + " cannot be deleted";
  if (auto f = capability_refusal(plugin, r.plugin_id(), cap, what)) {
    deliver(rp, *f);
    return;
  }
  auto controller = pick_capable_controller(self, r.plugin_id(), cap);
  if (!controller) {
    deliver(rp, no_controller(r.plugin_id(), cap, what));
    return;
  }
  r.set_can_list(plugin_can(*plugin, controller_capability::list_snapshots));
  auto id = r.snapshot_id(), plugin_id = r.plugin_id();
  self->request(controller, csi_step_timeout, snapshot_delete_atom::value, wrap(std::move(r)),
                st.options.term)
      .then(
          [rp, id, plugin_id](bool found) mutable {
            v1::Response resp;
            resp.set_message(found ? "snapshot " + quote_name(id) + " of plugin " + quote_name(plugin_id) +
                                         " deleted (DeleteSnapshot)"
                                   : "snapshot " + quote_name(id) + " of plugin " + quote_name(plugin_id) +
                                         " is already deleted (or never existed); nothing to do");
            deliver(rp, std::move(resp));
          },
          [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); });
}

void snapshot_list(const self_ptr& self, v1::SnapshotRequest r, response_promise rp) {
  if (auto f = request_problems(r, v1::Request::kSnapshotList, "snapshot list")) {
    deliver(rp, *f);
    return;
  }
  auto plugins = plugins_to_list(self->state.cat, r);
  if (auto* f = std::get_if<failure>(&plugins)) {
    deliver(rp, *f);
    return;
  }
  list_plugins(self, std::move(r), std::get<std::vector<std::string>>(std::move(plugins)), 0, 0,
               std::make_shared<v1::Response>(), rp);
}

void volume_list_external(const self_ptr& self, v1::ExternalVolumeListRequest r,
                          response_promise rp) {
  auto& st = self->state;
  if (r.plugin_id().empty()) {
    deliver(rp, failure{errc::invalid,
                        "external volumes: a plugin id is required (plugin_id=P; "
                        "list plugins with: berth plugin status)"});
    return;
  }
  auto cap = controller_capability::list_volumes;
  auto what = "the volumes of plugin " + quote_name(r.plugin_id()) + " cannot be listed";
  if (auto f = capability_refusal(find_plugin(st.cat, r.plugin_id()), r.plugin_id(), cap, what)) {
    deliver(rp, *f);
    return;
  }
  auto controller = pick_capable_controller(self, r.plugin_id(), cap);
  if (!controller) {
    deliver(rp, no_controller(r.plugin_id(), cap, what));
    return;
  }
  auto plugin = r.plugin_id();
  self->request(controller, csi_step_timeout, list_volumes_atom::value, wrap(std::move(r)),
                st.options.term)
      .then(
          [self, plugin, rp](pb<v1::ExternalVolumeList>& page) mutable {
            v1::Response resp;
            for (auto& v : *page.msg.mutable_volumes()) *resp.add_external_volumes() = std::move(v);
            resp.set_next_page_token(page.msg.next_token());
            resp.set_index(self->state.cat.applied_index);
            resp.set_message(std::to_string(resp.external_volumes_size()) +
                             " volume(s) of plugin " + quote_name(plugin) + " (ListVolumes)");
            deliver(rp, std::move(resp));
          },
          [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); });
}

void volume_modify(const self_ptr& self, v1::VolumeModifyRequest r, response_promise rp) {
  auto& st = self->state;
  auto problems = modify_problems(r);
  if (!problems.empty()) {
    deliver(rp,
            failure{errc::invalid, describe("volume modify " + quote_name(r.volume_id()), problems)});
    return;
  }
  auto found = lookup_volume(st.cat, r.namespace_(), r.volume_id());
  if (found.error) {
    deliver(rp, *found.error);
    return;
  }
  const auto& vol = volume_at(st.cat, found.key);
  auto cap = controller_capability::modify_volume;
  auto what = "volume " + quote_name(vol.id()) + " cannot be modified";
  if (auto f =
          capability_refusal(find_plugin(st.cat, vol.plugin_id()), vol.plugin_id(), cap, what)) {
    deliver(rp, *f);
    return;
  }
  auto controller = pick_capable_controller(self, vol.plugin_id(), cap);
  if (!controller) {
    deliver(rp, no_controller(vol.plugin_id(), cap, what));
    return;
  }
  ask_volume(self, found.key, rp,
             "volume " + quote_name(vol.id()) + " modified (ControllerModifyVolume)",
             modify_atom::value, wrap(std::move(r)), controller);
}

std::optional<failure> prepare_content_source(const self_ptr& self, v1::Volume& spec) {
  auto& st = self->state;
  auto problems = content_source_problems(spec, true);
  if (!problems.empty())
    return failure{errc::invalid, describe("volume " + quote_name(spec.id()), problems)};
  auto cap = content_source_capability(spec);
  if (!cap) return std::nullopt;
  auto what = "volume " + quote_name(spec.id()) + " cannot be created from " +
              (spec.snapshot_id().empty() ? "volume " + quote_name(spec.clone_id())
                                          : "snapshot " + quote_name(spec.snapshot_id()));
  if (auto f =
          capability_refusal(find_plugin(st.cat, spec.plugin_id()), spec.plugin_id(), *cap, what))
    return f;
  if (!spec.clone_id().empty()) {
    auto src = clone_source(st.cat, spec);
    if (auto* f = std::get_if<failure>(&src)) return *f;
    spec.set_clone_external_id(std::get<std::string>(src));
  }
  return std::nullopt;
}

}  // namespace berth::leader_flows
