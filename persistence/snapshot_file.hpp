// The Raft snapshot file (DATA/raft-snapshot.bin) in its streamed format:
// the snapshot's metadata first, then the state database's bytes as SQLite
// wrote them, so that the database is written, sent to a follower and
// installed in pieces and never held in memory whole.
//
//   "BERTHSNP" | format 2 (4 bytes) | snapshot length (8) | database
//   length (8) | CRC-32 of the rest (4) | the serialized raft Snapshot
//   (whose SnapshotData holds the members but no state_db) | the database
//
// (integers little-endian).  Format 1 (encode_snapshot_file in integrity,
// the whole database inside the serialized Snapshot) is still read:
// start-up rewrites such a file in this format (upgrade_snapshot_file in
// recovery).
//
// Plain functions with blocking file I/O; callers pick the thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "messages/failure.hpp"

namespace berth {

inline constexpr size_t snapshot_file_header = 8 + 4 + 8 + 8 + 4;

// A snapshot file's parts.
struct snapshot_file {
  std::string snapshot;    // the serialized raft Snapshot, without the database
  uint64_t db_offset = 0;  // where the database starts in the file
  uint64_t db_length = 0;
  uint64_t size() const { return db_offset + db_length; }
};

// Whether the file at `path` is in the streamed format (format 2).  A file
// that cannot be read or is shorter than the header is not.
bool is_streamed_snapshot_file(const std::string& path);

// Writes `path` (mode 0600 before any byte, then fsynced): the header,
// `snapshot` and the bytes of the SQLite database at `db_path`, streamed.
// Does not fsync the directory (the caller renames the file into place).
std::optional<failure> write_snapshot_file(const std::string& path, std::string_view snapshot,
                                           const std::string& db_path);

// Reads the header and the snapshot part of `path`.  With `verify`, also
// streams the whole file through the checksum and checks that the database
// part starts as a SQLite database.  A failure names the path and what is
// wrong (truncated, checksum, format: integrity.hpp's damage_message).
expected<snapshot_file> read_snapshot_file_parts(const std::string& path, bool verify);

// Copies the database part of the snapshot file `path` to `to` (created
// mode 0600, fsynced), in pieces.
std::optional<failure> extract_snapshot_db(const std::string& path, const snapshot_file& parts,
                                           const std::string& to);

// Up to `max` bytes of the file at `path` from `offset` (a piece to send);
// fewer only at the end of the file.
std::optional<failure> read_file_piece(const std::string& path, uint64_t offset, size_t max,
                                       std::string& out);

// Writes `bytes` at `offset` of the file at `path`, creating it (0600) and
// dropping whatever it held when `offset` is 0; fsyncs it when `sync`.
std::optional<failure> write_file_piece(const std::string& path, uint64_t offset,
                                        std::string_view bytes, bool sync);

}  // namespace berth
