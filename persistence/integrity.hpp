// Start-up checks of berthd's data directory: a damaged file must stop
// berthd with a message naming the file and the way to recover, never let
// it run with wrong state.
//
// - SQLite files (log.db, state.db): the header (magic, page size, the
//   page count it records against the file's size) before opening, then
//   PRAGMA quick_check after opening (see docs/user-guide.md for its cost).
// - raft-snapshot.bin: a header (magic, format, payload length, CRC-32 of
//   the payload) written by encode_snapshot_file.
// - log entries carry a CRC-32 (log_store), checked whenever they are read.
//
// Plain functions, no actors: the stores and berthd's start-up call them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "messages/failure.hpp"

namespace berth {

// Damage found in a file of the data directory is a failure whose message
// names the file, the damage and the way to recover (damage_message).

// How to recover from damage to any file of a server's data directory.
extern const char* const recovery_hint;

// CRC-32 (IEEE, as zlib's crc32).
uint32_t crc32(std::string_view bytes, uint32_t crc = 0);

// Little-endian integers of `bytes` bytes, as the snapshot files' headers
// hold them.
void put_le(std::string& out, uint64_t v, int bytes);
uint64_t get_le(std::string_view in, size_t at, int bytes);

// Checks the SQLite file at `path` before it is opened: a missing file is
// fine (it is created); a file that is not a SQLite database, or shorter
// than its header says (truncated), is a failure naming it.  An empty file
// is accepted only without a non-empty write-ahead log next to it (an
// empty file is what a crash right after creating it leaves).  Beside a
// non-empty write-ahead log the size is not checked: a checkpoint cut short
// leaves the file shorter than its header until SQLite replays the log (the
// quick_check after open judges the result).
std::optional<failure> check_sqlite_header(const std::string& path);

// The snapshot file's bytes around a serialized raft Snapshot.
std::string encode_snapshot_file(std::string_view snapshot);

// The serialized raft Snapshot inside the file's bytes; a failure naming
// `path` when the header, the length or the checksum is wrong.  A file
// without the header (written before berth 0.1 had one) is returned as it
// is: its parse is the only check left.
expected<std::string> decode_snapshot_file(const std::string& path, std::string_view bytes);

// Reads and decodes the snapshot file at `path` (a failure when it cannot
// be read or is damaged).
expected<std::string> read_snapshot_file(const std::string& path);

// The message for damage found in `path`: "PATH is damaged (DETAIL). To
// recover: ...".
std::string damage_message(const std::string& path, const std::string& detail);

// Whether `f` reports damage (its message was made by damage_message).
bool is_damage(const failure& f);

}  // namespace berth
