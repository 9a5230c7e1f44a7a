#include "apps/berth/commands.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "apps/berth/client.hpp"
#include "apps/berth/render.hpp"
#include "apps/berth/shell.hpp"
#include "messages/codec.hpp"

namespace berth {

namespace {

using nlohmann::json;

struct globals {
  std::string address;
  bool json = false;
  std::string ns = "default";
  int timeout = 30;
  client* shared = nullptr;  // the interactive shell's connection, if any
};

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

int code_of(errc c) {
  switch (c) {
    case errc::invalid: return exit_usage;
    case errc::not_found: return exit_not_found;
    case errc::refused: return exit_refused;
    case errc::unavailable: return exit_unreachable;
    default: return exit_internal;
  }
}

const char* code_name(errc c) {
  switch (c) {
    case errc::invalid: return "invalid";
    case errc::not_found: return "not_found";
    case errc::refused: return "refused";
    case errc::unavailable: return "unavailable";
    default: return "internal";
  }
}

int fail(const globals& g, const failure& f) {
  if (g.json)
    std::cerr << json{{"error", {{"code", code_name(f.code)}, {"message", f.message}}}}.dump()
              << "\n";
  else
    std::cerr << "Error: " << f.message << "\n";
  return code_of(f.code);
}

// Sends a request; on success hands the response to `show`.
template <class Show>
int send(const globals& g, const v1::Request& req, Show&& show) {
  // A shell line may name another server or timeout than the shell's.
  std::optional<client> own;
  client* c = g.shared;
  if (!c || c->address() != g.address || c->timeout() != g.timeout)
    c = &own.emplace(g.address, g.timeout);
  auto result = c->call(req);
  if (auto* f = std::get_if<failure>(&result)) return fail(g, *f);
  auto& resp = std::get<v1::Response>(result);
  if (resp.error().code() != v1::OK)
    return fail(g, failure{static_cast<errc>(resp.error().code()), resp.error().message()});
  show(resp);
  return exit_ok;
}

// A line on stderr for commands that take a while (CSI calls, waiting for
// releases), on a terminal only: quiet under --json and in scripts.
void progress(const globals& g, const std::string& text) {
  if (g.json || !isatty(STDERR_FILENO)) return;
  std::cerr << text << "\n";
}

json volumes_json(const v1::Response& r) {
  json out = json::array();
  for (const auto& v : r.volumes()) out.push_back(volume_json(v, plugin_in(r, v.plugin_id())));
  return out;
}

// Prints the single volume of a response: JSON object or details.
void show_volume(const globals& g, const v1::Response& r) {
  if (r.volumes().empty()) return;
  const auto& v = r.volumes(0);
  if (g.json) {
    std::cout << volume_json(v, plugin_in(r, v.plugin_id())).dump(2) << "\n";
    return;
  }
  if (!r.message().empty()) std::cout << r.message() << "\n\n";
  std::cout << render_volume(v, plugin_in(r, v.plugin_id()), now_ms());
}

std::variant<std::string, failure> read_input(const std::string& file) {
  std::stringstream ss;
  if (file == "-") {
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::ifstream in(file);
  if (!in) return failure{errc::invalid, "cannot read " + file + ": " + std::strerror(errno)};
  ss << in.rdbuf();
  return ss.str();
}

// The command line: the CLI11 parser and the variables it fills.  Parsing
// runs the chosen command's callback, which sets `action`.  Built once per
// command line, and by command_tree() to describe the commands.
struct command_line {
  globals g;
  std::function<int()> action;
  std::string spec_file, volume_id, alloc, node, access_mode, attachment_mode, plugin_id, node_id;
  bool force = false, read_only = false, stale = false;
  std::string server_name;
  std::string type = "monolith", description, provider, provider_version, csi_node_id;
  bool unhealthy = false, remove = false, controller_publish = false, stage_unstage = false;
  int64_t max_volumes = 0;
  std::vector<std::string> volume_args, command_args;
  std::string alloc_id;
  bool takes_command = false;  // alloc run: the words after -- are its command
  CLI::App app{"berth: the remote shell of a berth cluster (CSI volumes, plugins, claims).",
               "berth"};

  // The callbacks keep references to the members.
  command_line(const command_line&) = delete;
  command_line& operator=(const command_line&) = delete;

  explicit command_line(client* shared) {
    g.shared = shared;
    if (const char* env = std::getenv("BERTH_ADDRESS"); env && *env)
      g.address = env;
    else
      g.address = "127.0.0.1:4747";

    app.fallthrough();
    app.require_subcommand(0, 1);
    // The global options take the last value given: in the shell a line's
    // own --json or --namespace overrides the ones berth was started with.
    app.add_option("--address", g.address,
                   "berthd to talk to, HOST:PORT (env BERTH_ADDRESS; default 127.0.0.1:4747)")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.add_flag("--json", g.json, "Print JSON (snake_case keys) instead of tables")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.add_option("--namespace,-n", g.ns, "Namespace of the volumes named")
        ->capture_default_str()
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.add_option("--timeout", g.timeout, "Seconds to wait for berthd's answer")
        ->capture_default_str()
        ->check(CLI::Range(1, 3600))
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.footer(
        "Exit codes: 0 ok, 1 internal error, 2 usage or invalid input, 3 not found,\n"
        "4 refused by the rules, 5 berthd unreachable or unavailable.");

    // --- shell and agent status ----------------------------------------------
    auto* shell = app.add_subcommand(
        "shell", "Open the interactive shell (also what berth does without a command on a "
                 "terminal)");
    shell->callback([&] {
      action = [&] {
        if (g.shared)
          return fail(g, failure{errc::invalid, "this is the shell already"});
        return open_shell();
      };
    });

    app.add_subcommand("status", "Show the server berth talks to: its node, whether it leads, "
                                 "its version")
        ->callback([&] {
          action = [&] {
            v1::Request req;
            req.mutable_agent_status();
            return send(g, req, [&](const v1::Response& r) {
              if (g.json)
                std::cout << agent_json(r.agent()).dump(2) << "\n";
              else
                std::cout << render_agent(r.agent());
            });
          };
        });

    // --- volume --------------------------------------------------------------
    auto* volume = app.add_subcommand("volume", "Register, inspect, claim and release volumes");
    volume->require_subcommand(1);

    auto* reg = volume->add_subcommand(
        "register", "Register a volume from a spec file (JSON or YAML; - reads stdin), or update "
                    "a registered one (context, secrets; not plugin_id, external_id, parameters)");
    reg->add_option("file", spec_file, "The volume spec file, or - for stdin")->required();
    reg->callback([&, reg] {
      action = [&] {
        auto text = read_input(spec_file);
        if (auto* f = std::get_if<failure>(&text)) return fail(g, *f);
        auto parsed = parse_volume_spec(std::get<std::string>(text));
        if (auto* problems = std::get_if<std::vector<problem>>(&parsed))
          return fail(g, failure{errc::invalid, describe("volume spec " + spec_file, *problems)});
        auto v = std::get<v1::Volume>(parsed);
        if (reg->get_parent()->get_parent()->get_option("--namespace")->count() > 0)
          v.set_namespace_(g.ns);
        v1::Request req;
        *req.mutable_volume_register() = v;
        return send(g, req, [&](const v1::Response& r) { show_volume(g, r); });
      };
    });

    auto* create = volume->add_subcommand(
        "create", "Create a volume through its plugin's controller (CreateVolume: capacity_min/max, "
                  "parameters, topology_request) and register it; the spec has no external_id");
    create->add_option("file", spec_file, "The volume spec file, or - for stdin")->required();
    create->callback([&, create] {
      action = [&] {
        auto text = read_input(spec_file);
        if (auto* f = std::get_if<failure>(&text)) return fail(g, *f);
        auto parsed = parse_volume_spec(std::get<std::string>(text), spec_use::create);
        if (auto* problems = std::get_if<std::vector<problem>>(&parsed))
          return fail(g, failure{errc::invalid, describe("volume spec " + spec_file, *problems)});
        auto v = std::get<v1::Volume>(parsed);
        if (create->get_parent()->get_parent()->get_option("--namespace")->count() > 0)
          v.set_namespace_(g.ns);
        v1::Request req;
        *req.mutable_volume_create() = v;
        progress(g, "Creating volume '" + v.id() + "' through plugin '" + v.plugin_id() +
                        "' (CreateVolume)...");
        return send(g, req, [&](const v1::Response& r) { show_volume(g, r); });
      };
    });

    auto* vstatus = volume->add_subcommand("status", "Show one volume, or list every volume");
    vstatus->add_option("id", volume_id, "The volume's id (omit to list all)");
    vstatus->add_flag("--stale", stale,
                      "Answer from the server's own state tables, even if it does not lead "
                      "(may lag; default: ask the leader)");
    vstatus->callback([&] {
      action = [&] {
        v1::Request req;
        req.set_stale(stale);
        if (volume_id.empty()) {
          req.mutable_volume_list()->set_namespace_(g.ns);
          return send(g, req, [&](const v1::Response& r) {
            if (g.json)
              std::cout << volumes_json(r).dump(2) << "\n";
            else
              std::cout << render_volume_list(r, now_ms());
          });
        }
        req.mutable_volume_status()->set_namespace_(g.ns);
        req.mutable_volume_status()->set_id(volume_id);
        return send(g, req, [&](const v1::Response& r) { show_volume(g, r); });
      };
    });

    auto* dereg = volume->add_subcommand(
        "deregister", "Remove a volume from berth (refused while claimed; --force releases the "
                      "claims first). The storage itself is not deleted.");
    dereg->add_option("id", volume_id, "The volume's id")->required();
    dereg->add_flag("--force", force, "Release every claim of the volume, then deregister it");
    dereg->callback([&] {
      action = [&] {
        v1::Request req;
        auto* d = req.mutable_volume_deregister();
        d->set_namespace_(g.ns);
        d->set_volume_id(volume_id);
        d->set_force(force);
        return send(g, req, [&](const v1::Response& r) {
          if (g.json)
            std::cout << json{{"id", volume_id}, {"namespace", g.ns}, {"deregistered", true}}.dump(2)
                      << "\n";
          else
            std::cout << r.message() << "\n";
        });
      };
    });

    auto* vclaim = volume->add_subcommand(
        "claim", "Claim a volume for an alloc on a node (for writing unless --read-only)");
    vclaim->add_option("id", volume_id, "The volume's id")->required();
    vclaim->add_option("--alloc", alloc, "The alloc that claims the volume")->required();
    vclaim->add_option("--node", node, "The node the alloc runs on")->required();
    vclaim->add_flag("--read-only", read_only, "Claim for reading");
    vclaim->add_option("--access-mode", access_mode,
                       "Use this capability of the volume (default: one that fits)");
    vclaim->add_option("--attachment-mode", attachment_mode,
                       "Use this attachment mode (file-system or block-device)");
    vclaim->callback([&] {
      action = [&] {
        v1::Request req;
        auto* c = req.mutable_volume_claim();
        c->set_namespace_(g.ns);
        c->set_volume_id(volume_id);
        c->set_alloc_id(alloc);
        c->set_node_id(node);
        c->set_read_only(read_only);
        if (!access_mode.empty()) {
          auto m = parse_access_mode(access_mode);
          if (!m)
            return fail(g, failure{errc::invalid, "--access-mode '" + access_mode +
                                                      "' is not one of " + access_mode_names()});
          c->set_access_mode(*m);
        }
        if (!attachment_mode.empty()) {
          auto m = parse_attachment_mode(attachment_mode);
          if (!m)
            return fail(g, failure{errc::invalid, "--attachment-mode '" + attachment_mode +
                                                      "' is not one of " + attachment_mode_names()});
          c->set_attachment_mode(*m);
        }
        return send(g, req, [&](const v1::Response& r) {
          if (g.json) {
            auto j = volume_json(r.volumes(0), plugin_in(r, r.volumes(0).plugin_id()));
            j["published_path"] = r.published_path();
            std::cout << j.dump(2) << "\n";
          } else {
            show_volume(g, r);
          }
        });
      };
    });

    auto* vrelease = volume->add_subcommand("release", "Release an alloc's claim on a volume");
    vrelease->add_option("id", volume_id, "The volume's id")->required();
    vrelease->add_option("--alloc", alloc, "The alloc whose claim to release")->required();
    vrelease->callback([&] {
      action = [&] {
        v1::Request req;
        auto* r = req.mutable_volume_release();
        r->set_namespace_(g.ns);
        r->set_volume_id(volume_id);
        r->set_alloc_id(alloc);
        return send(g, req, [&](const v1::Response& resp) { show_volume(g, resp); });
      };
    });

    auto* detach = volume->add_subcommand(
        "detach", "Release every claim on NODE of allocs that are stopped, failed, lost or gone "
                  "(NodeUnpublish, NodeUnstage, ControllerUnpublish), e.g. after a node was lost; "
                  "claims of running allocs are kept");
    detach->add_option("id", volume_id, "The volume's id")->required();
    detach->add_option("node", node, "The node to detach it from")->required();
    detach->callback([&] {
      action = [&] {
        v1::Request req;
        auto* d = req.mutable_volume_detach();
        d->set_namespace_(g.ns);
        d->set_volume_id(volume_id);
        d->set_node_id(node);
        progress(g, "Detaching volume '" + volume_id + "' from node '" + node + "'...");
        return send(g, req, [&](const v1::Response& r) {
          if (g.json) {
            json j = r.volumes().empty() ? json::object()
                                         : volume_json(r.volumes(0),
                                                       plugin_in(r, r.volumes(0).plugin_id()));
            j["message"] = r.message();
            std::cout << j.dump(2) << "\n";
          } else {
            std::cout << r.message() << "\n";
          }
        });
      };
    });

    auto* vdelete = volume->add_subcommand(
        "delete", "Delete a volume's storage through its plugin's controller (DeleteVolume), then "
                  "deregister it; refused while it has claims");
    vdelete->add_option("id", volume_id, "The volume's id")->required();
    vdelete->callback([&] {
      action = [&] {
        v1::Request req;
        req.mutable_volume_delete()->set_namespace_(g.ns);
        req.mutable_volume_delete()->set_volume_id(volume_id);
        progress(g, "Deleting volume '" + volume_id + "' (DeleteVolume)...");
        return send(g, req, [&](const v1::Response& r) {
          if (g.json)
            std::cout << json{{"id", volume_id}, {"namespace", g.ns}, {"deleted", true}}.dump(2)
                      << "\n";
          else
            std::cout << r.message() << "\n";
        });
      };
    });

    // --- alloc ---------------------------------------------------------------
    auto* alloc_cmd = app.add_subcommand("alloc", "Run and stop allocs: workloads that claim volumes");
    alloc_cmd->require_subcommand(1);
    auto* arun = alloc_cmd->add_subcommand(
        "run", "Create an alloc on a node: claim each --volume (the node publishes it), then run "
               "the command (after --) with each volume's path in BERTH_VOLUME_<NAME>; without a "
               "command the alloc runs until berth alloc stop. Anything claimed is released again "
               "if a claim or mount fails.");
    arun->add_option("--node", node, "The node to run on")->required();
    arun->add_option("--volume", volume_args,
                     "NAME=VOLUME[:ro][,mount_flag=FLAG]... (repeatable): claim VOLUME for writing "
                     "(:ro for reading), published at $BERTH_VOLUME_<NAME>");
    arun->add_option("--id", alloc_id, "The alloc's id (default: a generated one)");
    arun->add_option("command", command_args, "The command and its arguments, after --");
    arun->callback([&] {
      takes_command = true;
      action = [&] {
        v1::Request req;
        auto* r = req.mutable_alloc_run();
        r->set_namespace_(g.ns);
        r->set_node_id(node);
        r->set_id(alloc_id);
        for (const auto& arg : volume_args) {
          auto v = parse_alloc_volume(arg);
          if (auto* err = std::get_if<std::string>(&v)) return fail(g, failure{errc::invalid, *err});
          *r->add_volumes() = std::get<v1::AllocVolume>(v);
        }
        for (const auto& c : command_args) r->add_command(c);
        progress(g, "Claiming and publishing " + std::to_string(volume_args.size()) +
                        " volume(s) on node '" + node + "'...");
        return send(g, req, [&](const v1::Response& resp) {
          if (g.json) {
            std::cout << alloc_json(resp.allocs(0)).dump(2) << "\n";
          } else {
            std::cout << resp.message() << "\n";
          }
        });
      };
    });
    auto* astop = alloc_cmd->add_subcommand(
        "stop", "Stop an alloc: its command is terminated (SIGTERM, then SIGKILL) and its claims "
                "released (waits for the releases)");
    astop->add_option("id", alloc_id, "The alloc's id")->required();
    astop->callback([&] {
      action = [&] {
        v1::Request req;
        req.set_alloc_stop(alloc_id);
        progress(g, "Stopping alloc '" + alloc_id + "' and releasing its claims...");
        return send(g, req, [&](const v1::Response& r) {
          if (g.json)
            std::cout << alloc_json(r.allocs(0)).dump(2) << "\n";
          else
            std::cout << r.message() << "\n";
        });
      };
    });
    auto* astatus = alloc_cmd->add_subcommand(
        "status", "Show one alloc (state, message, volumes and their claims), or list every alloc");
    astatus->add_option("id", alloc_id, "The alloc's id (omit to list all)");
    astatus->callback([&] {
      action = [&] {
        v1::Request req;
        if (alloc_id.empty())
          req.mutable_alloc_list()->set_namespace_(g.ns);
        else
          req.set_alloc_status(alloc_id);
        return send(g, req, [&](const v1::Response& r) {
          if (g.json) {
            if (alloc_id.empty()) {
              json out = json::array();
              for (const auto& a : r.allocs()) out.push_back(alloc_json(a));
              std::cout << out.dump(2) << "\n";
            } else {
              auto j = alloc_json(r.allocs(0));
              j["claims"] = json::array();
              for (const auto& v : r.volumes())
                for (const auto& c : v.claims())
                  if (c.alloc_id() == alloc_id) {
                    auto cj = claim_json(c);
                    cj["volume_id"] = v.id();
                    j["claims"].push_back(cj);
                  }
              std::cout << j.dump(2) << "\n";
            }
          } else {
            std::cout << (alloc_id.empty() ? render_alloc_list(r, now_ms()) : render_alloc(r, now_ms()));
          }
        });
      };
    });

    // --- plugin --------------------------------------------------------------
    auto* plugin = app.add_subcommand("plugin", "Inspect CSI plugins and their instances");
    plugin->require_subcommand(1);
    auto* pstatus = plugin->add_subcommand("status", "Show one plugin, or list every plugin");
    pstatus->add_option("id", plugin_id, "The plugin's id (omit to list all)");
    pstatus->callback([&] {
      action = [&] {
        v1::Request req;
        if (plugin_id.empty())
          req.mutable_plugin_list();
        else
          req.set_plugin_status(plugin_id);
        return send(g, req, [&](const v1::Response& r) {
          if (g.json) {
            json out = json::array();
            for (const auto& p : r.plugins()) out.push_back(plugin_json(p));
            std::cout << (plugin_id.empty() ? out : out.at(0)).dump(2) << "\n";
          } else if (plugin_id.empty()) {
            std::cout << render_plugin_list(r);
          } else {
            std::cout << render_plugin(r.plugins(0), now_ms());
          }
        });
      };
    });

    auto* fp = plugin->add_subcommand(
        "fingerprint",
        "Report a plugin instance on a node by hand (what a client's CSI fingerprint does): "
        "adds or updates it, or removes it with --remove");
    fp->add_option("id", plugin_id, "The plugin's id")->required();
    fp->add_option("--node", node, "The node that runs the instance")->required();
    fp->add_option("--type", type, "node, controller or monolith")
        ->capture_default_str()
        ->check(CLI::IsMember({"node", "controller", "monolith"}));
    fp->add_flag("--unhealthy", unhealthy, "Report the instance unhealthy");
    fp->add_option("--health-description", description, "Why it is (un)healthy");
    fp->add_flag("--remove", remove, "Remove the instance instead");
    fp->add_option("--provider", provider, "The plugin's name (GetPluginInfo)");
    fp->add_option("--provider-version", provider_version, "The plugin's version");
    fp->add_option("--csi-node-id", csi_node_id, "The node id the plugin reports (NodeGetInfo)");
    fp->add_flag("--controller-publish", controller_publish,
                 "The controller advertises PUBLISH_UNPUBLISH_VOLUME");
    fp->add_flag("--stage-unstage", stage_unstage, "The node advertises STAGE_UNSTAGE_VOLUME");
    fp->add_option("--max-volumes", max_volumes, "Max volumes per node (0 = unlimited)");
    fp->callback([&] {
      action = [&] {
        v1::Request req;
        auto* f = req.mutable_plugin_fingerprint();
        f->set_plugin_id(plugin_id);
        f->set_node_id(node);
        f->set_type(*parse_plugin_type(type));
        f->set_remove(remove);
        auto* i = f->mutable_instance();
        i->set_healthy(!unhealthy);
        i->set_health_description(description);
        i->set_provider(provider);
        i->set_provider_version(provider_version);
        i->set_csi_node_id(csi_node_id.empty() ? node : csi_node_id);
        i->set_publish_unpublish(controller_publish);
        i->set_stage_unstage(stage_unstage);
        i->set_max_volumes(max_volumes);
        return send(g, req, [&](const v1::Response& r) {
          if (g.json)
            std::cout << plugin_json(r.plugins(0)).dump(2) << "\n";
          else
            std::cout << r.message() << "\n\n" << render_plugin(r.plugins(0), now_ms());
        });
      };
    });

    // --- operator -------------------------------------------------------------
    auto* op = app.add_subcommand("operator", "Operate the control plane");
    op->require_subcommand(1);
    auto* raft = op->add_subcommand("raft", "The replicated log (Raft) across the servers");
    raft->require_subcommand(1);
    raft->add_subcommand("list-peers",
                         "Every server: name, address, role, term, last and applied index")
        ->callback([&] {
          action = [&] {
            v1::Request req;
            req.set_raft_list_peers(true);
            return send(g, req, [&](const v1::Response& r) {
              if (g.json) {
                json out = json::array();
                for (const auto& s : r.raft()) out.push_back(raft_json(s));
                std::cout << out.dump(2) << "\n";
              } else {
                std::cout << render_raft_peers(r);
              }
            });
          };
        });
    auto* remove_peer = raft->add_subcommand(
        "remove-peer", "Remove a server from the cluster (a committed configuration change)");
    remove_peer->add_option("name", server_name, "The server's name")->required();
    remove_peer->callback([&] {
      action = [&] {
        v1::Request req;
        req.set_raft_remove_peer(server_name);
        return send(g, req, [&](const v1::Response& r) {
          if (g.json)
            std::cout << json{{"message", r.message()}}.dump(2) << "\n";
          else
            std::cout << r.message() << "\n";
        });
      };
    });
    auto* transfer = raft->add_subcommand(
        "transfer-leadership", "Hand the leadership to a server (default: the most up to date)");
    transfer->add_option("name", server_name, "The server to lead next");
    transfer->callback([&] {
      action = [&] {
        v1::Request req;
        req.set_raft_transfer_leadership(server_name);
        return send(g, req, [&](const v1::Response& r) {
          if (g.json)
            std::cout << json{{"message", r.message()}}.dump(2) << "\n";
          else
            std::cout << r.message() << "\n";
        });
      };
    });

    auto* snap = op->add_subcommand("snapshot", "Back up and restore the cluster's state");
    snap->require_subcommand(1);
    auto* save = snap->add_subcommand(
        "save", "Write a consistent copy of the cluster's state (volumes, claims, plugins, "
                "nodes) to FILE");
    save->add_option("file", spec_file, "Where to write the snapshot")->required();
    save->callback([&] {
      action = [&] {
        v1::Request req;
        req.set_snapshot_save(true);
        progress(g, "Taking a consistent copy of the cluster's state...");
        return send(g, req, [&](const v1::Response& r) {
          // Written next to the target, then renamed: never a half file.
          auto tmp = spec_file + ".partial";
          {
            std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
            out.write(r.snapshot().data(), static_cast<std::streamsize>(r.snapshot().size()));
            if (!out) {
              std::cerr << "Error: cannot write " << tmp << "\n";
              return;
            }
          }
          std::rename(tmp.c_str(), spec_file.c_str());
          if (g.json)
            std::cout << json{{"file", spec_file}, {"index", r.snapshot_index()},
                              {"bytes", r.snapshot().size()}}.dump(2) << "\n";
          else
            std::cout << "Saved the state at index " << r.snapshot_index() << " to " << spec_file
                      << " (" << r.snapshot().size() << " bytes)\n";
        });
      };
    });
    auto* restore = snap->add_subcommand(
        "restore", "Replace the cluster's state with a snapshot from `operator snapshot save` "
                   "(every server applies it as one committed change)");
    restore->add_option("file", spec_file, "The snapshot file")->required();
    restore->callback([&] {
      action = [&] {
        auto bytes = read_input(spec_file);
        if (auto* f = std::get_if<failure>(&bytes)) return fail(g, *f);
        v1::Request req;
        req.set_snapshot_restore(std::get<std::string>(bytes));
        progress(g, "Restoring " + spec_file + " on every server (one committed change)...");
        return send(g, req, [&](const v1::Response& r) {
          if (g.json)
            std::cout << json{{"index", r.snapshot_index()}, {"message", r.message()}}.dump(2)
                      << "\n";
          else
            std::cout << r.message() << "\n";
        });
      };
    });

    // --- node ----------------------------------------------------------------
    auto* nodecmd = app.add_subcommand("node", "Inspect the nodes (hosts) of the cluster");
    nodecmd->require_subcommand(1);
    auto* nstatus = nodecmd->add_subcommand("status", "Show one node and its volumes, or list every node");
    nstatus->add_option("id", node_id, "The node's id (omit to list all)");
    nstatus->callback([&] {
      action = [&] {
        v1::Request req;
        if (node_id.empty())
          req.mutable_node_list();
        else
          req.set_node_status(node_id);
        return send(g, req, [&](const v1::Response& r) {
          if (g.json) {
            if (node_id.empty()) {
              json out = json::array();
              for (const auto& n : r.nodes()) out.push_back(node_json(n));
              std::cout << out.dump(2) << "\n";
            } else {
              auto j = node_json(r.nodes(0));
              j["volumes"] = volumes_json(r);
              j["allocs"] = json::array();
              for (const auto& a : r.allocs()) j["allocs"].push_back(alloc_json(a));
              std::cout << j.dump(2) << "\n";
            }
          } else {
            std::cout << (node_id.empty() ? render_node_list(r, now_ms()) : render_node(r, now_ms()));
          }
        });
      };
    });
  }

  // Opens the shell on this command line's server; the global options given
  // to berth apply to every line.
  int open_shell() {
    shell_options opts{{"--address", g.address}, g.address, g.timeout};
    if (g.json) opts.global_args.push_back("--json");
    for (const char* name : {"--namespace", "--timeout"})
      if (const auto* o = app.get_option(name); o->count() > 0)
        opts.global_args.insert(opts.global_args.end(), {name, o->as<std::string>()});
    return run_shell(opts);
  }
};

// The commands as a tree, for the shell's completion and help.
command_info tree_of(const CLI::App& app) {
  command_info c{app.get_name(), app.get_description(), {}, {}, {}};
  for (const auto* o : app.get_options()) {
    if (o->get_positional()) {
      c.positionals.push_back(o->get_name());
      continue;
    }
    for (const auto& name : o->get_lnames()) c.options.push_back({"--" + name, o->get_type_size() != 0});
    for (const auto& name : o->get_snames()) c.options.push_back({"-" + name, o->get_type_size() != 0});
  }
  for (const auto* sub : app.get_subcommands({})) c.subcommands.push_back(tree_of(*sub));
  return c;
}

}  // namespace

int run_command(const std::vector<std::string>& all_args, client* shared) {
  command_line cl(shared);
  // The words after "--" are an alloc's command, taken as they are (CLI11
  // would read its options as berth's).
  auto dashes = std::find(all_args.begin(), all_args.end(), "--");
  std::vector<std::string> args(all_args.begin(), dashes);
  std::vector<std::string> command;
  if (dashes != all_args.end()) command.assign(std::next(dashes), all_args.end());
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    cl.app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return cl.app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return cl.app.exit(e);
  } catch (const CLI::ParseError& e) {
    cl.app.exit(e);
    return exit_usage;
  }
  if (dashes != all_args.end()) {
    if (!cl.takes_command) {
      std::cerr << "Error: only `berth alloc run` takes a command after --\n";
      return exit_usage;
    }
    cl.command_args.insert(cl.command_args.end(), command.begin(), command.end());
  }
  if (cl.action) return cl.action();
  // No command: `berth` on a terminal opens the shell.
  if (!shared && isatty(STDIN_FILENO)) return cl.open_shell();
  std::cerr << "Error: a command is required (`berth --help` lists them; `berth shell` opens "
               "the interactive shell)\n";
  return exit_usage;
}

int parse_command(const std::vector<std::string>& args) {
  command_line cl(nullptr);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    cl.app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return cl.app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return cl.app.exit(e);
  } catch (const CLI::ParseError& e) {
    cl.app.exit(e);
    return exit_usage;
  }
  return exit_ok;
}

command_info command_tree() {
  command_line cl(nullptr);
  return tree_of(cl.app);
}

}  // namespace berth
