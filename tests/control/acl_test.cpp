// control/acl: the policy parser, grants, the check of each request, the
// filtering of answers and events, and what the ACL commands commit.
#include <doctest/doctest.h>

#include "control/acl.hpp"
#include "control/entries.hpp"

using namespace berth;

namespace {

v1::AclRules parsed(const std::string& text) {
  auto r = acl::parse_policy(text);
  if (auto* f = std::get_if<failure>(&r)) FAIL(f->message);
  return std::get<v1::AclRules>(r);
}

std::string refusal(const std::string& text) {
  auto r = acl::parse_policy(text);
  auto* f = std::get_if<failure>(&r);
  REQUIRE(f != nullptr);
  CHECK(f->code == errc::invalid);
  return f->message;
}

// Applies the changes as one committed entry at the next index.
void commit(catalog& c, const acl::changes& ch) {
  auto* list = std::get_if<std::vector<v1::Change>>(&ch);
  if (!list) FAIL(std::get<failure>(ch).message);
  apply(c, c.applied_index + 1, make_entry(*list));
}

v1::AclRequest policy_request(const std::string& name, const std::string& rules) {
  v1::AclRequest r;
  r.set_name(name);
  r.set_rules(rules);
  return r;
}

v1::AclRequest token_request(const std::string& accessor, const std::string& secret,
                             std::vector<std::string> policies, const std::string& type = "client") {
  v1::AclRequest r;
  r.set_accessor_id(accessor);
  r.set_secret(secret);
  r.set_type(type);
  for (auto& p : policies) r.add_policies(p);
  return r;
}

acl::grant grant_of(const catalog& c, const std::string& secret) {
  auto g = acl::resolve(c, secret);
  if (auto* f = std::get_if<failure>(&g)) FAIL(f->message);
  return std::get<acl::grant>(g);
}

std::optional<failure> check(const catalog& c, v1::Request req, const std::string& secret) {
  req.set_token(secret);
  acl::grant g;
  return acl::check(c, req, g);
}

v1::Request claim(const std::string& ns) {
  v1::Request r;
  r.mutable_volume_claim()->set_namespace_(ns);
  r.mutable_volume_claim()->set_volume_id("v");
  return r;
}

v1::Request status(const std::string& ns) {
  v1::Request r;
  r.mutable_volume_status()->set_namespace_(ns);
  r.mutable_volume_status()->set_id("v");
  return r;
}

const std::string reader_secret = "reader-secret-0123456789";
const std::string team_secret = "team-secret-0123456789ab";
const std::string admin_secret = "admin-secret-0123456789a";

// A catalog with a bootstrap token, policies "reader" (read on default)
// and "team-a" (write on team-a*, node read), and a token for each.
catalog with_tokens() {
  catalog c;
  commit(c, acl::bootstrap(c, token_request("boot", admin_secret, {}), 1000));
  commit(c, acl::policy_apply(c, policy_request("reader", R"(namespace "default" { policy = "read" })")));
  commit(c, acl::policy_apply(
                c, policy_request("team-a", "namespace \"team-a*\" { policy = \"write\" }\n"
                                            "node { policy = \"read\" }")));
  commit(c, acl::token_create(c, token_request("r1", reader_secret, {"reader"}), 2000));
  commit(c, acl::token_create(c, token_request("t1", team_secret, {"team-a"}), 2000));
  return c;
}

}  // namespace

TEST_CASE("parse_policy: Nomad's HCL form with shorthands expanded") {
  auto r = parsed(R"(
    # comment
    namespace "default" {
      policy = "read"
      capabilities = ["csi-mount-volume", "read-logs"]  // read-logs: Nomad's, ignored
    }
    namespace "team-*" { policy = "write" }
    /* a block
       comment */
    node { policy = "read" }
    plugin { policy = "list" }
    agent { policy = "read" }
    operator { policy = "write" }
  )");
  REQUIRE(r.namespaces_size() == 2);
  CHECK(r.namespaces(0).pattern() == "default");
  std::vector<std::string> caps(r.namespaces(0).capabilities().begin(),
                                r.namespaces(0).capabilities().end());
  CHECK(caps == std::vector<std::string>{"list-jobs", "read-job", "csi-list-volume",
                                         "csi-read-volume", "csi-mount-volume"});
  CHECK(r.namespaces(1).capabilities_size() == 9);
  CHECK(r.node() == "read");
  CHECK(r.plugin() == "list");
  CHECK(r.agent() == "read");
  CHECK(r.operator_() == "write");
}

