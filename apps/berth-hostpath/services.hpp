#pragma once
// The gRPC face of berth-hostpath: the Identity, Controller and Node services
// forwarding to one plugin, each call recorded in the call log with its code
// and its start and end times.
//
// Concurrency: gRPC's sync server runs handlers on several threads, and they
// run concurrently here. A handler first sleeps its --delay (holding
// nothing), then runs the plugin method through plugin::serve: the checks,
// mounts and state change under the plugin's state mutex (short: no fsync),
// then the wait for the group commit of the state file without it. There is
// no lock per volume: every decision and the change it leads to are atomic
// under the state mutex, so two calls on one volume (a CO's retry while the
// first attempt waits for its save) see each other's effects in some order,
// and both answer only once the state they rest on is durable.
//
// With --shared-root, whole calls are serialized (one mutex in this process,
// ROOT/state.lock across processes): the state is re-read at each call's
// start and only valid while the lock is held, so each call saves its own
// change before it releases the lock. Delays still run before, unlocked.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace grpc {
class ServerBuilder;
}

namespace berth::hostpath {

class plugin;
class call_log;

// The RPC names the services answer (the spec's method names), e.g.
// "ControllerPublishVolume": what --delay accepts.
const std::vector<std::string>& rpc_names();

class services {
 public:
  // `delays`: RPC name -> extra time the call takes (slept at its start,
  // holding no lock), a test aid that makes the plugin behave like a slow
  // one. Throws std::invalid_argument on a name not in rpc_names().
  services(plugin& p, call_log& log,
           std::map<std::string, std::chrono::milliseconds> delays = {});
  ~services();
  services(const services&) = delete;
  services& operator=(const services&) = delete;

  // Registers the three services; *this must outlive the server.
  void register_with(grpc::ServerBuilder& builder);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace berth::hostpath
