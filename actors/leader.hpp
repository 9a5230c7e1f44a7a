// The leader actor: the control plane's router.  It answers reads from its
// catalog, which changes only when the server hands it committed entries;
// it routes claims and releases to the volume actors and fingerprints to
// the plugin actors, and proposes what the rules in control/ decide for
// allocs and nodes.  It decides nothing itself.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actors/actors.hpp"
#include "actors/metrics.hpp"
#include "actors/node_call.hpp"
#include "control/activation.hpp"
#include "control/admission.hpp"
#include "control/catalog.hpp"
#include "control/gc.hpp"
#include "control/lease.hpp"
#include "persistence/state_store.hpp"

namespace berth {

struct leader_options {
  // A node whose client sent no heartbeat for this long is marked down and
  // its allocs lost (its claims released without it): longer than the
  // lease by the margin (control/lease.hpp).
  std::chrono::milliseconds node_down_timeout{45000};
  // The lease granted with each confirmed heartbeat (berthd --node-lease):
  // a client that cannot renew it for this long fences itself.
  std::chrono::milliseconds node_lease{15000};
  // berthd --keep-down-writers: a down node's claims that write a
  // single-writer volume are never released without the node (only when
  // it comes back, or by berth volume detach).
  bool keep_down_writers = false;
  // The fence the lease margin covers, as these servers assume it (berthd
  // --kill-timeout, --fence-unmount-time): a client whose own
  // --kill-timeout the margin does not cover gets no lease
  // (control/lease check_client_fence).
  fence_times fence;
  // How long alloc stop and a failed alloc run wait for the alloc's claims
  // to be released before answering (the watcher goes on after that).
  std::chrono::milliseconds release_wait{30000};
  // How long a claim refused only by ended allocs' claims waits for their
  // releases before it is judged anyway (control/release: releases_awaited).
  std::chrono::milliseconds claim_release_wait{10000};
  // The Raft term this leader serves (set when it starts): every CSI
  // request it sends carries it, and nodes refuse older terms.
  uint64_t term = 0;
  // Terminal allocs and down nodes are collected after these (berthd
  // --alloc-gc-threshold, --node-gc-threshold).
  gc_thresholds gc;
  // A volume's actor is stopped after it has been idle this long (berthd
  // --volume-idle-timeout); < 0: never.
  int64_t volume_idle_ms = 30000;
  // More running volume actors than this with nothing left to do: the
  // longest idle stop before their idle time is up (berthd
  // --volume-actors-max; control/activation).
  size_t volume_actors_max = default_volume_actors_max;
  // The volumes' condition is checked this often (berthd
  // --volume-health-interval); < 0: never.
  int64_t volume_health_ms = 60000;
  // berthd --acl: every request is checked against its token (control/acl).
  bool acl = false;
  // berthd --plugin-window: how many claims, and how many releases, of one
  // plugin's volumes are routed to the volume actors at once; the rest wait
  // at the leader in arrival order (control/admission); 0: no limit.
  size_t plugin_window = default_plugin_window;
};

// What the leader keeps for a volume with an actor or work under way
// (control/activation decides when to spawn, stop and forget it).
struct volume_slot {
  volume_actor actor;  // invalid: none now
  volume_activity activity;
  bool stop_when_free = false;  // a first registration failed: stop at once
  // Requests that arrived while the actor was stopping, or before the
  // catalog applied what the last actor committed: run again in order.
  std::vector<std::function<void()>> waiting;
};

struct leader_state {
  replicated_log_actor log;
  std::shared_ptr<metrics> stats;
  leader_options options;
  watcher_actor watcher;
  // Everything committed and applied, and nothing else.
  catalog cat;
  // Only volumes with an actor or waiting work: an idle volume is its
  // catalog row alone.
  std::map<volume_key, volume_slot> volume_actors;
  // The slots with an actor: kept as they change (counting the slots on
  // each spawn and stop cost O(slots) each, and ~20,000 actors stopping
  // together after a burst of registrations stalled the leader for 25 s).
  size_t running_volume_actors = 0;
  std::map<std::string, plugin_actor> plugin_actors;
  std::map<std::string, node_actor> node_actors;  // nodes with a connected berth client
  // The node actors replaced by a newer one of their node (a client
  // restarted): shared with the volume and plugin actors' step helpers.
  retired_nodes_ptr retired = std::make_shared<retired_nodes>();
  std::map<std::string, int64_t> last_seen;       // node -> steady ms of its last heartbeat
  // The way back to each client (control/lease.hpp, node_reach): its node
  // actor's address and the pings to it.  Kept across a mark-down; a new
  // address (a restarted client) starts afresh.
  struct node_path {
    caf::actor_addr addr;
    node_reach reach;
  };
  std::map<std::string, node_path> paths;
  // Heartbeats waiting for their lease (by node), and whether a ReadIndex
  // round that confirms this leader is under way (leader_flows::grant_lease).
  std::vector<std::pair<std::string, caf::typed_response_promise<uint64_t, int64_t, uint64_t>>>
      lease_waiting;
  bool lease_reading = false;
  std::set<std::string> unmounting;  // nodes back from down asked to unmount, not yet confirmed
  // Per node, the stops of complete allocs that still hold claims
  // (control/nodes: stops_due): confirmed by its client since it connected,
  // and on their way.  A failed one is in neither: the next heartbeat sends
  // it again.
  std::map<std::string, std::set<std::string>> stops_confirmed;
  std::map<std::string, std::set<std::string>> stops_in_flight;
  // Nodes whose mark-down is being written (how many writes of it are in flight).
  std::map<std::string, int> marking_down;
  std::map<std::string, int> claims_in_flight;  // alloc -> claims routed, not yet answered
  // Releases running or waiting for their plugin's window, by claim
  // ("NAMESPACE/VOLUME/ALLOC"): a release of the same claim asked meanwhile
  // joins one (control/release joins_running_release) and gets its outcome.
  struct release_run {
    uint64_t id = 0;
    bool detach = false;
    std::vector<std::function<void(std::optional<failure>, const v1::Volume&)>> joined;
  };
  std::map<std::string, std::vector<release_run>> releases_running;
  uint64_t release_runs = 0;
  // Claims and releases per plugin: which run now, which wait for room in
  // their plugin's window (control/admission; leader_flows::admit), and the
  // work of each waiting ticket; `ready` holds tickets whose turn came, run
  // in a loop rather than recursively (a turn may end as soon as it starts).
  admission admitted;
  std::map<uint64_t, std::function<void()>> admission_waiting;
  std::deque<uint64_t> admission_ready;
  bool admission_running = false;
  std::map<std::string, size_t> controller_turn;  // round-robin per plugin
  // Volumes being claimed, per node and plugin: counted against the
  // plugin's max volumes per node together with the claimed ones.
  std::map<std::pair<std::string, std::string>, std::set<volume_key>> claiming;
  // Work waiting for the catalog: run once `ready` holds after an apply
  // (or, with a deadline in steady ms, with false once it passes).
  struct waiter {
    std::function<bool()> ready;
    std::function<void(bool)> run;
    int64_t deadline_ms = 0;  // 0: none
  };
  std::vector<waiter> waiters;
  // alloc run requests being started, by alloc id (what each asked for):
  // the same request sent again waits for the first instead of running twice.
  std::map<std::string, v1::Alloc> starting_allocs;
  // Lost members of groups that may have to be replaced (announced allocs:
  // lost, in a group, not stopped), by id; leader_flows::drive_replacements.
  struct replace_drive {
    bool in_flight = false;
    uint32_t attempts = 0;  // runs no node took, in a row
    int64_t due_ms = 0;     // steady ms of the next try
    std::string last_error;
  };
  std::map<std::string, replace_drive> replacing;
  // Drains: allocs asked to stop, nodes whose force or finish is being written.
  std::set<std::string> drain_stops;
  std::set<std::string> drain_writes;
  // Volume drains (berth volume availability VOLUME drain): the claims
  // ("NAMESPACE/VOLUME/ALLOC") of command-less allocs being released.
  std::set<std::string> volume_drain_releases;
  // Expansions being driven or waiting to be retried (the ones in progress
  // are the catalog's `expanding`): a failed step is retried with backoff.
  struct expansion_drive {
    bool in_flight = false;
    uint32_t attempts = 0;  // failed steps in a row
    int64_t due_ms = 0;     // steady ms of the next try
  };
  std::map<volume_key, expansion_drive> expansions;
  // The metrics' counts of allocs per state and nodes per status.
  std::map<std::string, int64_t> alloc_counts;
  std::map<std::string, int64_t> node_counts;
  uint64_t ticks = 0;
  bool gc_running = false;  // a timed garbage collection is being written
  // Volume health: when the last check started (steady ms), and the
  // plugins whose check (and its commits) is still under way.
  int64_t health_checked_ms = 0;
  std::set<std::string> health_checking;
  static inline const char* name = "leader";
  // Stops the volume actors still running: they are not linked to the
  // leader (see with_volume_actor).
  ~leader_state();
};

// Starts with the committed state (a copy of the state machine's catalog)
// and spawns a plugin actor per plugin; volume actors are spawned when a
// request for their volume arrives.
leader_actor::behavior_type leader(leader_actor::stateful_pointer<leader_state> self,
                                   replicated_log_actor log, catalog initial,
                                   std::shared_ptr<metrics> stats, leader_options options);

}  // namespace berth