TEST_CASE("parse_policy: deny wins over everything in its rule") {
  auto r = parsed("namespace \"x\" { policy = \"write\" }\nnamespace \"x\" { policy = \"deny\" }\n"
                  "node { policy = \"write\" }\nnode { policy = \"deny\" }");
  REQUIRE(r.namespaces_size() == 1);
  CHECK(r.namespaces(0).capabilities_size() == 1);
  CHECK(r.namespaces(0).capabilities(0) == "deny");
  CHECK(r.node() == "deny");
}

TEST_CASE("parse_policy: refusals name the line and the fix") {
  CHECK(refusal("").find("empty") != std::string::npos);
  CHECK(refusal("# only a comment\n").find("empty") != std::string::npos);
  CHECK(refusal("quota { policy = \"read\" }").find("unknown block 'quota'") != std::string::npos);
  CHECK(refusal("namespace { policy = \"read\" }").find("needs a name") != std::string::npos);
  CHECK(refusal("node \"x\" { policy = \"read\" }").find("takes no name") != std::string::npos);
  CHECK(refusal("\n\nnamespace \"a\" { policy = \"scale\" }").find("line 3") != std::string::npos);
  CHECK(refusal("namespace \"a\" { policy = \"scale\" }").find("deny, read, write") != std::string::npos);
  CHECK(refusal("plugin { policy = \"write\" }").find("deny, list, read") != std::string::npos);
  CHECK(refusal("namespace \"a\" { capabilities = [\"csi-fly\"] }").find("unknown capability") !=
        std::string::npos);
  CHECK(refusal("namespace \"a\" { }").find("grants nothing") != std::string::npos);
  CHECK(refusal("node { }").find("needs a policy") != std::string::npos);
  CHECK(refusal("namespace \"a\" { policy = \"read\"").find("line 1") != std::string::npos);
  CHECK(refusal("namespace \"a { policy = \"read\" }").find("not closed") != std::string::npos);
  CHECK(refusal("namespace \"a\" { colour = \"red\" }").find("unknown key 'colour'") !=
        std::string::npos);
  CHECK(refusal("namespace \"a b\" { policy = \"read\" }").find("a name is") != std::string::npos);
  CHECK(refusal("namespace \"a\" { policy = read }").find("policy takes a string") !=
        std::string::npos);
  CHECK(refusal("namespace \"a\" { capabilities = [\"csi-read-volume\" \"x\"] }").find("','") !=
        std::string::npos);
  CHECK(refusal("/* never closed").find("not closed") != std::string::npos);
  CHECK(refusal(std::string(70 * 1024, ' ')).find("64 KiB") != std::string::npos);
  CHECK(refusal("namespace \"a\" { policy = \"read\" } $").find("unexpected '$'") !=
        std::string::npos);
}

TEST_CASE("allows: the exact namespace wins over globs, then the longest glob") {
  acl::grant g;
  auto rule = [&](const std::string& pattern, std::vector<std::string> caps) {
    v1::AclNamespaceRule r;
    r.set_pattern(pattern);
    for (auto& c : caps) r.add_capabilities(c);
    g.namespaces.push_back(r);
  };
  rule("*", {"csi-read-volume"});
  rule("prod-*", {"deny"});
  rule("prod-web", {"csi-read-volume", "csi-mount-volume"});
  rule("team-*", {"csi-list-volume"});
  rule("team-a*", {"csi-write-volume"});
  CHECK(acl::allows(g, "default", "csi-read-volume"));
  CHECK_FALSE(acl::allows(g, "default", "csi-write-volume"));
  CHECK_FALSE(acl::allows(g, "prod-db", "csi-read-volume"));  // denied by prod-*
  CHECK(acl::allows(g, "prod-web", "csi-mount-volume"));       // exact beats the deny glob
  CHECK(acl::allows(g, "team-ab", "csi-write-volume"));        // team-a* is longer than team-*
  CHECK_FALSE(acl::allows(g, "team-ab", "csi-list-volume"));   // ... and is the only rule used
  CHECK(acl::allows(g, "team-b", "csi-list-volume"));
  acl::grant none;
  CHECK_FALSE(acl::allows(none, "default", "csi-read-volume"));
  acl::grant mgmt;
  mgmt.management = true;
  CHECK(acl::allows(mgmt, "anything", "csi-write-volume"));
}

TEST_CASE("resolve: no token, unknown token, deleted token, node secret") {
  auto c = with_tokens();
  CHECK(std::get<failure>(acl::resolve(c, "")).code == errc::forbidden);
  CHECK(std::get<failure>(acl::resolve(c, "unknown-secret-0123456789")).code == errc::forbidden);
  CHECK(grant_of(c, admin_secret).management);
  CHECK_FALSE(grant_of(c, reader_secret).management);
  commit(c, acl::token_delete(c, "r1"));
  CHECK(std::get<failure>(acl::resolve(c, reader_secret)).code == errc::forbidden);
  commit(c, acl::bind_node(c, "n1", "node-secret-0123456789abcdef", 5));
  CHECK(std::get<failure>(acl::resolve(c, "node-secret-0123456789abcdef")).code == errc::forbidden);
}

