#include "control/acl.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "control/entries.hpp"

namespace berth::acl {

namespace {

// Capability sets of the namespace shorthands (as Nomad's, for what berth has).
const std::vector<std::string> read_caps = {"list-jobs", "read-job", "csi-list-volume",
                                            "csi-read-volume"};
const std::vector<std::string> write_extra = {"submit-job", "alloc-lifecycle", "csi-write-volume",
                                              "csi-mount-volume", "csi-register-plugin"};
// Nomad capabilities berth has nothing for: accepted (a Nomad policy
// applies as written) and granting nothing here.
const std::set<std::string> nomad_only = {
    "parse-job",         "read-logs",           "read-fs",          "alloc-exec",
    "alloc-node-exec",   "dispatch-job",        "scale-job",        "read-job-scaling",
    "list-scaling-policies", "read-scaling-policy", "submit-recommendation", "sentinel-override",
    "list-host-volume",  "read-host-volume",    "register-host-volume", "delete-host-volume"};

struct token {
  enum kind { ident, str, lbrace, rbrace, equals, lbracket, rbracket, comma, end } k;
  std::string text;
  int line;
};

// Splits an HCL document into tokens; a failure names the line.
std::variant<std::vector<token>, failure> lex(std::string_view s) {
  std::vector<token> out;
  int line = 1;
  size_t i = 0;
  auto bad = [&](const std::string& what) {
    return failure{errc::invalid, "policy line " + std::to_string(line) + ": " + what};
  };
  while (i < s.size()) {
    char ch = s[i];
    if (ch == '\n') {
      ++line;
      ++i;
    } else if (std::isspace(static_cast<unsigned char>(ch))) {
      ++i;
    } else if (ch == '#' || (ch == '/' && i + 1 < s.size() && s[i + 1] == '/')) {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (ch == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      auto close = s.find("*/", i + 2);
      if (close == std::string_view::npos) return bad("a /* comment is not closed");
      line += static_cast<int>(std::count(s.begin() + static_cast<long>(i),
                                          s.begin() + static_cast<long>(close), '\n'));
      i = close + 2;
    } else if (std::isalpha(static_cast<unsigned char>(ch)) || ch == '_') {
      size_t start = i;
      while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_' ||
                              s[i] == '-'))
        ++i;
      out.push_back({token::ident, std::string(s.substr(start, i - start)), line});
    } else if (ch == '"') {
      std::string text;
      ++i;
      for (;;) {
        if (i >= s.size() || s[i] == '\n') return bad("a string is not closed with \"");
        if (s[i] == '"') break;
        if (s[i] == '\\') {
          if (i + 1 >= s.size()) return bad("a string ends in \\");
          char e = s[i + 1];
          if (e != '"' && e != '\\') return bad("only \\\" and \\\\ are escapes in a string");
          text += e;
          i += 2;
          continue;
        }
        text += s[i++];
      }
      ++i;
      out.push_back({token::str, std::move(text), line});
    } else {
      token::kind k;
      switch (ch) {
        case '{': k = token::lbrace; break;
        case '}': k = token::rbrace; break;
        case '=': k = token::equals; break;
        case '[': k = token::lbracket; break;
        case ']': k = token::rbracket; break;
        case ',': k = token::comma; break;
        default: {
          std::string shown = std::isprint(static_cast<unsigned char>(ch)) ? std::string(1, ch)
                                                                          : "a control byte";
          return bad("unexpected '" + shown +
                     "' (a policy is blocks like: namespace \"default\" { policy = \"read\" })");
        }
      }
      out.push_back({k, std::string(1, ch), line});
      ++i;
    }
  }
  out.push_back({token::end, "", line});
  return out;
}

bool is_level(const std::string& block, const std::string& v) {
  if (block == "plugin") return v == "deny" || v == "list" || v == "read";
  return v == "deny" || v == "read" || v == "write";
}

int rank(const std::string& level) {
  if (level == "list") return 1;
  if (level == "read") return 2;
  if (level == "write") return 3;
  return 0;
}

// Merges two levels of one rule: deny wins, else the higher.
std::string merge_level(const std::string& a, const std::string& b) {
  if (a == "deny" || b == "deny") return "deny";
  return rank(a) >= rank(b) ? a : b;
}

bool glob_match(std::string_view pattern, std::string_view s) {
  size_t p = 0, i = 0, star = std::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pattern.size() && pattern[p] == s[i]) {
      ++p;
      ++i;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = i;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool valid_name(const std::string& s, size_t most) {
  if (s.empty() || s.size() > most) return false;
  return std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
  });
}

