#pragma once
// The gRPC face of berth-hostpath: the Identity, Controller, Node and
// GroupController services forwarding to one plugin, each call recorded in
// the call log with its code and its start and end times.
//
// Concurrency: gRPC's sync server runs handlers on several threads, and they
// run concurrently here. A handler first sleeps its --delay (holding
// nothing), then waits for earlier calls on the same volume id to finish
// (CreateVolume: the id its name maps to; CreateSnapshot: its source;
// CreateVolumeGroupSnapshot: every source volume, all taken at once): one
// call per volume at a time,
// which the spec allows, so a CO's retry never interleaves with its first
// attempt. Then the plugin method runs through plugin::serve: checks and
// in-memory changes under the plugin's state mutex, mounts and volume
// directory work with it released, and the wait for the group commit of the
// state file without it (hostpath.hpp). Calls on different volumes
// therefore overlap everywhere but in their short critical sections.
//
// With --shared-root, whole calls are also serialized (one mutex in this
// process, ROOT/state.lock across processes): the state is re-read at each
// call's start and only valid while the lock is held, so each call saves its
// own change before it releases the lock (a group of one). Delays still run
// first, unlocked.

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

  // Registers the four services; *this must outlive the server.
  void register_with(grpc::ServerBuilder& builder);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace berth::hostpath