TEST_CASE("check: each request against its token's capabilities") {
  auto c = with_tokens();
  // Anonymous: refused, except berth status and acl bootstrap.
  CHECK(check(c, claim("default"), "")->code == errc::forbidden);
  v1::Request st;
  st.mutable_agent_status();
  CHECK_FALSE(check(c, st, ""));
  // reader: reads default, cannot claim there, sees nothing of team-a.
  CHECK_FALSE(check(c, status("default"), reader_secret));
  auto f = check(c, claim("default"), reader_secret);
  REQUIRE(f);
  CHECK(f->code == errc::forbidden);
  CHECK(f->message.find("csi-mount-volume") != std::string::npos);
  CHECK(f->message.find("'default'") != std::string::npos);
  CHECK(check(c, status("team-a"), reader_secret));
  // team-a: writes team-a*, not default; node read but not write.
  CHECK_FALSE(check(c, claim("team-a"), team_secret));
  CHECK_FALSE(check(c, claim("team-alpha"), team_secret));
  CHECK(check(c, claim("default"), team_secret));
  v1::Request nodes;
  nodes.mutable_node_list();
  CHECK_FALSE(check(c, nodes, team_secret));
  CHECK(check(c, nodes, reader_secret));
  v1::Request drain;
  drain.mutable_node_drain()->set_node_id("n1");
  CHECK(check(c, drain, team_secret)->message.find("node write") != std::string::npos);
  // alloc run with volumes needs submit-job and csi-mount-volume.
  v1::Request run;
  run.mutable_alloc_run()->set_namespace_("team-a");
  run.mutable_alloc_run()->add_volumes();
  CHECK_FALSE(check(c, run, team_secret));
  run.mutable_alloc_run()->set_namespace_("default");
  CHECK(check(c, run, reader_secret)->message.find("submit-job") != std::string::npos);
  // Operator commands and ACL management: management only.
  for (auto make : {+[](v1::Request& r) { r.set_snapshot_save(true); },
                    +[](v1::Request& r) { r.set_system_gc(true); },
                    +[](v1::Request& r) { r.set_acl_token_list(true); },
                    +[](v1::Request& r) { r.mutable_acl_policy_apply()->set_name("x"); }}) {
    v1::Request r;
    make(r);
    CHECK(check(c, r, team_secret)->message.find("management token") != std::string::npos);
    CHECK_FALSE(check(c, r, admin_secret));
  }
  // Any valid token may ask about itself.
  v1::Request self;
  self.set_acl_token_self(true);
  CHECK_FALSE(check(c, self, reader_secret));
  CHECK(check(c, self, ""));
}

TEST_CASE("check: the namespace of an alloc named by id comes from the catalog") {
  auto c = with_tokens();
  v1::Alloc a;
  a.set_id("a1");
  a.set_namespace_("team-a");
  v1::Change ch;
  *ch.mutable_alloc_upsert() = a;
  apply(c, c.applied_index + 1, make_entry({ch}));
  v1::Request stop;
  stop.set_alloc_stop("a1");
  CHECK_FALSE(check(c, stop, team_secret));
  CHECK(check(c, stop, reader_secret));
}

TEST_CASE("filter_response and may_see keep what the token may read") {
  auto c = with_tokens();
  auto g = grant_of(c, reader_secret);
  v1::Request list;
  list.mutable_volume_list();
  v1::Response r;
  for (auto ns : {"default", "team-a", ""}) r.add_volumes()->set_namespace_(ns);
  acl::filter_response(g, list, r);
  REQUIRE(r.volumes_size() == 2);  // default, and "" (= default)
  CHECK(r.volumes(0).namespace_() == "default");
  v1::Event e;
  e.set_topic(v1::EVENT_VOLUME);
  e.set_namespace_("team-a");
  CHECK_FALSE(acl::may_see(g, e));
  e.set_namespace_("default");
  CHECK(acl::may_see(g, e));
  e.set_topic(v1::EVENT_NODE);
  CHECK_FALSE(acl::may_see(g, e));
  CHECK(acl::may_see(grant_of(c, team_secret), e));
  CHECK(acl::may_see(grant_of(c, admin_secret), e));
}

