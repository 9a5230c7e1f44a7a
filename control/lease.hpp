// Leases: how long a client may keep writing a volume that only one node
// may write, once it cannot reach a leader, and when the servers may hand
// such a volume to another node without the client.  Pure functions of
// plain values and clock readings the callers pass in (the client's node
// actor, the leader, berthd's option check).
//
// The protocol.  A client's heartbeat is answered by the leader, after a
// ReadIndex round confirmed with a quorum that it still leads, with the
// lease length L (berthd --node-lease).  The client's lease then runs until
// its own steady clock reads send + L, counted from when it *sent* the
// heartbeat.  The leader counts the node's silence from when it *received*
// that heartbeat, which is later, on its own steady clock, and releases the
// node's claims without it only after D (--node-down-timeout) > L of
// silence.  A new leader counts a full D from its own election, which comes
// after any heartbeat a deposed leader confirmed (the quorums of the
// confirmation and of the election share a server).  So the client's lease
// ends at least D - L (the margin) before any server releases its claims.
// When the lease ends the client fences itself: SIGTERM (SIGKILL after
// the kill timeout K, berthd --kill-timeout, 5 s) to every alloc that
// writes a single-writer volume here, then NodeUnpublish and NodeUnstage of
// its publications.  The margin must cover that fence and the rate
// difference of two steady clocks (NTP slews a clock by at most 500 ppm:
// 45 ms in 45 s); the default margin is 30 s, and berthd refuses one that
// does not cover the fence (fence_margin_ms, check_lease).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "messages/api.pb.h"
#include "messages/failure.hpp"

