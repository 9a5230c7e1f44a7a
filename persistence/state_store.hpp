// The state tables: volumes, claims, plugins, nodes and allocs as of the
// applied index, in one SQLite file.  Committed log entries are applied in
// one transaction together with the applied index, so the tables are always
// exactly the state after some prefix of the log.
//
// The log is the source of truth: this file is written with
// synchronous=NORMAL, and after a crash the entries after applied_index()
// are applied again from the log.  Applying is idempotent (entries at or
// below the applied index are skipped).
//
// Every public function returns what failed as a value (a failure naming
// the file); the state machine fail-stops where a change could not be
// applied.
//
// Not thread-safe: owned by one detached actor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "messages/berth.pb.h"
#include "messages/failure.hpp"
#include "persistence/sqlite.hpp"

namespace berth {

struct catalog;

struct state_contents {
  uint64_t applied_index = 0;
  std::vector<v1::Volume> volumes;
  std::vector<v1::Plugin> plugins;
  std::vector<v1::Node> nodes;
  std::vector<v1::Alloc> allocs;
  std::vector<v1::AclPolicy> acl_policies;
  std::vector<v1::AclToken> acl_tokens;
  uint64_t acl_bootstrap_index = 0;
};

class state_store {
 public:
  // Opens (creating) the state database at `path`; a failure names the file
  // when it cannot be opened, is damaged or was written by a newer berth.
  static expected<std::unique_ptr<state_store>> open(const std::string& path);

  expected<uint64_t> applied_index();

  // Rows in a table of the state ("volumes", "plugins", ...): a count, not
  // a load (berthd's start-up banner).
  expected<uint64_t> rows(const std::string& table);

  // Applies entries (index, encoded v1::LogEntry) in index order in one
  // transaction.  A failure when an entry cannot be decoded (naming its
  // index) or cannot be written.
  std::optional<failure> apply(const std::vector<std::pair<uint64_t, std::string>>& entries);
  // The same for entries decoded already (the replicated log decodes each
  // committed entry once, for every catalog of its server and for these
  // tables; shared, never changed).  An operator restore's entry replaces
  // the tables at its index.  A claim's alloc_volume_freed is resolved from
  // the tables' rows with the catalog's rule (control/catalog.hpp,
  // alloc_after_free), as the catalog's apply resolves it.
  using decoded = std::vector<std::pair<uint64_t, std::shared_ptr<const v1::LogEntry>>>;
  std::optional<failure> apply(decoded::const_iterator first, decoded::const_iterator last);
  // Decodes the entries after index `after`; a failure when one cannot be
  // decoded (naming its index: the log is damaged).
  static expected<decoded> decode(const std::vector<std::pair<uint64_t, std::string>>& entries,
                                  uint64_t after);
  // Decodes one committed entry (empty bytes: an empty entry, as a
  // configuration change is applied); a failure naming its index when the
  // bytes are no entry or one of a newer format than this berthd applies.
  static expected<v1::LogEntry> decode_entry(uint64_t index, const std::string& bytes);

  // Everything in the tables (`volumes` false: all but the volumes, which
  // each_volume gives one at a time).
  expected<state_contents> load(bool volumes = true);
  // Every volume, in key order, decoded one at a time, with its encoded
  // bytes: a catalog is built from them without holding every decoded
  // volume at once, or encoding them again.
  std::optional<failure> each_volume(
      const std::function<void(const v1::Volume&, const std::string&)>& f);

  // A digest of every table's rows, equal on two servers exactly when their
  // state tables are equal.
  expected<std::string> digest();

  // A consistent copy of the whole state database (VACUUM INTO), as bytes:
  // a backup (`berth operator snapshot save`).  Made in the file
  // PATH.snapshot next to the database, removed afterwards.
  expected<std::string> snapshot();

  // The same copy written to the file `path` (created 0600; not fsynced):
  // a Raft snapshot's database, streamed from there into the snapshot file.
  std::optional<failure> snapshot_to(const std::string& path);

  // Replaces the whole state database with a snapshot's bytes (atomically
  // and durably: written next to it, fsynced, renamed over it, directory
  // fsynced, before it is opened again).  A failure when the bytes are not
  // a berth state database or cannot be written; the store cannot be used
  // after a failure to reopen it.
  std::optional<failure> install(const std::string& bytes);

  // The same with the database inside a Raft snapshot file (format 2,
  // persistence/snapshot_file.hpp), copied out in pieces.
  std::optional<failure> install_snapshot_file(const std::string& snapshot_path);

  const std::string& path() const { return path_; }

 private:
  // These raise store_error (store_error.hpp); the public functions return
  // it as a failure.
  explicit state_store(const std::string& path);
  void reopen();
  uint64_t applied();
  void apply_all(decoded::const_iterator first, decoded::const_iterator last);
  void install_bytes(const std::string& bytes);
  void copy_to(const std::string& path);
  // Renames the fsynced database file `tmp` over the state database.
  void replace_with(const std::string& tmp);
  void apply_batch(decoded::const_iterator first, decoded::const_iterator last);
  void apply_change(const v1::Change& c);
  // The rows a free's alloc_volume_freed is resolved on (its alloc, the
  // alloc's node, the volume), as a catalog of just them.
  catalog rows_for(const v1::AllocVolumeFreed& f);
  // The version of the object an entry's expectation names, read from the
  // tables (control/catalog's version_in, from the rows).
  uint64_t version_of(const v1::Expectation& e);

  std::string path_;
  std::unique_ptr<sql::database> db_;
  uint64_t applying_index_ = 0;  // the entry apply_batch is applying
};

}  // namespace berth
