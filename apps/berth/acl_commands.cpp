#include "apps/berth/acl_commands.hpp"

#include <cstring>
#include <fstream>
#include <sstream>

#include "apps/berth/render.hpp"
#include "messages/codec.hpp"
#include "messages/ids.hpp"

namespace berth {

namespace {

using nlohmann::json;

std::string join(const google::protobuf::RepeatedPtrField<std::string>& xs) {
  std::string out;
  for (const auto& x : xs) out += (out.empty() ? "" : ",") + x;
  return out;
}

std::string token_text(const v1::AclToken& t, const std::string& secret) {
  std::ostringstream out;
  out << "Accessor ID  = " << t.accessor_id() << "\n";
  if (!secret.empty()) out << "Secret ID    = " << secret << "\n";
  out << "Name         = " << (t.name().empty() ? "<none>" : t.name()) << "\n"
      << "Type         = " << t.type() << "\n"
      << "Policies     = " << (t.policies().empty() ? "n/a" : join(t.policies())) << "\n"
      << "Create Index = " << t.create_index() << "\n";
  if (!secret.empty())
    out << "\nKeep the Secret ID: berth shows it this once (servers keep only its hash). Use it "
           "with --token or BERTH_TOKEN.\n";
  return out.str();
}

call token_call(v1::Request req) {
  return call{std::move(req), "",
              [](const v1::Response& r) {
                return r.acl_tokens().empty() ? json() : token_json(r.acl_tokens(0), r.acl_secret());
              },
              [](const v1::Response& r) {
                return r.acl_tokens().empty() ? std::string() : token_text(r.acl_tokens(0), r.acl_secret());
              },
              {}};
}

}  // namespace

void add_acl_commands(CLI::App& app, const acl_sends& sends) {
  auto* acl = app.add_subcommand(
      "acl", "ACL policies and tokens (servers started with --acl): who may do what");
  acl->require_subcommand(1);

  auto* boot = acl->add_subcommand(
      "bootstrap",
      "Make the first management token and print its Secret ID (once: later bootstraps are "
      "refused). Safe to repeat after a lost answer only within the same command");
  sends(boot, [] () -> plan {
    v1::Request req;
    auto* r = req.mutable_acl_bootstrap();
    r->set_accessor_id(random_uuid());
    r->set_secret(random_uuid());
    return token_call(std::move(req));
  });

  auto* policy = acl->add_subcommand("policy", "ACL policies: rules per namespace, node, plugin, "
                                               "agent and operator");
  policy->require_subcommand(1);
  {
    struct opts {
      std::string name, file, description;
    };
    auto o = std::make_shared<opts>();
    auto* cmd = policy->add_subcommand(
        "apply",
        "Create or update a policy from a file (- for stdin) in Nomad's HCL form, e.g.\n"
        "  namespace \"default\" { policy = \"read\"  capabilities = [\"csi-mount-volume\"] }\n"
        "  node { policy = \"read\" }   plugin { policy = \"list\" }\n"
        "Namespace capabilities: csi-list-volume, csi-read-volume, csi-write-volume, "
        "csi-mount-volume, csi-register-plugin, list-jobs, read-job, submit-job, "
        "alloc-lifecycle, deny (policy = read|write|deny expands to them). Safe to repeat");
    cmd->add_option("name", o->name, "The policy's name")->required();
    cmd->add_option("file", o->file, "The policy document (- for stdin)")->required();
    cmd->add_option("--description", o->description, "What the policy is for");
    sends(cmd, [o]() -> plan {
      std::stringstream ss;
      if (o->file == "-") {
        ss << std::cin.rdbuf();
      } else {
        std::ifstream in(o->file);
        if (!in) return failure{errc::invalid, "cannot read " + o->file + ": " + std::strerror(errno)};
        ss << in.rdbuf();
      }
      v1::Request req;
      auto* r = req.mutable_acl_policy_apply();
      r->set_name(o->name);
      r->set_rules(ss.str());
      r->set_description(o->description);
      return call{req, "", [](const v1::Response& resp) {
                    return json{{"message", resp.message()}};
                  },
                  [](const v1::Response& resp) { return resp.message() + "\n"; }, {}};
    });
  }
  {
    auto* cmd = policy->add_subcommand("list", "List the policies");
    sends(cmd, []() -> plan {
      v1::Request req;
      req.set_acl_policy_list(true);
      return call{req, "",
                  [](const v1::Response& r) {
                    json out = json::array();
                    for (const auto& p : r.acl_policies()) out.push_back(policy_json(p, false));
                    return out;
                  },
                  [](const v1::Response& r) {
                    if (r.acl_policies().empty()) return std::string("No ACL policies\n");
                    table t{{"NAME", "DESCRIPTION"}, {}};
                    for (const auto& p : r.acl_policies())
                      t.rows.push_back({p.name(), p.description().empty() ? "-" : p.description()});
                    return render_table(t);
                  },
                  {}};
    });
  }
  {
    auto name = std::make_shared<std::string>();
    auto* cmd = policy->add_subcommand("info", "Show a policy and its rules");
    cmd->add_option("name", *name, "The policy's name")->required();
    sends(cmd, [name]() -> plan {
      v1::Request req;
      req.set_acl_policy_info(*name);
      return call{req, "",
                  [](const v1::Response& r) {
                    return r.acl_policies().empty() ? json() : policy_json(r.acl_policies(0), true);
                  },
                  [](const v1::Response& r) {
                    if (r.acl_policies().empty()) return std::string();
                    const auto& p = r.acl_policies(0);
                    return "Name        = " + p.name() + "\nDescription = " +
                           (p.description().empty() ? "<none>" : p.description()) +
                           "\nCreate Index = " + std::to_string(p.create_index()) +
                           "\nModify Index = " + std::to_string(p.modify_index()) + "\n\nRules\n\n" +
                           p.rules() + (p.rules().empty() || p.rules().back() == '\n' ? "" : "\n");
                  },
                  {}};
    });
  }
  {
    auto name = std::make_shared<std::string>();
    auto* cmd = policy->add_subcommand(
        "delete", "Delete a policy (tokens naming it keep the name and lose what it granted)");
    cmd->add_option("name", *name, "The policy's name")->required();
    sends(cmd, [name]() -> plan {
      v1::Request req;
      req.set_acl_policy_delete(*name);
      return call{req, "", [](const v1::Response& r) { return json{{"message", r.message()}}; },
                  [](const v1::Response& r) { return r.message() + "\n"; }, {}};
    });
  }

  auto* token = acl->add_subcommand("token", "ACL tokens: a secret that carries policies");
  token->require_subcommand(1);
  {
    struct opts {
      std::string name;
      std::string type = "client";
      std::vector<std::string> policies;
    };
    auto o = std::make_shared<opts>();
    auto* cmd = token->add_subcommand(
        "create", "Create a token and print its Secret ID (shown this once)");
    cmd->add_option("--name", o->name, "A label for the token");
    cmd->add_option("--type", o->type, "client (its policies) or management (everything)")
        ->capture_default_str()
        ->check(CLI::IsMember({"client", "management"}));
    cmd->add_option("--policy", o->policies, "A policy the token carries (repeat for more)");
    sends(cmd, [o]() -> plan {
      v1::Request req;
      auto* r = req.mutable_acl_token_create();
      r->set_accessor_id(random_uuid());
      r->set_secret(random_uuid());
      r->set_name(o->name);
      r->set_type(o->type);
      for (const auto& p : o->policies) r->add_policies(p);
      return token_call(std::move(req));
    });
  }
  {
    auto* cmd = token->add_subcommand("list", "List the tokens (never their secrets)");
    sends(cmd, []() -> plan {
      v1::Request req;
      req.set_acl_token_list(true);
      return call{req, "",
                  [](const v1::Response& r) {
                    json out = json::array();
                    for (const auto& t : r.acl_tokens()) out.push_back(token_json(t, ""));
                    return out;
                  },
                  [](const v1::Response& r) {
                    if (r.acl_tokens().empty()) return std::string("No ACL tokens\n");
                    table t{{"ACCESSOR ID", "NAME", "TYPE", "POLICIES"}, {}};
                    for (const auto& x : r.acl_tokens())
                      t.rows.push_back({x.accessor_id(), x.name().empty() ? "-" : x.name(), x.type(),
                                        x.policies().empty() ? "-" : join(x.policies())});
                    return render_table(t);
                  },
                  {}};
    });
  }
  {
    auto id = std::make_shared<std::string>();
    auto* cmd = token->add_subcommand("info", "Show a token by its accessor id");
    cmd->add_option("accessor", *id, "The token's accessor id")->required();
    sends(cmd, [id]() -> plan {
      v1::Request req;
      req.set_acl_token_info(*id);
      return token_call(std::move(req));
    });
  }
  {
    auto* cmd = token->add_subcommand("self", "Show the token this shell sends (--token)");
    sends(cmd, []() -> plan {
      v1::Request req;
      req.set_acl_token_self(true);
      return token_call(std::move(req));
    });
  }
  {
    auto id = std::make_shared<std::string>();
    auto* cmd = token->add_subcommand(
        "delete", "Delete a token by its accessor id: refused at once on every server");
    cmd->add_option("accessor", *id, "The token's accessor id")->required();
    sends(cmd, [id]() -> plan {
      v1::Request req;
      req.set_acl_token_delete(*id);
      return call{req, "", [](const v1::Response& r) { return json{{"message", r.message()}}; },
                  [](const v1::Response& r) { return r.message() + "\n"; }, {}};
    });
  }
}

}  // namespace berth
