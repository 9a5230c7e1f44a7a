// The streamed snapshot file (persistence/snapshot_file.hpp): written from
// a database file, read back in parts, checked, copied out and put together
// again from pieces; and the upgrade of a file of format 1
// (persistence/recovery.hpp).
#include "persistence/snapshot_file.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>

#include "messages/api.pb.h"
#include "messages/raft.pb.h"
#include "persistence/integrity.hpp"
#include "persistence/recovery.hpp"
#include "tests/persistence_values.hpp"
#include "tests/temp_dir.hpp"

using namespace berth;
using berth::test::failure_of;
using berth::test::must;
namespace fs = std::filesystem;

namespace {

struct temp_dir : berth::test::temp_dir {
  temp_dir() : berth::test::temp_dir("berth-snapfile-") {}
};

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Bytes that start as a SQLite database does, `n` in all (pseudo-random).
std::string fake_db(size_t n, unsigned seed) {
  std::string out("SQLite format 3\0", 16);
  std::mt19937 rng(seed);
  while (out.size() < n) out.push_back(static_cast<char>(rng() & 0xff));
  out.resize(n);
  return out;
}

raft::v1::Snapshot snapshot_meta(uint64_t index, uint64_t term) {
  raft::v1::Snapshot s;
  s.mutable_metadata()->set_index(index);
  s.mutable_metadata()->set_term(term);
  v1::SnapshotData data;
  data.add_members()->set_name("s1");
  s.set_data(data.SerializeAsString());
  return s;
}

}  // namespace

TEST_CASE("a snapshot file holds the snapshot and the database, read back in parts") {
  temp_dir t;
  // Sizes around the 1 MiB pieces the file is written and read in.
  for (size_t n : {size_t{100}, size_t{1 << 20}, size_t{(1 << 20) + 1}, size_t{3 * (1 << 20) + 17}}) {
    auto db = fake_db(n, static_cast<unsigned>(n));
    write_all(t / "copy.db", db);
    auto snap = snapshot_meta(42, 7).SerializeAsString();
    REQUIRE_FALSE(write_snapshot_file(t / "snap.bin", snap, t / "copy.db"));
    CHECK(is_streamed_snapshot_file(t / "snap.bin"));
    CHECK((fs::status(t / "snap.bin").permissions() & fs::perms::all) ==
          (fs::perms::owner_read | fs::perms::owner_write));
    auto parts = must(read_snapshot_file_parts(t / "snap.bin", true));
    CHECK(parts.snapshot == snap);
    CHECK(parts.db_length == n);
    CHECK(parts.db_offset == snapshot_file_header + snap.size());
    CHECK(parts.size() == fs::file_size(t / "snap.bin"));
    REQUIRE_FALSE(extract_snapshot_db(t / "snap.bin", parts, t / "out.db"));
    CHECK(read_all(t / "out.db") == db);
  }
}

TEST_CASE("a damaged snapshot file is refused naming the file and the damage") {
  temp_dir t;
  write_all(t / "copy.db", fake_db(300000, 1));
  REQUIRE_FALSE(write_snapshot_file(t / "snap.bin", snapshot_meta(9, 2).SerializeAsString(),
                                    t / "copy.db"));
  auto good = read_all(t / "snap.bin");

  auto flipped = good;
  flipped[flipped.size() / 2] ^= 0x01;
  write_all(t / "flipped.bin", flipped);
  auto err = failure_of(read_snapshot_file_parts(t / "flipped.bin", true));
  CHECK(err.find(t / "flipped.bin") != std::string::npos);
  CHECK(err.find("checksum") != std::string::npos);
  // Without verification the parts are read all the same (start-up verified them).
  CHECK(failure_of(read_snapshot_file_parts(t / "flipped.bin", false)).empty());

  write_all(t / "short.bin", good.substr(0, good.size() - 1));
  CHECK(failure_of(read_snapshot_file_parts(t / "short.bin", false)).find("truncated") !=
        std::string::npos);
  write_all(t / "long.bin", good + "x");
  CHECK(failure_of(read_snapshot_file_parts(t / "long.bin", false)).find("too long") !=
        std::string::npos);
  write_all(t / "header.bin", good.substr(0, 20));
  CHECK(failure_of(read_snapshot_file_parts(t / "header.bin", false)).find("header") !=
        std::string::npos);

  write_all(t / "notdb.db", std::string(5000, 'x'));
  REQUIRE_FALSE(write_snapshot_file(t / "notdb.bin", "meta", t / "notdb.db"));
  CHECK(failure_of(read_snapshot_file_parts(t / "notdb.bin", true)).find("not one") !=
        std::string::npos);

  auto newer = good;
  newer[8] = 3;  // format 3
  write_all(t / "newer.bin", newer);
  CHECK(failure_of(read_snapshot_file_parts(t / "newer.bin", false))
            .find("unknown snapshot format 3") != std::string::npos);
  CHECK_FALSE(is_streamed_snapshot_file(t / "newer.bin"));
  CHECK_FALSE(is_streamed_snapshot_file(t / "missing.bin"));
}

