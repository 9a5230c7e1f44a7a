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

#include "persistence/log_store.hpp"

namespace berth {

// Reads the committed entries in (applied, commit] from a durable log, for
// recovery of the state tables before anything starts.
std::vector<std::pair<uint64_t, std::string>> committed_after(log_store& disk, uint64_t applied);

// The snapshot file next to a durable log: DIR/raft-snapshot.bin.
std::string snapshot_path_of(const log_store& disk);

// Start-up check of a server's data directory, before anything runs: the
// snapshot file (header, checksum, decodable), every log entry (checksum,
// decodable, no gaps), and that the log, the snapshot and the state
// tables (at `applied`) fit together.  Throws damaged_file naming the
// file and the way to recover.
void check_data_dir(log_store& disk, uint64_t applied);

// The state database of the snapshot file when the state tables (at
// `applied`) are behind it (a crash while installing a leader's snapshot,
// or a lost state.db): start-up installs it before applying the log after
// it.
std::optional<std::string> snapshot_to_install(log_store& disk, uint64_t applied);

}  // namespace berth
