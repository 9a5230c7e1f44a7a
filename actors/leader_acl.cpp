// The leader's ACL flows (control/acl decides): the berth acl commands and
// a client node's identity.  The check of each request is in execute
// (leader.cpp), before anything happens.
#include <caf/typed_event_based_actor.hpp>

#include "actors/clock.hpp"
#include "actors/leader_flows.hpp"
#include "control/acl.hpp"
#include "log/log.hpp"

namespace berth::leader_flows {

// berth acl ...: reads answered from the catalog; policy and token changes
// committed one at a time (key "acl"), answered once applied.
void acl_command(const self_ptr& self, const v1::Request& req, const acl::grant& g,
                 response_promise rp) {
  using R = v1::Request;
  switch (req.command_case()) {
    case R::kAclPolicyList:
    case R::kAclPolicyInfo:
    case R::kAclTokenList:
    case R::kAclTokenInfo:
    case R::kAclTokenSelf: {
      auto r = acl::read(self->state.cat, g, req);
      if (auto* f = std::get_if<failure>(&r))
        deliver(rp, *f);
      else
        deliver(rp, std::move(std::get<v1::Response>(r)));
      return;
    }
    default:
      break;
  }
  // What the shell is told once the change applied: the token (with the
  // secret it made, echoed once) or a summary.
  auto answer = [self, req, rp](std::optional<failure> f) mutable {
    if (f) {
      deliver(rp, *f);
      return;
    }
    v1::Response r;
    const auto& c = self->state.cat;
    const v1::AclRequest* made = req.has_acl_bootstrap()      ? &req.acl_bootstrap()
                                 : req.has_acl_token_create() ? &req.acl_token_create()
                                                              : nullptr;
    if (made) {
      auto it = c.acl_tokens.find(made->accessor_id());
      if (it != c.acl_tokens.end()) {
        auto* t = r.add_acl_tokens();
        *t = it->second;
        t->clear_secret_hash();
      }
      r.set_acl_secret(made->secret());
    } else if (req.has_acl_policy_apply()) {
      auto it = c.acl_policies.find(req.acl_policy_apply().name());
      if (it != c.acl_policies.end()) *r.add_acl_policies() = it->second;
      r.set_message("ACL policy '" + req.acl_policy_apply().name() + "' applied");
    } else if (req.has_acl_policy_delete()) {
      r.set_message("ACL policy '" + req.acl_policy_delete() + "' deleted");
    } else {
      r.set_message("ACL token '" + req.acl_token_delete() + "' deleted");
    }
    deliver(rp, std::move(r));
  };
  int64_t now = wall_ms();
  write(
      self,
      [req, now](const catalog& c) -> std::variant<failure, std::vector<v1::Change>> {
        switch (req.command_case()) {
          case R::kAclBootstrap: return acl::bootstrap(c, req.acl_bootstrap(), now);
          case R::kAclPolicyApply: return acl::policy_apply(c, req.acl_policy_apply());
          case R::kAclPolicyDelete: return acl::policy_delete(c, req.acl_policy_delete());
          case R::kAclTokenCreate: return acl::token_create(c, req.acl_token_create(), now);
          case R::kAclTokenDelete: return acl::token_delete(c, req.acl_token_delete());
          default: return failure{errc::invalid, "not an ACL command"};
        }
      },
      answer);
}

void with_node_identity(const self_ptr& self, const std::string& node_id, const std::string& secret,
                        std::function<void(std::optional<failure>)> then) {
  auto refusal = acl::node_refusal(self->state.cat, node_id, secret);
  if (!refusal) {
    then(std::nullopt);
    return;
  }
  if (refusal->code != errc::not_found) {
    logging::warn("leader", "node refused: another node secret", {{"node", node_id}});
    then(refusal);
    return;
  }
  int64_t now = wall_ms();
  write(
      self,
      [node_id, secret, now](const catalog& c) { return acl::bind_node(c, node_id, secret, now); },
      [then, node_id](std::optional<failure> f) {
        if (f) logging::warn("leader", "node refused", {{"node", node_id}, {"why", f->message}});
        then(std::move(f));
      });
}

}  // namespace berth::leader_flows
