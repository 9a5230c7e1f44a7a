// The pure rules of berth's domain: validation, claims, plugin health,
// re-registration and redaction.  Plain functions on the protobuf types of
// messages/berth.proto; no I/O, no clock (callers pass `now`), no actors.
//
// Functions that change an object take it by reference and either apply the
// whole change or leave it untouched and return a `failure`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "messages/berth.pb.h"
#include "messages/failure.hpp"

namespace berth {

// (berth::v1, the protobuf types, is in scope here already; an alias of it
// to itself is an error for clang.)

// --- names -------------------------------------------------------------
// The operator-facing names ("single-node-writer", "file-system", "taken",
// ...), the same in specs, output, metrics and docs.

std::string_view name_of(v1::AccessMode x);
std::string_view name_of(v1::AttachmentMode x);
std::string_view name_of(v1::ClaimMode x);
std::string_view name_of(v1::ClaimState x);
std::string_view name_of(v1::PluginType x);
std::string_view name_of(v1::NodeStatus x);
std::string_view name_of(v1::AllocState x);

std::optional<v1::AccessMode> parse_access_mode(std::string_view s);
std::optional<v1::AttachmentMode> parse_attachment_mode(std::string_view s);
std::optional<v1::PluginType> parse_plugin_type(std::string_view s);

// A volume's availability: "active", "pause", "drain" (the words of berth
// volume availability, as Docker Swarm's cluster volumes name them).
std::string_view name_of(v1::VolumeAvailability x);
std::optional<v1::VolumeAvailability> parse_volume_availability(std::string_view s);
std::string volume_availability_names();

// The words of every valid access/attachment mode, for error messages.
std::string access_mode_names();
std::string attachment_mode_names();

bool allows_writers(v1::AccessMode m);
bool single_node(v1::AccessMode m);

// --- validation --------------------------------------------------------

struct problem {
  std::string field;    // e.g. "capabilities[1].access_mode"
  std::string message;  // e.g. "unknown access mode 'rw'"
};

// Every problem of a volume registration at once.  Namespace defaults are
// applied by the caller before validation (see apply_defaults).
std::vector<problem> validate_volume(const v1::Volume& v);

// Fills in defaults: namespace "default", name = id.
void apply_defaults(v1::Volume& v);

// "volume 'db': plugin_id: is required; capabilities: ..." (one line).
std::string describe(std::string_view object, const std::vector<problem>& problems);

// Valid ids: 1..128 bytes of [A-Za-z0-9_.-], not starting with '.' or '-'.
bool valid_id(std::string_view id);
// Volume and alloc ids may also be a member of a group or count:
// BASE[N] with a valid BASE and N in 0..99999 without leading zeros
// (alloc run --count N --group web: web[0] .. web[N-1]; volume create
// --count N: db[0] ..).
bool valid_member_id(std::string_view id);
// The id of member `index` of `base`: "base[index]".
std::string member_id(const std::string& base, int index);
// Alloc ids: a valid id, a member, or the replacement of a lost member:
// BASE[N].K, K in 1..99999 without leading zeros (web[0].1 replaces web[0],
// web[0].2 replaces web[0].1).
bool valid_alloc_id(std::string_view id);
// The id of the alloc that replaces lost member `id` (web[0] -> web[0].1,
// web[0].1 -> web[0].2).
std::string replacement_id(const std::string& id);
// The most members a group (alloc run --count) or volume create --count makes.
constexpr uint32_t max_group_count = 100;

// --- plugin health -----------------------------------------------------

struct plugin_health {
  int controllers_healthy = 0;
  int controllers_expected = 0;
  int nodes_healthy = 0;
  int nodes_expected = 0;
};

// Derived from the instances every time: counts are never stored, so they
// cannot drift from the instances they count.
plugin_health health_of(const v1::Plugin& p);

// Adds or replaces the instance of `type` on instance.node_id(); a monolith
// is both a controller and a node instance.  Updates provider/version and
// the sticky controller_required flag.  Returns true when anything changed.
bool upsert_instance(v1::Plugin& p, v1::PluginType type, const v1::PluginInstance& instance);

// Removes the instances of `type` on node_id (monolith: both).  Returns true
// when anything was removed.
bool remove_instance(v1::Plugin& p, v1::PluginType type, const std::string& node_id);

// A plugin without instances can be garbage-collected.
bool plugin_is_empty(const v1::Plugin& p);

const v1::PluginInstance* node_instance(const v1::Plugin& p, const std::string& node_id);

// Whether a node's topology lies in `allowed` (every segment of `allowed`
// is the node's too).
bool topology_matches(const v1::Topology& node, const v1::Topology& allowed);

// Why volumes of this plugin cannot be claimed right now, or nullopt.
std::optional<std::string> plugin_unschedulable(const v1::Plugin& p);

// --- claims ------------------------------------------------------------

struct claim_request {
  std::string alloc_id;
  std::string node_id;
  bool write = false;
  // Optional: the capability to use; UNKNOWN = pick one that fits.
  v1::AccessMode access_mode = v1::ACCESS_MODE_UNKNOWN;
  v1::AttachmentMode attachment_mode = v1::ATTACHMENT_MODE_UNKNOWN;
  int64_t now_ms = 0;
  // How many other volumes of the plugin are published on the node; -1 =
  // unknown (max volumes per node is not checked).
  int64_t node_volume_count = -1;
  // --allow-abnormal: the volume's abnormal condition does not refuse it.
  bool allow_abnormal = false;
};

// A claim counts against the volume's limits from the moment it is taken
// until it is freed: a claim whose release is still in flight still holds
// its writer slot and its node, so two writers can never be published at
// once.
bool holds_volume(const v1::Claim& c);

// The access mode the volume is used with now (from its claims), or UNKNOWN
// when it has none.
v1::AccessMode mode_in_use(const v1::Volume& v);

// Why the volume takes no new claim now: it is paused or draining (berth
// volume availability), named with the command that allows claims again;
// nullopt when it is active.  Existing claims are not affected by it.
std::optional<failure> refuse_unavailable(const v1::Volume& v);

// Why the volume takes no new claim now because its plugin reported it
// abnormal (the leader's health check), naming the plugin's message and
// --allow-abnormal; nullopt when it is ok or the operator said
// --allow-abnormal.  Existing claims are not affected by it.
std::optional<failure> refuse_abnormal(const v1::Volume& v, bool allow_abnormal);

// Why the volume cannot be used from the node (what claim checks of the
// node): its plugin unhealthy or unregistered (`plugin` null), no healthy
// instance of it on the node, or the node outside the volume's accessible
// topology; nullopt when it is accessible.
std::optional<failure> refuse_inaccessible(const v1::Volume& v, const v1::Plugin* plugin,
                                           const std::string& node_id);

// Claims the volume for an alloc, by the rules of its availability (a
// paused or draining volume takes no new claim; a claim it holds already
// is answered as before), its access mode, the
// plugin's health and the node's plugin instance.  `plugin` is null when
// the plugin is not registered.  Claiming again with the same alloc and
// mode succeeds without change.
std::optional<failure> claim(v1::Volume& v, const claim_request& req, const v1::Plugin* plugin);

// Starts releasing an alloc's claim: the claim keeps its mode and moves to
// unpublishing.  Releasing a claim already in release succeeds unchanged;
// an alloc without a claim is not_found.
std::optional<failure> release(v1::Volume& v, const std::string& alloc_id,
                               std::string_view reason, int64_t now_ms);

// GC: starts releasing every taken claim whose alloc is not live.  Returns
// the alloc ids whose claims it released.
template <class IsLive>
std::vector<std::string> gc_release(v1::Volume& v, IsLive&& is_live, int64_t now_ms) {
  std::vector<std::string> released;
  for (const auto& c : v.claims())
    if (c.state() == v1::CLAIM_TAKEN && !is_live(c.alloc_id())) released.push_back(c.alloc_id());
  for (const auto& id : released) release(v, id, "gc", now_ms);
  return released;
}

// Moves a released claim forward to `to` (node-detached,
// controller-detached, ready-to-free).  Steps may be skipped (no controller
// to detach) but never go back; repeating the current state succeeds.
std::optional<failure> advance_claim(v1::Volume& v, const std::string& alloc_id,
                                     v1::ClaimState to);

// Removes a claim that reached ready-to-free.
std::optional<failure> free_claim(v1::Volume& v, const std::string& alloc_id);

const v1::Claim* find_claim(const v1::Volume& v, const std::string& alloc_id);

// Whether another claim than `alloc_id`'s is still published on `node_id`
// (taken, or released but not yet unpublished).  While one is, the node's
// staging stays (no NodeUnstage) and so does the controller attachment (no
// ControllerUnpublish).  Decided from the current claims, never from counts
// taken earlier.
bool other_publications_on_node(const v1::Volume& v, const std::string& node_id,
                                const std::string& alloc_id);

// --- allocs and the volume watcher -------------------------------------

// complete, failed and lost allocs hold their claims only until the volume
// watcher released them.
bool alloc_terminal(v1::AllocState s);

// Every problem of an alloc to run at once: node, volumes (names unique,
// valid ids), command.
std::vector<problem> validate_alloc(const v1::Alloc& a);

// The environment variable that carries a volume's published path into
// the alloc's command: BERTH_VOLUME_<NAME>, upper case, [^A-Z0-9] -> '_'.
std::string volume_env_name(std::string_view volume_name);

// Parses an alloc run --volume argument: NAME=VOLUME[:ro][,mount_flag=F]...
std::variant<v1::AllocVolume, std::string> parse_alloc_volume(std::string_view arg);

// The claims of a volume the volume watcher must release now: claims
// already in release (a leader change or a failed step left them there),
// and taken claims whose alloc is terminal or vanished.  `alloc_state`
// maps an alloc id to its state, nullopt when the alloc does not exist.
template <class AllocState>
std::vector<std::string> claims_to_release(const v1::Volume& v, AllocState&& alloc_state) {
  std::vector<std::string> out;
  for (const auto& c : v.claims()) {
    if (c.state() != v1::CLAIM_TAKEN) {
      out.push_back(c.alloc_id());
      continue;
    }
    std::optional<v1::AllocState> s = alloc_state(c.alloc_id());
    if (!s || alloc_terminal(*s)) out.push_back(c.alloc_id());
  }
  return out;
}

// Whether the claim of `alloc_id` on `v` is taken by an alloc that lives
// (known and not terminal): what claims_to_release never picks, checked
// again by the leader against its catalog when the watcher asks, since the
// watcher's view may be behind.
template <class AllocState>
bool claim_alloc_is_live(const v1::Volume& v, const std::string& alloc_id,
                         AllocState&& alloc_state) {
  for (const auto& c : v.claims()) {
    if (c.alloc_id() != alloc_id || c.state() != v1::CLAIM_TAKEN) continue;
    std::optional<v1::AllocState> s = alloc_state(alloc_id);
    return s && !alloc_terminal(*s);
  }
  return false;
}

// The watcher's delay before retrying a failed step: exponential from
// base_ms, capped at cap_ms, scaled by a jitter in [0, 1) into
// [delay/2, delay) so that retries of many claims spread out.
int64_t retry_delay_ms(uint32_t attempts, double jitter, int64_t base_ms = 500,
                       int64_t cap_ms = 30000);

// The fence against deposed leaders (NodeVolumeRequest.leader_term): what a
// node does with a CSI request of leader term `term` when the newest term
// it took requests from is `seen`.  Term 0 is unfenced (accepted as is).
enum class fence_verdict {
  accept,         // the current leader (or unfenced)
  accept_newer,   // a newer leader: record its term first, then run
  refuse,         // a deposed leader: run nothing
};
fence_verdict fence(uint64_t seen, uint64_t term);

// What a server tells clients in heartbeat answers: the newest term in
// which a leader is known, after it heard of Raft term `term` with
// (`leader_known`) or without a leader.  A term without a known leader may
// never have one (a failed election), and fencing clients to it could
// refuse the leader still in charge; the newest term with a leader is safe,
// as every leader of an older term is deposed by it.
uint64_t newest_leader_term(uint64_t known, uint64_t term, bool leader_known);

// --- registration ------------------------------------------------------

// Applies a re-registration `incoming` onto the registered `current`.
// Immutable: plugin_id, external_id, parameters; capabilities and mount
// options may not change while the volume has claims.  Context, secrets,
// name and the rest may change.  Claims and indexes are kept.
std::optional<failure> reregister(v1::Volume& current, const v1::Volume& incoming);

// Deregistration is refused while any claim exists (taken or in release).
std::optional<failure> can_deregister(const v1::Volume& v);

// deregister --force drops the claims whose release is stuck, never a live
// (taken) one: those are released through the release workflow first.
std::optional<failure> can_force_deregister(const v1::Volume& v);

// --- redaction ---------------------------------------------------------

// A copy fit for output: no secrets, no mount flags.
v1::Volume redacted(const v1::Volume& v);

// The volume's health from its plugin: nullopt when claims may proceed,
// else the reason.
std::optional<std::string> volume_unhealthy(const v1::Volume& v, const v1::Plugin* plugin);

}  // namespace berth