TEST_CASE("bootstrap: once; the same ids again are no change, others are refused") {
  catalog c;
  auto first = token_request("boot", admin_secret, {});
  commit(c, acl::bootstrap(c, first, 1));
  CHECK(c.acl_bootstrap_index == 1);
  CHECK(c.acl_tokens.at("boot").type() == "management");
  CHECK(c.acl_tokens.at("boot").secret_hash() == acl::secret_hash(admin_secret));
  CHECK(c.acl_tokens.at("boot").secret_hash() != admin_secret);
  auto again = acl::bootstrap(c, first, 2);
  CHECK(std::get<std::vector<v1::Change>>(again).empty());
  auto other = acl::bootstrap(c, token_request("boot2", "another-secret-0123456789", {}), 3);
  CHECK(std::get<failure>(other).code == errc::refused);
  // Deleting the bootstrap token does not open bootstrap again.
  commit(c, acl::token_delete(c, "boot"));
  CHECK(std::holds_alternative<failure>(acl::bootstrap(c, first, 4)));
  CHECK(std::get<failure>(acl::bootstrap(c, token_request("b", "short", {}), 1)).code ==
        errc::invalid);
}

TEST_CASE("token create: policies must exist; ids made by the shell make it safe to repeat") {
  auto c = with_tokens();
  auto req = token_request("new", "new-secret-0123456789abc", {"missing"});
  CHECK(std::get<failure>(acl::token_create(c, req, 1)).code == errc::not_found);
  req = token_request("new", "new-secret-0123456789abc", {});
  CHECK(std::get<failure>(acl::token_create(c, req, 1)).message.find("at least one policy") !=
        std::string::npos);
  req = token_request("new", "new-secret-0123456789abc", {"reader"}, "management");
  CHECK(std::get<failure>(acl::token_create(c, req, 1)).message.find("no --policy") !=
        std::string::npos);
  req = token_request("new", "new-secret-0123456789abc", {"reader"});
  commit(c, acl::token_create(c, req, 1));
  CHECK(std::get<std::vector<v1::Change>>(acl::token_create(c, req, 2)).empty());
  auto clash = token_request("new", "other-secret-0123456789ab", {"reader"});
  CHECK(std::get<failure>(acl::token_create(c, clash, 2)).code == errc::refused);
  auto same_secret = token_request("new2", "new-secret-0123456789abc", {"reader"});
  CHECK(std::get<failure>(acl::token_create(c, same_secret, 2)).code == errc::refused);
  CHECK(std::get<failure>(acl::token_delete(c, "nope")).code == errc::not_found);
}

TEST_CASE("policy apply: the same document is no change; a bad one names the policy") {
  auto c = with_tokens();
  auto same = policy_request("reader", R"(namespace "default" { policy = "read" })");
  CHECK(std::get<std::vector<v1::Change>>(acl::policy_apply(c, same)).empty());
  auto bad = policy_request("reader", "namespace \"default\" { policy = \"root\" }");
  auto f = std::get<failure>(acl::policy_apply(c, bad));
  CHECK(f.message.find("policy 'reader'") != std::string::npos);
  CHECK(std::get<failure>(acl::policy_apply(c, policy_request("a b", "node { policy = \"read\" }")))
            .code == errc::invalid);
  // Changing a policy changes what its tokens may do at once.
  CHECK(check(c, claim("default"), reader_secret));
  commit(c, acl::policy_apply(c, policy_request("reader", R"(namespace "default" { policy = "write" })")));
  CHECK_FALSE(check(c, claim("default"), reader_secret));
  commit(c, acl::policy_delete(c, "reader"));
  CHECK(check(c, status("default"), reader_secret));
  CHECK(std::get<failure>(acl::policy_delete(c, "reader")).code == errc::not_found);
}

TEST_CASE("node identity: the first secret binds the node id, others are refused") {
  auto c = with_tokens();
  const std::string s1 = "node-one-secret-0123456789", s2 = "node-two-secret-0123456789";
  CHECK(acl::node_refusal(c, "n1", s1)->code == errc::not_found);
  commit(c, acl::bind_node(c, "n1", s1, 7));
  CHECK_FALSE(acl::node_refusal(c, "n1", s1));
  auto f = acl::node_refusal(c, "n1", s2);
  REQUIRE(f);
  CHECK(f->code == errc::forbidden);
  CHECK(f->message.find("berth acl token delete node:n1") != std::string::npos);
  CHECK(std::get<std::vector<v1::Change>>(acl::bind_node(c, "n1", s1, 8)).empty());
  CHECK(std::get<failure>(acl::bind_node(c, "n1", s2, 8)).code == errc::forbidden);
  // A node report with its secret is checked by identity, not by token.
  v1::Request report;
  report.mutable_alloc_update()->set_node_id("n1");
  report.set_node_secret(s1);
  CHECK(acl::is_node_request(report));
  CHECK(acl::node_of(report) == "n1");
  acl::grant g;
  CHECK_FALSE(acl::check(c, report, g));
  report.clear_node_secret();  // from the shell: needs node write
  CHECK(acl::check(c, report, g));
}

TEST_CASE("secret_hash is SHA-256 in hex") {
  CHECK(acl::secret_hash("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
