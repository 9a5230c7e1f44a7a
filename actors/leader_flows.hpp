// The leader actor's flows, split by topic over leader.cpp (the commit
// path, the catalog's apply, routing, the behaviour), leader_allocs.cpp,
// leader_volumes.cpp and leader_nodes.cpp.  Internal to the leader actor:
// nothing outside actors/leader*.cpp includes it.  Every decision the flows
// act on comes from control/; they order the work and do the messaging.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "actors/leader.hpp"
#include "messages/failure.hpp"
#include "control/acl.hpp"
#include "control/snapshots.hpp"
#include "control/views.hpp"

namespace berth::leader_flows {

using self_ptr = leader_actor::stateful_pointer<leader_state>;
using response_promise = caf::typed_response_promise<pb<v1::Response>>;
using lease_promise = caf::typed_response_promise<uint64_t, int64_t, uint64_t>;
using then_fn = std::function<void(std::optional<failure>)>;
using build_fn = std::function<std::variant<failure, std::vector<v1::Change>>(const catalog&)>;

inline void deliver(response_promise& rp, const failure& f) {
  rp.deliver(wrap(error_response(f)));
}

inline void deliver(response_promise& rp, v1::Response r) {
  rp.deliver(wrap(std::move(r)));
}

// --- leader.cpp: the commit path, the catalog, routing -----------------------

// Runs `run(true)` once `ready()` holds for the catalog (now, or after a
// later apply), or `run(false)` when a deadline is given and passes first.
void when(const self_ptr& self, std::function<bool()> ready, std::function<void(bool)> run,
          int64_t deadline_ms = 0);
// Runs `run` once the catalog applied `index`.
void when_applied(const self_ptr& self, uint64_t index, std::function<void()> run);
void check_waiters(const self_ptr& self);
// Commits changes as one entry and continues once the catalog applied it.
void commit(const self_ptr& self, std::vector<v1::Change> changes, then_fn then);
// The leader's own writes (allocs, nodes, ACLs): `build` from the catalog
// as committed, proposed with the versions of what it changes (and, with
// `node_allocs`, of every written node's allocs: a change built from all
// of a node), built again when the apply refuses it because one changed;
// after write_attempts refusals in a row it fails (unavailable, retry).
constexpr uint32_t write_attempts = 16;
void write(const self_ptr& self, build_fn build, then_fn then, bool node_allocs = false,
           uint32_t attempt = 1);
then_fn ignore_result();
// Applies committed entries to the catalog and tells the watcher and the
// metrics what changed.
void apply_batch(const self_ptr& self, const committed_batch& batch);
void announce(const self_ptr& self, const applied_change& a);

node_actor node_of(const self_ptr& self, const std::string& node_id);
plugin_actor plugin_of(const self_ptr& self, const std::string& plugin_id);
// The plugin as the catalog holds it (empty when unknown): what a volume
// actor decides claims, releases and expansions on.
pb<v1::Plugin> committed_plugin(const self_ptr& self, const std::string& plugin_id);
// Runs `use` with the volume's actor, spawned from the catalog when it has
// none (control/activation): later, in order, when its actor is being
// stopped or the catalog has not yet applied what the last one committed.
// `use` sends one request and calls `done(index)` with the index its
// answer carried (0 when it failed).
// Runs `run` now, or once the plugin's window for `kind` ("claim",
// "release") has room (control/admission): the claims and releases of one
// plugin's volumes wait behind each other, never behind another plugin's.
// `run` is handed the end of its turn, to call once it is answered (again:
// nothing).
void admit(const self_ptr& self, const std::string& kind, const std::string& plugin_id,
           std::function<void(std::function<void()>)> run);
using volume_use = std::function<void(volume_actor, std::function<void(uint64_t)> done)>;
void with_volume_actor(const self_ptr& self, const volume_key& key, volume_use use);
// Stops the actors idle for longer than the idle timeout (on the tick).
void stop_idle_volume_actors(const self_ptr& self);
// After a first registration failed: stops the actor once nothing is in
// flight, so no actor stays for a volume that does not exist.
void stop_volume_actor_when_free(const self_ptr& self, const volume_key& key);
// The volume was deleted: its actor quit by itself.
void forget_volume_actor(const self_ptr& self, const volume_key& key);
size_t count_volume_actors(const self_ptr& self);
plugin_actor spawn_plugin(const self_ptr& self, v1::Plugin p);
// A plugin actor for the plugin, spawned on its committed state when there
// is none yet.
plugin_actor ensure_plugin_actor(const self_ptr& self, const std::string& id);
// A connected node with a healthy controller of the plugin, round-robin.
node_actor pick_controller(const self_ptr& self, const std::string& plugin_id,
                           const v1::TopologyRequest* topology = nullptr);
// --- leader_volumes.cpp ---------------------------------------------------------
// Claims one volume through its actor (which has the node publish it).
void claim_volume(const self_ptr& self, v1::ClaimRequest c,
                  std::function<void(std::optional<failure>, v1::ClaimResult)> done);
// Releases one claim through its volume actor.
void release_claim(const self_ptr& self, v1::ReleaseRequest r,
                   std::function<void(std::optional<failure>, v1::Volume)> done);
// Adds the watcher's progress to the claims of the volumes in a response.
void add_progress(const self_ptr& self, v1::Response r, response_promise rp);

// The modify index a volume actor's answer carries.
inline uint64_t index_of(const v1::Volume& v) {
  return v.modify_index();
}
inline uint64_t index_of(const v1::ClaimResult& r) {
  return r.volume().modify_index();
}
inline uint64_t index_of(const v1::Snapshot&) {
  return 0;  // a snapshot commits nothing
}

// Sends one request to the volume's actor (with_volume_actor) and calls
// `ok` with its answer or `fail` with its error.  `Result` is pb<v1::Volume>
// or pb<v1::ClaimResult>: the answer's modify index is what the next actor
// of the volume waits for.
template <class Result, class... Ts>
void ask_volume_actor(const self_ptr& self, const volume_key& key,
                      std::function<void(Result&)> ok, std::function<void(caf::error&)> fail,
                      Ts... xs) {
  with_volume_actor(self, key,
                    [self, ok, fail, xs...](volume_actor actor,
                                            std::function<void(uint64_t)> done) {
                      self->request(actor, caf::infinite, xs...)
                          .then(
                              [ok, done](Result& r) {
                                done(index_of(r.msg));
                                ok(r);
                              },
                              [fail, done](caf::error& e) {
                                done(0);
                                fail(e);
                              });
                    });
}

// Forwards a request to the volume's actor and answers with the volume,
// once the catalog applied it.
template <class... Ts>
void ask_volume(const self_ptr& self, const volume_key& key, response_promise rp,
                std::string message, Ts... xs) {
  ask_volume_actor<pb<v1::Volume>>(
      self, key,
      [self, rp, message](pb<v1::Volume>& v) mutable {
        auto index = v.msg.modify_index();  // read before the lambda moves v
        when_applied(self, index,
                     [self, rp, message, v = std::move(v.msg)]() mutable {
                       deliver(rp, volume_response(self->state.cat, v, message));
                     });
      },
      [rp](caf::error& e) mutable { deliver(rp, to_failure(e)); }, xs...);
}

// --- leader_allocs.cpp --------------------------------------------------------
void alloc_run(const self_ptr& self, const v1::AllocRunRequest& req, response_promise rp);
void alloc_stop(const self_ptr& self, const std::string& id, response_promise rp);
void alloc_update(const self_ptr& self, const v1::AllocUpdate& u, response_promise rp);
// On the tick: replaces each lost member of a group whose claims are freed
// (control/allocs replace_lost_member) with a new alloc, placed as alloc
// run places one; a replacement no node takes now is tried again with
// backoff (1 s doubling to 30 s).
void drive_replacements(const self_ptr& self);
// Commits an alloc in a new state, if its lifecycle allows it from the
// committed one (`fallback` when it was never committed).
void set_alloc_state(const self_ptr& self, const std::string& id, v1::AllocState to,
                     std::string why, int32_t exit_code, then_fn then,
                     std::optional<v1::Alloc> fallback = std::nullopt);

void register_volume(const self_ptr& self, v1::Volume v, response_promise rp,
                     std::string verb = "registered");
void create_volume(const self_ptr& self, v1::Volume spec, response_promise rp);
void deregister_volume(const self_ptr& self, const v1::DeregisterRequest& d, response_promise rp);
void volume_claim(const self_ptr& self, v1::ClaimRequest c, response_promise rp);
void volume_release(const self_ptr& self, v1::ReleaseRequest r, response_promise rp);
void volume_detach(const self_ptr& self, const v1::VolumeDetachRequest& d, response_promise rp);
void volume_delete(const self_ptr& self, const v1::VolumeDeleteRequest& d, response_promise rp);

// --- leader_availability.cpp -----------------------------------------------------
// berth volume availability VOLUME active|pause|drain, through the volume's
// actor; a drain is then driven on every tick.
void volume_availability(const self_ptr& self, const v1::VolumeAvailabilityRequest& r,
                         response_promise rp);
// One step of every volume drain: stop the allocs using the volume, release
// the claims of command-less allocs (control/availability's plan).
void drive_volume_drains(const self_ptr& self);

// --- leader_health.cpp -----------------------------------------------------------
// On the tick, every --volume-health-interval: the condition of each
// plugin's volumes through a capable controller node (ListVolumes or
// ControllerGetVolume), a changed one committed by the volume's actor.
void check_volume_health(const self_ptr& self);
// A client's volume stats report: one node upsert when a value changed.
void volume_stats_report(const self_ptr& self, v1::VolumeStatsReport r, response_promise rp);
// Sets the volume's health metrics from the catalog (control/health's
// series_of; none for a deleted volume).
void announce_volume_health(const self_ptr& self, const volume_key& key);

// --- leader_expansion.cpp -------------------------------------------------------
// berth volume expand VOLUME SIZE: the volume's actor commits the
// expansion's record, then its steps are driven (drive_expansion).
void volume_expand(const self_ptr& self, const v1::VolumeExpandRequest& r, response_promise rp);
// Runs the volume's expansion steps through its actor, one at a time, each
// after the catalog applied the one before; `done` once it finished
// (nullopt), or with the failure of the step that could not run.
void drive_expansion(const self_ptr& self, const volume_key& key,
                     std::function<void(std::optional<failure>)> done);
// On the tick: resumes every expansion in progress (the catalog's
// `expanding`) that is not being driven, failed ones after their backoff.
void drive_expansions(const self_ptr& self);

// --- leader.cpp: leases -----------------------------------------------------------
// Answers a heartbeat of `node_id` with this leader's term and the node's
// lease once a ReadIndex round that started after it arrived confirmed the
// leadership (batched: one round for every heartbeat waiting); an error
// otherwise.  The lease is 0 when control/lease's lease_grantable says no
// at that moment (the node committed down or unknown, or being marked down).
void grant_lease(const self_ptr& self, const std::string& node_id, lease_promise rp);

// --- leader_nodes.cpp -------------------------------------------------------------
void fingerprint(const self_ptr& self, v1::Fingerprint f, response_promise rp);
// A client's heartbeat (its node actor registering again).  False when the
// leader's way back to the client is lost (control/lease.hpp, node_reach):
// the heartbeat is not counted and gets no lease.  Otherwise `registered`
// runs once the node's record is committed ready (at once when it was), so
// the lease granted after it finds the node's return committed
// (lease_grantable).
bool heartbeat(const self_ptr& self, const std::string& node_id, node_actor node,
               std::function<void()> registered);
// berth node drain and berth node eligibility.
void node_drain(const self_ptr& self, const v1::NodeDrainRequest& r, response_promise rp);
void node_eligibility(const self_ptr& self, const v1::NodeEligibilityRequest& r,
                      response_promise rp);
// berth system gc: collects every terminal alloc and down node that
// nothing needs any more, whatever their age.
void system_gc(const self_ptr& self, response_promise rp);
// Stops a running alloc through its node's client and commits it complete
// (`why`: its message); a client that is away is asked again on the next
// drive.  Drains of nodes and of volumes use it.
void stop_alloc(const self_ptr& self, const std::string& node_id, const std::string& alloc,
                std::string why);
// Timer: drives drains, marks silent nodes down, expires waits, collects
// empty plugins, and (every 30 s) terminal allocs and down nodes past their
// thresholds.
void leader_tick(const self_ptr& self);

// --- leader_acl.cpp (control/acl) ------------------------------------------------------

// berth acl ...: reads answered from the catalog; policy and token changes
// committed one at a time (key "acl"), answered once applied.
void acl_command(const self_ptr& self, const v1::Request& req, const acl::grant& g,
                 response_promise rp);
// A client node's identity (ACLs on): runs `then` with nothing once the
// node id is bound to this node secret (binding it the first time), else
// with the refusal (logged).
void with_node_identity(const self_ptr& self, const std::string& node_id, const std::string& secret,
                        std::function<void(std::optional<failure>)> then);

// --- leader_snapshots.cpp ----------------------------------------------------------
// pick_controller among the controllers that advertise `cap`.
node_actor pick_capable_controller(const self_ptr& self, const std::string& plugin_id,
                                   controller_capability cap,
                                   const v1::TopologyRequest* topology = nullptr);
// berth volume snapshot create: CreateSnapshot through the volume's actor.
void snapshot_create(const self_ptr& self, v1::SnapshotRequest r, response_promise rp);
// berth volume snapshot delete: DeleteSnapshot through a controller.
void snapshot_delete(const self_ptr& self, v1::SnapshotRequest r, response_promise rp);
// berth volume snapshot list: ListSnapshots of one plugin or of every one
// that can list snapshots.
void snapshot_list(const self_ptr& self, v1::SnapshotRequest r, response_promise rp);
// Nomad's GET /v1/volumes/external: one page of ListVolumes through a
// controller of the plugin that advertises LIST_VOLUMES.
void volume_list_external(const self_ptr& self, v1::ExternalVolumeListRequest r,
                          response_promise rp);
// berth volume modify: ControllerModifyVolume through the volume's actor,
// which commits the mutable parameters once the plugin accepted them.
void volume_modify(const self_ptr& self, v1::VolumeModifyRequest r, response_promise rp);
// volume create with snapshot_id or clone_id: checks the spec and the
// plugin's capability, and sets the clone source's external id.
std::optional<failure> prepare_content_source(const self_ptr& self, v1::Volume& spec);

}  // namespace berth::leader_flows
