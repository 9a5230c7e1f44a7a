// The modes of berthd's own files: the data directory is 0700 and every
// database, snapshot and copy of the state in it is 0600, because they hold
// volumes' secrets (the state tables) and the cluster's whole state.  Set
// by each call that creates a file (open(..., 0600), or a mode fixed before
// any data is written), never through the process's umask, which would also
// change what allocs' commands create.
//
// SQLite creates a database's -wal, -shm and -journal files with the mode of
// the database file, so a database created by private_file before SQLite
// opens it keeps all of them 0600.
//
// Errors are values; POSIX only (berth-hostpath links it too).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "messages/failure.hpp"

namespace berth {

constexpr mode_t private_dir_mode = 0700;
constexpr mode_t private_file_mode = 0600;

// The permission bits `mode` keeps once group and other lose theirs (the
// owner's bits stay): 0755 -> 0700, 0644 -> 0600.
constexpr mode_t without_group_other(mode_t mode) {
  return mode & 0700;
}

// What private_dir did.
enum class dir_outcome { created, kept, tightened };

// Creates `dir` (and its missing parents, those with the default mode) with
// mode 0700; an existing `dir` with any group or other bit loses them
// (tightened: the caller logs it once).
std::optional<failure> private_dir(const std::string& dir, dir_outcome* outcome = nullptr);

// Creates `path` empty with mode 0600 when it does not exist; an existing
// file with group or other bits loses them.  So does each of its SQLite
// companions PATH-wal, PATH-shm and PATH-journal that exists.
std::optional<failure> private_file(const std::string& path);

// Creates `path` empty with mode 0600, replacing any file of that name:
// for the target of SQLite's VACUUM INTO (which must not exist or be empty).
std::optional<failure> fresh_private_file(const std::string& path);

}  // namespace berth
