// berth's Prometheus metrics, behind a small interface so that actors do
// not include prometheus-cpp.  Every method is thread-safe (the log writer
// and the state machine report from their own threads).  Labels carry
// names and ids only: never a secret.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "control/health.hpp"
#include "messages/berth.pb.h"

namespace prometheus {
class Collectable;
}

namespace berth {

class metrics {
 public:
  virtual ~metrics() = default;

  // A new leader recounts volumes, claims and plugins from scratch.
  virtual void clear_state() = 0;
  // A volume changed from `before` to `after` (either may be null for a
  // registration or a deregistration): updates volumes and claims gauges.
  virtual void volume_changed(const v1::Volume* before, const v1::Volume* after) = 0;
  // `count` volumes without a claim were added at once (a new leader's
  // catalog: it decodes only the volumes with claims).
  virtual void volumes_unclaimed(int64_t count) = 0;
  // A volume's health series (berth_volume_capacity_bytes,
  // berth_volume_used_bytes, berth_volume_abnormal) are now `rows`
  // (control/health's series_of): the volume's other series are removed,
  // all of them when `rows` is empty (a deleted volume).
  virtual void volume_health(const std::string& ns, const std::string& volume,
                             const std::vector<health_series>& rows) = 0;
  // Same for a plugin's healthy/expected gauges.
  virtual void plugin_changed(const v1::Plugin* before, const v1::Plugin* after) = 0;
  // One durable log write of `entries` entries that took `seconds`.
  virtual void log_written(size_t entries, uint64_t last_index, double seconds) = 0;
  // What a restart recovered: the log's last index and the applied index.
  virtual void restored(uint64_t last_index, uint64_t applied_index) = 0;
  // A Raft snapshot was taken or installed at `index`.
  virtual void snapshot_taken(uint64_t index) = 0;
  // This server's Raft view: term, whether it leads, commit index, and the
  // entries kept in the log.
  virtual void raft_state(uint64_t term, bool leader, uint64_t commit, uint64_t log_entries) = 0;
  // The state machine applied up to `index`.
  virtual void applied(uint64_t index) = 0;
  // A shell command finished: `command` (e.g. "volume_claim"), `outcome`
  // ("ok", "refused", ...), after `seconds`.
  virtual void request_done(const std::string& command, const std::string& outcome,
                            double seconds) = 0;
  // One CSI call: plugin, the spec's method name, the gRPC code name.
  virtual void csi_call(const std::string& plugin, const std::string& method,
                        const std::string& code, double seconds) = 0;
  // A plugin connection's CSI calls of `kind` ("controller", "node") in
  // flight and the limit in effect (lowered while the plugin is overloaded).
  virtual void csi_calls_in_flight(const std::string& plugin, const std::string& kind,
                                   size_t in_flight, size_t limit) = 0;
  // A CSI call answered RESOURCE_EXHAUSTED or ABORTED was queued again.
  virtual void csi_call_backoff(const std::string& plugin) = 0;
  // A claim answered (committed and, with a client, published).
  virtual void claim_done(double seconds) = 0;
  // How many actors of a kind are running ("volume", "plugin", ...).
  virtual void actors(const std::string& kind, size_t count) = 0;

  // A volume actor was started for a request, stopped after being idle,
  // or a request waited for a volume actor's stop ("started", "stopped",
  // "waited"; control/activation).
  virtual void volume_actor_event(const std::string& event) = 0;
  // The volume watcher retried a failed release step.
  virtual void watcher_retry() = 0;
  // One of the leader's writes was refused at apply (an object it changes
  // changed since it was built: compare-and-set) and is built again.
  virtual void write_refused() = 0;
  // The node's group commit wrote `writes` publication records to
  // client.db in one transaction, which took `seconds` with its fsync
  // (clients only).
  virtual void client_db_written(size_t writes, double seconds) = 0;
  // An alloc run without --node was placed: `result` "placed" (a node
  // fits), "none" (no node fits: refused) or "explained" (--explain).
  virtual void placement(const std::string& result) = 0;
  // Messages waiting in the mailbox of the actor of `kind` ("leader",
  // "replicated_log", ...), sampled by the actor itself.
  virtual void mailbox(const std::string& kind, size_t backlog) = 0;
  // The leader's claims or releases (`kind`) of one plugin's volumes routed
  // to the volume actors now and waiting for room in the plugin's window
  // (control/admission).
  virtual void plugin_operations(const std::string& plugin, const std::string& kind,
                                 size_t running, size_t queued) = 0;
  // Claims the volume watcher is releasing now.
  virtual void watcher_pending(size_t count) = 0;
  // Allocs by state, and nodes by status ("ready", "down"), as the leader
  // has them.
  virtual void allocs(const std::string& state, size_t count) = 0;
  virtual void nodes(const std::string& status, size_t count) = 0;

  // What /metrics serves (every family, the health series included).
  virtual std::shared_ptr<prometheus::Collectable> registry() = 0;
};

std::shared_ptr<metrics> make_metrics();

}  // namespace berth
