#pragma once
// berth-hostpath's durable store: a snapshot (state.json, the whole state,
// replaced atomically) and next to it an append-only journal
// (state.journal) of the changes made since. A save appends one line, the
// records of one group commit, and fdatasyncs it: its cost is the size of
// the change, not of the state. When the journal grows past its limit, the
// next save compacts instead: it writes the whole state to the snapshot
// (temporary file, fsync, rename, fsync of the directory) and then empties
// the journal (ftruncate, fsync).
//
// A journal line is "CRC SP JSON LF": CRC, 8 lowercase hex digits, the
// CRC-32 of JSON, a list of records (state.hpp). Loading reads the snapshot
// and replays the journal's lines over it. The last line may be torn (a
// crash during its append: no LF, or a checksum or JSON that does not
// match): it is ignored, and cut off before the next append, since its
// group was never answered. Any other bad line means the file is damaged:
// loading throws rather than forget a mount. A crash between the rename of
// a new snapshot and the emptying of the journal is harmless: replaying
// records the snapshot already holds changes nothing (records are
// idempotent), and every record of the journal precedes that snapshot.
//
// An old state.json without a journal loads as it is.
//
// Thread safety: none; the plugin saves from one thread at a time.
// Crash points (docs/testing.md): hostpath.journal.after_write (appended,
// not yet fdatasynced), hostpath.journal.after_sync, and in a compaction
// hostpath.state.after_temp_fsync, .after_rename, .after_dir_fsync, then
// hostpath.journal.after_truncate.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "state.hpp"

namespace berth::hostpath {

// One journal line (with its LF) holding `rs`.
std::string encode_journal_line(const std::vector<record>& rs);

struct replayed {
  int64_t valid_bytes = 0;  // the length of the journal's intact lines
  int64_t lines = 0;        // intact lines replayed
  bool torn = false;        // a torn last line was ignored
};

// Applies the journal text `bytes` to `s`, line by line. A torn last line
// is ignored (torn = true); a bad line followed by anything throws
// std::runtime_error naming `what` (the file) and the line's offset.
replayed replay_journal(std::string_view bytes, state& s, const std::string& what);

// CRC-32 (IEEE, as zlib's).
uint32_t crc32_of(std::string_view bytes);

class store {
 public:
  // When a save compacts instead of appending: with `limit` >= 0, once the
  // journal holds at least `limit` bytes (0: every save compacts, as a
  // whole-file save did); with -1, once it holds at least max(`floor`,
  // twice the snapshot's size), so compactions cost O(1) per byte appended.
  store(std::filesystem::path snapshot, std::filesystem::path journal, int64_t limit = -1,
        int64_t floor = 4 << 20);
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  // Reads the snapshot and replays the journal (see above); cuts a torn
  // last line off, durably. Can be called again (--shared-root re-reads
  // before each call). Throws std::runtime_error.
  state load();

  // Appends `rs` as one line and fdatasyncs it. Throws std::runtime_error;
  // after a failure the journal's end is unknown, so the next save must
  // compact (must_compact() says so).
  void append(const std::vector<record>& rs);

  // True when the next save should be a compaction: the journal is past
  // its limit, or an append failed.
  bool must_compact() const;

  // Makes the next save a compaction (another store's part of the same save
  // failed, so this one's records of it may be missing too).
  void mark_broken() { broken_ = true; }

  // Replaces the snapshot by `s` and empties the journal. Throws.
  void compact(const state& s);

  // Makes sure the snapshot file exists (writing an empty state if not).
  void create_snapshot_if_missing();

  int64_t journal_bytes() const { return journal_bytes_; }
  int64_t snapshot_bytes() const { return snapshot_bytes_; }

 private:
  void open_journal();

  std::filesystem::path snapshot_;
  std::filesystem::path journal_;
  int64_t limit_;
  int64_t floor_;
  int fd_ = -1;                // the journal, O_APPEND
  int64_t journal_bytes_ = 0;  // its intact length
  int64_t snapshot_bytes_ = 0;
  bool broken_ = false;  // an append failed: compact next
};

}  // namespace berth::hostpath
