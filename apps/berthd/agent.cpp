#include "apps/berthd/agent.hpp"

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/send.hpp>

#include "actors/api.hpp"
#include "actors/leader.hpp"
#include "actors/metrics.hpp"
#include "actors/log_writer.hpp"
#include "actors/node.hpp"
#include "actors/replicated_log.hpp"
#include "actors/state_machine.hpp"
#include "apps/berthd/dev_plugin.hpp"
#include "apps/berthd/metrics_server.hpp"

namespace berth {

namespace {

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "dev";
  std::string name(buf);
  return name.substr(0, name.find('.'));
}

// The node actor's configuration from the options; --dev without --plugin
// starts berth-hostpath and uses it.
node_config client_config(const agent_options& opts) {
  namespace fs = std::filesystem;
  node_config cfg;
  cfg.node_id = opts.node_name.empty() ? host_name() : opts.node_name;
  if (!valid_id(cfg.node_id))
    throw std::runtime_error("node name '" + cfg.node_id +
                             "' is not a valid id (1-128 of A-Z a-z 0-9 _ . -); pass --node-name");
  cfg.csi_root = opts.csi_root.empty() ? (fs::path(opts.data_dir) / "csi").string() : opts.csi_root;
  cfg.fingerprint_interval =
      std::chrono::milliseconds(static_cast<int64_t>(opts.fingerprint_interval * 1000));
  cfg.csi_timeout = std::chrono::milliseconds(static_cast<int64_t>(opts.csi_timeout * 1000));
  for (const auto& flag : opts.plugin_flags) {
    auto p = parse_plugin_flag(flag);
    if (auto* err = std::get_if<std::string>(&p)) throw std::runtime_error(*err);
    cfg.plugins.push_back(std::get<node_plugin>(p));
  }
  if (opts.dev && cfg.plugins.empty()) {
    auto socket = start_dev_plugin(opts.hostpath_bin, opts.data_dir, cfg.node_id);
    cfg.plugins.push_back({"hostpath", v1::PLUGIN_MONOLITH, "unix://" + socket});
  }
  return cfg;
}

}  // namespace

agent_started start_agent(caf::actor_system& sys, const agent_options& opts) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(opts.data_dir, ec);
  if (ec)
    throw std::runtime_error("cannot create the data directory " + opts.data_dir + ": " +
                             ec.message() + " (pass a writable --data-dir)");
  std::shared_ptr<log_store> log;
  std::shared_ptr<state_store> state;
  state_contents contents;
  try {
    log = std::make_shared<log_store>((fs::path(opts.data_dir) / "log.db").string());
    state = std::make_shared<state_store>((fs::path(opts.data_dir) / "state.db").string());
    // Recovery: the state tables may lag the durable log after a crash;
    // apply what is missing before anything is served.
    auto applied = state->applied_index();
    auto last = log->last_index();
    while (applied < last) {
      std::vector<std::pair<uint64_t, std::string>> batch;
      for (auto& r : log->read(applied + 1, last, 10000))
        batch.emplace_back(r.index, std::move(r.data));
      if (batch.empty())
        throw std::runtime_error(log->path() + " has no entries after " +
                                 std::to_string(applied) + " but its last index is " +
                                 std::to_string(last) +
                                 "; the log is damaged (restore a snapshot)");
      state->apply(batch);
      applied = batch.back().first;
    }
    contents = state->load();
    if (contents.applied_index < last)
      throw std::runtime_error(state->path() + " is behind the log after recovery");
  } catch (const sql::sqlite_error& e) {
    throw std::runtime_error(std::string(e.what()) +
                             " (if the file is damaged, move it away and restore a snapshot)");
  }
  agent_started started;
  started.applied_index = contents.applied_index;
  started.volumes = contents.volumes.size();
  started.plugins = contents.plugins.size();
  auto last_index = std::max<uint64_t>(log->last_index(), contents.applied_index);
  auto stats = make_metrics();
  stats->restored(last_index, contents.applied_index);
  auto writer = sys.spawn<caf::detached>(log_writer, log, stats);
  auto machine = sys.spawn<caf::detached>(state_machine, state, stats);
  auto rlog = sys.spawn(replicated_log, last_index, writer, machine);
  auto lead = sys.spawn(leader, rlog, std::move(contents), stats);
  auto endpoint = sys.spawn(api, lead, stats);
  auto port = sys.middleman().publish(endpoint, opts.port, opts.bind.c_str(), true);
  if (!port)
    throw std::runtime_error("cannot listen on " + opts.bind + ":" + std::to_string(opts.port) +
                             ": " + sys.render(port.error()) +
                             " (is another berthd running? choose another --port)");
  started.port = *port;
  auto client = client_config(opts);
  started.node_name = client.node_id;
  // Sent before start_agent returns (and so before the banner): a shell
  // that waited for the banner finds the leader knowing its identity.
  caf::anon_send(lead, status_atom::value,
                 agent_identity{client.node_id, opts.bind + ":" + std::to_string(*port)});
  for (const auto& p : client.plugins) started.plugin_ids.push_back(p.id);
  sys.spawn(node, std::move(client), lead);
  started.metrics_port = serve_metrics(opts.metrics_bind, opts.metrics_port, stats->registry());
  return started;
}

}  // namespace berth