v1::AclToken shown(v1::AclToken t) {
  t.clear_secret_hash();
  return t;
}

const v1::AclToken* by_accessor(const catalog& c, const std::string& id) {
  auto it = c.acl_tokens.find(id);
  return it == c.acl_tokens.end() ? nullptr : &it->second;
}

std::optional<failure> check_ids(const v1::AclRequest& r) {
  if (!valid_name(r.accessor_id(), 64))
    return failure{errc::invalid, "the token's accessor id must be 1-64 letters, digits, '-', "
                                  "'_' or '.' (the shell makes one)"};
  if (r.secret().size() < 16 || !valid_name(r.secret(), 128))
    return failure{errc::invalid, "the token's secret must be 16-128 letters, digits, '-', '_' "
                                  "or '.' (the shell makes one)"};
  return std::nullopt;
}

v1::Change token_change(v1::AclToken t, bool bootstrap) {
  v1::Change ch;
  if (bootstrap)
    *ch.mutable_acl_bootstrap() = std::move(t);
  else
    *ch.mutable_acl_token_upsert() = std::move(t);
  return ch;
}

}  // namespace

const std::vector<std::string>& namespace_capabilities() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> v{"deny"};
    v.insert(v.end(), read_caps.begin(), read_caps.end());
    v.insert(v.end(), write_extra.begin(), write_extra.end());
    return v;
  }();
  return all;
}