TEST_CASE("a snapshot file sent in pieces of any size arrives whole") {
  temp_dir t;
  write_all(t / "copy.db", fake_db(2500000, 3));
  REQUIRE_FALSE(write_snapshot_file(t / "snap.bin", snapshot_meta(5, 1).SerializeAsString(),
                                    t / "copy.db"));
  auto whole = read_all(t / "snap.bin");
  for (size_t piece : {size_t{1}, size_t{4096}, size_t{1 << 20}, size_t{1 << 22}}) {
    if (piece == 1) {  // a whole file one byte at a time is slow: its start only
      std::string got;
      for (uint64_t at = 0; at < 64; ++at) {
        std::string bytes;
        REQUIRE_FALSE(read_file_piece(t / "snap.bin", at, 1, bytes));
        got += bytes;
      }
      CHECK(got == whole.substr(0, 64));
      continue;
    }
    // What was there before is dropped by the piece at offset 0.
    write_all(t / "in.bin", std::string(10000000, 'z'));
    uint64_t at = 0;
    for (;;) {
      std::string bytes;
      REQUIRE_FALSE(read_file_piece(t / "snap.bin", at, piece, bytes));
      if (bytes.empty()) break;
      bool last = at + bytes.size() == whole.size();
      REQUIRE_FALSE(write_file_piece(t / "in.bin", at, bytes, last));
      at += bytes.size();
    }
    CHECK(at == whole.size());
    CHECK(read_all(t / "in.bin") == whole);
    CHECK(must(read_snapshot_file_parts(t / "in.bin", true)).db_length == 2500000);
  }
}

TEST_CASE("a snapshot file of format 1 is rewritten in the streamed format at start") {
  temp_dir t;
  auto db = fake_db(70000, 4);
  auto snap = snapshot_meta(77, 5);
  v1::SnapshotData data;
  data.ParseFromString(snap.data());
  data.set_state_db(db);
  snap.set_data(data.SerializeAsString());
  write_all(t / "raft-snapshot.bin", encode_snapshot_file(snap.SerializeAsString()));
  CHECK_FALSE(is_streamed_snapshot_file(t / "raft-snapshot.bin"));

  must(upgrade_snapshot_file(t / "raft-snapshot.bin"));
  REQUIRE(is_streamed_snapshot_file(t / "raft-snapshot.bin"));
  auto parts = must(read_snapshot_file_parts(t / "raft-snapshot.bin", true));
  raft::v1::Snapshot got;
  REQUIRE(got.ParseFromString(parts.snapshot));
  CHECK(got.metadata().index() == 77);
  CHECK(got.metadata().term() == 5);
  v1::SnapshotData members;
  REQUIRE(members.ParseFromString(got.data()));
  CHECK(members.state_db().empty());  // the database is the file's second part
  REQUIRE(members.members_size() == 1);
  CHECK(members.members(0).name() == "s1");
  REQUIRE_FALSE(extract_snapshot_db(t / "raft-snapshot.bin", parts, t / "out.db"));
  CHECK(read_all(t / "out.db") == db);
  CHECK(must(read_snapshot_of(t / "raft-snapshot.bin")).metadata().index() == 77);
  // Nothing left behind; a second call leaves the file as it is.
  auto before = read_all(t / "raft-snapshot.bin");
  must(upgrade_snapshot_file(t / "raft-snapshot.bin"));
  CHECK(read_all(t / "raft-snapshot.bin") == before);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(t.path)) files += e.path().filename() != "out.db";
  CHECK(files == 1);

  // A damaged file of format 1 is refused, not upgraded.
  auto bad = encode_snapshot_file(snap.SerializeAsString());
  bad[bad.size() / 2] ^= 0x10;
  write_all(t / "bad.bin", bad);
  CHECK(failure_of(upgrade_snapshot_file(t / "bad.bin")).find("checksum") != std::string::npos);
}
