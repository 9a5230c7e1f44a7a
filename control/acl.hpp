// ACLs (berthd --acl): policies of rules per namespace with Nomad's
// capability names, tokens that carry policies, and the check of every
// request against the token that sent it.  Plain functions on the catalog:
// the leader checks before it does anything, a server answering on its own
// (stale reads, the event stream, status of the log) checks with its own
// catalog.  Tests in tests/control/acl_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "control/catalog.hpp"
#include "messages/api.pb.h"
#include "messages/failure.hpp"

namespace berth::acl {

// The capabilities a namespace rule may grant, as Nomad names them
// (list-jobs/read-job/submit-job/alloc-lifecycle are berth's allocs).
const std::vector<std::string>& namespace_capabilities();

// Parses a policy document, Nomad's HCL form:
//
//   namespace "default" { policy = "read"  capabilities = ["csi-mount-volume"] }
//   namespace "team-*"  { policy = "write" }
//   node { policy = "read" }      plugin { policy = "list" }
//   agent { policy = "read" }     operator { policy = "write" }
//
// `#` and `//` start comments.  A namespace's policy is deny, read or write
// (expanded into capabilities); node, agent and operator take deny, read or
// write; plugin deny, list or read.  An error names the line and the fix.
std::variant<v1::AclRules, failure> parse_policy(std::string_view text);

// What a token may do: the union of its policies' rules (deny wins within a
// namespace rule), or everything for a management token.
struct grant {
  bool management = false;
  std::string accessor_id;
  std::string name;
  std::vector<v1::AclNamespaceRule> namespaces;
  std::string node, plugin, agent, op;  // "", "deny", "list", "read", "write"
};

// The hash servers keep of a token's secret (SHA-256, hex).
std::string secret_hash(std::string_view secret);

// The grant of the token with this secret; forbidden when ACLs are on and
// the secret is empty or unknown (the message says how to get a token).
std::variant<grant, failure> resolve(const catalog& c, const std::string& secret);

// Whether the grant holds the capability in the namespace (the rule of the
// most specific matching pattern: the exact name, else the longest glob).
bool allows(const grant& g, const std::string& ns, const std::string& capability);

// Whether a level ("read", "write", "list") of node/plugin/agent/operator
// is granted.
bool allows_level(const std::string& granted, const std::string& wanted);

// Checks a request against the grant before anything happens; the refusal
// names the missing capability and the namespace (or rule).  Requests a
// client node sends for itself (node_secret set) are not checked here.
std::optional<failure> authorize(const catalog& c, const grant& g, const v1::Request& req);

// Whether a request is a node's own report (fingerprint, alloc exit, volume
// usage) sent with its node secret: checked by node identity, not tokens.
bool is_node_request(const v1::Request& req);

// The whole check of a request with ACLs on: resolves its token and
// authorizes the request, leaving the token's grant in `out` (for
// filter_response and may_see).  berth status and acl bootstrap need no
// token; a node's own reports are checked by node identity instead.
std::optional<failure> check(const catalog& c, const v1::Request& req, grant& out);

// Drops from a list answer what the grant may not list (volumes and allocs
// of other namespaces, nodes and plugins without read).
void filter_response(const grant& g, const v1::Request& req, v1::Response& r);

// Whether the grant may see an event (by its topic and namespace).
bool may_see(const grant& g, const v1::Event& e);

// --- the ACL commands: what they commit (or why not) --------------------------

using changes = std::variant<failure, std::vector<v1::Change>>;

// berth acl bootstrap: the first management token, once.  Sending the same
// accessor and secret again after it committed is no change (the answer
// was lost), anything else is refused.
changes bootstrap(const catalog& c, const v1::AclRequest& r, int64_t now_ms);
changes policy_apply(const catalog& c, const v1::AclRequest& r);
changes policy_delete(const catalog& c, const std::string& name);
changes token_create(const catalog& c, const v1::AclRequest& r, int64_t now_ms);
changes token_delete(const catalog& c, const std::string& accessor_id);

// A client node's identity: the first node secret a node reports with is
// bound to its id (a token of type "node", accessor "node:ID", listed with
// the tokens; deleting it lets a rebuilt client take the id).  Later
// reports for that node must carry the same secret.
std::string node_of(const v1::Request& req);
// nullopt: bound to this secret; else the refusal, or (errc::not_found)
// not bound yet.
std::optional<failure> node_refusal(const catalog& c, const std::string& node_id,
                                    const std::string& secret);
changes bind_node(const catalog& c, const std::string& node_id, const std::string& secret,
                  int64_t now_ms);

// The answers of the ACL reads (policy list/info, token list/info/self).
std::variant<failure, v1::Response> read(const catalog& c, const grant& g, const v1::Request& req);

// Whether the request is one of the ACL commands.
bool is_acl_command(const v1::Request& req);

}  // namespace berth::acl
