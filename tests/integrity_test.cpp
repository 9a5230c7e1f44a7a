// Damage detection in the persistence layer (persistence/integrity.hpp and
// the stores): checksums, the snapshot file's header, SQLite headers and
// quick_check, each refusing with a message that names the file.
#include "persistence/integrity.hpp"

#include <doctest/doctest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "persistence/client_store.hpp"
#include "persistence/log_store.hpp"
#include "persistence/state_store.hpp"
#include "tests/persistence_values.hpp"
#include "tests/temp_dir.hpp"

using namespace berth;
using berth::test::failure_of;
using berth::test::must;
namespace fs = std::filesystem;

namespace {

struct temp_dir : berth::test::temp_dir {
  temp_dir() : berth::test::temp_dir("berth-integrity-") {}
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Runs SQL on a file behind the stores' back (as damage would).
void raw_sql(const fs::path& p, const char* sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(p.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

}  // namespace

TEST_CASE("crc32 is the IEEE CRC-32") {
  CHECK(crc32("123456789") == 0xCBF43926u);
  CHECK(crc32("") == 0u);
  CHECK(crc32("6789", crc32("12345")) == 0xCBF43926u);
}

TEST_CASE("the snapshot file round-trips and refuses damage, naming the file") {
  std::string payload(5000, 'x');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7);
  auto file = encode_snapshot_file(payload);
  CHECK(must(decode_snapshot_file("DIR/raft-snapshot.bin", file)) == payload);

  auto flipped = file;
  flipped[file.size() / 2] ^= 0x01;
  auto err = failure_of(decode_snapshot_file("DIR/raft-snapshot.bin", flipped));
  CHECK(err.find("DIR/raft-snapshot.bin is damaged") != std::string::npos);
  CHECK(err.find("checksum") != std::string::npos);
  CHECK(err.find("berth operator snapshot restore") != std::string::npos);

  err = failure_of(decode_snapshot_file("S", file.substr(0, file.size() - 1)));
  CHECK(err.find("truncated") != std::string::npos);
  err = failure_of(decode_snapshot_file("S", file.substr(0, 10)));
  CHECK(err.find("truncated") != std::string::npos);
  err = failure_of(decode_snapshot_file("S", file + "extra"));
  CHECK(err.find("too long") != std::string::npos);

  // A file from before the header: passed on as it is (its parse decides).
  CHECK(must(decode_snapshot_file("S", "legacy bytes")) == "legacy bytes");
}

TEST_CASE("a log entry whose bytes changed on disk fails its checksum") {
  temp_dir dir;
  auto path = dir.path / "log.db";
  {
    auto log = must(log_store::open(path.string()));
    log_write w;
    for (uint64_t i = 1; i <= 5; ++i) w.entries.push_back({i, 1, "entry " + std::to_string(i)});
    must(log->write(w));
    CHECK(must(log->read(1, 5)).size() == 5);
  }
  raw_sql(path, "UPDATE entries SET data = CAST('entry X' AS BLOB) WHERE idx = 3");
  auto log = must(log_store::open(path.string()));
  CHECK(must(log->read(1, 2)).size() == 2);
  auto err = failure_of(log->read(1, 5));
  CHECK(err.find(path.string() + " is damaged") != std::string::npos);
  CHECK(err.find("log entry 3 does not match its checksum") != std::string::npos);
}

TEST_CASE("entries written before checksums existed are read unchecked") {
  temp_dir dir;
  auto path = dir.path / "log.db";
  raw_sql(path,
          "CREATE TABLE entries(idx INTEGER PRIMARY KEY, term INTEGER NOT NULL, data BLOB NOT NULL);"
          "CREATE TABLE meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);"
          "INSERT INTO meta VALUES('format_version', '1');"
          "INSERT INTO entries VALUES(1, 1, CAST('old' AS BLOB));");
  auto log = must(log_store::open(path.string()));
  auto rows = must(log->read(1, 10));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].data == "old");
  log_write w;
  w.entries.push_back({2, 1, "new"});
  must(log->write(w));
  CHECK(must(log->read(1, 10)).size() == 2);
}

