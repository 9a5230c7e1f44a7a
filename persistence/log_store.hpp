// The durable log of the replicated log actor: entries and small metadata
// (Raft's term and vote) in one SQLite file (WAL, synchronous=FULL).
//
// A write() returns only after its transaction is fsynced: whatever it wrote
// survives a crash (SIGKILL or power loss) from then on.  Many entries share
// one transaction, which is what makes group commit fast.
//
// Every function returns what failed as a value (a failure naming the
// file); the replicated log fail-stops on a failed write or read.
//
// Not thread-safe: owned by one detached actor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "messages/failure.hpp"
#include "persistence/sqlite.hpp"

namespace berth {

struct log_record {
  uint64_t index = 0;
  uint64_t term = 0;
  std::string data;  // an encoded v1::LogEntry (or a Raft entry payload)
};

struct log_write {
  // Entries at or after this index are removed first (Raft's log
  // truncation on conflict); 0 = none.
  uint64_t truncate_from = 0;
  std::vector<log_record> entries;
  // Metadata to set in the same transaction (e.g. "hard_state").
  std::map<std::string, std::string> meta;
};

class log_store {
 public:
  // Opens or creates the log at `path`; a failure names the file when it
  // cannot be opened, is damaged or was written by a newer berth.
  static expected<std::unique_ptr<log_store>> open(const std::string& path);

  std::optional<failure> write(const log_write& w);

  // Indexes of the first and last stored entries (0 when empty).
  expected<uint64_t> first_index();
  expected<uint64_t> last_index();

  // Entries in [from, to], at most `max` of them; a failure when one does
  // not match its checksum (the file is damaged).
  expected<std::vector<log_record>> read(uint64_t from, uint64_t to, size_t max = SIZE_MAX);

  // The value of a metadata key (none when it was never set).
  expected<std::optional<std::string>> meta(const std::string& key);

  // Drops entries up to and including `index` (after a snapshot).
  std::optional<failure> compact(uint64_t index);

  const std::string& path() const { return db_.path(); }

 private:
  explicit log_store(const std::string& path);  // raises store_error

  sql::database db_;
  sql::statement insert_;
};

}  // namespace berth
