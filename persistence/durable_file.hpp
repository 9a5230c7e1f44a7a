// Files that a later step relies on, written so that a crash or a power loss
// leaves either the old file or the new one, never a torn or vanished one:
// the bytes go to a temporary file in the same directory, which is fsynced,
// renamed over the target, and then the directory is fsynced (a rename is on
// disk only once the directory that holds it is).  Only after
// write_file_durably returns may anything depend on the new file (compact
// the log, answer a request).
//
// Errors are values.  `crash_prefix`, when not empty, names crash points
// (persistence/crashpoint.hpp) after each step: PREFIX.after_temp_fsync,
// PREFIX.after_rename, PREFIX.after_dir_fsync.
//
// Used by berthd and berth-hostpath alike; depends on nothing but POSIX.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "messages/failure.hpp"

namespace berth {

// Writes `bytes` to `path` (created or truncated, mode 0600 before any byte
// is written) and fsyncs it.
std::optional<failure> write_and_fsync(const std::string& path, std::string_view bytes);

// fsyncs the directory `dir`: the entries created, renamed or removed in it
// are durable afterwards.
std::optional<failure> fsync_dir(const std::string& dir);

// fsyncs the directory that holds `path`.
std::optional<failure> fsync_dir_of(const std::string& path);

// Renames `from` over `to` and fsyncs the directory of `to` (both must be in
// the same directory).
std::optional<failure> rename_durably(const std::string& from, const std::string& to,
                                      std::string_view crash_prefix = {});

// Replaces `path` by `bytes` through PATH.tmp, as described above.
std::optional<failure> write_file_durably(const std::string& path, std::string_view bytes,
                                          std::string_view crash_prefix = {});

}  // namespace berth