TEST_CASE("a truncated or overwritten SQLite file is refused before it is opened") {
  temp_dir dir;
  auto path = dir.path / "state.db";
  {
    auto store = must(state_store::open(path.string()));
    raw_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)");
  }
  // Fill it so that it has more than a few pages, then checkpoint.
  raw_sql(path,
          "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200)"
          " INSERT INTO claims SELECT 'default', 'v' || i, 'a', 'n' || (i % 7), 'write',"
          " hex(randomblob(100)) FROM n");
  raw_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)");
  auto bytes = read_all(path);
  REQUIRE(bytes.size() > 12 * 4096);
  CHECK(failure_of(check_sqlite_header(path.string())).empty());

  write_all(path, bytes.substr(0, bytes.size() / 2));
  auto err = failure_of(state_store::open(path.string()));
  CHECK(err.find(path.string() + " is damaged (truncated") != std::string::npos);

  write_all(path, bytes.substr(0, bytes.size() - 100));
  err = failure_of(state_store::open(path.string()));
  CHECK(err.find("truncated") != std::string::npos);

  write_all(path, bytes.substr(0, 50));
  err = failure_of(state_store::open(path.string()));
  CHECK(err.find("shorter than a SQLite header") != std::string::npos);

  write_all(path, std::string(16, 'Z') + bytes.substr(16));
  err = failure_of(state_store::open(path.string()));
  CHECK(err.find("not a SQLite database") != std::string::npos);

  // The last page (claims or its indexes, which load() never reads)
  // overwritten in place: quick_check finds it at open.
  auto damaged = bytes;
  for (size_t i = bytes.size() - 4096; i < bytes.size(); ++i) damaged[i] = '\x5a';
  write_all(path, damaged);
  err = failure_of(state_store::open(path.string()));
  CHECK(err.find(path.string() + " is damaged (PRAGMA quick_check") != std::string::npos);

  // And the intact file still opens.
  write_all(path, bytes);
  auto ok = must(state_store::open(path.string()));
  CHECK(must(ok->digest()).size() == 16);
}

