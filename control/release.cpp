#include "control/release.hpp"

#include <algorithm>

#include "control/lease.hpp"
#include "messages/model.hpp"

namespace berth {

release_step next_release_step(const v1::Volume& v, const std::string& alloc_id,
                               const release_facts& facts) {
  const auto* c = find_claim(v, alloc_id);
  if (c == nullptr) return {release_action::done};
  switch (c->state()) {
    case v1::CLAIM_TAKEN:
      return {release_action::commit, v1::CLAIM_UNPUBLISHING};
    case v1::CLAIM_UNPUBLISHING:
      if (!facts.node_connected && facts.node_detached)
        return {release_action::commit, v1::CLAIM_NODE_DETACHED};
      if (!facts.node_connected) return {release_action::wait_for_node};
      return {release_action::node_unpublish, v1::CLAIM_NODE_DETACHED,
              !other_publications_on_node(v, c->node_id(), alloc_id)};
    case v1::CLAIM_NODE_DETACHED:
      // A claim taken while the plugin required ControllerPublishVolume
      // needs ControllerUnpublishVolume, whatever the plugin says now.
      if (!(facts.controller_required || c->controller_required()) ||
          other_publications_on_node(v, c->node_id(), alloc_id))
        return {release_action::commit, v1::CLAIM_CONTROLLER_DETACHED};
      // Claim simulation seed 49999: a record of an ended alloc whose unmount
      // on return failed after unstaging kept the client from unstaging
      // again for this claim; ControllerUnpublish ran on a staged volume.
      if (facts.node_unmounts_pending) return {release_action::wait_for_unmounts};
      if (!facts.controller_available) return {release_action::wait_for_controller};
      return {release_action::controller_unpublish, v1::CLAIM_CONTROLLER_DETACHED};
    default:
      return {release_action::commit, v1::CLAIM_READY_TO_FREE};
  }
}

bool commit_before_next_step(v1::ClaimState to) {
  switch (to) {
    case v1::CLAIM_NODE_DETACHED:
    case v1::CLAIM_CONTROLLER_DETACHED:
      return false;
    default:
      return true;
  }
}

bool release_without_node(const catalog& c, const v1::Claim& claim, bool connected,
                          bool operator_detach, bool keep_down_writers) {
  // Not a drain past its deadline either (issue 59): its writers may still
  // run; the drain stops them through the client first.
  if (connected) return false;
  const auto* n = find_node(c, claim.node_id());
  if (operator_detach) return true;
  if (n == nullptr || !n->has_client()) return true;
  if (n->status() != v1::NODE_DOWN) return false;
  return !(keep_down_writers && claim.mode() == v1::CLAIM_WRITE &&
           fenced_publication(claim.access_mode(), false));
}

claim_request claim_request_of(const v1::ClaimRequest& q, int64_t now_ms) {
  claim_request r;
  r.alloc_id = q.alloc_id();
  r.node_id = q.node_id();
  r.write = !q.read_only();
  r.access_mode = q.access_mode();
  r.attachment_mode = q.attachment_mode();
  r.now_ms = now_ms;
  r.node_volume_count = q.node_volume_count();
  r.allow_abnormal = q.allow_abnormal();
  return r;
}

std::optional<failure> refuse_release_under_writer(const catalog& c, const v1::Volume& v,
                                                   const std::string& alloc_id) {
  const auto* claim = find_claim(v, alloc_id);
  const auto* a = find_alloc(c, alloc_id);
  if (claim == nullptr || a == nullptr || alloc_terminal(a->state()) || a->command().empty())
    return std::nullopt;
  return failure{errc::refused,
                 "alloc " + quote_name(alloc_id) + " still runs its command on node " +
                     quote_name(claim->node_id()) + ", which writes through its claim of " +
                     "volume " + quote_name(v.id()) + "; stop it first (berth alloc stop " +
                     alloc_id + "): its claim is released once the command stopped"};
}

std::vector<std::string> claims_being_released(const catalog& c, const v1::Volume& v) {
  return claims_to_release(v, [&](const std::string& id) -> std::optional<v1::AllocState> {
    if (const auto* a = find_alloc(c, id)) return a->state();
    return std::nullopt;
  });
}

std::vector<std::string> releases_awaited(const catalog& c, const v1::Volume& v,
                                          const claim_request& req, const v1::Plugin* plugin) {
  auto ended = claims_being_released(c, v);
  ended.erase(std::remove(ended.begin(), ended.end(), req.alloc_id), ended.end());
  if (ended.empty()) return {};
  auto now = v;
  if (!claim(now, req, plugin)) return {};  // taken as it is
  auto without = v;
  auto* claims = without.mutable_claims();
  for (auto it = claims->begin(); it != claims->end();)
    it = std::find(ended.begin(), ended.end(), it->alloc_id()) != ended.end() ? claims->erase(it)
                                                                              : std::next(it);
  if (claim(without, req, plugin)) return {};  // refused for another reason too
  return ended;
}

bool still_detached(bool node_detached, int64_t detached_at_ms, int64_t last_publish_ms) {
  if (!node_detached) return false;
  return detached_at_ms == 0 || last_publish_ms == 0 || last_publish_ms < detached_at_ms;
}

bool release_judged_another(int64_t judged_claimed_at_ms, const v1::Claim& now) {
  return judged_claimed_at_ms != 0 && now.claimed_at_ms() != judged_claimed_at_ms;
}

bool joins_running_release(bool running_is_detach, bool asks_detach) {
  return running_is_detach || !asks_detach;
}

detach_plan plan_detach(const catalog& c, const v1::Volume& v, const std::string& node_id) {
  detach_plan plan;
  const auto* n = find_node(c, node_id);
  bool node_down = n != nullptr && n->status() == v1::NODE_DOWN;
  for (const auto& claim : v.claims()) {
    if (claim.node_id() != node_id) continue;
    const auto* a = find_alloc(c, claim.alloc_id());
    bool live = a != nullptr && !alloc_terminal(a->state());
    if (live && !node_down && claim.state() == v1::CLAIM_TAKEN)
      plan.kept.push_back(claim.alloc_id());
    else
      plan.release.push_back(claim.alloc_id());
  }
  return plan;
}

v1::Volume node_view(const v1::Volume& v) {
  v1::Volume out;
  out.set_id(v.id());
  out.set_namespace_(v.namespace_());
  out.set_external_id(v.external_id());
  out.set_modify_index(v.modify_index());
  if (v.has_mount_options()) *out.mutable_mount_options() = v.mount_options();
  *out.mutable_context() = v.context();
  *out.mutable_secrets() = v.secrets();
  return out;
}

v1::NodeVolumeRequest node_request(const v1::Volume& v, const v1::Claim& c,
                                   const v1::Plugin& plugin) {
  v1::NodeVolumeRequest r;
  r.set_plugin_id(v.plugin_id());
  r.set_alloc_id(c.alloc_id());
  *r.mutable_volume() = node_view(v);
  r.set_read_only(c.mode() == v1::CLAIM_READ);
  r.set_access_mode(c.access_mode());
  r.set_attachment_mode(c.attachment_mode());
  // The CSI node id the claim was published to (its node's plugin
  // instance may be gone: the node is down), else the instance's now.
  const auto* inst = node_instance(plugin, c.node_id());
  if (!c.csi_node_id().empty())
    r.set_csi_node_id(c.csi_node_id());
  else
    r.set_csi_node_id(inst && !inst->csi_node_id().empty() ? inst->csi_node_id() : c.node_id());
  return r;
}

bool step_uses_secrets(node_step s) {
  switch (s) {
    case node_step::controller_publish:
    case node_step::controller_unpublish:
    case node_step::stage_publish:
    case node_step::controller_expand:
      return true;
    case node_step::unpublish_unstage:
    case node_step::node_expand:
      return false;
  }
  return false;
}

v1::NodeVolumeRequest request_for(v1::NodeVolumeRequest r, node_step s) {
  if (!step_uses_secrets(s)) r.mutable_volume()->clear_secrets();
  return r;
}

publish_plan plan_publish(const v1::Volume& v, const v1::Claim& c, const v1::Plugin& plugin,
                          const std::vector<std::string>& mount_flags) {
  publish_plan plan;
  plan.publish = node_request(v, c, plugin);
  if (!mount_flags.empty()) {
    auto* flags = plan.publish.mutable_volume()->mutable_mount_options()->mutable_mount_flags();
    flags->Clear();
    for (const auto& f : mount_flags) *flags->Add() = f;
  }
  plan.controller_publish = plugin.controller_required();
  plan.attach = plan.publish;
  plan.attach.set_read_only(!allows_writers(c.access_mode()));
  return plan;
}

}  // namespace berth
