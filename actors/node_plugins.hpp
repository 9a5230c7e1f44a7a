// The node actor's plugin connections: one csi_plugin actor per --plugin,
// fingerprints (probe each plugin, keep what a healthy probe said, report
// changes to the leader), and CSI jobs, which wait until their plugin was
// probed healthy once since the client started (after a restart the plugin
// may not be back yet, and what it stages is only known then).  Functions
// of the node actor: they run on its thread, in its state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "actors/node.hpp"

namespace berth {

using node_self = node_actor::stateful_pointer<node_state>;

// Spawns a connection per configured plugin (its workers are detached:
// gRPC blocks).
void connect_plugins(node_self self);

// Probes every plugin; reports an instance that changed to the leader.
void fingerprint(node_self self);

// Runs a job (made knowing whether the plugin stages volumes) on a plugin's
// connection: `done` gets its outcome, `fail` a plugin this node does not
// run or a connection that failed.  Returns true when the job waits for
// its plugin's first healthy probe (at most one CSI timeout: poll with
// expire_waiting).
bool run_csi(node_self self, const std::string& plugin_id, std::function<csi_job(bool)> make_job,
             std::function<void(csi_outcome&)> done, std::function<void(caf::error)> fail);

// Fails the jobs that waited for their plugin past their deadline.
void expire_waiting(node_self self, int64_t now_ms);

}  // namespace berth