namespace {

size_t count_rows(const fs::path& p, const char* table) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(p.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, (std::string("SELECT count(*) FROM ") + table).c_str(), -1, &st,
                             nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  auto n = static_cast<size_t>(sqlite3_column_int64(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

}  // namespace

TEST_CASE("a file cut short by a checkpoint opens from its write-ahead log") {
  // The state a process killed during a checkpoint leaves: the checkpoint
  // wrote page 1 (the header, with the new page count) but not the pages
  // after it, and the log still holds them all.
  temp_dir dir;
  auto path = dir.path / "state.db";
  auto cut = dir.path / "cut.db";
  { auto store = must(state_store::open(path.string())); }
  raw_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "PRAGMA wal_autocheckpoint=0", nullptr, nullptr, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db,
                       "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300)"
                       " INSERT INTO claims SELECT 'default', 'v' || i, 'a', 'n' || (i % 7),"
                       " 'write', hex(randomblob(100)) FROM n",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  // The file and its log before the checkpoint (the connection keeps the log).
  fs::copy_file(path, cut);
  fs::copy_file(path.string() + "-wal", cut.string() + "-wal");
  REQUIRE(sqlite3_exec(db, "PRAGMA wal_checkpoint(FULL)", nullptr, nullptr, nullptr) == SQLITE_OK);
  auto full = read_all(path);
  sqlite3_close(db);
  auto before = read_all(cut);
  size_t page_size = (size_t(uint8_t(full[16])) << 8) | uint8_t(full[17]);
  REQUIRE(full.size() > before.size() + 4 * page_size);
  write_all(cut, full.substr(0, page_size) + before.substr(page_size));
  // The header now records more pages than the file has.
  auto header = read_all(cut).substr(0, 100);
  uint32_t pages = (uint32_t(uint8_t(header[28])) << 24) | (uint32_t(uint8_t(header[29])) << 16) |
                   (uint32_t(uint8_t(header[30])) << 8) | uint32_t(uint8_t(header[31]));
  REQUIRE(size_t(pages) * page_size == full.size());
  REQUIRE(fs::file_size(cut) < full.size());

  CHECK(failure_of(check_sqlite_header(cut.string())).empty());
  {
    auto reopened = must(state_store::open(cut.string()));
    CHECK(must(reopened->digest()).size() == 16);
  }
  CHECK(count_rows(cut, "claims") == 300);

  // Without its log the same cut is damage, named as such.
  write_all(cut, full.substr(0, page_size) + before.substr(page_size));
  fs::remove(cut.string() + "-wal");
  fs::remove(cut.string() + "-shm");
  auto err = failure_of(state_store::open(cut.string()));
  CHECK(err.find(cut.string() + " is damaged (truncated") != std::string::npos);
}

TEST_CASE("the state tables resolve a free's alloc record as the catalog does") {
  // The replay at start-up applies entries to the tables without a catalog:
  // a free's alloc_volume_freed is resolved from their rows, to the same
  // result as the catalog's apply (control/catalog, alloc_after_free).
  temp_dir dir;
  auto store = must(state_store::open((dir.path / "state.db").string()));
  v1::Volume db;
  db.set_namespace_("default");
  db.set_id("db");
  db.set_plugin_id("p");
  auto claimed = db;
  for (const char* alloc : {"one", "two", "ended"}) {
    auto* c = claimed.add_claims();
    c->set_alloc_id(alloc);
    c->set_node_id("n1");
    c->set_mode(v1::CLAIM_WRITE);
    c->set_state(v1::CLAIM_TAKEN);
  }
  v1::Node n1;
  n1.set_id("n1");
  n1.set_status(v1::NODE_READY);
  auto alloc = [](const char* id, v1::AllocState state, std::vector<const char*> volumes) {
    v1::Alloc a;
    a.set_id(id);
    a.set_namespace_("default");
    a.set_node_id("n1");
    a.set_state(state);
    for (auto v : volumes) a.add_volumes()->set_volume_id(v);
    return a;
  };
  std::vector<std::pair<uint64_t, std::string>> entries;
  entries.emplace_back(1, make_entry({upsert_change(claimed), upsert_change(n1),
                                      upsert_change(alloc("one", v1::ALLOC_RUNNING, {"db"})),
                                      upsert_change(alloc("two", v1::ALLOC_RUNNING, {"db", "x"})),
                                      upsert_change(alloc("ended", v1::ALLOC_COMPLETE, {"db"}))})
                              .SerializeAsString());
  entries.emplace_back(2, make_entry({upsert_change(db),
                                      alloc_volume_freed_change("one", "default", "db"),
                                      alloc_volume_freed_change("two", "default", "db"),
                                      alloc_volume_freed_change("ended", "default", "db"),
                                      alloc_volume_freed_change("gone", "default", "db")})
                              .SerializeAsString());
  CHECK(failure_of(store->apply(entries)).empty());
  catalog c;
  for (const auto& [index, bytes] : entries) {
    v1::LogEntry e;
    REQUIRE(e.ParseFromString(bytes));
    apply(c, index, e);
  }
  auto tables = must(store->load());
  std::map<std::string, std::string> stored;
  for (const auto& a : tables.allocs) stored[a.id()] = a.SerializeAsString();
  std::map<std::string, std::string> cataloged;
  for (const auto& [id, a] : c.allocs) cataloged[id] = a.SerializeAsString();
  CHECK(stored == cataloged);
  CHECK(stored.count("one") == 0);  // nothing left: deleted
  REQUIRE(stored.count("two") == 1);
  CHECK(c.allocs.at("two").volumes_size() == 1);
  CHECK(c.allocs.at("two").modify_index() == 2);
  CHECK(c.allocs.at("ended").volumes_size() == 1);  // an ended alloc keeps its record
}

TEST_CASE("the client database keeps the newest leader term across a restart") {
  temp_dir dir;
  auto db = (dir.path / "client.db").string();
  {
    auto store = must(client_store::open(db));
    CHECK(must(store->leader_term()) == 0);
    must(store->set_leader_term(4));
    must(store->set_leader_term(9));
  }
  auto reopened = must(client_store::open(db));
  CHECK(must(reopened->leader_term()) == 9);
}