std::variant<v1::AclRules, failure> parse_policy(std::string_view text) {
  if (text.size() > 64 * 1024)
    return failure{errc::invalid, "the policy is larger than 64 KiB; split it into several"};
  auto lexed = lex(text);
  if (auto* f = std::get_if<failure>(&lexed)) return *f;
  const auto& toks = std::get<std::vector<token>>(lexed);
  size_t i = 0;
  auto bad = [&](const token& t, const std::string& what) {
    return failure{errc::invalid, "policy line " + std::to_string(t.line) + ": " + what};
  };
  auto name_of = [](const token& t) {
    return t.k == token::end ? std::string("the end") : "'" + t.text + "'";
  };
  v1::AclRules rules;
  std::map<std::string, std::set<std::string>> ns_caps;  // pattern -> capabilities
  std::vector<std::string> ns_order;
  bool any = false;
  while (toks[i].k != token::end) {
    const auto& head = toks[i];
    if (head.k != token::ident)
      return bad(head, "expected a block (namespace, node, plugin, agent, operator), found " +
                           name_of(head));
    std::string block = head.text;
    bool is_ns = block == "namespace";
    if (!is_ns && block != "node" && block != "plugin" && block != "agent" && block != "operator")
      return bad(head, "unknown block '" + block +
                           "'; the blocks are namespace \"NAME\", node, plugin, agent, operator");
    ++i;
    std::string pattern;
    if (is_ns) {
      if (toks[i].k != token::str)
        return bad(toks[i], "namespace needs a name in quotes: namespace \"default\" { ... }");
      pattern = toks[i].text;
      if (pattern.empty() || pattern.size() > 128 ||
          !std::all_of(pattern.begin(), pattern.end(), [](char ch) {
            return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' ||
                   ch == '.' || ch == '*';
          }))
        return bad(toks[i], "namespace \"" + pattern.substr(0, 40) +
                                "\": a name is 1-128 letters, digits, '-', '_', '.' or '*'");
      ++i;
    } else if (toks[i].k == token::str) {
      return bad(toks[i], block + " takes no name: " + block + " { policy = \"read\" }");
    }
    if (toks[i].k != token::lbrace) return bad(toks[i], "expected '{' after " + block);
    ++i;
    std::string policy;
    std::vector<std::string> caps;
    bool has_caps = false;
    while (toks[i].k != token::rbrace) {
      const auto& key = toks[i];
      if (key.k != token::ident)
        return bad(key, "expected policy = \"...\"" +
                            std::string(is_ns ? " or capabilities = [...]" : "") + ", found " +
                            name_of(key));
      ++i;
      if (toks[i].k != token::equals) return bad(toks[i], "expected '=' after " + key.text);
      ++i;
      if (key.text == "policy") {
        if (toks[i].k != token::str) return bad(toks[i], "policy takes a string: policy = \"read\"");
        policy = toks[i].text;
        ++i;
        bool ok = is_ns ? (policy == "deny" || policy == "read" || policy == "write")
                        : is_level(block, policy);
        if (!ok)
          return bad(key, block + " policy \"" + policy.substr(0, 40) + "\" is not one of " +
                              (block == "plugin" ? "deny, list, read" : "deny, read, write"));
      } else if (key.text == "capabilities" && is_ns) {
        if (toks[i].k != token::lbracket)
          return bad(toks[i], "capabilities takes a list: capabilities = [\"csi-read-volume\"]");
        ++i;
        has_caps = true;
        while (toks[i].k != token::rbracket) {
          if (toks[i].k != token::str)
            return bad(toks[i], "expected a capability in quotes, found " + name_of(toks[i]));
          const auto& cap = toks[i].text;
          const auto& known = namespace_capabilities();
          if (std::find(known.begin(), known.end(), cap) == known.end() && !nomad_only.count(cap)) {
            std::string list;
            for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
            return bad(toks[i], "unknown capability \"" + cap.substr(0, 40) + "\"; berth's are " + list);
          }
          if (!nomad_only.count(cap)) caps.push_back(cap);
          ++i;
          if (toks[i].k == token::comma)
            ++i;
          else if (toks[i].k != token::rbracket)
            return bad(toks[i], "expected ',' or ']' in the capabilities list");
        }
        ++i;
      } else {
        return bad(key, "unknown key '" + key.text + "' in " + block + " (" +
                            (is_ns ? "policy, capabilities" : "policy") + ")");
      }
    }
    ++i;
    any = true;
    if (is_ns) {
      if (policy.empty() && !has_caps)
        return bad(head, "namespace \"" + pattern + "\" grants nothing: give a policy or capabilities");
      if (!ns_caps.count(pattern)) ns_order.push_back(pattern);
      auto& set = ns_caps[pattern];
      if (policy == "deny") set.insert("deny");
      if (policy == "read" || policy == "write") set.insert(read_caps.begin(), read_caps.end());
      if (policy == "write") set.insert(write_extra.begin(), write_extra.end());
      set.insert(caps.begin(), caps.end());
    } else {
      if (policy.empty()) return bad(head, block + " needs a policy: " + block + " { policy = \"read\" }");
      std::string* slot = block == "node"     ? rules.mutable_node()
                          : block == "plugin" ? rules.mutable_plugin()
                          : block == "agent"  ? rules.mutable_agent()
                                              : rules.mutable_operator_();
      *slot = merge_level(*slot, policy);
    }
  }
  if (!any) return failure{errc::invalid, "the policy is empty: it needs at least one block"};
  for (const auto& p : ns_order) {
    auto* r = rules.add_namespaces();
    r->set_pattern(p);
    const auto& set = ns_caps[p];
    if (set.count("deny")) {
      r->add_capabilities("deny");
      continue;
    }
    for (const auto& cap : namespace_capabilities())
      if (set.count(cap)) r->add_capabilities(cap);
  }
  return rules;
}

