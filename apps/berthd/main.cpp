// berthd: the berth agent.  In --dev mode one process is the whole cluster:
// a single-member control plane (leader, volume and plugin actors, durable
// log) serving the shell on --bind:--port.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>

#include "actors/actors.hpp"
#include "apps/berthd/agent.hpp"

int main(int argc, char** argv) {
  berth::agent_options opts;
  CLI::App app{
      "berthd: the berth agent. Manages CSI volumes, plugins and claims.\n"
      "Run `berthd --dev` for a single-process cluster (server and client in one),\n"
      "then talk to it with the shell: `berth volume status`."};
  app.set_config("--config", "", "Read options from this TOML/INI file (keys are the long option names, e.g. port = 4747)");
  app.add_flag("--dev", opts.dev,
               "Development mode: one process acts as the whole cluster (a single-member control "
               "plane); state is durable in --data-dir");
  app.add_option("--data-dir", opts.data_dir,
                 "Directory for the durable log and state tables (default: /tmp/berth-dev in "
                 "--dev mode)");
  app.add_option("--bind", opts.bind, "Address the shell endpoint listens on")
      ->capture_default_str();
  app.add_option("--port", opts.port, "Port of the shell endpoint (0 = any free port)")
      ->capture_default_str();
  app.add_option("--metrics-bind", opts.metrics_bind,
                 "Address of the Prometheus /metrics endpoint (keep it on loopback or a private "
                 "network)")
      ->capture_default_str();
  app.add_option("--metrics-port", opts.metrics_port, "Port of the /metrics endpoint (0 = any free port)")
      ->capture_default_str();
  app.add_option("--scheduler-threads", opts.scheduler_threads,
                 "Worker threads of the actor scheduler")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  auto* client = app.add_option_group("client", "The node this berthd serves and its CSI plugins");
  client->add_option("--node-name", opts.node_name, "This node's id (default: the host name)");
  client->add_option("--plugin", opts.plugin_flags,
                     "A CSI plugin on this host, ID=TYPE:SOCKET with TYPE node, controller or "
                     "monolith (repeatable). --dev without --plugin starts berth-hostpath itself");
  client->add_option("--csi-root", opts.csi_root,
                     "Where volumes are staged and published (default: DATA-DIR/csi)");
  client->add_option("--fingerprint-interval", opts.fingerprint_interval,
                     "Seconds between plugin fingerprints (health, capabilities)")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 3600.0));
  client->add_option("--csi-timeout", opts.csi_timeout, "Deadline of one CSI call, in seconds")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  client->add_option("--hostpath-bin", opts.hostpath_bin,
                     "--dev: the berth-hostpath binary to start (default: next to berthd, or PATH)");
  CLI11_PARSE(app, argc, argv);

  if (!opts.dev) {
    std::cerr << "berthd: only --dev mode exists in this version (cluster mode with --server and "
                 "--client comes with the replicated log); run: berthd --dev\n";
    return 2;
  }
  if (opts.data_dir.empty()) opts.data_dir = "/tmp/berth-dev";

  // Block the stop signals in every thread; the main thread waits for them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  caf::actor_system_config cfg;
  cfg.load<caf::io::middleman>();
  cfg.set("scheduler.max-threads", static_cast<size_t>(opts.scheduler_threads));
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  berth::add_message_types(cfg);
  caf::actor_system sys{cfg};

  try {
    auto s = berth::start_agent(sys, opts);
    std::cout << "berthd: dev agent serving the shell on " << opts.bind << ":" << s.port
              << ", metrics on " << opts.metrics_bind << ":" << s.metrics_port << " (data in " << opts.data_dir << "; " << s.volumes << " volumes, " << s.plugins
              << " plugins restored at index " << s.applied_index << "); node " << s.node_name
              << " with plugins:";
    for (const auto& id : s.plugin_ids) std::cout << " " << id;
    std::cout << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "berthd: cannot start: " << e.what() << std::endl;
    std::_Exit(1);
  }

  int sig = 0;
  sigwait(&stop, &sig);
  std::cout << "berthd: stopping on signal " << sig << std::endl;
  // Every acknowledged change is already durable in the log, so stopping
  // needs no flush; the state tables catch up from the log at the next
  // start.
  std::_Exit(0);
}
