// Alloc supervision on a client: the allocs' commands (actors/alloc_process),
// their records in client.db, their exits and the reports of them.
//
// The decisions are pure functions on an alloc_table; the functions of the
// last section start and check processes and write client.db, and never
// throw: a SQLite error comes back as a failure naming the alloc, the file
// and what to do.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "actors/alloc_process.hpp"
#include "messages/api.pb.h"
#include "messages/model.hpp"
#include "persistence/client_store.hpp"

namespace berth {

using alloc_table = std::map<std::string, alloc_record>;  // by alloc id

// Whether the alloc's command is still running (as far as this client
// knows: it has one and saw no exit yet).
bool command_running(const alloc_record& a);

// Why a NodeUnpublishVolume the servers ask for one of alloc `alloc_id`'s
// claims is not made now: its command still runs here (a volume is never
// unmounted from under a running command, which would go on reading or
// writing the directory beneath).  The servers release the claim of an
// alloc they hold ended (lost while this node was cut off or down) as soon
// as the node is back, possibly before they told it to stop that alloc
// (fault.short seed 980723172: a read-only alloc read on after its
// volume was unpublished); the release retries until the command stopped.
std::optional<failure> refuse_unpublish_under_command(const alloc_table& allocs,
                                                      const std::string& alloc_id,
                                                      const std::string& node_id);

// The host's boot id as /proc/sys/kernel/random/boot_id gives it (empty
// when it cannot be read), and a hash of it (0 then).
std::string boot_id_text();
int64_t current_boot();

// After the host restarted (`recorded_boot`, from client.db, differs from
// `boot`), every recorded alloc command ended with the old boot, and its pid
// may belong to another process now: each is marked exited (its exit file's
// code if it has one), so nothing signals that pid.  Records `boot` as the
// current one.  A client.db problem is returned.
std::optional<failure> forget_previous_boot(client_store& store, alloc_table& allocs,
                                            int64_t boot);

// What a stop finds: an alloc whose command is not running is answered at
// once (with its exit code, 0 when it had none or is unknown) unless it has
// publications to undo; otherwise the stop waits for the exit.
bool stop_answers_at_once(const alloc_table& allocs, const std::string& id, bool unmount,
                          bool has_mounts);

// The exit code a stop answers with (0 for an unknown alloc).
int32_t exit_code_of(const alloc_table& allocs, const std::string& id);

// The alloc_update request that reports an exited alloc to the leader:
// complete with exit code 0, else failed, with how it ended.
v1::Request exit_report(const alloc_record& a, const std::string& node_id,
                        const std::string& node_secret);

// Whether the leader took an exit report (or no longer knows the alloc):
// then the client forgets it; otherwise it reports again on the next poll.
bool exit_report_taken(v1::ErrorCode code);

// Whether anything needs the poll timer: a command to watch, an exit to
// report, a stop waiting, a call waiting for its plugin.
bool needs_polling(const alloc_table& allocs, bool stops_waiting, bool calls_waiting);

// --- processes and client.db -----------------------------------------------

// Reads every recorded alloc into `allocs`.
std::optional<failure> load_allocs(client_store& store, alloc_table& allocs);

// Starts the alloc's command (if any) in alloc_dir/ID under its supervisor
// and records it; a command that cannot be recorded is killed (an
// unrecorded one would outlive a restart unsupervised).
std::optional<failure> start_alloc(client_store& store, alloc_table& allocs, const v1::Alloc& a,
                                   const std::string& alloc_dir, const std::string& node_id,
                                   const alloc_supervision& supervision);

// Checks every running command; records the exits it finds.
std::optional<failure> collect_exits(client_store& store, alloc_table& allocs);

// Forgets an alloc (client.db first, then the table).
std::optional<failure> forget_alloc(client_store& store, alloc_table& allocs,
                                    const std::string& id);

// Sends SIGTERM (kill: SIGKILL) to a running command's process group.
void signal_alloc(const alloc_table& allocs, const std::string& id, bool kill);

}  // namespace berth
