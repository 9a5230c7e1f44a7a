#include "persistence/recovery.hpp"

#include <cstdio>
#include <filesystem>

#include "messages/api.pb.h"
#include "messages/raft.pb.h"
#include "persistence/durable_file.hpp"
#include "persistence/integrity.hpp"
#include "persistence/snapshot_file.hpp"
#include "persistence/store_error.hpp"

namespace berth {

namespace pbr = raft::v1;

expected<std::vector<std::pair<uint64_t, std::string>>> committed_after(log_store& disk,
                                                                        uint64_t applied) {
  return stored([&] {
    std::vector<std::pair<uint64_t, std::string>> out;
    pbr::HardState hs;
    if (auto bytes = need(disk.meta("hard_state")); bytes && !hs.ParseFromString(*bytes))
      throw store_error(damage_message(disk.path(), "its Raft hard state cannot be decoded"));
    for (auto& r : need(disk.read(applied + 1, hs.commit()))) {
      pbr::Entry e;
      if (!e.ParseFromString(r.data))
        throw store_error(
            damage_message(disk.path(), "entry " + std::to_string(r.index) + " cannot be decoded"));
      uint64_t expected = out.empty() ? applied + 1 : out.back().first + 1;
      if (r.index != expected)
        throw store_error(damage_message(
            disk.path(), "committed entry " + std::to_string(expected) + " is missing"));
      out.emplace_back(r.index, e.type() == pbr::ENTRY_NORMAL ? e.data() : std::string());
    }
    return out;
  });
}

std::string snapshot_path_of(const log_store& disk) {
  return (std::filesystem::path(disk.path()).parent_path() / "raft-snapshot.bin").string();
}

namespace {

// The raft Snapshot of a snapshot file (format 2), checked whole.
pbr::Snapshot read_snapshot_meta(const std::string& path, bool verify) {
  auto parts = need(read_snapshot_file_parts(path, verify));
  pbr::Snapshot snap;
  v1::SnapshotData data;
  if (!snap.ParseFromString(parts.snapshot) || !data.ParseFromString(snap.data()))
    throw store_error(damage_message(path, "it cannot be decoded"));
  return snap;
}

}  // namespace

namespace {

void upgrade_or_raise(const std::string& path) {
  if (!std::filesystem::exists(path) || is_streamed_snapshot_file(path)) return;
  pbr::Snapshot snap;
  v1::SnapshotData data;
  if (!snap.ParseFromString(need(read_snapshot_file(path))) || !data.ParseFromString(snap.data()))
    throw store_error(damage_message(path, "it cannot be decoded"));
  if (data.state_db().compare(0, 16, std::string("SQLite format 3\0", 16)) != 0)
    throw store_error(damage_message(path, "the state database inside it is not one"));
  auto db = path + ".upgrade.db", tmp = path + ".upgrade.tmp";
  if (auto f = write_and_fsync(db, data.state_db())) throw store_error(f->message);
  data.clear_state_db();
  snap.set_data(data.SerializeAsString());
  if (auto f = write_snapshot_file(tmp, snap.SerializeAsString(), db))
    throw store_error(f->message);
  if (auto f = rename_durably(tmp, path)) throw store_error(f->message);
  std::remove(db.c_str());
}

}  // namespace

std::optional<failure> upgrade_snapshot_file(const std::string& path) {
  return stored([&] { upgrade_or_raise(path); });
}

std::optional<failure> check_data_dir(log_store& disk, uint64_t applied) {
  return stored([&] {
    auto snap_path = snapshot_path_of(disk);
    auto state_path = (std::filesystem::path(disk.path()).parent_path() / "state.db").string();
    uint64_t snap_index = 0;
    upgrade_or_raise(snap_path);
    if (std::filesystem::exists(snap_path))
      snap_index = read_snapshot_meta(snap_path, true).metadata().index();
    if (auto bytes = need(disk.meta("hard_state"))) {
      pbr::HardState hs;
      if (!hs.ParseFromString(*bytes))
        throw store_error(damage_message(disk.path(), "its Raft hard state cannot be decoded"));
    }
    uint64_t first = 0, last = 0;
    for (const auto& r : need(disk.read(1, UINT64_MAX))) {  // checks every entry's checksum
      pbr::Entry e;
      if (!e.ParseFromString(r.data) || e.index() != r.index)
        throw store_error(
            damage_message(disk.path(), "entry " + std::to_string(r.index) + " cannot be decoded"));
      if (last != 0 && r.index != last + 1)
        throw store_error(damage_message(disk.path(), "entries " + std::to_string(last + 1) +
                                                          " to " + std::to_string(r.index - 1) +
                                                          " are missing"));
      if (first == 0) first = r.index;
      last = r.index;
    }
    if (first > 1 && snap_index == 0)
      throw store_error(damage_message(snap_path, "it is missing, but the log " + disk.path() +
                                                      " was compacted up to entry " +
                                                      std::to_string(first - 1)));
    if (first > 1 && first > snap_index + 1)
      throw store_error(damage_message(disk.path(), "it starts at entry " + std::to_string(first) +
                                                        " but the snapshot ends at entry " +
                                                        std::to_string(snap_index)));
    if (applied > std::max(last, snap_index))
      throw store_error(damage_message(
          disk.path(), "the state tables (" + state_path + ") are at entry " +
                           std::to_string(applied) + " but the log and the snapshot end at entry " +
                           std::to_string(std::max(last, snap_index)) + ": entries were lost"));
    // applied < snapshot: the state tables lag behind the snapshot (a crash
    // while installing a leader's snapshot, or a lost state.db); the snapshot
    // covers the gap (checked above), and snapshot_to_install hands it over.
    (void)state_path;
  });
}

expected<std::optional<std::string>> snapshot_to_install(log_store& disk, uint64_t applied) {
  auto snap_path = snapshot_path_of(disk);
  if (!std::filesystem::exists(snap_path)) return std::optional<std::string>();
  auto snap = read_snapshot_of(snap_path);
  if (!snap) return snap.error();
  if (applied >= snap->metadata().index()) return std::optional<std::string>();
  // Even when the log still holds the entries up to the snapshot, they are
  // no way to catch up: Raft restarts from the snapshot and hands out only
  // what follows it, and start-up applies only up to the commit index on
  // disk.  A crash after writing a leader's snapshot but before truncating
  // the log (or its hard state) leaves exactly that, and the entries in
  // between would never reach the state tables.
  return std::optional<std::string>(snap_path);
}

expected<pbr::Snapshot> read_snapshot_of(const std::string& path) {
  return stored([&] { return read_snapshot_meta(path, false); });
}

}  // namespace berth
