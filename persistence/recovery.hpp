// Start-up recovery of a server's data directory, before any actor runs:
// checking that the log, the snapshot file and the state tables fit
// together, and what to install and apply to bring the state tables up to
// the committed log.  Used by berthd's agent; the replicated log actor
// takes over afterwards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "messages/raft.pb.h"
#include "persistence/log_store.hpp"

namespace berth {

// Every function returns damage as a failure whose message names the file
// and the way to recover (integrity.hpp's damage_message); berthd does not
// start on it.

// Reads the committed entries in (applied, commit] from a durable log, for
// recovery of the state tables before anything starts.
expected<std::vector<std::pair<uint64_t, std::string>>> committed_after(log_store& disk,
                                                                        uint64_t applied);

// The snapshot file next to a durable log: DIR/raft-snapshot.bin.
std::string snapshot_path_of(const log_store& disk);

// Start-up check of a server's data directory, before anything runs: the
// snapshot file (header, checksum, decodable), every log entry (checksum,
// decodable, no gaps), and that the log, the snapshot and the state
// tables (at `applied`) fit together.
std::optional<failure> check_data_dir(log_store& disk, uint64_t applied);

// The snapshot file's path when the state tables (at `applied`) are
// behind it (a crash while installing a leader's snapshot, or a lost
// state.db): start-up installs its database (state_store::
// install_snapshot_file) before applying the log after it.
expected<std::optional<std::string>> snapshot_to_install(log_store& disk, uint64_t applied);

// Rewrites a snapshot file of format 1 (the database inside the serialized
// Snapshot, written by berth before the streamed format) in format 2
// (persistence/snapshot_file.hpp), durably; a file in format 2, or none,
// is left alone.  check_data_dir calls it first.
std::optional<failure> upgrade_snapshot_file(const std::string& path);

// The raft Snapshot (metadata and members, no database) of a snapshot file
// of format 2; not checksummed (check_data_dir did that at start-up).
expected<raft::v1::Snapshot> read_snapshot_of(const std::string& path);

}  // namespace berth
