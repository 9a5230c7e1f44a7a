// The modes of berthd's files (persistence/file_modes.hpp): the data
// directory 0700, databases (and SQLite's -wal/-shm) and snapshot files 0600,
// whatever the umask, and existing ones tightened.
#include "persistence/file_modes.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "persistence/durable_file.hpp"
#include "persistence/sqlite.hpp"
#include "persistence/state_store.hpp"

#include "tests/temp_dir.hpp"

using namespace berth;
namespace fs = std::filesystem;

namespace {

struct temp_dir : berth::test::temp_dir {
  temp_dir() : berth::test::temp_dir("berth-modes-") {}
};

// The umask a default install has: files 0644, directories 0755.
struct umask_022 {
  mode_t old;
  umask_022() : old(::umask(022)) {}
  ~umask_022() { ::umask(old); }
};

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

void make_file(const fs::path& p, mode_t mode) {
  std::ofstream(p) << "x";
  REQUIRE(::chmod(p.c_str(), mode) == 0);
}

}  // namespace

TEST_CASE("without_group_other keeps the owner's bits only") {
  CHECK(without_group_other(0755) == 0700);
  CHECK(without_group_other(0644) == 0600);
  CHECK(without_group_other(0600) == 0600);
  CHECK(without_group_other(0777) == 0700);
}

TEST_CASE("private_dir creates the data directory 0700 with its parents") {
  umask_022 m;
  temp_dir t;
  auto dir = t.path / "a" / "b" / "data";
  dir_outcome out{};
  REQUIRE_FALSE(private_dir(dir.string(), &out));
  CHECK(out == dir_outcome::created);
  CHECK(mode_of(dir) == 0700);
  REQUIRE_FALSE(private_dir(dir.string(), &out));
  CHECK(out == dir_outcome::kept);
}

TEST_CASE("private_dir tightens an existing directory with group or other bits") {
  temp_dir t;
  auto dir = t.path / "data";
  fs::create_directories(dir);
  REQUIRE(::chmod(dir.c_str(), 0755) == 0);
  dir_outcome out{};
  REQUIRE_FALSE(private_dir(dir.string(), &out));
  CHECK(out == dir_outcome::tightened);
  CHECK(mode_of(dir) == 0700);
}

TEST_CASE("private_dir names the directory it cannot create") {
  temp_dir t;
  make_file(t.path / "file", 0600);
  auto f = private_dir((t.path / "file" / "data").string());
  REQUIRE(f);
  CHECK(f->message.find("file/data") != std::string::npos);
}

TEST_CASE("private_file creates 0600 and tightens the database and its companions") {
  umask_022 m;
  temp_dir t;
  auto db = t.path / "state.db";
  REQUIRE_FALSE(private_file(db.string()));
  CHECK(mode_of(db) == 0600);
  CHECK(fs::file_size(db) == 0);
  REQUIRE(::chmod(db.c_str(), 0644) == 0);
  make_file(t.path / "state.db-wal", 0644);
  make_file(t.path / "state.db-journal", 0664);
  REQUIRE_FALSE(private_file(db.string()));
  CHECK(mode_of(db) == 0600);
  CHECK(mode_of(t.path / "state.db-wal") == 0600);
  CHECK(mode_of(t.path / "state.db-journal") == 0600);
  CHECK_FALSE(fs::exists(t.path / "state.db-shm"));
}

TEST_CASE("a database berth opens is 0600, and so are the -wal and -shm SQLite makes") {
  umask_022 m;
  temp_dir t;
  auto path = (t.path / "log.db").string();
  {
    sql::database db(path);
    db.exec("PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    CHECK(mode_of(path) == 0600);
    REQUIRE(fs::exists(path + "-wal"));
    CHECK(mode_of(path + "-wal") == 0600);
    REQUIRE(fs::exists(path + "-shm"));
    CHECK(mode_of(path + "-shm") == 0600);
  }
  {
    // A rollback journal (the default mode) likewise.
    auto other = (t.path / "other.db").string();
    sql::database db(other);
    db.exec("PRAGMA journal_mode=PERSIST; CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    REQUIRE(fs::exists(other + "-journal"));
    CHECK(mode_of(other + "-journal") == 0600);
  }
}

TEST_CASE("write_and_fsync makes the file 0600, also one that existed with another mode") {
  umask_022 m;
  temp_dir t;
  auto p = t.path / "raft-snapshot.bin.tmp";
  REQUIRE_FALSE(write_and_fsync(p.string(), "abc"));
  CHECK(mode_of(p) == 0600);
  make_file(t.path / "saved.partial", 0644);
  REQUIRE_FALSE(write_and_fsync((t.path / "saved.partial").string(), "abc"));
  CHECK(mode_of(t.path / "saved.partial") == 0600);
}

TEST_CASE("fresh_private_file replaces a file by an empty 0600 one") {
  umask_022 m;
  temp_dir t;
  auto p = t.path / "state.db.snapshot";
  make_file(p, 0644);
  REQUIRE_FALSE(fresh_private_file(p.string()));
  CHECK(mode_of(p) == 0600);
  CHECK(fs::file_size(p) == 0);
}
