#include "apps/berth/commands.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "apps/berth/acl_commands.hpp"
#include "apps/berth/client.hpp"
#include "apps/berth/event_stream.hpp"
#include "apps/berth/render.hpp"
#include "apps/berth/send.hpp"
#include "apps/berth/shell.hpp"
#include "apps/berth/tls_commands.hpp"
#include "apps/berth/volume_init.hpp"
#include "control/snapshots.hpp"
#include "messages/codec.hpp"
#include "messages/ids.hpp"
#include "persistence/durable_file.hpp"
#include "tls/pki.hpp"

namespace berth {

namespace {

using nlohmann::json;

// What the commands share while a command line is parsed: the global
// options, and the work of the command that parsing chose.  CLI11 runs the
// chosen command's callback only; that callback sets `build` or `local`.
struct context {
  CLI::App& root;
  globals g;
  std::function<plan()> build;  // a command that sends one request
  std::function<int()> local;   // a command that runs here (shell)
  // alloc run's command, which takes the words after -- (null: no command
  // takes them).
  std::vector<std::string>* command = nullptr;
  // The command runs here without a berthd (berth tls ...): the TLS options
  // are not needed.
  bool offline = false;
};

// Makes `build` the work of `cmd` when the command line chooses it.  Each
// command keeps its options in a struct of its own that `build` holds.
void sends(CLI::App* cmd, context& ctx, std::function<plan()> build) {
  cmd->callback([&ctx, build = std::move(build)] { ctx.build = build; });
}

CLI::App& group(CLI::App& parent, const std::string& name, const std::string& description) {
  auto* cmd = parent.add_subcommand(name, description);
  cmd->require_subcommand(1);
  return *cmd;
}

// --- pieces of the answers ---------------------------------------------------

template <class Items, class ToJson>
json array_of(const Items& items, ToJson to_json) {
  json out = json::array();
  for (const auto& x : items) out.push_back(to_json(x));
  return out;
}

std::string single_volume_text(const v1::Response& r) {
  if (r.volumes().empty()) return "";
  const auto& v = r.volumes(0);
  return (r.message().empty() ? "" : r.message() + "\n\n") +
         render_volume(v, plugin_in(r, v.plugin_id()), now_ms());
}

json message_json(const v1::Response& r) {
  return json{{"message", r.message()}};
}
std::string message_text(const v1::Response& r) {
  return r.message() + "\n";
}
json first_alloc_json(const v1::Response& r) {
  return alloc_json(r.allocs(0));
}
json all_allocs_json(const v1::Response& r) {
  return array_of(r.allocs(), alloc_json);
}
// alloc run --group: the summary, then each member and its node.
std::string render_group(const v1::Response& r) {
  std::string out = r.message() + "\n";
  for (const auto& a : r.allocs())
    out += "  " + a.id() + " on node '" + a.node_id() + "': " + std::string(name_of(a.state())) +
           "\n";
  return out;
}
using to_json = std::function<json(const v1::Response&)>;
using to_text = std::function<std::string(const v1::Response&)>;

// Text with times relative to when it is shown.
to_text at_now(std::string (*render)(const v1::Response&, int64_t)) {
  return [render](const v1::Response& r) { return render(r, now_ms()); };
}

// The call that sends `req` and shows the answer as `as_json` or `as_text`.
call shows(v1::Request req, to_json as_json, to_text as_text, std::string progress = "") {
  return call{std::move(req), std::move(progress), std::move(as_json), std::move(as_text), {}};
}

// --- pieces of the requests ----------------------------------------------------

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

// A volume spec file, in the namespace --namespace names (when given: a
// spec's own namespace wins over the default one).
std::variant<v1::Volume, failure> read_spec(const context& ctx, const std::string& file,
                                            spec_use use) {
  auto text = read_input(file);
  if (auto* f = std::get_if<failure>(&text)) return *f;
  auto parsed = parse_volume_spec(std::get<std::string>(text), use);
  if (auto* problems = std::get_if<std::vector<problem>>(&parsed))
    return failure{errc::invalid, describe("volume spec " + file, *problems)};
  auto v = std::get<v1::Volume>(parsed);
  if (ctx.root.get_option("--namespace")->count() > 0) v.set_namespace_(ctx.g.ns);
  return v;
}

// --- the server --------------------------------------------------------------

int open_shell(const context& ctx);

void add_shell(CLI::App& app, context& ctx) {
  app.add_subcommand("shell",
                     "Open the interactive shell (also what berth does without a "
                     "command on a terminal)")
      ->callback([&ctx] {
        ctx.local = [&ctx] {
          if (ctx.g.shared) return fail(ctx.g, failure{errc::invalid, "this is the shell already"});
          return open_shell(ctx);
        };
      });
}

void add_agent_status(CLI::App& app, context& ctx) {
  auto* cmd = app.add_subcommand("status",
                                 "Show the server berth talks to: its node, whether it "
                                 "leads, its version");
  sends(cmd, ctx, [] {
    v1::Request req;
    req.mutable_agent_status();
    return shows(
        req, [](const v1::Response& r) { return agent_json(r.agent()); },
        [](const v1::Response& r) { return render_agent(r.agent()); });
  });
}

// --- volume ------------------------------------------------------------------

// register and create: a spec file, sent as `field` of the request.
void add_volume_from_spec(CLI::App& volume, context& ctx, const std::string& name,
                          const std::string& description, spec_use use) {
  auto file = std::make_shared<std::string>();
  auto count = std::make_shared<uint32_t>(0);
  auto* cmd = volume.add_subcommand(name, description);
  cmd->add_option("file", *file, "The volume spec file, or - for stdin")->required();
  if (use == spec_use::create)
    cmd->add_option("--count", *count,
                    "Create N volumes ID[0] .. ID[N-1] from the one spec (for alloc run "
                    "--per-alloc), one after the other; stops at the first that fails (the ones "
                    "before it stay: sent again, the command creates only the rest)")
        ->check(CLI::Range(1u, max_group_count));
  // With --count: one create per member, each shown as it is made (with
  // --json: one array of the members, those made before a failure if one
  // fails).
  auto create_members = [&ctx, file, count] {
    auto spec = read_spec(ctx, *file, spec_use::create);
    if (auto* f = std::get_if<failure>(&spec)) return fail(ctx.g, *f);
    const auto base = std::get<v1::Volume>(spec);
    auto members = json::array();
    auto done = [&](int code) {
      if (ctx.g.json)
        std::cout << members.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
      return code;
    };
    for (uint32_t i = 0; i < *count; ++i) {
      auto v = base;
      v.set_id(member_id(base.id(), static_cast<int>(i)));
      v.clear_name();  // the id's (apply_defaults)
      // A member made by an earlier try (of the same plugin) stays as it is.
      v1::Request status;
      status.mutable_volume_status()->set_namespace_(v.namespace_());
      status.mutable_volume_status()->set_id(v.id());
      auto known = answer(ctx.g, status);
      if (auto* r = std::get_if<v1::Response>(&known); r && r->volumes_size() > 0) {
        if (r->volumes(0).plugin_id() != v.plugin_id())
          return done(fail(ctx.g, failure{errc::refused, "volume '" + v.id() +
                                                             "' exists already with plugin '" +
                                                             r->volumes(0).plugin_id() +
                                                             "'; choose another id for the spec"}));
        if (ctx.g.json)
          members.push_back(single_volume_json(*r));
        else
          std::cout << "Volume '" << v.id() << "' exists already; not created again\n";
        continue;
      }
      v1::Request req;
      *req.mutable_volume_create() = v;
      if (ctx.g.json) {
        auto made = answer(ctx.g, req);
        if (auto* f = std::get_if<failure>(&made)) return done(fail(ctx.g, *f));
        members.push_back(single_volume_json(std::get<v1::Response>(made)));
        continue;
      }
      int code = send(ctx.g, shows(req, single_volume_json, single_volume_text,
                                   "Creating volume '" + v.id() + "' through plugin '" +
                                       v.plugin_id() + "' (CreateVolume)..."));
      if (code != 0) return code;
    }
    return done(0);
  };
  auto build = [&ctx, file, use]() -> plan {
    auto spec = read_spec(ctx, *file, use);
    if (auto* f = std::get_if<failure>(&spec)) return *f;
    const auto& v = std::get<v1::Volume>(spec);
    v1::Request req;
    if (use == spec_use::registration) {
      *req.mutable_volume_register() = v;
      return shows(req, single_volume_json, single_volume_text);
    }
    *req.mutable_volume_create() = v;
    return shows(req, single_volume_json, single_volume_text,
                 "Creating volume '" + v.id() + "' through plugin '" + v.plugin_id() +
                     "' (CreateVolume)...");
  };
  cmd->callback([&ctx, count, build, create_members] {
    if (*count > 0)
      ctx.local = create_members;
    else
      ctx.build = build;
  });
}

void add_volume_register(CLI::App& volume, context& ctx) {
  add_volume_from_spec(
      volume, ctx, "register",
      "Register a volume from a spec file (JSON or YAML; - reads stdin), or update a registered "
      "one (context, secrets; not plugin_id, external_id, parameters)",
      spec_use::registration);
}

void add_volume_create(CLI::App& volume, context& ctx) {
  add_volume_from_spec(
      volume, ctx, "create",
      "Create a volume through its plugin's controller (CreateVolume: capacity_min/max, "
      "parameters, topology_request) and register it; the spec has no external_id",
      spec_use::create);
}

// --- lists: filters and pages --------------------------------------------------

// The options every list takes; the flags become one filter expression
// (control/filter.hpp) evaluated by the server, with --filter's own.
struct list_options {
  std::string plugin, node, state, group, filter, page_token;
  uint32_t per_page = 0;
  bool stale = false;
};

enum class listing { volumes, allocs, nodes, plugins };

void add_list_options(CLI::App* cmd, list_options& o, listing what) {
  if (what == listing::volumes)
    cmd->add_option("--plugin", o.plugin, "List only the volumes of this plugin");
  if (what == listing::nodes)
    cmd->add_option("--plugin", o.plugin, "List only the nodes that run this plugin");
  if (what != listing::nodes)
    cmd->add_option("--node", o.node,
                    what == listing::volumes  ? "List only the volumes claimed on this node"
                    : what == listing::allocs ? "List only the allocs on this node"
                                              : "List only the plugins with an instance on this node");
  if (what == listing::volumes)
    cmd->add_option("--state", o.state, "List only unclaimed, claimed or releasing volumes")
        ->check(CLI::IsMember({"unclaimed", "claimed", "releasing"}));
  if (what == listing::allocs)
    cmd->add_option("--state", o.state, "List only the allocs in this state")
        ->check(CLI::IsMember({"pending", "running", "complete", "failed", "lost"}));
  if (what == listing::nodes)
    cmd->add_option("--state", o.state, "List only the nodes with this status")
        ->check(CLI::IsMember({"ready", "down"}));
  if (what == listing::volumes)
    cmd->add_option("--group", o.group, "List only the volumes of this volume group");
  if (what == listing::allocs)
    cmd->add_option("--group", o.group, "List only the allocs of this group");
  cmd->add_option("--filter", o.filter,
                  "Only the objects whose JSON fields (as --json shows them) match EXPR, e.g. "
                  "'plugin_id == \"hostpath\" and claims is not empty' (==, !=, contains, in, "
                  "is empty, and, or, not, parentheses)");
  cmd->add_option("--per-page", o.per_page, "At most N objects; the answer names the next page")
      ->check(CLI::Range(1u, 100000u));
  cmd->add_option("--page-token", o.page_token,
                  "Start after this token (the next page token of the page before)");
  cmd->add_flag("--stale", o.stale,
                "Answer from the server asked, even if it does not lead (what it applied: may "
                "lag; default: ask the leader)");
}

std::string literal(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Fills the list request from the options; the flags are clauses of the filter.
void apply_list(const list_options& o, listing what, v1::ListRequest* q) {
  std::vector<std::string> clauses;
  if (!o.plugin.empty())
    clauses.push_back(what == listing::volumes ? "plugin_id == " + literal(o.plugin)
                                               : literal(o.plugin) + " in plugin_ids");
  if (!o.node.empty())
    clauses.push_back(what == listing::volumes  ? "claims.node_id == " + literal(o.node)
                      : what == listing::allocs ? "node_id == " + literal(o.node)
                                                : "(nodes.node_id == " + literal(o.node) +
                                                      " or controllers.node_id == " +
                                                      literal(o.node) + ")");
  if (!o.state.empty()) {
    if (what == listing::volumes)
      clauses.push_back(o.state == "unclaimed" ? "claims is empty"
                        : o.state == "claimed" ? "claims.state == \"taken\""
                                               : "claims.state != \"taken\"");
    else
      clauses.push_back((what == listing::allocs ? "state == " : "status == ") + literal(o.state));
  }
  if (!o.group.empty()) clauses.push_back("group == " + literal(o.group));
  if (!o.filter.empty()) clauses.push_back("(" + o.filter + ")");
  std::string expr;
  for (const auto& c : clauses) expr += (expr.empty() ? "" : " and ") + c;
  q->set_filter(expr);
  q->set_per_page(o.per_page);
  q->set_page_token(o.page_token);
}

// --namespace '*' lists every namespace.
std::string list_namespace(const globals& g) { return g.ns == "*" ? "" : g.ns; }

// A page's answer: as it is without --per-page; with it, the JSON names the
// next page ({"KEY": [...], "next_page_token": T}) and the text ends with it.
to_json paged_json(const list_options& o, const char* key, to_json items) {
  if (o.per_page == 0) return items;
  return [key, items](const v1::Response& r) {
    return json{{key, items(r)}, {"next_page_token", r.next_page_token()}};
  };
}

to_text paged_text(const list_options& o, to_text items) {
  if (o.per_page == 0) return items;
  return [items](const v1::Response& r) {
    auto text = items(r);
    if (!r.next_page_token().empty())
      text += "Next page: --page-token " + r.next_page_token() + "\n";
    return text;
  };
}

void add_volume_status(CLI::App& volume, context& ctx) {
  struct options {
    std::string id;
    list_options list;
  };
  auto o = std::make_shared<options>();
  auto* cmd = volume.add_subcommand(
      "status", "Show one volume, or list the volumes (of --namespace; '*' for every one)");
  cmd->add_option("id", o->id, "The volume's id (omit to list all)");
  add_list_options(cmd, o->list, listing::volumes);
  sends(cmd, ctx, [&ctx, o] {
    v1::Request req;
    req.set_stale(o->list.stale);
    if (!o->id.empty()) {
      req.mutable_volume_status()->set_namespace_(ctx.g.ns);
      req.mutable_volume_status()->set_id(o->id);
      return shows(req, single_volume_json, single_volume_text);
    }
    req.mutable_volume_list()->set_namespace_(list_namespace(ctx.g));
    apply_list(o->list, listing::volumes, req.mutable_volume_list());
    return shows(req, paged_json(o->list, "volumes", volumes_json),
                 paged_text(o->list, at_now(render_volume_list)));
  });
}

// deregister and delete answer the same way: the volume is gone.
std::function<json(const v1::Response&)> gone_json(const context& ctx, const std::string& id,
                                                   const char* what) {
  return [id, ns = ctx.g.ns, what](const v1::Response& r) {
    return json{{"id", id}, {"namespace", ns}, {what, true}, {"message", r.message()}};
  };
}

void add_volume_deregister(CLI::App& volume, context& ctx) {
  struct options {
    std::string id;
    bool force = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = volume.add_subcommand(
      "deregister",
      "Remove a volume from berth (refused while claimed; --force releases the "
      "claims first). The storage itself is not deleted.");
  cmd->add_option("id", o->id, "The volume's id")->required();
  cmd->add_flag("--force", o->force, "Release every claim of the volume, then deregister it");
  sends(cmd, ctx, [&ctx, o] {
    v1::Request req;
    auto* d = req.mutable_volume_deregister();
    d->set_namespace_(ctx.g.ns);
    d->set_volume_id(o->id);
    d->set_force(o->force);
    return shows(req, gone_json(ctx, o->id, "deregistered"), message_text);
  });
}

failure not_one_of(const std::string& flag, const std::string& value, const std::string& names) {
  return failure{errc::invalid, flag + " '" + value + "' is not one of " + names};
}

void add_volume_claim(CLI::App& volume, context& ctx) {
  struct options {
    std::string id, alloc, node, access_mode, attachment_mode;
    bool read_only = false;
    bool allow_abnormal = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = volume.add_subcommand(
      "claim", "Claim a volume for an alloc on a node (for writing unless --read-only)");
  cmd->add_option("id", o->id, "The volume's id")->required();
  cmd->add_option("--alloc", o->alloc, "The alloc that claims the volume")->required();
  cmd->add_option("--node", o->node, "The node the alloc runs on")->required();
  cmd->add_flag("--read-only", o->read_only, "Claim for reading");
  cmd->add_flag("--allow-abnormal", o->allow_abnormal,
                "Claim even if the volume's plugin reports it abnormal (volume status shows "
                "its condition)");
  cmd->add_option("--access-mode", o->access_mode,
                  "Use this capability of the volume (default: one that fits)");
  cmd->add_option("--attachment-mode", o->attachment_mode,
                  "Use this attachment mode (file-system or block-device)");
  sends(cmd, ctx, [&ctx, o]() -> plan {
    v1::Request req;
    auto* c = req.mutable_volume_claim();
    c->set_namespace_(ctx.g.ns);
    c->set_volume_id(o->id);
    c->set_alloc_id(o->alloc);
    c->set_node_id(o->node);
    c->set_read_only(o->read_only);
    c->set_allow_abnormal(o->allow_abnormal);
    if (!o->access_mode.empty()) {
      auto m = parse_access_mode(o->access_mode);
      if (!m) return not_one_of("--access-mode", o->access_mode, access_mode_names());
      c->set_access_mode(*m);
    }
    if (!o->attachment_mode.empty()) {
      auto m = parse_attachment_mode(o->attachment_mode);
      if (!m) return not_one_of("--attachment-mode", o->attachment_mode, attachment_mode_names());
      c->set_attachment_mode(*m);
    }
    auto claimed = [](const v1::Response& r) {
      auto j = single_volume_json(r);
      j["published_path"] = r.published_path();
      return j;
    };
    return shows(req, claimed, single_volume_text);
  });
}

void add_volume_release(CLI::App& volume, context& ctx) {
  struct options {
    std::string id, alloc;
  };
  auto o = std::make_shared<options>();
  auto* cmd = volume.add_subcommand("release", "Release an alloc's claim on a volume");
  cmd->add_option("id", o->id, "The volume's id")->required();
  cmd->add_option("--alloc", o->alloc, "The alloc whose claim to release")->required();
  sends(cmd, ctx, [&ctx, o] {
    v1::Request req;
    auto* r = req.mutable_volume_release();
    r->set_namespace_(ctx.g.ns);
    r->set_volume_id(o->id);
    r->set_alloc_id(o->alloc);
    return shows(req, single_volume_json, single_volume_text);
  });
}

void add_volume_detach(CLI::App& volume, context& ctx) {
  struct options {
    std::string id, node;
  };
  auto o = std::make_shared<options>();
  auto* cmd = volume.add_subcommand(
      "detach",
      "Release every claim on NODE of allocs that are stopped, failed, lost or gone "
      "(NodeUnpublish, NodeUnstage, ControllerUnpublish), e.g. after a node was lost; "
      "claims of running allocs are kept");
  cmd->add_option("id", o->id, "The volume's id")->required();
  cmd->add_option("node", o->node, "The node to detach it from")->required();
  sends(cmd, ctx, [&ctx, o] {
    v1::Request req;
    auto* d = req.mutable_volume_detach();
    d->set_namespace_(ctx.g.ns);
    d->set_volume_id(o->id);
    d->set_node_id(o->node);
    auto detached = [](const v1::Response& r) {
      auto j = single_volume_json(r);  // null becomes an object
      j["message"] = r.message();
      return j;
    };
    return shows(req, detached, message_text,
                 "Detaching volume '" + o->id + "' from node '" + o->node + "'...");
  });
}

void add_volume_delete(CLI::App& volume, context& ctx) {
  auto id = std::make_shared<std::string>();
  auto* cmd = volume.add_subcommand(
      "delete",
      "Delete a volume's storage through its plugin's controller (DeleteVolume), then "
      "deregister it; refused while it has claims");
  cmd->add_option("id", *id, "The volume's id")->required();
  sends(cmd, ctx, [&ctx, id] {
    v1::Request req;
    req.mutable_volume_delete()->set_namespace_(ctx.g.ns);
    req.mutable_volume_delete()->set_volume_id(*id);
    return shows(req, gone_json(ctx, *id, "deleted"), message_text,
                 "Deleting volume '" + *id + "' (DeleteVolume)...");
  });
}

// --- volume init ----------------------------------------------------------------

// Writes the example to `file` (- : stdout).  An existing file is kept
// unless `force`: O_EXCL makes the check and the creation one step.  Mode
// 0600: once filled in, the spec holds the volume's secrets.
std::optional<failure> write_example(const std::string& file, const std::string& text, bool force) {
  if (file == "-") {
    std::cout << text;
    std::cout.flush();
    return std::nullopt;
  }
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL);
  int fd = ::open(file.c_str(), flags, 0600);
  if (fd < 0 && errno == EEXIST)
    return failure{errc::refused, "file " + file +
                                      " exists already; give --force to overwrite it, or "
                                      "--output to write another file"};
  if (fd < 0) return failure{errc::invalid, "cannot write " + file + ": " + std::strerror(errno)};
  size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      auto why = std::string(std::strerror(errno));
      ::close(fd);
      return failure{errc::invalid, "cannot write " + file + ": " + why};
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0)
    return failure{errc::invalid, "cannot write " + file + ": " + std::strerror(errno)};
  return std::nullopt;
}

void add_volume_init(CLI::App& volume, context& ctx) {
  struct options {
    std::string type = "csi", output;
    bool json = false, force = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = volume.add_subcommand(
      "init",
      "Write an example volume spec, every key with a comment, for volume create or register "
      "(volume.yaml, or volume.json with --json; nothing is sent to berthd)");
  cmd->add_option("--type", o->type, "The kind of volume: csi (the only one)")
      ->capture_default_str()
      ->check(CLI::IsMember({"csi"}));
  cmd->add_flag("--json", o->json, "Write JSON (the same keys, without comments) instead of YAML");
  cmd->add_option("--output,-o", o->output,
                  "Write to FILE (- for stdout; default volume.yaml, or volume.json with --json)")
      ->type_name("FILE");
  cmd->add_flag("--force", o->force, "Overwrite FILE if it exists");
  cmd->callback([&ctx, o] {
    ctx.local = [&ctx, o] {
      auto format = o->json || ctx.g.json ? spec_format::json : spec_format::yaml;
      auto file = o->output.empty() ? default_example_file(format) : o->output;
      if (auto f = write_example(file, volume_spec_example(format), o->force))
        return fail(ctx.g, *f);
      if (file != "-")
        std::cout << "Example volume spec written to " << file
                  << "; fill it in, then: berth volume create " << file << "\n";
      return int(exit_ok);
    };
  });
}

// --- volume snapshot, volume modify -------------------------------------------

// --parameter / --secret K=V (repeatable) into a map; the flag is named in
// the error.  Values are never echoed (a secret's would be).
std::optional<failure> read_pairs(const std::vector<std::string>& pairs, const char* flag,
                                  google::protobuf::Map<std::string, std::string>* out) {
  for (const auto& kv : pairs) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return failure{errc::invalid, std::string(flag) + " takes KEY=VALUE (got a value without "
                                                        "'=' or with an empty key)"};
    (*out)[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return std::nullopt;
}

void add_snapshot_create(CLI::App& snapshot, context& ctx) {
  struct options {
    std::vector<std::string> args;
    std::string group;
    std::vector<std::string> parameters, secrets;
  };
  auto o = std::make_shared<options>();
  auto* cmd = snapshot.add_subcommand(
      "create",
      "Take a snapshot of a volume through its plugin's controller (CreateSnapshot; the plugin "
      "must advertise CREATE_DELETE_SNAPSHOT), or with --group one group snapshot of several "
      "volumes of one plugin at one point in time (CreateVolumeGroupSnapshot; the plugin must "
      "offer the GroupController service). Prints each snapshot's id, source volume, group, "
      "size, creation time and whether it is ready to use");
  cmd->add_option("volume", o->args,
                  "VOLUME [NAME]: the volume and the snapshot's name (default: "
                  "berth-NAMESPACE-VOLUME-<unix ms>, made once by the shell, so a retry finds "
                  "the snapshot the first attempt took); with --group: VOLUME... (every volume "
                  "of the group)")
      ->required();
  cmd->add_option("--group", o->group,
                  "Take one group snapshot of all the volumes named, called NAME (the group's "
                  "CSI name: a retry with the same NAME finds the group the first attempt took)");
  cmd->add_option("--parameter", o->parameters, "KEY=VALUE for the plugin (repeatable)");
  cmd->add_option("--secret", o->secrets,
                  "KEY=VALUE secret for the plugin, over the volume's own (repeatable; never "
                  "shown or logged)");
  sends(cmd, ctx, [&ctx, o]() -> plan {
    v1::Request req;
    auto* r = req.mutable_snapshot_create();
    r->set_namespace_(ctx.g.ns);
    std::string doing;
    if (!o->group.empty()) {
      r->set_name(o->group);
      for (const auto& v : o->args) r->add_volume_ids(v);
      doing = "Taking group snapshot '" + o->group + "' of " + std::to_string(o->args.size()) +
              " volume(s) (CreateVolumeGroupSnapshot)...";
    } else {
      if (o->args.size() > 2)
        return failure{errc::invalid,
                       "volume snapshot create takes VOLUME [NAME]; to snapshot several volumes "
                       "at one point in time, name the group: --group NAME VOLUME..."};
      const auto& volume = o->args[0];
      r->set_volume_id(volume);
      r->set_name(o->args.size() == 2 ? o->args[1]
                                      : generated_snapshot_name(ctx.g.ns, volume, now_ms()));
      doing = "Taking a snapshot of volume '" + volume + "' (CreateSnapshot)...";
    }
    if (auto f = read_pairs(o->parameters, "--parameter", r->mutable_parameters())) return *f;
    if (auto f = read_pairs(o->secrets, "--secret", r->mutable_secrets())) return *f;
    bool group = !o->group.empty();
    return shows(
        req,
        [group](const v1::Response& r) {
          if (group) return snapshots_json(r);
          return r.snapshots().empty() ? json() : snapshot_json(r.snapshots(0));
        },
        [](const v1::Response& r) {
          return r.message() + "\n\n" + render_snapshot_list(r, now_ms());
        },
        doing);
  });
}

void add_snapshot_delete(CLI::App& snapshot, context& ctx) {
  struct options {
    std::string plugin, id, group;
    std::vector<std::string> members, secrets;
  };
  auto o = std::make_shared<options>();
  auto* cmd = snapshot.add_subcommand(
      "delete",
      "Delete a snapshot through its plugin's controller (DeleteSnapshot), or with --group a "
      "group snapshot with all its members (DeleteVolumeGroupSnapshot); one that is gone "
      "already is success, said so");
  cmd->add_option("plugin", o->plugin, "The snapshot's plugin")->required();
  cmd->add_option("snapshot_id", o->id,
                  "The snapshot's id (as snapshot list shows it); not with --group");
  cmd->add_option("--group", o->group,
                  "Delete this group snapshot (the GROUP column of snapshot list) and its members");
  cmd->add_option("--member", o->members,
                  "With --group: a member snapshot's id (repeatable; default: the members the "
                  "plugin lists with the group's id, for a plugin that cannot list: required)");
  cmd->add_option("--secret", o->secrets,
                  "KEY=VALUE secret for the plugin (repeatable; never shown or logged)");
  sends(cmd, ctx, [o]() -> plan {
    v1::Request req;
    auto* r = req.mutable_snapshot_delete();
    r->set_plugin_id(o->plugin);
    r->set_snapshot_id(o->id);
    r->set_group_snapshot_id(o->group);
    for (const auto& m : o->members) r->add_snapshot_ids(m);
    if (auto f = read_pairs(o->secrets, "--secret", r->mutable_secrets())) return *f;
    return shows(req, message_json, message_text,
                 o->group.empty()
                     ? "Deleting snapshot '" + o->id + "' (DeleteSnapshot)..."
                     : "Deleting group snapshot '" + o->group + "' (DeleteVolumeGroupSnapshot)...");
  });
}

void add_snapshot_list(CLI::App& snapshot, context& ctx) {
  struct options {
    std::string plugin, page_token;
    uint32_t per_page = 0;
    std::vector<std::string> secrets;
  };
  auto o = std::make_shared<options>();
  auto* cmd = snapshot.add_subcommand(
      "list",
      "List the snapshots of a plugin, or of every plugin that advertises LIST_SNAPSHOTS "
      "(ListSnapshots: the plugins keep the snapshots, berth does not)");
  cmd->add_option("--plugin", o->plugin, "Only this plugin's snapshots");
  cmd->add_option("--per-page", o->per_page,
                  "At most N snapshots (with --plugin); the answer names the next page")
      ->check(CLI::Range(1u, 100000u));
  cmd->add_option("--page-token", o->page_token,
                  "Start at this token (the next page token of the page before; with --plugin)");
  cmd->add_option("--secret", o->secrets,
                  "KEY=VALUE secret for the plugin (repeatable; never shown or logged)");
  sends(cmd, ctx, [o]() -> plan {
    v1::Request req;
    auto* r = req.mutable_snapshot_list();
    r->set_plugin_id(o->plugin);
    r->set_per_page(o->per_page);
    r->set_page_token(o->page_token);
    if (auto f = read_pairs(o->secrets, "--secret", r->mutable_secrets())) return *f;
    list_options paging;
    paging.per_page = o->per_page;
    return shows(req, paged_json(paging, "snapshots", snapshots_json),
                 paged_text(paging, at_now(render_snapshot_list)));
  });
}

void add_volume_snapshot(CLI::App& volume, context& ctx) {
  auto& snapshot = group(volume, "snapshot",
                         "Take, delete and list snapshots of volumes (through the plugins)");
  add_snapshot_create(snapshot, ctx);
  add_snapshot_delete(snapshot, ctx);
  add_snapshot_list(snapshot, ctx);
}

void add_volume_modify(CLI::App& volume, context& ctx) {
  struct options {
    std::string volume;
    std::vector<std::string> parameters, secrets;
  };
  auto o = std::make_shared<options>();
  auto* cmd = volume.add_subcommand(
      "modify",
      "Change a volume's mutable parameters through its plugin's controller "
      "(ControllerModifyVolume; the plugin must advertise MODIFY_VOLUME); the volume records "
      "them once the plugin accepted them");
  cmd->add_option("volume", o->volume, "The volume's id")->required();
  cmd->add_option("--parameter", o->parameters, "KEY=VALUE mutable parameter (repeatable)")
      ->required();
  cmd->add_option("--secret", o->secrets,
                  "KEY=VALUE secret for the plugin, over the volume's own (repeatable; never "
                  "shown or logged)");
  sends(cmd, ctx, [&ctx, o]() -> plan {
    v1::Request req;
    auto* r = req.mutable_volume_modify();
    r->set_namespace_(ctx.g.ns);
    r->set_volume_id(o->volume);
    if (auto f = read_pairs(o->parameters, "--parameter", r->mutable_parameters())) return *f;
    if (auto f = read_pairs(o->secrets, "--secret", r->mutable_secrets())) return *f;
    return shows(req, single_volume_json, single_volume_text,
                 "Modifying volume '" + o->volume + "' (ControllerModifyVolume)...");
  });
}

void add_volume_availability(CLI::App& volume, context& ctx) {
  struct options {
    std::string id, availability;
  };
  auto o = std::make_shared<options>();
  auto* cmd = volume.add_subcommand(
      "availability",
      "Set whether a volume takes claims: active (it does), pause (new claims are refused, "
      "existing ones kept), drain (also stops the allocs using it and releases its claims)");
  cmd->add_option("id", o->id, "The volume's id")->required();
  cmd->add_option("availability", o->availability, "active, pause or drain")->required();
  sends(cmd, ctx, [&ctx, o]() -> plan {
    auto a = parse_volume_availability(o->availability);
    if (!a) return not_one_of("availability", o->availability, volume_availability_names());
    v1::Request req;
    auto* r = req.mutable_volume_availability();
    r->set_namespace_(ctx.g.ns);
    r->set_volume_id(o->id);
    r->set_availability(*a);
    auto shown = [](const v1::Response& r) {
      auto j = single_volume_json(r);
      j["message"] = r.message();
      return j;
    };
    return shows(req, shown, message_text);
  });
}

void add_volume_expand(CLI::App& volume, context& ctx) {
  struct options {
    std::string id, size;
  };
  auto o = std::make_shared<options>();
  auto* cmd = volume.add_subcommand(
      "expand",
      "Grow a volume to SIZE (2GiB, 500MiB or bytes): ControllerExpandVolume, then "
      "NodeExpandVolume on every node where it is published (or at its next stage when the "
      "plugin expands offline only).  The volume's capacity_min becomes SIZE; a smaller size "
      "than it has is refused, the same size again changes nothing.  The steps are retried "
      "until they succeed; berth volume status shows the capacity the plugin reported");
  cmd->add_option("id", o->id, "The volume's id")->required();
  cmd->add_option("size", o->size,
                  "The new size: bytes, or with KiB, MiB, GiB, TiB (or KB, MB, ...)")
      ->required();
  sends(cmd, ctx, [&ctx, o]() -> plan {
    auto size = parse_size(o->size);
    if (!size || *size <= 0)
      return failure{errc::invalid, "volume expand: SIZE '" + o->size + "'" +
                                        " is not a size; give bytes (1073741824) or a number "
                                        "with a unit (2GiB, 500MiB)"};
    v1::Request req;
    auto* r = req.mutable_volume_expand();
    r->set_namespace_(ctx.g.ns);
    r->set_volume_id(o->id);
    r->set_required_bytes(*size);
    auto shown = [](const v1::Response& r) {
      auto j = single_volume_json(r);
      j["message"] = r.message();
      return j;
    };
    return shows(req, shown, message_text,
                 "Expanding volume '" + o->id + "' (ControllerExpandVolume, NodeExpandVolume)...");
  });
}

void add_volume_commands(CLI::App& app, context& ctx) {
  auto& volume = group(app, "volume", "Register, inspect, claim and release volumes");
  add_volume_register(volume, ctx);
  add_volume_create(volume, ctx);
  add_volume_status(volume, ctx);
  add_volume_deregister(volume, ctx);
  add_volume_claim(volume, ctx);
  add_volume_release(volume, ctx);
  add_volume_detach(volume, ctx);
  add_volume_delete(volume, ctx);
  add_volume_snapshot(volume, ctx);
  add_volume_modify(volume, ctx);
  add_volume_availability(volume, ctx);
  add_volume_init(volume, ctx);
  add_volume_expand(volume, ctx);
}

// --- alloc -------------------------------------------------------------------

void add_alloc_run(CLI::App& alloc, context& ctx) {
  struct options {
    std::string node, id;
    std::vector<std::string> volumes, command;
    bool allow_abnormal = false;
    bool explain = false;
    uint32_t count = 0;
    std::string group;
    bool per_alloc = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = alloc.add_subcommand(
      "run",
      "Create an alloc on a node: claim each --volume (the node publishes it), then run "
      "the command (after --) with each volume's path in BERTH_VOLUME_<NAME>; without a "
      "command the alloc runs until berth alloc stop. Anything claimed is released again "
      "if a claim or mount fails. Without --node the leader places it on a node where "
      "every volume can be claimed now (the fewest allocs first, ties by name), or "
      "says for each node why it cannot.");
  cmd->add_option("--node", o->node,
                  "The node to run on (default: placed by the leader: a node that is up, "
                  "eligible, has the volumes' plugins healthy, lies in their topology, has "
                  "room under max volumes per node and a free writer slot)");
  cmd->add_flag("--explain", o->explain,
                "Show where the alloc would be placed and why each node was rejected; run "
                "nothing (without --node)");
  cmd->add_option("--count", o->count,
                  "Run N allocs GROUP[0] .. GROUP[N-1] (with --group), one after the other, "
                  "each placed (or on --node) as a single run is; a group spreads over the "
                  "nodes")
      ->check(CLI::Range(1u, max_group_count));
  cmd->add_option("--group", o->group,
                  "The group's name: its allocs are NAME[0], NAME[1], ... (default --count 1); "
                  "sent again, the allocs that exist answer as they are");
  cmd->add_flag("--per-alloc", o->per_alloc,
                "Alloc GROUP[i] claims volume VOLUME[i] for each --volume NAME=VOLUME (make "
                "them with berth volume create SPEC --count N)");
  cmd->add_option("--volume", o->volumes,
                  "NAME=VOLUME[:ro][,mount_flag=FLAG]... (repeatable): claim VOLUME for writing "
                  "(:ro for reading), published at $BERTH_VOLUME_<NAME>");
  cmd->add_option("--id", o->id,
                  "The alloc's id (default: one the shell generates). Sent again with the same "
                  "id, node, volumes and command, the request answers the alloc that exists");
  cmd->add_flag("--allow-abnormal", o->allow_abnormal,
                "Claim the volumes even if their plugin reports one abnormal (volume status "
                "shows its condition)");
  cmd->add_option("command", o->command, "The command and its arguments, after --");
  cmd->callback([&ctx, o] {
    ctx.command = &o->command;
    ctx.build = [&ctx, o]() -> plan {
      v1::Request req;
      auto* r = req.mutable_alloc_run();
      r->set_namespace_(ctx.g.ns);
      r->set_node_id(o->node);
      r->set_id(o->id.empty() ? random_alloc_id() : o->id);
      r->set_allow_abnormal(o->allow_abnormal);
      if (o->explain && !o->node.empty())
        return failure{errc::invalid,
                       "--explain shows where the leader would place the alloc: leave out --node"};
      r->set_explain(o->explain);
      if (!o->group.empty() || o->count > 0 || o->per_alloc) {
        if (!o->id.empty())
          return failure{errc::invalid,
                         "--id is not taken with --group: the allocs are GROUP[0], GROUP[1], ..."};
        if (o->group.empty())
          return failure{errc::invalid, "--count and --per-alloc need --group NAME"};
        r->clear_id();
        r->set_group(o->group);
        r->set_count(o->count > 0 ? o->count : 1);
        r->set_per_alloc(o->per_alloc);
      }
      for (const auto& arg : o->volumes) {
        auto v = parse_alloc_volume(arg);
        if (auto* err = std::get_if<std::string>(&v)) return failure{errc::invalid, *err};
        *r->add_volumes() = std::get<v1::AllocVolume>(v);
      }
      for (const auto& c : o->command) r->add_command(c);
      if (o->explain) return shows(req, placement_json, render_placement);
      if (!o->group.empty())
        return shows(req, all_allocs_json, render_group,
                     "Running " + std::to_string(r->count()) + " alloc(s) of group '" + o->group +
                         "'...");
      return shows(req, first_alloc_json, message_text,
                   "Claiming and publishing " + std::to_string(o->volumes.size()) +
                       " volume(s) on " +
                       (o->node.empty() ? std::string("the node the leader places it on")
                                        : "node '" + o->node + "'") +
                       "...");
    };
  });
}

v1::Request alloc_stop_request(const std::string& id) {
  v1::Request req;
  req.set_alloc_stop(id);
  return req;
}

// alloc stop --group NAME: every alloc of the group that is not terminal,
// and every lost one not replaced yet (so that it is not), one after the
// other (each stop is safe to send again).
int stop_group(const context& ctx, const std::string& group) {
  v1::Request list;
  list.mutable_alloc_list()->set_namespace_(list_namespace(ctx.g));
  auto listed = answer(ctx.g, list);
  if (auto* f = std::get_if<failure>(&listed)) return fail(ctx.g, *f);
  const auto& allocs = std::get<v1::Response>(listed).allocs();
  std::set<std::string> known;
  for (const auto& a : allocs) known.insert(a.id());
  std::vector<std::string> ids;
  for (const auto& a : allocs)
    if (a.group() == group &&
        (!alloc_terminal(a.state()) || (a.state() == v1::ALLOC_LOST && !a.no_replace() &&
                                        !known.count(replacement_id(a.id())))))
      ids.push_back(a.id());
  if (ids.empty()) {
    if (ctx.g.json)
      std::cout << "[]\n";
    else
      std::cout << "alloc group '" << group << "' has no alloc to stop in namespace '"
                << ctx.g.ns << "'\n";
    return 0;
  }
  // With --json: one array of the stopped allocs (those stopped before a
  // failure if one fails).
  auto stopped = json::array();
  for (const auto& id : ids) {
    if (ctx.g.json) {
      auto r = answer(ctx.g, alloc_stop_request(id));
      if (auto* f = std::get_if<failure>(&r)) {
        std::cout << stopped.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
        return fail(ctx.g, *f);
      }
      stopped.push_back(first_alloc_json(std::get<v1::Response>(r)));
      continue;
    }
    int code = send(ctx.g, shows(alloc_stop_request(id), first_alloc_json, message_text,
                                 "Stopping alloc '" + id + "' and releasing its claims..."));
    if (code != 0) return code;
  }
  if (ctx.g.json) std::cout << stopped.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  return 0;
}

void add_alloc_stop(CLI::App& alloc, context& ctx) {
  auto id = std::make_shared<std::string>();
  auto group = std::make_shared<std::string>();
  auto* cmd = alloc.add_subcommand(
      "stop",
      "Stop an alloc: its command is terminated (SIGTERM, then SIGKILL) and its claims "
      "released (waits for the releases); with --group, every alloc of the group");
  auto* id_opt = cmd->add_option("id", *id, "The alloc's id");
  auto* group_opt = cmd->add_option("--group", *group,
                                    "Stop every alloc of this group that is not terminal, one "
                                    "after the other");
  id_opt->excludes(group_opt);
  cmd->callback([&ctx, id, group] {
    if (!group->empty()) {
      ctx.local = [&ctx, group] { return stop_group(ctx, *group); };
      return;
    }
    ctx.build = [id]() -> plan {
      if (id->empty())
        return failure{errc::invalid, "alloc stop needs an alloc id (or --group NAME)"};
      return shows(alloc_stop_request(*id), first_alloc_json, message_text,
                   "Stopping alloc '" + *id + "' and releasing its claims...");
    };
  });
}

void add_alloc_status(CLI::App& alloc, context& ctx) {
  auto id = std::make_shared<std::string>();
  auto list = std::make_shared<list_options>();
  auto* cmd = alloc.add_subcommand(
      "status", "Show one alloc (state, message, volumes and their claims), or list the allocs");
  cmd->add_option("id", *id, "The alloc's id (omit to list all)");
  add_list_options(cmd, *list, listing::allocs);
  sends(cmd, ctx, [&ctx, id, list] {
    v1::Request req;
    req.set_stale(list->stale);
    if (!id->empty()) {
      req.set_alloc_status(*id);
      return shows(
          req, [id](const v1::Response& r) { return alloc_with_claims_json(r, *id); },
          at_now(render_alloc));
    }
    req.mutable_alloc_list()->set_namespace_(list_namespace(ctx.g));
    apply_list(*list, listing::allocs, req.mutable_alloc_list());
    return shows(req,
                 paged_json(*list, "allocs",
                            [](const v1::Response& r) { return array_of(r.allocs(), alloc_json); }),
                 paged_text(*list, at_now(render_alloc_list)));
  });
}

void add_alloc_commands(CLI::App& app, context& ctx) {
  auto& alloc = group(app, "alloc", "Run and stop allocs: workloads that claim volumes");
  add_alloc_run(alloc, ctx);
  add_alloc_stop(alloc, ctx);
  add_alloc_status(alloc, ctx);
}

// --- plugin ------------------------------------------------------------------

void add_plugin_status(CLI::App& plugin, context& ctx) {
  auto id = std::make_shared<std::string>();
  auto list = std::make_shared<list_options>();
  auto* cmd = plugin.add_subcommand("status", "Show one plugin, or list the plugins");
  cmd->add_option("id", *id, "The plugin's id (omit to list all)");
  add_list_options(cmd, *list, listing::plugins);
  sends(cmd, ctx, [id, list] {
    v1::Request req;
    req.set_stale(list->stale);
    if (!id->empty()) {
      req.set_plugin_status(*id);
      return shows(
          req, [](const v1::Response& r) { return array_of(r.plugins(), plugin_json).at(0); },
          [](const v1::Response& r) { return render_plugin(r.plugins(0), now_ms()); });
    }
    apply_list(*list, listing::plugins, req.mutable_plugin_list());
    return shows(
        req,
        paged_json(*list, "plugins",
                   [](const v1::Response& r) { return array_of(r.plugins(), plugin_json); }),
        paged_text(*list, render_plugin_list));
  });
}

void add_plugin_fingerprint(CLI::App& plugin, context& ctx) {
  struct options {
    std::string id, node, type = "monolith", description, provider, provider_version, csi_node_id;
    bool unhealthy = false, remove = false, controller_publish = false, stage_unstage = false;
    int64_t max_volumes = 0;
  };
  auto o = std::make_shared<options>();
  auto* cmd = plugin.add_subcommand(
      "fingerprint",
      "Report a plugin instance on a node by hand (what a client's CSI fingerprint does): "
      "adds or updates it, or removes it with --remove");
  cmd->add_option("id", o->id, "The plugin's id")->required();
  cmd->add_option("--node", o->node, "The node that runs the instance")->required();
  cmd->add_option("--type", o->type, "node, controller or monolith")
      ->capture_default_str()
      ->check(CLI::IsMember({"node", "controller", "monolith"}));
  cmd->add_flag("--unhealthy", o->unhealthy, "Report the instance unhealthy");
  cmd->add_option("--health-description", o->description, "Why it is (un)healthy");
  cmd->add_flag("--remove", o->remove, "Remove the instance instead");
  cmd->add_option("--provider", o->provider, "The plugin's name (GetPluginInfo)");
  cmd->add_option("--provider-version", o->provider_version, "The plugin's version");
  cmd->add_option("--csi-node-id", o->csi_node_id, "The node id the plugin reports (NodeGetInfo)");
  cmd->add_flag("--controller-publish", o->controller_publish,
                "The controller advertises PUBLISH_UNPUBLISH_VOLUME");
  cmd->add_flag("--stage-unstage", o->stage_unstage, "The node advertises STAGE_UNSTAGE_VOLUME");
  cmd->add_option("--max-volumes", o->max_volumes, "Max volumes per node (0 = unlimited)");
  sends(cmd, ctx, [o] {
    v1::Request req;
    auto* f = req.mutable_plugin_fingerprint();
    f->set_plugin_id(o->id);
    f->set_node_id(o->node);
    f->set_type(*parse_plugin_type(o->type));  // --type is checked to be one
    f->set_remove(o->remove);
    auto* i = f->mutable_instance();
    i->set_healthy(!o->unhealthy);
    i->set_health_description(o->description);
    i->set_provider(o->provider);
    i->set_provider_version(o->provider_version);
    i->set_csi_node_id(o->csi_node_id.empty() ? o->node : o->csi_node_id);
    i->set_publish_unpublish(o->controller_publish);
    i->set_stage_unstage(o->stage_unstage);
    i->set_max_volumes(o->max_volumes);
    return shows(
        req, [](const v1::Response& r) { return plugin_json(r.plugins(0)); },
        [](const v1::Response& r) {
          return r.message() + "\n\n" + render_plugin(r.plugins(0), now_ms());
        });
  });
}

void add_plugin_commands(CLI::App& app, context& ctx) {
  auto& plugin = group(app, "plugin", "Inspect CSI plugins and their instances");
  add_plugin_status(plugin, ctx);
  add_plugin_fingerprint(plugin, ctx);
}

// --- operator ----------------------------------------------------------------

void add_raft_list_peers(CLI::App& raft, context& ctx) {
  auto* cmd = raft.add_subcommand(
      "list-peers", "Every server: name, address, role, term, last and applied index");
  sends(cmd, ctx, [] {
    v1::Request req;
    req.set_raft_list_peers(true);
    return shows(
        req, [](const v1::Response& r) { return array_of(r.raft(), raft_json); },
        render_raft_peers);
  });
}

void add_raft_remove_peer(CLI::App& raft, context& ctx) {
  auto name = std::make_shared<std::string>();
  auto* cmd = raft.add_subcommand(
      "remove-peer", "Remove a server from the cluster (a committed configuration change)");
  cmd->add_option("name", *name, "The server's name")->required();
  sends(cmd, ctx, [name] {
    v1::Request req;
    req.set_raft_remove_peer(*name);
    return shows(req, message_json, message_text);
  });
}

void add_raft_transfer_leadership(CLI::App& raft, context& ctx) {
  auto name = std::make_shared<std::string>();
  auto* cmd = raft.add_subcommand("transfer-leadership",
                                  "Hand the leadership to a server (default: the most up to date)");
  cmd->add_option("name", *name, "The server to lead next");
  sends(cmd, ctx, [name] {
    v1::Request req;
    req.set_raft_transfer_leadership(*name);
    return shows(req, message_json, message_text);
  });
}

// Written next to the target (mode 0600: the state holds the volumes'
// secrets), fsynced, renamed, and the directory fsynced: never a half file,
// and the snapshot survives a power loss once the command said it is saved.
std::optional<failure> write_snapshot(const std::string& file, const std::string& bytes) {
  auto tmp = file + ".partial";
  auto f = write_and_fsync(tmp, bytes);
  if (!f) f = rename_durably(tmp, file);
  if (f) f->code = errc::invalid;  // the operator's file: exit code 2, as for bad input
  return f;
}

void add_snapshot_save(CLI::App& snapshot, context& ctx) {
  auto file = std::make_shared<std::string>();
  auto* cmd = snapshot.add_subcommand(
      "save",
      "Write a consistent copy of the cluster's state (volumes, claims, plugins, "
      "nodes) to FILE");
  cmd->add_option("file", *file, "Where to write the snapshot")->required();
  sends(cmd, ctx, [file] {
    v1::Request req;
    req.set_snapshot_save(true);
    auto saved = [file](const v1::Response& r) {
      return json{{"file", *file}, {"index", r.snapshot_index()}, {"bytes", r.snapshot().size()}};
    };
    auto said = [file](const v1::Response& r) {
      return "Saved the state at index " + std::to_string(r.snapshot_index()) + " to " + *file +
             " (" + std::to_string(r.snapshot().size()) + " bytes)\n";
    };
    auto keep = [file](const v1::Response& r) { return write_snapshot(*file, r.snapshot()); };
    auto c = shows(req, saved, said, "Taking a consistent copy of the cluster's state...");
    c.keep = keep;
    return c;
  });
}

void add_snapshot_restore(CLI::App& snapshot, context& ctx) {
  auto file = std::make_shared<std::string>();
  auto* cmd = snapshot.add_subcommand(
      "restore",
      "Replace the cluster's state with a snapshot from `operator snapshot save` "
      "(every server applies it as one committed change)");
  cmd->add_option("file", *file, "The snapshot file")->required();
  sends(cmd, ctx, [file]() -> plan {
    auto bytes = read_input(*file);
    if (auto* f = std::get_if<failure>(&bytes)) return *f;
    v1::Request req;
    req.set_snapshot_restore(std::get<std::string>(bytes));
    auto restored = [](const v1::Response& r) {
      return json{{"index", r.snapshot_index()}, {"message", r.message()}};
    };
    return shows(req, restored, message_text,
                 "Restoring " + *file + " on every server (one committed change)...");
  });
}

void add_operator_commands(CLI::App& app, context& ctx) {
  auto& op = group(app, "operator", "Operate the control plane");
  auto& raft = group(op, "raft", "The replicated log (Raft) across the servers");
  add_raft_list_peers(raft, ctx);
  add_raft_remove_peer(raft, ctx);
  add_raft_transfer_leadership(raft, ctx);
  auto& snapshot = group(op, "snapshot", "Back up and restore the cluster's state");
  add_snapshot_save(snapshot, ctx);
  add_snapshot_restore(snapshot, ctx);
}

// --- node --------------------------------------------------------------------

void add_node_status(CLI::App& node, context& ctx) {
  auto id = std::make_shared<std::string>();
  auto list = std::make_shared<list_options>();
  auto* cmd = node.add_subcommand("status", "Show one node and its volumes, or list the nodes");
  cmd->add_option("id", *id, "The node's id (omit to list all)");
  add_list_options(cmd, *list, listing::nodes);
  sends(cmd, ctx, [id, list] {
    v1::Request req;
    req.set_stale(list->stale);
    if (!id->empty()) {
      req.set_node_status(*id);
      return shows(req, node_with_volumes_json, at_now(render_node));
    }
    apply_list(*list, listing::nodes, req.mutable_node_list());
    return shows(req,
                 paged_json(*list, "nodes",
                            [](const v1::Response& r) { return array_of(r.nodes(), node_json); }),
                 paged_text(*list, at_now(render_node_list)));
  });
}

void add_node_drain(CLI::App& node, context& ctx) {
  struct options {
    std::string id, deadline = "1h";
    bool no_deadline = false, force = false, keep_plugins = false, disable = false,
         keep_ineligible = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = node.add_subcommand(
      "drain",
      "Drain a node: it takes no new allocs or claims, its allocs are stopped and their claims "
      "released through the node's own plugins (its plugin instances are withdrawn last); after "
      "the deadline the rest are stopped anyway and released without the node. The node stays "
      "ineligible until `berth node eligibility NODE --enable`. Follow with `berth node status "
      "NODE`");
  cmd->add_option("id", o->id, "The node's id")->required();
  auto* deadline = cmd->add_option(
      "--deadline", o->deadline,
      "How long the allocs may take to stop before the rest is released without the node "
      "(e.g. 30m, 1h, 90s; default 1h)");
  auto* none = cmd->add_flag("--no-deadline", o->no_deadline, "Wait for the allocs however long");
  auto* force = cmd->add_flag(
      "--force", o->force,
      "Deadline now: stop every alloc at once and release its claims without the node");
  auto* keep = cmd->add_flag(
      "--keep-plugins", o->keep_plugins,
      "Keep the node's plugin instances registered when the drain is done");
  auto* disable = cmd->add_flag("--disable", o->disable,
                                "Cancel the drain in progress (the node is eligible again)");
  auto* keep_ineligible = cmd->add_flag("--keep-ineligible", o->keep_ineligible,
                                        "With --disable: the node stays ineligible");
  none->excludes(deadline);
  force->excludes(deadline)->excludes(none);
  disable->excludes(deadline)->excludes(none)->excludes(force)->excludes(keep);
  keep_ineligible->needs(disable);
  sends(cmd, ctx, [o]() -> plan {
    v1::Request req;
    auto* d = req.mutable_node_drain();
    d->set_node_id(o->id);
    if (o->disable) {
      d->set_disable(true);
      d->set_keep_ineligible(o->keep_ineligible);
      return shows(req, node_message_json, message_text,
                   "Cancelling the drain of node '" + o->id + "'...");
    }
    d->set_keep_plugins(o->keep_plugins);
    if (o->no_deadline) {
      d->set_no_deadline(true);
    } else if (!o->force) {
      auto ms = parse_duration_ms(o->deadline);
      if (!ms || *ms == 0)
        return failure{errc::invalid, "--deadline " + o->deadline +
                                          " is not a duration such as 30m, 1h or 90s (for no "
                                          "deadline: --no-deadline; for now: --force)"};
      d->set_deadline_ms(*ms);
    }
    return shows(req, node_message_json, message_text,
                 "Starting the drain of node '" + o->id + "'...");
  });
}

void add_node_eligibility(CLI::App& node, context& ctx) {
  struct options {
    std::string id;
    bool enable = false, disable = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = node.add_subcommand(
      "eligibility",
      "Let a node take new allocs and claims (--enable), or stop it from taking them while what "
      "runs there keeps running (--disable)");
  cmd->add_option("id", o->id, "The node's id")->required();
  auto* enable = cmd->add_flag("--enable", o->enable, "The node takes new allocs and claims");
  auto* disable =
      cmd->add_flag("--disable", o->disable, "The node takes no new allocs or claims");
  enable->excludes(disable);
  sends(cmd, ctx, [o]() -> plan {
    if (!o->enable && !o->disable)
      return failure{errc::invalid, "say --enable or --disable"};
    v1::Request req;
    req.mutable_node_eligibility()->set_node_id(o->id);
    req.mutable_node_eligibility()->set_eligible(o->enable);
    return shows(req, node_message_json, message_text);
  });
}

void add_node_commands(CLI::App& app, context& ctx) {
  auto& node = group(app, "node", "Inspect, drain and enable the nodes (hosts) of the cluster");
  add_node_status(node, ctx);
  add_node_drain(node, ctx);
  add_node_eligibility(node, ctx);
}

// --- system ------------------------------------------------------------------

void add_system_commands(CLI::App& app, context& ctx) {
  auto& system = group(app, "system", "Housekeeping of the cluster's state");
  auto* gc = system.add_subcommand(
      "gc",
      "Collect now every terminal alloc (complete, failed, lost) that holds no claim and every "
      "down node with nothing left on it, whatever their age (berthd collects them on its own "
      "after --alloc-gc-threshold and --node-gc-threshold). Safe to repeat");
  sends(gc, ctx, []() -> plan {
    v1::Request req;
    req.set_system_gc(true);
    return shows(req, message_json, message_text);
  });
}

// --- monitor -----------------------------------------------------------------

struct monitor_options {
  std::string level = "info";
  std::string node;
  std::string server;
  int lines = 20;
};

// Streams a berthd's log lines until interrupted (Ctrl-C): asks for the
// lines after the last one it printed, and berthd answers as soon as there
// is one (or after wait_ms with none: then it asks again).
int run_monitor(const globals& g, const monitor_options& o) {
  constexpr uint32_t wait_ms = 10000;
  client c(o.server.empty() ? g.address : o.server, std::max(g.timeout, 30));
  uint64_t after = 0;
  bool first = true;
  for (;;) {
    v1::Request req;
    auto* m = req.mutable_monitor();
    m->set_after(after);
    m->set_level(o.level);
    m->set_node_id(o.node);
    m->set_wait_ms(first ? 0 : wait_ms);
    m->set_tail(first ? static_cast<uint32_t>(o.lines) : std::numeric_limits<uint32_t>::max());
    auto result = c.call(req);
    if (auto* f = std::get_if<failure>(&result)) return fail(g, *f);
    const auto& resp = std::get<v1::Response>(result);
    if (resp.error().code() != v1::OK)
      return fail(g, failure{static_cast<errc>(resp.error().code()), resp.error().message()});
    const auto& r = resp.monitor();
    if (r.dropped() > 0)
      std::cerr << "(" << r.dropped() << " lines were written faster than read and are not "
                << "shown)\n";
    for (const auto& line : r.lines()) std::cout << line << "\n";
    std::cout.flush();
    // A restarted berthd numbers its lines from 1 again.
    after = r.last() < after ? 0 : r.last();
    first = false;
  }
}

void add_monitor(CLI::App& app, context& ctx) {
  auto o = std::make_shared<monitor_options>();
  auto* cmd = app.add_subcommand(
      "monitor",
      "Stream a berthd's log lines (the recent ones first) until interrupted (Ctrl-C)");
  cmd->add_option("--log-level", o->level,
                  "Lines at this level and above: trace, debug, info, warn, error (berthd "
                  "produces lower levels than its own --log-level while a monitor asks)")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  auto* node = cmd->add_option("--node", o->node,
                               "The lines of the berthd running this node's client (asked "
                               "through the leader)");
  cmd->add_option("--server", o->server,
                  "The lines of the berthd at this address HOST:PORT (default: --address)")
      ->excludes(node);
  cmd->add_option("--lines", o->lines, "How many recent lines to show first")
      ->capture_default_str()
      ->check(CLI::Range(0, 2048));
  cmd->callback([&ctx, o] {
    ctx.local = [&ctx, o] {
      // Ctrl-C ends the monitor by ending the process: not the shell's.
      if (ctx.g.shared)
        return fail(ctx.g, failure{errc::invalid,
                                   "berth monitor runs until Ctrl-C, which would end this shell "
                                   "too; run it from another terminal"});
      return run_monitor(ctx.g, *o);
    };
  });
}

// --- event ---------------------------------------------------------------------

void add_event_stream(CLI::App& event, context& ctx) {
  struct options {
    std::vector<std::string> topics;
    uint64_t index = 0;
    uint64_t until_index = 0;
  };
  auto o = std::make_shared<options>();
  auto* cmd = event.add_subcommand(
      "stream",
      "Print every committed change as one JSON line (index, seq, topic, type, namespace, key, "
      "object), from --index or from now, until Ctrl-C. --address may list several servers "
      "(comma-separated): when one stops answering, the stream goes on at the next");
  cmd->add_option("--topic", o->topics, "Only these topics: volume, claim, alloc, node, plugin")
      ->delimiter(',');
  cmd->add_option("--index", o->index,
                  "From this log index (resume with the last index seen + 1); default: from now");
  cmd->add_option("--until-index", o->until_index,
                  "Stop after the events of this index (default: never)");
  cmd->callback([&ctx, o] {
    ctx.local = [&ctx, o] {
      event_stream_options so;
      size_t start = 0;
      const auto& a = ctx.g.address;
      while (start <= a.size()) {
        auto comma = a.find(',', start);
        auto part = a.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!part.empty()) so.addresses.push_back(part);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      for (const auto& t : o->topics) {
        auto topic = parse_event_topic(t);
        if (!topic || *topic == v1::EVENT_STATE)
          return fail(ctx.g, failure{errc::invalid, "--topic '" + t +
                                                        "' is not a topic; the topics are volume, "
                                                        "claim, alloc, node, plugin"});
        so.topics.push_back(*topic);
      }
      // Every namespace unless --namespace is given.
      if (ctx.root.get_option("--namespace")->count() > 0) so.ns = ctx.g.ns;
      so.index = o->index;
      so.until_index = o->until_index;
      so.timeout = ctx.g.timeout;
      return stream_events(so, ctx.g.json, std::cout, std::cerr);
    };
  });
}

void add_event_commands(CLI::App& app, context& ctx) {
  auto& event = group(app, "event", "Follow the cluster's committed changes");
  add_event_stream(event, ctx);
}

// --- tls ----------------------------------------------------------------------

void add_tls_commands(CLI::App& app, context& ctx) {
  auto& tls = group(app, "tls",
                    "Create a CA and certificates for a TLS cluster (written here, in PEM; keys "
                    "mode 0600; never overwrites a file)");
  auto& ca = group(tls, "ca", "The cluster's certificate authority");
  {
    auto o = std::make_shared<tls_ca_options>();
    auto* cmd = ca.add_subcommand(
        "create",
        "Create a CA: DIR/NAME.pem and DIR/NAME-key.pem (EC P-256). Keep the key off the "
        "servers; every berthd and shell gets NAME.pem as --tls-ca");
    cmd->add_option("--dir", o->dir, "Directory to write to")->capture_default_str();
    cmd->add_option("--name", o->name, "The files' name and the CA's common name")
        ->capture_default_str();
    cmd->add_option("--days", o->days, "Validity in days")->capture_default_str();
    cmd->callback([&ctx, o] {
      ctx.offline = true;
      ctx.local = [&ctx, o] { return run_tls_ca_create(*o, ctx.g.json); };
    });
  }
  auto& cert = group(tls, "cert", "Certificates signed by the cluster's CA");
  {
    auto o = std::make_shared<tls_cert_options>();
    auto* cmd = cert.add_subcommand(
        "create",
        "Create a certificate and its key: DIR/NAME-ROLE-berth.pem and -key.pem, for "
        "ROLE.NAME.berth (also localhost and 127.0.0.1). --server for berthd --server and "
        "--dev (may serve and connect), --client for berthd --client, --cli for the shell "
        "(these two may only connect)");
    auto* role = cmd->add_option_group("role", "What the certificate is for");
    role->add_flag("--server", o->server, "A server: server.NAME.berth");
    role->add_flag("--client", o->client, "A client agent: client.NAME.berth");
    role->add_flag("--cli", o->cli, "The berth shell: cli.NAME.berth");
    role->require_option(1);
    cmd->add_option("--name", o->name, "The cluster's name (Nomad's region)")
        ->capture_default_str();
    cmd->add_option("--dir", o->dir, "Directory to write to")->capture_default_str();
    cmd->add_option("--ca-cert", o->ca_cert, "The CA's certificate")->capture_default_str();
    cmd->add_option("--ca-key", o->ca_key, "The CA's key")->capture_default_str();
    cmd->add_option("--days", o->days, "Validity in days")->capture_default_str();
    cmd->callback([&ctx, o] {
      ctx.offline = true;
      ctx.local = [&ctx, o] { return run_tls_cert_create(*o, ctx.g.json); };
    });
  }
}

// --- the command line --------------------------------------------------------

// The global options take the last value given: in the shell a line's own
// --json or --namespace overrides the ones berth was started with.
void add_globals(CLI::App& app, globals& g) {
  if (const char* env = std::getenv("BERTH_ADDRESS"); env && *env)
    g.address = env;
  else
    g.address = "127.0.0.1:4747";
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
  if (const char* env = std::getenv("BERTH_TOKEN"); env && *env) g.token = env;
  app.add_option("--token", g.token,
                 "ACL token's Secret ID to send (env BERTH_TOKEN), when the servers run with --acl")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (auto [flag, env, file, help] :
       {std::tuple{"--tls-ca", "BERTH_CACERT", &g.tls.ca,
                   "TLS: the cluster's CA certificate (env BERTH_CACERT)"},
        std::tuple{"--tls-cert", "BERTH_CLIENT_CERT", &g.tls.cert,
                   "TLS: this shell's certificate, from `berth tls cert create --cli` (env "
                   "BERTH_CLIENT_CERT)"},
        std::tuple{"--tls-key", "BERTH_CLIENT_KEY", &g.tls.key,
                   "TLS: the key of --tls-cert (env BERTH_CLIENT_KEY)"}}) {
    if (const char* v = std::getenv(env); v && *v) *file = v;
    app.add_option(flag, *file, help)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
}

// The shell's TLS files, from the options or the environment: none, or all
// three and readable.  Set for every client of this process.
std::optional<failure> setup_tls(const globals& g) {
  if (auto f = tls::check_complete(
          g.tls, {"--tls-ca (or BERTH_CACERT)", "--tls-cert (or BERTH_CLIENT_CERT)",
                  "--tls-key (or BERTH_CLIENT_KEY)"}))
    return f;
  if (!g.tls.enabled()) return std::nullopt;
  if (auto f = tls::check_files(g.tls)) return f;
  use_tls(g.tls);
  return std::nullopt;
}

// The CLI11 parser and the context its callbacks fill.  Built once per
// command line, and by command_tree() to describe the commands.
struct command_line {
  CLI::App app{"berth: the remote shell of a berth cluster (CSI volumes, plugins, claims).",
               "berth"};
  context ctx{app, {}, {}, {}, nullptr};

  // The callbacks keep references to the context.
  command_line(const command_line&) = delete;
  command_line& operator=(const command_line&) = delete;

  explicit command_line(client* shared) {
    ctx.g.shared = shared;
    // Subcommands copy these settings from their parent when added.
    app.fallthrough();
    app.require_subcommand(0, 1);
    add_globals(app, ctx.g);
    app.footer(
        "Exit codes: 0 ok, 1 internal error, 2 usage or invalid input, 3 not found,\n"
        "4 refused by the rules, 5 berthd unreachable or unavailable, 6 refused by ACLs\n"
        "(the --token lacks a capability), 7 the answer was lost and the change may have\n"
        "been made (the error says how to check).\n"
        "TLS: a cluster started with --tls-* needs --tls-ca, --tls-cert and --tls-key here\n"
        "too (or BERTH_CACERT, BERTH_CLIENT_CERT, BERTH_CLIENT_KEY); `berth tls` makes them.");
    add_shell(app, ctx);
    add_agent_status(app, ctx);
    add_volume_commands(app, ctx);
    add_alloc_commands(app, ctx);
    add_plugin_commands(app, ctx);
    add_operator_commands(app, ctx);
    add_node_commands(app, ctx);
    add_system_commands(app, ctx);
    add_monitor(app, ctx);
    add_event_commands(app, ctx);
    add_tls_commands(app, ctx);
    add_acl_commands(app, [this](CLI::App* cmd, std::function<plan()> build) {
      sends(cmd, ctx, std::move(build));
    });
  }
};

// Opens the shell on this command line's server; the global options given
// to berth apply to every line.
int open_shell(const context& ctx) {
  const auto& g = ctx.g;
  shell_options opts{{"--address", g.address}, g.address, g.timeout};
  if (g.json) opts.global_args.push_back("--json");
  for (const char* name : {"--namespace", "--timeout"})
    if (const auto* o = ctx.root.get_option(name); o->count() > 0)
      opts.global_args.insert(opts.global_args.end(), {name, o->as<std::string>()});
  return run_shell(opts);
}

// Errors in the command line print as CLI11 prints its own: plain text,
// whatever --json says.
int usage_error(std::ostream& err, const std::string& message) {
  err << "Error: " << message << "\n";
  return exit_usage;
}

// Parses a command line into `cl`.  The words after "--" are an alloc's
// command, taken as they are (CLI11 would read its options as berth's).
// CLI11 reports a usage error or a call for help by throwing; that stops
// here and becomes the exit code, after CLI11 printed it on `out`/`err`.
// Returns nothing when the line chose a command (or none).
std::optional<int> parse(command_line& cl, const std::vector<std::string>& all_args,
                         std::ostream& out, std::ostream& err) {
  auto dashes = std::find(all_args.begin(), all_args.end(), "--");
  std::vector<std::string> reversed(std::make_reverse_iterator(dashes), all_args.rend());
  try {
    cl.app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return cl.app.exit(e, out, err) == 0 ? exit_ok : exit_usage;
  }
  if (dashes == all_args.end()) return std::nullopt;
  if (!cl.ctx.command) return usage_error(err, "only `berth alloc run` takes a command after --");
  cl.ctx.command->insert(cl.ctx.command->end(), std::next(dashes), all_args.end());
  return std::nullopt;
}

// The commands as a tree, for the shell's completion and help.
command_info tree_of(const CLI::App& app) {
  command_info c{app.get_name(), app.get_description(), {}, {}, {}};
  for (const auto* o : app.get_options()) {
    if (o->get_positional()) {
      c.positionals.push_back(o->get_name());
      continue;
    }
    for (const auto& name : o->get_lnames())
      c.options.push_back({"--" + name, o->get_type_size() != 0});
    for (const auto& name : o->get_snames())
      c.options.push_back({"-" + name, o->get_type_size() != 0});
  }
  for (const auto* sub : app.get_subcommands({})) c.subcommands.push_back(tree_of(*sub));
  return c;
}

}  // namespace

int run_command(const std::vector<std::string>& args, client* shared) {
  command_line cl(shared);
  if (auto done = parse(cl, args, std::cout, std::cerr)) return *done;
  // The shell's lines use the TLS of the shell (set when it started).
  if (!shared && !cl.ctx.offline)
    if (auto f = setup_tls(cl.ctx.g)) return fail(cl.ctx.g, *f);
  if (!cl.ctx.g.token.empty()) client::set_token(cl.ctx.g.token);
  if (cl.ctx.build) return send(cl.ctx.g, cl.ctx.build());
  if (cl.ctx.local) return cl.ctx.local();
  // No command: `berth` on a terminal opens the shell.
  if (!shared && isatty(STDIN_FILENO)) return open_shell(cl.ctx);
  return usage_error(std::cerr,
                     "a command is required (`berth --help` lists them; `berth shell` "
                     "opens the interactive shell)");
}

int parse_command(const std::vector<std::string>& args) {
  command_line cl(nullptr);
  return parse(cl, args, std::cout, std::cerr).value_or(exit_ok);
}

std::variant<v1::Request, failure> request_of(const std::vector<std::string>& args) {
  command_line cl(nullptr);
  std::ostringstream out, err;
  if (auto done = parse(cl, args, out, err))
    return failure{errc::invalid, *done == exit_ok ? out.str() : err.str()};
  if (!cl.ctx.build) return failure{errc::invalid, "no command that sends a request"};
  auto p = cl.ctx.build();
  if (auto* f = std::get_if<failure>(&p)) return *f;
  return std::get<call>(p).request;
}

command_info command_tree() {
  command_line cl(nullptr);
  return tree_of(cl.app);
}

}  // namespace berth
