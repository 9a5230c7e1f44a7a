// berth-hostpath: command line, socket and signals around the plugin.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <iostream>
#include <limits>

#include "call_log.hpp"
#include "csi/client.hpp"
#include "hostpath.hpp"
#include "services.hpp"

namespace fs = std::filesystem;
using namespace berth::hostpath;

#if defined(BERTH_TSAN)
// ThreadSanitizer suppressions of this process only (make test-tsan, issue
// 32): gRPC's synchronous server reads a call's request on one of its
// threads (into an arena it allocated there) and runs the handler on
// another, handing the call over through its own uninstrumented
// synchronization, so every read of a request's fields in a handler shows
// as a race with the parse.  Each call has its own request, which no
// handler writes; berthd's side keeps the suppressions of
// tests/sanitizers/tsan.supp only.  The same handover shows as
// std::string::_M_replace (libprotobuf's parse copying a gRPC slice, no
// berth frame on the stack).
extern "C" const char* __tsan_default_suppressions() {
  return "race:csi::v1::\n"
         "race:google::protobuf::\n"
         "race:std::__cxx11::basic_string<char, std::char_traits<char>, "
         "std::allocator<char> >::_M_replace\n";
}
#endif

int main(int argc, char** argv) {
  berth::csi::skip_lock_order_checks();
  options opts;
  std::string endpoint;
  std::string log_file;
  std::vector<std::string> topology;
  std::vector<std::string> delay_args;
  // Real bind mounts need CAP_SYS_ADMIN; without root, symlinks stand in.
  std::string mode = ::geteuid() == 0 ? "bind" : "symlink";

  CLI::App app{"berth-hostpath: a monolith CSI plugin (Identity, Controller, Node, "
               "GroupController) whose volumes are directories under ROOT/volumes. berth's "
               "reference plugin."};
  app.add_option("--endpoint", endpoint, "gRPC endpoint to serve, unix:///path/csi.sock "
                                         "(a stale socket file is removed first)")
      ->required();
  app.add_option("--root", opts.root, "directory holding volumes/, state.json and "
                                      "state.journal (created if missing)")
      ->required();
  app.add_option("--node-id", opts.node_id, "node id returned by NodeGetInfo and accepted by "
                                            "ControllerPublishVolume")
      ->required();
  app.add_option("--max-volumes", opts.max_volumes,
                 "max volumes staged on this node and controller-published per node; "
                 "RESOURCE_EXHAUSTED beyond (0 = no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--topology", topology,
                 "KEY=VALUE topology segment of this node (repeatable); when set, "
                 "VOLUME_ACCESSIBILITY_CONSTRAINTS is advertised");
  app.add_option("--peer-node", opts.peer_nodes,
                 "another node id the controller may publish to (repeatable); unknown "
                 "node ids get NOT_FOUND");
  app.add_flag("--shared-root", opts.shared_root,
               "ROOT is shared with berth-hostpath processes of other nodes (a stand-in for "
               "network storage): volumes and controller publications are shared, stagings "
               "and publications are per node (ROOT/nodes/NODE-ID.json), calls take a lock "
               "on ROOT/state.lock");
  app.add_option("--journal-limit", opts.journal_limit,
                 "compact ROOT/state.journal into ROOT/state.json once the journal holds this "
                 "many bytes (0: every save rewrites state.json whole). Default -1: at "
                 "max(4 MiB, twice state.json), with --shared-root max(64 KiB, twice "
                 "state.json). A test and benchmark aid")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
  app.add_option("--mount-mode", mode,
                 "bind: stage and publish with real bind mounts (mount(2), needs root; "
                 "readonly publications are remounted read-only). symlink: the target "
                 "path becomes a symlink to the volume directory, staging is bookkeeping "
                 "only (for unprivileged runs; readonly is not enforced). "
                 "Default: bind as root, else symlink")
      ->check(CLI::IsMember({"bind", "symlink"}))
      ->capture_default_str();
  app.add_option("--call-log", log_file,
                 "append one JSON line per RPC (method, ids, paths, code, at_ns and end_ns: "
                 "when the call started and when its answer was ready), fsync'ed; "
                 "never secrets");
  std::vector<std::string> mutable_keys;
  app.add_option("--mutable-parameter-key", mutable_keys,
                 "a mutable parameter key CreateVolume and ControllerModifyVolume accept "
                 "(repeatable or comma-separated; default: iops,tier); any other key is "
                 "INVALID_ARGUMENT")
      ->delimiter(',');
  app.add_option("--delay", delay_args,
                 "CALL=MS (repeatable): the RPC named CALL (the spec's name, e.g. "
                 "ControllerPublishVolume) takes at least MS more milliseconds, slept at its "
                 "start while holding no lock, so the plugin behaves like a slow cloud plugin. "
                 "A test aid; off by default");
  CLI11_PARSE(app, argc, argv);
  if (!mutable_keys.empty()) {
    opts.mutable_keys.clear();
    for (const auto& k : mutable_keys) {
      google::protobuf::Map<std::string, std::string> probe;
      probe[k] = "";
      if (auto why = berth::hostpath::bad_mutable_parameters(probe, {k}); !why.empty()) {
        std::fprintf(stderr, "berth-hostpath: --mutable-parameter-key: %s\n", why.c_str());
        return 2;
      }
      opts.mutable_keys.insert(k);
    }
  }

  std::map<std::string, std::chrono::milliseconds> delays;
  for (const auto& kv : delay_args) {
    auto eq = kv.find('=');
    auto name = kv.substr(0, eq);
    const auto& names = rpc_names();
    if (eq == std::string::npos || std::find(names.begin(), names.end(), name) == names.end()) {
      std::cerr << "berth-hostpath: --delay wants CALL=MS with CALL one of";
      for (const auto& n : names)
        std::cerr << " " << n;
      std::cerr << "; got '" << kv << "'\n";
      return 2;
    }
    auto ms = kv.substr(eq + 1);
    bool digits = !ms.empty() && ms.size() <= 9
                  && std::all_of(ms.begin(), ms.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!digits) {
      std::cerr << "berth-hostpath: --delay " << name
                << " wants a whole number of milliseconds (0 to 999999999), got '" << ms << "'\n";
      return 2;
    }
    delays[name] = std::chrono::milliseconds(std::stoll(ms));
  }

  for (const auto& kv : topology) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "berth-hostpath: --topology wants KEY=VALUE, got '" << kv << "'\n";
      return 2;
    }
    opts.topology[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  opts.mode = mode == "bind" ? mount_mode::bind : mount_mode::symlink;
  const std::string scheme = "unix://";
  if (endpoint.rfind(scheme, 0) != 0 || endpoint.size() == scheme.size()) {
    std::cerr << "berth-hostpath: --endpoint must be unix:///path, got '" << endpoint << "'\n";
    return 2;
  }
  fs::path socket_path = endpoint.substr(scheme.size());

  // Block the stop signals before gRPC starts its threads (they inherit the
  // mask), so that only sigwait() below receives them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  try {
    plugin p(opts);
    call_log log(log_file);
    services svc(p, log, delays);

    std::error_code ec;
    fs::create_directories(socket_path.parent_path(), ec);
    struct stat st {};
    if (::lstat(socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode))
      ::unlink(socket_path.c_str());  // left by a previous run that was killed

    grpc::ServerBuilder builder;
    builder.AddListeningPort(endpoint, grpc::InsecureServerCredentials());
    svc.register_with(builder);
    auto server = builder.BuildAndStart();
    if (!server) {
      std::cerr << "berth-hostpath: cannot listen on " << endpoint << "\n";
      return 1;
    }
    std::cerr << "berth-hostpath: serving " << endpoint << " (node " << opts.node_id
              << ", mount mode " << to_string(opts.mode) << ")\n";

    int sig = 0;
    sigwait(&stop, &sig);
    std::cerr << "berth-hostpath: signal " << sig << ", shutting down\n";
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    ::unlink(socket_path.c_str());
  } catch (const std::exception& e) {
    std::cerr << "berth-hostpath: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