std::string secret_hash(std::string_view secret) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(secret.data(), secret.size(), md, &n, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

std::variant<grant, failure> resolve(const catalog& c, const std::string& secret) {
  if (secret.empty())
    return failure{errc::forbidden,
                   "ACLs are on: this request needs a token (berth --token or BERTH_TOKEN; `berth "
                   "acl bootstrap` makes the first management token)"};
  auto it = c.acl_by_hash.find(secret_hash(secret));
  const v1::AclToken* t = it == c.acl_by_hash.end() ? nullptr : by_accessor(c, it->second);
  if (!t)
    return failure{errc::forbidden, "the ACL token is not known here (deleted, or of another "
                                    "cluster): ask an operator for a token (berth acl token create)"};
  if (t->type() == "node")
    return failure{errc::forbidden, "a node secret is not an ACL token: pass a token (berth acl "
                                    "token create)"};
  grant g;
  g.accessor_id = t->accessor_id();
  g.name = t->name();
  if (t->type() == "management") {
    g.management = true;
    return g;
  }
  for (const auto& name : t->policies()) {
    auto p = c.acl_policies.find(name);
    if (p == c.acl_policies.end()) continue;  // deleted since: grants nothing
    const auto& r = p->second.parsed();
    for (const auto& ns : r.namespaces()) g.namespaces.push_back(ns);
    g.node = merge_level(g.node, r.node());
    g.plugin = merge_level(g.plugin, r.plugin());
    g.agent = merge_level(g.agent, r.agent());
    g.op = merge_level(g.op, r.operator_());
  }
  return g;
}

bool allows(const grant& g, const std::string& ns, const std::string& capability) {
  if (g.management) return true;
  // The most specific pattern: the exact name, else the matching glob with
  // the most literal characters; its rules across the token's policies.
  std::string best;
  bool found = false;
  bool exact = false;
  for (const auto& r : g.namespaces) {
    if (r.pattern() == ns) {
      best = ns;
      found = exact = true;
      break;
    }
  }
  if (!exact) {
    size_t best_len = 0;
    for (const auto& r : g.namespaces) {
      if (r.pattern().find('*') == std::string::npos || !glob_match(r.pattern(), ns)) continue;
      size_t literal = static_cast<size_t>(
          std::count_if(r.pattern().begin(), r.pattern().end(), [](char ch) { return ch != '*'; }));
      if (!found || literal > best_len) {
        best = r.pattern();
        best_len = literal;
        found = true;
      }
    }
  }
  if (!found) return false;
  bool has = false;
  for (const auto& r : g.namespaces) {
    if (r.pattern() != best) continue;
    for (const auto& cap : r.capabilities()) {
      if (cap == "deny") return false;
      if (cap == capability) has = true;
    }
  }
  return has;
}

bool allows_level(const std::string& granted, const std::string& wanted) {
  if (granted == "deny" || granted.empty()) return false;
  return rank(granted) >= rank(wanted);
}

bool is_node_request(const v1::Request& req) {
  if (req.node_secret().empty()) return false;
  return req.has_plugin_fingerprint() || req.has_alloc_update() || req.has_volume_stats_report();
}

bool is_acl_command(const v1::Request& req) {
  switch (req.command_case()) {
    case v1::Request::kAclBootstrap:
    case v1::Request::kAclPolicyApply:
    case v1::Request::kAclPolicyDelete:
    case v1::Request::kAclPolicyList:
    case v1::Request::kAclPolicyInfo:
    case v1::Request::kAclTokenCreate:
    case v1::Request::kAclTokenList:
    case v1::Request::kAclTokenInfo:
    case v1::Request::kAclTokenDelete:
    case v1::Request::kAclTokenSelf:
      return true;
    default:
      return false;
  }
}

namespace {

std::optional<failure> need_ns(const grant& g, const std::string& ns_in, const std::string& cap) {
  auto ns = ns_or_default(ns_in);
  if (allows(g, ns, cap)) return std::nullopt;
  return failure{errc::forbidden, "the ACL token '" + (g.name.empty() ? g.accessor_id : g.name) +
                                      "' lacks capability " + cap + " on namespace '" + ns +
                                      "' (add it to one of the token's policies: berth acl policy apply)"};
}

std::optional<failure> need_level(const grant& g, const std::string& rule, const std::string& granted,
                                  const std::string& wanted) {
  if (g.management || allows_level(granted, wanted)) return std::nullopt;
  return failure{errc::forbidden, "the ACL token '" + (g.name.empty() ? g.accessor_id : g.name) +
                                      "' lacks " + rule + " " + wanted + " (a policy with " + rule +
                                      " { policy = \"" + wanted + "\" } grants it)"};
}

std::optional<failure> need_management(const grant& g, const std::string& what) {
  if (g.management) return std::nullopt;
  return failure{errc::forbidden, what + " needs a management token (the ACL token '" +
                                      (g.name.empty() ? g.accessor_id : g.name) + "' is not one)"};
}

std::string alloc_ns(const catalog& c, const std::string& id) {
  const auto* a = find_alloc(c, id);
  return a ? a->namespace_() : "default";
}

}  // namespace

std::optional<failure> authorize(const catalog& c, const grant& g, const v1::Request& req) {
  using R = v1::Request;
  switch (req.command_case()) {
    case R::kAgentStatus:
    case R::kAclBootstrap:
    case R::kAclTokenSelf:
    case R::kEventStream:  // every event is filtered (may_see)
      return std::nullopt;
    case R::kVolumeRegister:
      return need_ns(g, req.volume_register().namespace_(), "csi-write-volume");
    case R::kVolumeCreate:
      return need_ns(g, req.volume_create().namespace_(), "csi-write-volume");
    case R::kVolumeDeregister:
      return need_ns(g, req.volume_deregister().namespace_(), "csi-write-volume");
    case R::kVolumeDelete:
      return need_ns(g, req.volume_delete().namespace_(), "csi-write-volume");
    case R::kVolumeDetach:
      return need_ns(g, req.volume_detach().namespace_(), "csi-write-volume");
    case R::kSnapshotCreate:
      return need_ns(g, req.snapshot_create().namespace_(), "csi-write-volume");
    case R::kSnapshotDelete:
      return need_ns(g, req.snapshot_delete().namespace_(), "csi-write-volume");
    case R::kSnapshotList:
      return need_ns(g, req.snapshot_list().namespace_(), "csi-list-volume");
    case R::kVolumeListExternal:
      return need_ns(g, req.volume_list_external().namespace_(), "csi-list-volume");
    case R::kVolumeModify:
      return need_ns(g, req.volume_modify().namespace_(), "csi-write-volume");
    case R::kVolumeAvailability:
      return need_ns(g, req.volume_availability().namespace_(), "csi-write-volume");
    case R::kVolumeExpand:
      return need_ns(g, req.volume_expand().namespace_(), "csi-write-volume");
    case R::kVolumeStatus:
      return need_ns(g, req.volume_status().namespace_(), "csi-read-volume");
    case R::kVolumeList:
      // Every namespace: the answer keeps the ones the token may list.
      if (req.volume_list().namespace_().empty()) return std::nullopt;
      return need_ns(g, req.volume_list().namespace_(), "csi-list-volume");
    case R::kVolumeClaim:
      return need_ns(g, req.volume_claim().namespace_(), "csi-mount-volume");
    case R::kVolumeRelease:
      return need_ns(g, req.volume_release().namespace_(), "csi-mount-volume");
    case R::kAllocRun: {
      const auto& a = req.alloc_run();
      if (auto f = need_ns(g, a.namespace_(), "submit-job")) return f;
      if (a.volumes_size() > 0) return need_ns(g, a.namespace_(), "csi-mount-volume");
      return std::nullopt;
    }
    case R::kAllocStop:
      return need_ns(g, alloc_ns(c, req.alloc_stop()), "alloc-lifecycle");
    case R::kAllocStatus:
      return need_ns(g, alloc_ns(c, req.alloc_status()), "read-job");
    case R::kAllocList:
      if (req.alloc_list().namespace_().empty()) return std::nullopt;
      return need_ns(g, req.alloc_list().namespace_(), "list-jobs");
    case R::kPluginStatus:
      return need_level(g, "plugin", g.plugin, "read");
    case R::kPluginList:
      return need_level(g, "plugin", g.plugin, "list");
    case R::kPluginFingerprint:  // by hand, from the shell
      return need_ns(g, "default", "csi-register-plugin");
    case R::kNodeStatus:
    case R::kNodeList:
      return need_level(g, "node", g.node, "read");
    case R::kNodeDrain:
    case R::kNodeEligibility:
    case R::kAllocUpdate:        // not from a node (no node secret)
    case R::kVolumeStatsReport:  // likewise
      return need_level(g, "node", g.node, "write");
    case R::kMonitor:
      return need_level(g, "agent", g.agent, "read");
    case R::kRaftListPeers:
      return need_level(g, "operator", g.op, "read");
    case R::kRaftRemovePeer:
    case R::kRaftTransferLeadership:
      return need_level(g, "operator", g.op, "write");
    case R::kSnapshotSave:
    case R::kSnapshotRestore:
      return need_management(g, "an operator snapshot");
    case R::kSystemGc:
      return need_management(g, "berth system gc");
    case R::kAclPolicyApply:
    case R::kAclPolicyDelete:
    case R::kAclPolicyList:
    case R::kAclPolicyInfo:
    case R::kAclTokenCreate:
    case R::kAclTokenList:
    case R::kAclTokenInfo:
    case R::kAclTokenDelete:
      return need_management(g, "managing ACL policies and tokens");
    case R::COMMAND_NOT_SET:
      return std::nullopt;  // refused as unknown by whoever executes it
  }
  return need_management(g, "this request");
}

std::optional<failure> check(const catalog& c, const v1::Request& req, grant& out) {
  out = grant{};
  if (req.has_agent_status() || req.has_acl_bootstrap() || is_node_request(req)) return std::nullopt;
  auto resolved = resolve(c, req.token());
  if (auto* f = std::get_if<failure>(&resolved)) return *f;
  out = std::move(std::get<grant>(resolved));
  return authorize(c, out, req);
}

void filter_response(const grant& g, const v1::Request& req, v1::Response& r) {
  if (g.management) return;
  if (req.has_volume_list()) {
    auto* vs = r.mutable_volumes();
    vs->erase(std::remove_if(vs->begin(), vs->end(),
                             [&](const v1::Volume& v) {
                               return !allows(g, ns_or_default(v.namespace_()), "csi-list-volume");
                             }),
              vs->end());
  }
  if (req.has_alloc_list()) {
    auto* as = r.mutable_allocs();
    as->erase(std::remove_if(as->begin(), as->end(),
                             [&](const v1::Alloc& a) {
                               return !allows(g, ns_or_default(a.namespace_()), "list-jobs");
                             }),
              as->end());
  }
}

bool may_see(const grant& g, const v1::Event& e) {
  if (g.management) return true;
  switch (e.topic()) {
    case v1::EVENT_VOLUME:
    case v1::EVENT_CLAIM:
      return allows(g, ns_or_default(e.namespace_()), "csi-read-volume");
    case v1::EVENT_ALLOC:
      return allows(g, ns_or_default(e.namespace_()), "read-job");
    case v1::EVENT_NODE:
      return allows_level(g.node, "read");
    case v1::EVENT_PLUGIN:
      return allows_level(g.plugin, "read");
    default:
      return false;
  }
}

changes bootstrap(const catalog& c, const v1::AclRequest& r, int64_t now_ms) {
  if (auto f = check_ids(r)) return *f;
  if (c.acl_bootstrap_index != 0) {
    const auto* t = by_accessor(c, r.accessor_id());
    if (t && t->bootstrap() && t->secret_hash() == secret_hash(r.secret()))
      return std::vector<v1::Change>{};  // the same request again: its answer was lost
    return failure{errc::refused, "ACLs were bootstrapped already (at log index " +
                                      std::to_string(c.acl_bootstrap_index) +
                                      "); a management token makes more tokens (berth acl token "
                                      "create --type management)"};
  }
  v1::AclToken t;
  t.set_accessor_id(r.accessor_id());
  t.set_secret_hash(secret_hash(r.secret()));
  t.set_name("Bootstrap Token");
  t.set_type("management");
  t.set_create_time_ms(now_ms);
  t.set_bootstrap(true);
  return std::vector<v1::Change>{token_change(std::move(t), true)};
}

changes policy_apply(const catalog& c, const v1::AclRequest& r) {
  if (!valid_name(r.name(), 128))
    return failure{errc::invalid, "policy name '" + r.name().substr(0, 40) +
                                      "': 1-128 letters, digits, '-', '_' or '.'"};
  auto parsed = parse_policy(r.rules());
  if (auto* f = std::get_if<failure>(&parsed)) {
    f->message = "policy '" + r.name() + "': " + f->message;
    return *f;
  }
  v1::AclPolicy p;
  auto it = c.acl_policies.find(r.name());
  if (it != c.acl_policies.end()) {
    if (it->second.rules() == r.rules() && it->second.description() == r.description())
      return std::vector<v1::Change>{};
    p = it->second;
  }
  p.set_name(r.name());
  p.set_description(r.description());
  p.set_rules(r.rules());
  *p.mutable_parsed() = std::move(std::get<v1::AclRules>(parsed));
  v1::Change ch;
  *ch.mutable_acl_policy_upsert() = std::move(p);
  return std::vector<v1::Change>{std::move(ch)};
}

changes policy_delete(const catalog& c, const std::string& name) {
  if (!c.acl_policies.count(name))
    return failure{errc::not_found,
                   "ACL policy '" + name + "' does not exist (berth acl policy list shows them)"};
  v1::Change ch;
  ch.set_acl_policy_delete(name);
  return std::vector<v1::Change>{std::move(ch)};
}

changes token_create(const catalog& c, const v1::AclRequest& r, int64_t now_ms) {
  if (auto f = check_ids(r)) return *f;
  auto type = r.type().empty() ? std::string("client") : r.type();
  if (type != "client" && type != "management")
    return failure{errc::invalid, "token type '" + type.substr(0, 40) +
                                      "' is not client or management"};
  if (type == "client" && r.policies_size() == 0)
    return failure{errc::invalid, "a client token needs at least one policy (--policy NAME)"};
  if (type == "management" && r.policies_size() > 0)
    return failure{errc::invalid, "a management token may do everything: it takes no --policy"};
  for (const auto& p : r.policies())
    if (!c.acl_policies.count(p))
      return failure{errc::not_found, "ACL policy '" + p +
                                          "' does not exist (berth acl policy apply makes it)"};
  auto hash = secret_hash(r.secret());
  if (const auto* t = by_accessor(c, r.accessor_id())) {
    if (t->secret_hash() == hash) return std::vector<v1::Change>{};  // sent again
    return failure{errc::refused, "an ACL token with accessor id '" + r.accessor_id() +
                                      "' exists already; let the shell make the ids"};
  }
  if (c.acl_by_hash.count(hash))
    return failure{errc::refused, "another ACL token has this secret; let the shell make the ids"};
  v1::AclToken t;
  t.set_accessor_id(r.accessor_id());
  t.set_secret_hash(hash);
  t.set_name(r.name());
  t.set_type(type);
  for (const auto& p : r.policies()) t.add_policies(p);
  t.set_create_time_ms(now_ms);
  return std::vector<v1::Change>{token_change(std::move(t), false)};
}

changes token_delete(const catalog& c, const std::string& accessor_id) {
  if (!by_accessor(c, accessor_id))
    return failure{errc::not_found, "ACL token '" + accessor_id +
                                        "' does not exist (berth acl token list shows them)"};
  v1::Change ch;
  ch.set_acl_token_delete(accessor_id);
  return std::vector<v1::Change>{std::move(ch)};
}

std::string node_of(const v1::Request& req) {
  if (req.has_plugin_fingerprint()) return req.plugin_fingerprint().node_id();
  if (req.has_alloc_update()) return req.alloc_update().node_id();
  if (req.has_volume_stats_report()) return req.volume_stats_report().node_id();
  return "";
}

std::optional<failure> node_refusal(const catalog& c, const std::string& node_id,
                                    const std::string& secret) {
  const auto* t = by_accessor(c, "node:" + node_id);
  if (!t) return failure{errc::not_found, "node '" + node_id + "' is not bound to a node secret yet"};
  if (t->secret_hash() == secret_hash(secret)) return std::nullopt;
  return failure{errc::forbidden,
                 "node '" + node_id + "' is bound to the node secret of the client that first "
                 "registered it; this client has another (a client rebuilt with a new data "
                 "directory: an operator runs `berth acl token delete node:" + node_id +
                 "` to let it take the id)"};
}

changes bind_node(const catalog& c, const std::string& node_id, const std::string& secret,
                  int64_t now_ms) {
  if (node_id.empty() || secret.size() < 16)
    return failure{errc::invalid, "a node's report needs its node id and node secret"};
  auto refusal = node_refusal(c, node_id, secret);
  if (!refusal) return std::vector<v1::Change>{};  // bound already
  if (refusal->code != errc::not_found) return *refusal;
  v1::AclToken t;
  t.set_accessor_id("node:" + node_id);
  t.set_secret_hash(secret_hash(secret));
  t.set_name("node " + node_id);
  t.set_type("node");
  t.set_create_time_ms(now_ms);
  return std::vector<v1::Change>{token_change(std::move(t), false)};
}

std::variant<failure, v1::Response> read(const catalog& c, const grant& g, const v1::Request& req) {
  v1::Response out;
  switch (req.command_case()) {
    case v1::Request::kAclPolicyList:
      for (const auto& [name, p] : c.acl_policies) *out.add_acl_policies() = p;
      return out;
    case v1::Request::kAclPolicyInfo: {
      auto it = c.acl_policies.find(req.acl_policy_info());
      if (it == c.acl_policies.end())
        return failure{errc::not_found, "ACL policy '" + req.acl_policy_info() +
                                            "' does not exist (berth acl policy list shows them)"};
      *out.add_acl_policies() = it->second;
      return out;
    }
    case v1::Request::kAclTokenList:
      for (const auto& [id, t] : c.acl_tokens) *out.add_acl_tokens() = shown(t);
      return out;
    case v1::Request::kAclTokenInfo: {
      const auto* t = by_accessor(c, req.acl_token_info());
      if (!t)
        return failure{errc::not_found, "ACL token '" + req.acl_token_info() +
                                            "' does not exist (berth acl token list shows them)"};
      *out.add_acl_tokens() = shown(*t);
      return out;
    }
    case v1::Request::kAclTokenSelf: {
      const auto* t = by_accessor(c, g.accessor_id);
      if (!t) return failure{errc::forbidden, "the ACL token is not known here"};
      *out.add_acl_tokens() = shown(*t);
      return out;
    }
    default:
      return failure{errc::invalid, "not an ACL read"};
  }
}

}  // namespace berth::acl
