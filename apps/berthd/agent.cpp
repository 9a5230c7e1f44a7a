#include "apps/berthd/agent.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "actors/event_journal.hpp"
#include "actors/log_monitor.hpp"
#include "actors/metrics.hpp"
#include "actors/node.hpp"
#include "actors/raft_log.hpp"
#include "actors/server.hpp"
#include "actors/state_machine.hpp"
#include "actors/vital.hpp"
#include "apps/berthd/dev_plugin.hpp"
#include "apps/berthd/http_api.hpp"
#include "apps/berthd/metrics_server.hpp"
#include "log/log.hpp"
#include "messages/codec.hpp"
#include "persistence/client_store.hpp"
#include "persistence/durable_file.hpp"
#include "persistence/file_modes.hpp"
#include "persistence/integrity.hpp"
#include "tls/caf_tls.hpp"

namespace berth {

namespace {

namespace fs = std::filesystem;

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "dev";
  std::string name(buf);
  return name.substr(0, name.find('.'));
}

// This client's node secret (control/acl: the servers bind its node id to
// it): made once from /dev/urandom into DATA/node-secret (0600, fsynced
// with the directory before it is used), read at every later start.
std::string node_secret(const std::string& data_dir) {
  auto path = (fs::path(data_dir) / "node-secret").string();
  std::ifstream in(path);
  std::string secret;
  if (in && std::getline(in, secret) && secret.size() >= 32) return secret;
  std::ifstream random("/dev/urandom", std::ios::binary);
  unsigned char bytes[24];
  if (!random.read(reinterpret_cast<char*>(bytes), sizeof bytes))
    throw std::runtime_error("cannot read /dev/urandom to make this client's node secret");
  static const char* hex = "0123456789abcdef";
  for (unsigned char b : bytes) {
    secret += hex[b >> 4];
    secret += hex[b & 15];
  }
  // Created 0600 before the secret is written into it.
  int fd = ::open((path + ".tmp").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ::fchmod(fd, 0600) != 0)
    throw std::runtime_error("cannot create " + path + ".tmp: " + std::strerror(errno));
  ::close(fd);
  if (auto f = write_and_fsync(path + ".tmp", secret + "\n"))
    throw std::runtime_error(f->message);
  if (auto f = rename_durably(path + ".tmp", path, "node_secret")) throw std::runtime_error(f->message);
  return secret;
}

// The node actor's configuration from the options; --dev without --plugin
// starts berth-hostpath and uses it.
node_config client_config(const agent_options& opts, const std::string& name) {
  node_config cfg;
  cfg.node_id = name;
  cfg.node_secret = node_secret(opts.data_dir);
  cfg.csi_root = opts.csi_root.empty() ? (fs::path(opts.data_dir) / "csi").string() : opts.csi_root;
  cfg.forget_leader_term = opts.forget_leader_term;
  cfg.fingerprint_interval =
      std::chrono::milliseconds(static_cast<int64_t>(opts.fingerprint_interval * 1000));
  cfg.csi_timeout = std::chrono::milliseconds(static_cast<int64_t>(opts.csi_timeout * 1000));
  cfg.kill_timeout = std::chrono::milliseconds(static_cast<int64_t>(opts.kill_timeout * 1000));
  // < 0: never; else at least 100 ms (0 would measure without a pause).
  cfg.volume_stats_interval = std::chrono::milliseconds(
      opts.volume_stats_ms < 0 ? -1 : std::max<int64_t>(opts.volume_stats_ms, 100));
  cfg.servers = opts.servers;
  cfg.alloc_dir = (fs::path(opts.data_dir) / "allocs").string();
  cfg.lease_file = (fs::path(opts.data_dir) / "lease").string();
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

struct stores {
  std::shared_ptr<log_store> log;
  std::shared_ptr<state_store> state;
  uint64_t last_index = 0;
  uint64_t applied = 0;
  size_t volumes = 0;
  size_t plugins = 0;
};

// Opens the durable log and the state tables, checks them and the snapshot
// file (persistence/integrity.hpp, check_data_dir), and brings the tables up
// to the log's commit index (they may lag after a crash).
stores open_stores(const std::string& data_dir) {
  // A damaged file stops berthd here: the failure names it and the fix.
  auto stop = [](const failure& f) {
    if (is_damage(f)) throw damaged_data(f.message);
    throw std::runtime_error(f.message +
                             " (if the file is damaged, move it away and restore a snapshot or "
                             "rejoin the cluster)");
  };
  auto need = [&](auto e) {
    if (!e) stop(e.error());
    return std::move(*e);
  };
  auto check = [&](const std::optional<failure>& f) {
    if (f) stop(*f);
  };
  stores s;
  s.log = need(log_store::open((fs::path(data_dir) / "log.db").string()));
  s.state = need(state_store::open((fs::path(data_dir) / "state.db").string()));
  check(check_data_dir(*s.log, need(s.state->applied_index())));
  if (auto snap = need(snapshot_to_install(*s.log, need(s.state->applied_index()))))
    check(s.state->install_snapshot_file(*snap));
  auto missing = need(committed_after(*s.log, need(s.state->applied_index())));
  if (!missing.empty()) check(s.state->apply(missing));
  // Counted, not loaded: the state machine loads the state once, when it
  // starts (a load here cost 1,000,000 volumes parsed and freed again).
  s.applied = need(s.state->applied_index());
  s.last_index = need(s.log->last_index());
  s.volumes = need(s.state->rows("volumes"));
  s.plugins = need(s.state->rows("plugins"));
  return s;
}

// Publishes a typed handle (so that peers can check its interface).
template <class Handle>
uint16_t publish(caf::actor_system& sys, const Handle& whom, const std::string& bind,
                 uint16_t port, const char* what, const char* flag) {
  auto res = tls::publish(sys, whom, port, bind);
  if (!res)
    throw std::runtime_error("cannot listen on " + bind + ":" + std::to_string(port) + " for the " +
                             what + ": " + sys.render(res.error()) +
                             " (is another berthd running? choose another " + flag + ")");
  return *res;
}

void wait_for_leader(caf::actor_system& sys, const server_actor& front) {
  caf::scoped_actor self{sys};
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    bool leads = false;
    v1::Request req;
    req.mutable_agent_status();
    self->request(front, std::chrono::seconds(5), api_atom::value, wrap(std::move(req)))
        .receive([&](pb<v1::Response>& r) { leads = r.msg.agent().leader(); },
                 [&](caf::error&) {});
    if (leads) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("the single-member cluster elected no leader within 10 s");
}

}  // namespace

agent_started start_agent(caf::actor_system& sys, const agent_options& opts) {
  // 0700: the databases in it hold the volumes' secrets.
  dir_outcome made = dir_outcome::kept;
  if (auto f = private_dir(opts.data_dir, &made))
    throw std::runtime_error("the data directory: " + f->message + " (pass a writable --data-dir)");
  if (made == dir_outcome::tightened)
    logging::info("berthd",
                  "data directory made private (mode 0700): it had group or other permissions",
                  {{"dir", opts.data_dir}});
  start_log_monitor(sys);
  agent_started started;
  started.name = opts.name.empty() ? host_name() : opts.name;
  if (!valid_id(started.name))
    throw std::runtime_error("name '" + started.name +
                             "' is not a valid id (1-128 of A-Z a-z 0-9 _ . -); pass --name");
  auto stats = make_metrics();
  api_actor api;
  if (opts.dev || opts.server) {
    auto s = open_stores(opts.data_dir);
    started.applied_index = s.applied;
    started.volumes = s.volumes;
    started.plugins = s.plugins;
    stats->restored(s.last_index, s.applied);
    auto journal = sys.spawn(event_journal_server, opts.event_journal_size, s.applied);
    auto machine = sys.spawn<caf::detached>(state_machine, s.state, stats, journal, opts.acl);
    leader_options lo;
    lo.node_down_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(opts.node_down_timeout * 1000));
    lo.node_lease = std::chrono::milliseconds(opts.node_lease_ms);
    lo.keep_down_writers = opts.keep_down_writers;
    lo.fence = fence_times{static_cast<int64_t>(opts.kill_timeout * 1000),
                           static_cast<int64_t>(opts.fence_unmount_time * 1000)};
    lo.gc = gc_thresholds{opts.alloc_gc_ms, opts.node_gc_ms};
    lo.volume_idle_ms = opts.volume_idle_ms;
    lo.volume_actors_max = opts.volume_actors_max;
    lo.plugin_window = opts.plugin_window;
    lo.volume_health_ms = opts.volume_health_ms;
    lo.acl = opts.acl;
    auto front = sys.spawn(server, machine, journal, stats, lo);
    started.port = publish(sys, front, opts.bind,
                           opts.port, "shell endpoint", "--port");
    raft_options ro;
    ro.self.set_name(started.name);
    ro.self.set_raft_id(raft_id_of(started.name));
    ro.self.set_api_address(opts.bind + ":" + std::to_string(started.port));
    ro.bootstrap_expect = opts.dev ? 1 : opts.bootstrap_expect;
    ro.join = opts.join;
    ro.tick = std::chrono::milliseconds(static_cast<int64_t>(opts.raft_tick * 1000));
    ro.snapshot_threshold = opts.snapshot_threshold;
    ro.snapshot_keep = std::min<uint64_t>(256, opts.snapshot_threshold / 2);
    ro.snapshot_piece = opts.snapshot_piece_size;
    if (opts.server) {
      // The raft address is part of the server's identity in the cluster
      // configuration, so it must be known before the log starts.
      if (opts.raft_port == 0)
        throw std::runtime_error("--raft-port must be a fixed port (the other servers store it)");
      ro.self.set_raft_address(opts.bind + ":" + std::to_string(opts.raft_port));
    }
    if (opts.server && opts.tls.enabled()) {
      // Each peer is asked to prove it holds a server certificate, and so
      // is this server (CAF checks only that a certificate is the CA's).
      auto id = tls::identity::load(opts.tls);
      if (auto* f = std::get_if<failure>(&id)) throw std::runtime_error(f->message);
      ro.identity = std::make_shared<const tls::identity>(std::get<tls::identity>(id));
    }
    auto log = sys.spawn<caf::detached>(raft_log, ro, s.log, s.applied, machine, front, stats);
    if (opts.server) {
      started.raft_port = publish(sys, log, opts.bind,
                                  opts.raft_port, "replicated log", "--raft-port");
    }
    watch_vital(journal, "event journal", exit_process);
    watch_vital(machine, "state machine", exit_process);
    watch_vital(front, "server", exit_process);
    watch_vital(log, "replicated log", exit_process);
    caf::anon_send(front, log, wrap(ro.self));
    api = front;
    // A single-member cluster elects itself within a second: wait for it,
    // so that "berthd: dev agent ..." means ready to serve.
    if (opts.dev) wait_for_leader(sys, front);
  }
  if (opts.dev || opts.client) {
    auto client = client_config(opts, started.name);
    for (const auto& p : client.plugins) started.plugin_ids.push_back(p.id);
    auto db = (fs::path(opts.data_dir) / "client.db").string();
    auto opened = client_store::open(db);
    std::optional<failure> f;
    if (!opened)
      f = opened.error();
    else if (auto m = (*opened)->mounts(); !m)
      f = m.error();
    else if (auto a = (*opened)->allocs(); !a)
      f = a.error();
    if (f) {
      throw std::runtime_error("cannot open the client database " + db + ": " + f->message +
                               " (it records this node's mounts; if it is damaged, unmount what "
                               "is under " +
                               client.csi_root + ", move the file away and restart)");
    }
    std::shared_ptr<client_store> cs = std::move(*opened);
    watch_vital(sys.spawn(node, std::move(client), api, stats, std::move(cs)), "node",
                exit_process);
  }
  started.metrics_port = serve_metrics(
      opts.metrics_bind, opts.metrics_port, stats->registry(),
      [&sys, api, name = started.name](const http_request& req) {
        return answer_http(sys, api, name, req);
      },
      !api ? stream_view{} : stream_view([&sys, api](const http_request& req, http_stream& out) {
        if (req.path == "/v1/agent/monitor")
          monitor_view(sys, api, req, out);
        else
          event_stream_view(sys, api, req, out);
      }),
      opts.tls.enabled()
          ? std::optional<https_options>(https_options{opts.tls, opts.tls_verify_http_client})
          : std::nullopt);
  return started;
}

}  // namespace berth
