// berthd: the berth agent.  A server (control plane, 3 or 5 per cluster), a
// client (one per host with CSI plugins), or --dev: both in one process, a
// single-member cluster.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <tuple>

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>

#include "actors/actors.hpp"
#include "control/lease.hpp"
#include "csi/client.hpp"
#include "apps/berthd/agent.hpp"
#include "log/log.hpp"
#include "messages/codec.hpp"
#include "persistence/integrity.hpp"
#include "tls/caf_tls.hpp"
#include "tls/https.hpp"
#include "tls/pki.hpp"

namespace {

void split_commas(std::vector<std::string>& xs) {
  std::vector<std::string> out;
  for (const auto& x : xs) {
    size_t start = 0;
    while (start <= x.size()) {
      auto comma = x.find(',', start);
      auto part = x.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!part.empty()) out.push_back(part);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  xs = std::move(out);
}

}  // namespace

int main(int argc, char** argv) {
  berth::tls::keep_openssl_until_exit();
  berth::csi::skip_lock_order_checks();
  berth::agent_options opts;
  CLI::App app{
      "berthd: the berth agent. Manages CSI volumes, plugins and claims.\n"
      "  berthd --dev                       one process is the whole cluster (try this first)\n"
      "  berthd --server --name s1 ...      a server of the control plane (3 or 5 per cluster)\n"
      "  berthd --client --name n1 ...      a host with CSI plugins\n"
      "Talk to any of them with the shell: `berth volume status`."};
  app.set_config("--config", "",
                 "Read options from this TOML/INI file (keys are the long option names, e.g. "
                 "port = 4747)");
  auto* mode = app.add_option_group("mode", "What this berthd is");
  mode->add_flag("--dev", opts.dev,
                 "Development: server and client in one process, a single-member cluster; "
                 "starts berth-hostpath unless --plugin is given");
  mode->add_flag("--server", opts.server, "A server of the control plane");
  mode->add_flag("--client", opts.client, "A client: runs the node actor for this host's plugins");
  mode->require_option(1, 2);
  app.add_option("--name", opts.name,
                 "This server's name and this node's id (default: the host name)");
  app.add_option("--node-name", opts.name, "Same as --name");
  app.add_option("--data-dir", opts.data_dir,
                 "Directory for the durable log, the state tables and CSI paths (default: "
                 "/tmp/berth-dev with --dev, else /var/lib/berth)");
  app.add_option("--bind", opts.bind, "Address the shell endpoint and the raft port listen on")
      ->capture_default_str();
  app.add_option("--port", opts.port, "Port of the shell endpoint (0 = any free port)")
      ->capture_default_str();
  auto* server = app.add_option_group("server", "Servers");
  server->add_option("--raft-port", opts.raft_port, "Port of the replicated log (fixed, not 0)")
      ->capture_default_str();
  server->add_option("--bootstrap-expect", opts.bootstrap_expect,
                     "Servers to wait for before the cluster bootstraps (3 or 5); set the same "
                     "on every initial server")
      ->capture_default_str()
      ->check(CLI::Range(1, 7));
  server->add_option("--join", opts.join,
                     "Another server's raft address HOST:PORT (repeatable, or comma-separated)");
  server->add_option("--raft-tick", opts.raft_tick,
                     "Seconds per Raft tick (elections time out after 10-20 ticks)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 10.0));
  server->add_option("--snapshot-threshold", opts.snapshot_threshold,
                     "Applied log entries between snapshots at the least (the log before a "
                     "snapshot is compacted; lagging or new servers catch up by installing it). "
                     "Once the state exceeds 4 MiB, a snapshot also waits until the log grew by "
                     "half the state, so that large states are not copied every few seconds")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{4}, uint64_t{1} << 40));
  server->add_option("--snapshot-piece-size", opts.snapshot_piece_size,
                     "Bytes per piece when the leader sends its snapshot file to a server that "
                     "catches up (each piece waits for the one before to arrive)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{4096}, uint64_t{64} << 20));
  server->add_option("--event-journal-size", opts.event_journal_size,
                     "Recent events each server keeps for `berth event stream` and "
                     "/v1/event/stream (older ones answer with the oldest index still kept)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{100}, size_t{10'000'000}));
  server->add_option("--node-down-timeout", opts.node_down_timeout,
                     "Seconds without a heartbeat from a node's client before the node is "
                     "marked down and its allocs lost (their claims are then released without "
                     "it); must exceed --node-lease by the time a client needs to fence "
                     "itself (docs/user-guide.md, Leases)")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 86400.0));
  server->add_option("--node-lease", opts.node_lease,
                     "Seconds a client may go on writing single-writer volumes after its last "
                     "heartbeat a leader confirmed; past it the client stops those allocs and "
                     "unmounts the volumes (default: a third of --node-down-timeout)")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--kill-timeout", opts.kill_timeout,
                 "Seconds an alloc's command has after SIGTERM before SIGKILL, when it is "
                 "stopped or its client fences itself (clients); the longest grace the "
                 "servers' lease margin covers (servers: give clients this value or less)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  server->add_option("--fence-unmount-time", opts.fence_unmount_time,
                     "Seconds a fencing client's NodeUnpublishVolume and NodeUnstageVolume may "
                     "take; the lease margin (--node-down-timeout - --node-lease) must cover "
                     "--kill-timeout, this and a little more (docs/user-guide.md, Leases)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  server->add_flag("--keep-down-writers", opts.keep_down_writers,
                   "Never release a down node's claims that write a single-writer volume "
                   "without the node: they wait until it comes back or `berth volume detach` "
                   "(for clients whose agent may freeze and so cannot fence itself)");
  server->add_option("--alloc-gc-threshold", opts.alloc_gc_threshold,
                     "How long a terminal alloc (complete, failed, lost) that holds no claim "
                     "stays in the state before it is collected (e.g. 5m, 1h; 'never'); "
                     "`berth system gc` collects at once")
      ->capture_default_str();
  server->add_option("--node-gc-threshold", opts.node_gc_threshold,
                     "How long a down node with no alloc, claim or plugin instance left stays "
                     "in the state before it is collected (e.g. 24h; 'never'); it registers "
                     "again if it comes back")
      ->capture_default_str();
  server->add_option("--volume-idle-timeout", opts.volume_idle_timeout,
                     "How long the leader keeps a volume's actor after its last claim, release "
                     "or registration step (e.g. 30s, 5m; 'never' keeps one per volume); an "
                     "idle volume is only its row in the state, and its actor is started again "
                     "by the next request")
      ->capture_default_str();
  server->add_option("--volume-actors-max", opts.volume_actors_max,
                     "How many volume actors the leader keeps running with nothing left to do "
                     "before their idle timeout: beyond it the longest idle (for 1 s at "
                     "least) stop first, so a stream of registrations keeps memory flat; "
                     "not with --volume-idle-timeout never")
      ->check(CLI::Range(size_t{1}, size_t{100'000'000}))
      ->capture_default_str();
  server->add_option("--plugin-window", opts.plugin_window,
                     "How many claims, and separately how many releases, of one plugin's "
                     "volumes the leader works on at once; the rest wait at the leader in "
                     "the order they came (berth_plugin_operations shows both), so an attach "
                     "storm on one plugin does not delay another plugin's claims; 0: no limit")
      ->check(CLI::Range(size_t{0}, size_t{1'000'000}))
      ->capture_default_str();
  server->add_option("--volume-health-interval", opts.volume_health_interval,
                     "How often the leader asks each plugin for its volumes' condition "
                     "(ListVolumes or ControllerGetVolume, when a controller advertises "
                     "VOLUME_CONDITION; e.g. 60s, 5m; 'never' turns it off); a volume whose "
                     "condition turns abnormal takes no new claim without --allow-abnormal")
      ->capture_default_str();
  server->add_flag("--acl", opts.acl,
                   "Turn ACLs on (give it to every server): each request must carry a token "
                   "(berth --token, BERTH_TOKEN) whose policies allow it; `berth acl bootstrap` "
                   "makes the first management token. Clients need no token: each binds its "
                   "node id to its own node secret (DATA/node-secret)");
  auto* client = app.add_option_group("client", "Clients: this node and its CSI plugins");
  client->add_option("--servers", opts.servers,
                     "Servers' shell endpoints HOST:PORT (comma-separated or repeated); any of "
                     "them forwards to the leader");
  client->add_option("--plugin", opts.plugin_flags,
                     "A CSI plugin on this host, ID=TYPE:SOCKET with TYPE node, controller or "
                     "monolith (repeatable)");
  client->add_option("--csi-root", opts.csi_root,
                     "Where volumes are staged and published (default: DATA-DIR/csi)");
  client->add_option("--fingerprint-interval", opts.fingerprint_interval,
                     "Seconds between plugin fingerprints (health, capabilities)")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  client->add_option("--volume-stats-interval", opts.volume_stats_interval,
                     "How often this client measures the volumes published on it "
                     "(NodeGetVolumeStats, when the node plugin has GET_VOLUME_STATS) and "
                     "reports their usage to the leader (e.g. 60s; 'never' turns it off)")
      ->capture_default_str();
  client->add_flag("--forget-leader-term", opts.forget_leader_term,
                   "Forget the newest leader term this client took CSI requests from (kept in "
                   "DATA-DIR/client.db to refuse requests of deposed leaders). Only after the "
                   "servers were rebuilt from scratch as a new cluster, whose terms start again "
                   "at 1");
  client->add_option("--csi-timeout", opts.csi_timeout, "Deadline of one CSI call, in seconds; also how long a call may wait for its turn "
                     "(behind other calls of its plugin or volume) before it is answered "
                     "unsent (below the servers' 75 s per step)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  client->add_option("--hostpath-bin", opts.hostpath_bin,
                     "--dev: the berth-hostpath binary to start (default: next to berthd, or PATH)");
  app.add_option("--metrics-bind", opts.metrics_bind,
                 "Address of the HTTP port: /metrics, the /v1/ API and the web UI (HTTPS only "
                 "with --tls-*; without, keep it on loopback or a private network)")
      ->capture_default_str();
  app.add_option("--metrics-port", opts.metrics_port,
                 "Port of /metrics, the /v1/ API and the web UI (0 = any free port)")
      ->capture_default_str();
  app.add_option("--scheduler-threads", opts.scheduler_threads,
                 "Worker threads of the actor scheduler")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  auto* tls = app.add_option_group(
      "TLS", "Mutual TLS for every connection (shell, servers, clients): all three or none");
  tls->add_option("--tls-ca", opts.tls.ca,
                  "The cluster's CA certificate (PEM), from `berth tls ca create`; peers must "
                  "present a certificate it signed");
  tls->add_option("--tls-cert", opts.tls.cert,
                  "This berthd's certificate (PEM): `berth tls cert create --server` for a "
                  "server or --dev, --client for a client");
  tls->add_option("--tls-key", opts.tls.key, "The key of --tls-cert (PEM, mode 0600)");
  tls->add_flag("--tls-verify-http-client", opts.tls_verify_http_client,
               "With --tls-*, the metrics port (HTTPS then) requires a client certificate "
               "signed by --tls-ca; without it one is verified only when presented, so that "
               "browsers and Prometheus connect with the CA alone");
  std::string log_level = "info";
  bool log_json = false;
  app.add_option("--log-level", log_level,
                 "Log lines at this level and above to stderr: trace, debug, info, warn, error "
                 "(berth monitor can ask a running berthd for more)")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_flag("--log-json", log_json,
               "Log JSON lines (time, level, component, message and the ids as keys) instead "
               "of text");
  app.footer(
      "Logs go to stderr (journald under systemd), one line per event: time (UTC), level, "
      "component, what happened and the ids involved (volume, namespace, alloc, node, plugin). "
      "Secrets, parameters, contexts and mount flags are never logged. `berth monitor` "
      "streams a running berthd's lines.");
  CLI11_PARSE(app, argc, argv);
  berth::logging::setup(*berth::logging::parse_level(log_level), log_json);
  split_commas(opts.join);
  split_commas(opts.servers);

  if (opts.dev && (opts.server || opts.client)) {
    std::cerr << "berthd: --dev already is a server and a client; drop --server/--client\n";
    return 2;
  }
  if (opts.client && !opts.server && !opts.dev && opts.servers.empty()) {
    std::cerr << "berthd: a client needs --servers HOST:PORT[,HOST:PORT...] (the servers' shell "
                 "endpoints)\n";
    return 2;
  }
  for (auto [flag, text, ms] :
       {std::tuple{"--alloc-gc-threshold", &opts.alloc_gc_threshold, &opts.alloc_gc_ms},
        std::tuple{"--node-gc-threshold", &opts.node_gc_threshold, &opts.node_gc_ms},
        std::tuple{"--volume-idle-timeout", &opts.volume_idle_timeout, &opts.volume_idle_ms},
        std::tuple{"--volume-health-interval", &opts.volume_health_interval,
                   &opts.volume_health_ms},
        std::tuple{"--volume-stats-interval", &opts.volume_stats_interval,
                   &opts.volume_stats_ms}}) {
    if (*text == "never") {
      *ms = -1;
      continue;
    }
    auto parsed = berth::parse_duration_ms(*text);
    if (!parsed) {
      std::cerr << "berthd: " << flag << " '" << *text
                << "' is not a duration: give a number with a unit (ms, s, m, h), e.g. 5m or "
                   "24h, or 'never'\n";
      return 2;
    }
    *ms = *parsed;
  }
  if (auto f = berth::tls::check_complete(opts.tls, {"--tls-ca", "--tls-cert", "--tls-key"})) {
    std::cerr << "berthd: " << f->message << "\n";
    return 2;
  }
  if (auto f = berth::tls::check_https_options(opts.tls, opts.tls_verify_http_client)) {
    std::cerr << "berthd: " << f->message << "\n";
    return 2;
  }
  if (opts.tls.enabled())
    if (auto f = berth::tls::check_files(opts.tls)) {
      std::cerr << "berthd: " << f->message << "\n";
      return 2;
    }
  {
    // Checked where D and L are known (a server, --dev); a client learns L
    // in its grants and never D (control/lease.hpp, fence_times).
    auto down_ms = static_cast<int64_t>(opts.node_down_timeout * 1000);
    opts.node_lease_ms = opts.node_lease > 0 ? static_cast<int64_t>(opts.node_lease * 1000)
                                             : berth::default_lease_ms(down_ms);
    berth::fence_times fence{static_cast<int64_t>(opts.kill_timeout * 1000),
                             static_cast<int64_t>(opts.fence_unmount_time * 1000)};
    if (opts.server || opts.dev) {
      if (auto f = berth::check_lease(opts.node_lease_ms, down_ms, fence, opts.node_lease > 0)) {
        std::cerr << "berthd: " << f->message << "\n";
        return 2;
      }
    }
  }
  if (opts.data_dir.empty()) opts.data_dir = opts.dev ? "/tmp/berth-dev" : "/var/lib/berth";

  // Block the stop signals in every thread; the main thread waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads", static_cast<size_t>(opts.scheduler_threads));
  // An idle worker polls its queue 500 times, sleeping 50 us in between
  // (CAF's "moderate" phase, 25 ms and more), before it waits on its
  // condition variable, which every enqueue from outside signals.  Between
  // the messages of a busy berthd that phase never ends: thousands of
  // wake-ups per second per thread, the largest kernel cost of every
  // berthd on a 2-core machine running several (issue 28, bench/README).
  // Without it a worker spins briefly (the aggressive phase), then waits.
  cfg.set("work-stealing.moderate-poll-attempts", size_t{0});
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  // No automatic connections, with or without TLS: CAF 0.17 would open a
  // port of its own for them (basp_broker: a doorman on port 0 of every
  // interface, whatever --bind says; plain text even under TLS), and gives
  // no option for its address (issue 59).  berthd listens only where it is
  // told.  A node actor's handle then reaches the leader through the server
  // its client talks to (CAF relays through it), and the client registers
  // again through another server when that one goes; every connection is
  // one berthd opened to an address it was given (--servers, --join, the
  // members' raft and shell addresses).
  cfg.set("middleman.enable-automatic-connections", false);
  berth::tls::configure(cfg, opts.tls);
  berth::add_message_types(cfg);
  caf::actor_system sys{cfg};

  try {
    auto s = berth::start_agent(sys, opts);
    std::string what = opts.dev ? "dev agent" : opts.server && opts.client ? "server and client"
                                              : opts.server ? "server" : "client";
    std::cout << "berthd: " << what << " " << s.name;
    if (opts.dev || opts.server)
      std::cout << " serving the shell on " << opts.bind << ":" << s.port;
    if (opts.server) std::cout << ", raft on " << opts.bind << ":" << s.raft_port;
    if (opts.tls.enabled()) std::cout << " (TLS)";
    std::cout << ", metrics on " << opts.metrics_bind << ":" << s.metrics_port
              << (opts.tls.enabled() ? " (HTTPS)" : "") << " (data in "
              << opts.data_dir;
    if (opts.dev || opts.server)
      std::cout << "; " << s.volumes << " volumes, " << s.plugins << " plugins restored at index "
                << s.applied_index;
    std::cout << ")";
    if (opts.dev || opts.client) {
      std::cout << "; node " << s.name << " with plugins:";
      for (const auto& id : s.plugin_ids) std::cout << " " << id;
    }
    std::cout << std::endl;
    berth::logging::info("berthd", "started", {{"name", s.name}, {"mode", what}});
  } catch (const berth::damaged_data& e) {
    berth::logging::error("berthd", "refusing to start on damaged data", {{"error", e.what()}});
    std::_Exit(1);
  } catch (const std::exception& e) {
    berth::logging::error("berthd", "cannot start", {{"error", e.what()}});
    std::_Exit(1);
  }

  int sig = 0;
  sigwait(&stop, &sig);
  std::cout << "berthd: stopping on signal " << sig << std::endl;
  berth::logging::info("berthd", "stopping", {{"signal", sig}});
  // Every acknowledged change is already durable in the log, so stopping
  // needs no flush; the state tables catch up from the log at the next
  // start.
  std::_Exit(0);
}