namespace berth {

// --- the client's side ---------------------------------------------------------

// What a client knows of its lease.  length_ms 0: no lease was ever granted
// (a client that never reached a leader has nothing to fence).
struct lease {
  int64_t length_ms = 0;
  int64_t until_ms = 0;  // the client's steady clock
};

// A grant of `length_ms` answering a heartbeat sent at `sent_ms`: runs from
// the send.  A grant never shortens a lease already held; 0 (no leader
// confirmed it) renews nothing.
lease renew(const lease& l, int64_t sent_ms, int64_t length_ms);

// Whether the lease ran out at `now_ms`.  Never without a grant.
bool expired(const lease& l, int64_t now_ms);

// The lease a restarted client holds: the rest of the one recorded before
// the restart (its length and the wall clock of its last renewal), at most
// one length, none left when the wall clock says it ran out meanwhile.
// Without a record there is no lease to fence on.
lease lease_at_start(int64_t length_ms, int64_t renewed_wall_ms, int64_t wall_now_ms,
                     int64_t steady_now_ms);

// The lease a restarted client holds when the lease file it wrote before
// (`file_text`, lease_file_text) names this boot (`boot_id`): `at_start`
// (lease_at_start) cut to the end in that file, which is on the host's
// steady clock.  The wall clock may have been set back while the agent was
// away (NTP, an operator): lease_at_start would then give it up to a whole
// lease more than the servers count, and through the file it writes again,
// every alloc's supervisor too (they outlive the agent's restart, issue 59
// item 5).  A file of another boot, or none, leaves `at_start`; a torn one
// of this boot, or one with no lease, makes it run out (the supervisors
// fence on such a file already).
lease lease_at_start_in_boot(lease at_start, const std::string& file_text,
                             const std::string& boot_id);

// Whether a renewal at wall time `renewed_wall_ms` is recorded in client.db
// for a restart (lease_at_start), the last one recorded at
// `recorded_wall_ms`: at most once a second, and at least every quarter of
// the lease.  An older record only ends a restarted client's lease sooner,
// but a record a whole short lease old (1 s: a lease of a third of a 3 s
// node-down timeout, renewed every 250 ms) made a restarted client find its
// lease out and fence a healthy alloc (integration.lifecycle under load).
bool lease_record_due(int64_t recorded_wall_ms, int64_t renewed_wall_ms, int64_t length_ms);

// How often a client with lease length `length_ms` heartbeats: a quarter
// of the lease (at least 100 ms); before it has a lease, every
// `interval_ms` (--fingerprint-interval).  Each heartbeat costs the leader a
// ReadIndex round, so not more often than the lease needs.
int64_t heartbeat_period_ms(int64_t length_ms, int64_t interval_ms);

// Whether a publication is one the fence undoes: writable, in an access mode
// in which one node at most may write (single-node-writer,
// multi-node-single-writer).  Readers are not fenced.
bool fenced_publication(v1::AccessMode mode, bool read_only);

// A publication on the client, as the fence sees it.
struct publication_fact {
  std::string alloc_id;
  v1::AccessMode mode = v1::ACCESS_MODE_UNKNOWN;
  bool read_only = false;
};

// What the fence does: the allocs whose commands it stops (then unmounts
// every publication of theirs), and the allocs without a running command
// whose publications it unmounts at once (a claim made with `berth volume
// claim`: whoever writes the path is not berth's to stop).
struct fence_plan {
  std::set<std::string> stop;
  std::set<std::string> unmount;
  bool empty() const { return stop.empty() && unmount.empty(); }
};
fence_plan plan_fence(const std::vector<publication_fact>& publications,
                      const std::set<std::string>& running_allocs);

// Whether a node may start an alloc's command now: not while its lease is
// out (`lease_out`) when the alloc writes any volume.  The fence stops such
// a writer at once and may already have unmounted what it writes: a
// NodePublishVolume sent before the lease ran out can finish after the
// fence unmounted the volume, and the command then ran on a path that was
// gone (fault.short, seed 111342638, check 6).  Readers may start.
bool start_allowed(bool lease_out, const v1::Alloc& alloc);

// The lease guard (actors/lease_guard) stops the writers of plan.stop the
// moment the lease runs out, on a thread of its own, so a node actor held
// up (a slow client.db fsync, a busy scheduler) does not delay it.  Its
// step for one writer: nothing while the lease holds or none was granted
// (`lease_until_ms` 0); SIGTERM once the lease has run out; SIGKILL from the
// kill timeout after that SIGTERM, and again every second until the writer
// is gone.  `term_at_ms` and `kill_at_ms` are the writer's record of what
// was sent (0: nothing yet); the step updates them.
enum class guard_signal { none, term, kill };
guard_signal guard_step(int64_t now_ms, int64_t lease_until_ms, int64_t kill_timeout_ms,
                        int64_t& term_at_ms, int64_t& kill_at_ms);

// The guard that outlives the agent.  The lease guard is a thread of the
// client's agent: a killed (or frozen) agent stops nobody, and its allocs'
// commands would write on after the servers marked the node down and handed
// its volumes to another node (the fault suite's kill-client with the
// agent down longer than the node-down timeout).  So every alloc command
// runs under its own supervisor process, berth-alloc (apps/berth-alloc),
// which the agent's death does not stop: the agent writes its lease to a
// file (DATA/lease) at its start and on every renewal, and the supervisor
// of an alloc that writes a single-writer volume steps guard_step on what
// the file says, with the same kill timeout.  Both clocks are the host's
// steady clock (CLOCK_MONOTONIC), shared by every process of one boot; the
// file names the boot, so a file left from an earlier boot counts as no
// lease.  What the file holds: "BOOT_ID UNTIL_MS\n".
std::string lease_file_text(const std::string& boot_id, int64_t until_ms);
// The lease end a supervisor steps on, from the file's text: its UNTIL_MS
// when the text is well formed, names `boot_id` and a granted lease (> 0);
// otherwise 1, a lease that ran out long ago (no file, a torn or foreign
// one, none granted: a writer runs only after a grant, so anything else is
// a lapse, and the supervisor fences rather than trusts it).
int64_t lease_until_in_file(const std::string& text, const std::string& boot_id);
// The lease end a supervisor keeps after reading the file (`held_until_ms`
// 0: nothing read yet): the later of what it held and what it read.  Every
// value the agent writes was a lease it held, so a shorter one (a
// restarted agent's record, older than the file) never shortens what it
// held.  The supervisor reads the file only once what it held has run out,
// so a renewal found then continues the lease.  Once it has signalled its
// command (`signalled`: SIGTERM sent), what it held stays: a renewal after
// that (a restarted agent) does not spare the command the SIGKILL after
// the kill timeout.
int64_t supervisor_lease_until(int64_t held_until_ms, int64_t read_until_ms, bool signalled);

// The publish floor.  A claim's NodeStage/NodePublish may reach a node
// after its lease ran out and the servers released the claim without it
// (a call queued behind a slow plugin, or sent just before a partition,
// runs after the heal): a publication nobody releases any more.  So once
// its lease runs out a node publishes nothing (the floor is
// `floor_lapsed`), and from the first renewal after that, only claims
// committed at or after the leader's applied index in that renewal (the
// index is at least that of any mark-down of the node decided before the
// renewal).  A request's volume carries the index of its claim's commit.
//
// A client that has held no lease since it started (none granted yet, none
// recorded before a restart) publishes nothing either: it has no lease to
// lose, so it would never fence what it published.  A claim committed
// between its registration and its first grant (the grant waits for the
// registration's commit and a ReadIndex round) was published on such a
// client, whose heartbeats a partition cut before its first answer came;
// marked down, its claim went to another node while it still wrote
// (integration.partition on a loaded CI machine).  Its publishes wait for
// the first grant (publish_waits_for_lease; actors/node refuses them after
// a while), and that grant sets the floor to 0: a process that never held a
// lease was sent nothing before it connected (calls to an earlier process
// died with its connections), a deposed leader's call is refused by the
// term fence the grant's answer raised, and the leader that grants it
// publishes no claim it released.
constexpr uint64_t floor_lapsed = UINT64_MAX;
// The floor a client starts with: 0 while a lease recorded before a restart
// still holds, floor_lapsed otherwise.
uint64_t floor_at_start(const lease& l, int64_t now_ms);
// The floor after a grant answering a heartbeat; `first_lease`: the client
// held no lease since it started.
uint64_t floor_after_renewal(uint64_t floor, uint64_t applied_index, bool first_lease = false);
bool publish_allowed(uint64_t claim_index, uint64_t floor);
// Whether a publish waits for the client's first lease instead of being
// judged against the floor: none held since the start.
bool publish_waits_for_lease(const lease& l, uint64_t floor);
// Whether a ControllerPublishVolume this node runs as its plugin's
// controller may go: judged against the floor like a publish once the node
// held a lease.  A controller step held in a partition while the node's
// lease ran out, from a leader deposed meanwhile (the node never heard of
// the new term), reached the node after the heal and attached a volume
// whose claim the new leader had released (claim simulation seed 9007).
// Before its first lease it runs: a new process was sent nothing before it
// connected, and its term fence (client.db) refuses a deposed leader.
bool controller_publish_allowed(const lease& l, uint64_t floor, uint64_t claim_index);
// How long a publish waits for the client's first lease before it is
// refused (as long as the answer to a heartbeat without a lease may take),
// and whether one that waited since `since_ms` is refused at `now_ms`.
constexpr int64_t first_lease_wait_ms = 10'000;
bool first_lease_wait_over(int64_t since_ms, int64_t now_ms);

// --- the servers' side -----------------------------------------------------------

// Whether the leader grants a lease to a heartbeat, judged when the lease
// is handed out (after its ReadIndex round).  Only to a node the committed
// state has ready with a client and that no mark-down of this leader is
// under way for.  A lease given while a mark-down is in flight outlives it:
// the mark-down commits and its claims are released without the node
// (by this leader, or at once by a newer one that sees the node down)
// while the node holds a fresh lease and may still publish and write
// (claim simulation seed 73245: an expansion's NodePublish of a deposed
// leader reached the node after its claim was freed without it).  Nor to
// a node committed down or unknown: a newer leader that never saw the
// node's return releases its claims without it at once, and counts no
// node-down timeout.  The heartbeat that finds it down or unknown commits
// its return, and its answer waits for that commit (leader_flows::heartbeat).
bool lease_grantable(const v1::Node* committed, bool marking_down);

// The lease length when --node-lease is not given: a third of the node-down
// timeout (15 s of the default 45 s, a 30 s margin).
int64_t default_lease_ms(int64_t node_down_ms);

// The fence the margin D - L must cover, as the servers assume it
// (berthd --kill-timeout and --fence-unmount-time; a client's own
// --kill-timeout is the grace its allocs get, so give clients the servers'
// value or less: a client learns L in its grants but never D or the
// servers' values, so it cannot check this itself).
struct fence_times {
  int64_t kill_timeout_ms = 5000;  // K: SIGTERM, then SIGKILL this much later
  int64_t unmount_ms = 5000;       // U: the fence's NodeUnpublish + NodeUnstage
};

// The polls between the lease's end and the unmount's start: the lease
// guard's and the supervisors' checks (50 ms) and the node actor's poll
// that finds the stopped command gone (200 ms).
constexpr int64_t fence_poll_ms = 250;

// The least margin D - L that covers a client's fence.  From the lease's
// end (the client's clock): the lease guard and each alloc's supervisor
// send SIGTERM at once and SIGKILL K later, so the writers are gone by
// K + the polls; the node actor starts the fence's unmounts once the
// command is gone and its own lease tick (every heartbeat period, L/4, at
// least 100 ms) found the lease out, so they start by max(K, L/4) + the
// polls and end U later.  The servers count D on their own clock: the
// rates of two steady clocks differ by at most 1000 ppm (500 each), D/1000
// (rounded up).  So D - L >= max(K, L/4) + U + 250 ms + D/1000.  What it
// cannot cover: a writer in an uninterruptible sleep (SIGKILL waits for
// it), an unmount that fails or outlasts U (retried; the servers release
// without it), a node actor held longer than a poll (the guard still
// stops the writers, the unmount comes late), a client whose agent is
// dead (nothing unmounts: --keep-down-writers).
int64_t fence_margin_ms(int64_t lease_ms, int64_t node_down_ms, const fence_times& fence);

// Whether D and L leave that margin.
bool margin_covers_fence(int64_t lease_ms, int64_t node_down_ms, const fence_times& fence);

// The least node-down timeout whose margin covers the fence: with the
// lease `lease_ms`, or, when `lease_ms` is 0 (--node-lease not given), with
// the default lease of that timeout (a third of it).
int64_t least_node_down_ms(int64_t lease_ms, const fence_times& fence);

// The options' check (berthd, where D and L are known: servers and --dev):
// a lease of more than 0, and a margin that covers the fence
// (margin_covers_fence); a failure naming the inequality, the values and
// the fix.  `lease_given`: --node-lease was given (else `lease_ms` is the
// default, a third of D, and the fix says so).
std::optional<failure> check_lease(int64_t lease_ms, int64_t node_down_ms, const fence_times& fence,
                                   bool lease_given = true);

// The leader's check of a client's own --kill-timeout (`client_kill_ms`,
// sent with each heartbeat) against the margin its lease leaves: the
// servers' check (check_lease) assumes their own --kill-timeout, and a
// client given a longer one would still be running its writers' SIGTERM
// grace when the servers release its claims.  Accepted when the margin
// D - L covers the fence with the client's K and the servers'
// --fence-unmount-time; otherwise a failure (invalid: a configuration to
// fix, not to retry) naming the node, both values, the most the client may
// take and the fixes.  The leader grants such a client no lease, and the
// client exits with the message.
std::optional<failure> check_client_fence(const std::string& node_id, int64_t client_kill_ms,
                                          int64_t lease_ms, int64_t node_down_ms,
                                          const fence_times& servers);

// The longest --kill-timeout a client may have under that lease and
// timeout (check_client_fence), 0 when none fits.
int64_t most_client_kill_ms(int64_t lease_ms, int64_t node_down_ms, const fence_times& servers);

// --- the way back: the leader's calls to a client --------------------------------
//
// A heartbeat proves the way from a client to the leader, not the way back.
// The leader's calls reach a node actor over CAF's routes, and a route
// through a server can go stale while the client's heartbeats still arrive
// (the client reconnected through another server after a partition, and the
// leader's route still goes through the one it left: every call and ping
// is lost in silence).  Then every CSI step sent there waited out its ping
// guard, and a controller picked there held up its plugin's whole queue
// (issue 26, partition-client with proxies, seeds 2 and 5).  So the leader
// pings each client while it heartbeats; a ping that went unanswered for
// its timeout marks the way back lost: the leader sends the node nothing
// (it counts as not connected), does not count its heartbeats as heard,
// and grants it no lease.  Without a lease the client tries its next
// server after two heartbeats (a new route), and fences itself once its
// lease runs out; the node is marked down when its last counted heartbeat
// is older than --node-down-timeout.  One answered ping brings it back.
struct node_reach {
  int64_t asked_ms = 0;     // a ping in flight since then (0: none)
  int64_t answered_ms = 0;  // the last ping answered (0: none yet)
  bool lost = false;        // the last ping went unanswered
};
// Whether to ping now: none in flight, and none answered within
// `interval_ms` (or the last one went unanswered).
bool reach_ping_due(const node_reach& r, int64_t now_ms, int64_t interval_ms);
// Whether the leader may count on the way back: until a ping goes
// unanswered it does (a new client is served at once).
bool reachable(const node_reach& r);
// After the ping sent at `asked_ms` answered (`answered`) or not.  A late
// answer of an older ping changes nothing.
node_reach reach_after_ping(node_reach r, int64_t asked_ms, bool answered, int64_t now_ms);

// A CSI step in flight on a node: its helper pings the node actor, which
// answers whether a step from that helper reached it (actors/node_call.hpp).
// A step sent on a route that died, to a client reached again another way,
// never arrives while the pings are answered: two answers in a row saying
// so (5 s apart) fail it as unavailable, and its caller retries it.  One
// answer saying no is not enough: a ping that took a new route can overtake
// a step still on its way over the old, slow one.
struct step_watch {
  int unseen = 0;  // answers in a row saying the step never arrived
};
step_watch watch_after_ping(step_watch w, bool arrived);
bool step_lost(const step_watch& w);

// A step is sent to its plugin only once its helper confirmed, right
// before, that it still waits for it (NodeVolumeRequest.confirm_start);
// the node sends nothing when no confirmation comes within
// `confirm_timeout_ms` of its question.  So a helper that gives up on a
// step without ever confirming it knows the call never starts, and its
// caller may go on without it: a step delivered late (a partition; TCP
// delivers after the heal) finds nobody to confirm it.  A helper that
// confirmed at `confirmed_ms` (0: never) holds its failure until the
// call's latest start has passed: the node's question came before the
// confirmation, so its wait ends before confirmed_ms + confirm_timeout_ms
// by any clock running at the same rate (a second more for the rates).
// How long to hold a failure found at `now_ms` (0: fail now).  Not for
// a closed connection: a yes on the way died with it.
//
// What this does not cover: a call confirmed and started, whose node is
// cut off while it runs.  Its helper fails it after the hold, and the call
// may still be running on the plugin (at most the client's --csi-timeout
// per call).  Holding the failure that long would hold the volume's
// release as long (integration.lifecycle: a client killed during a release
// step is retried at once, within 40 s).
int64_t step_failure_hold_ms(int64_t confirmed_ms, int64_t confirm_timeout_ms, int64_t now_ms);

}  // namespace berth
