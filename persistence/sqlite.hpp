// A thin RAII layer over the SQLite C API: a connection and prepared
// statements.  Internal to persistence/: errors raise store_error
// (store_error.hpp) naming the database file, and the stores' public
// functions return them as failures.
//
// Not thread-safe: each connection is owned by one (detached) actor.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>

#include "persistence/store_error.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace berth::sql {

class statement;

class database {
 public:
  // Opens (creating if missing) the file at `path`.  A damaged file (see
  // persistence/integrity.hpp: header, size, PRAGMA quick_check) raises
  // store_error with damage_message's text; so does any SQLITE_CORRUPT or
  // SQLITE_NOTADB later.
  explicit database(const std::string& path);
  ~database();
  database(const database&) = delete;
  database& operator=(const database&) = delete;

  // Runs one or more statements without results.
  void exec(std::string_view sql);
  statement prepare(std::string_view sql);
  // The statement for `sql`, prepared on first use and kept for the life of
  // the connection, reset and without bindings: for the statements run on
  // every applied change (bind, then run()).
  statement& cached(std::string_view sql);

  const std::string& path() const { return path_; }
  sqlite3* handle() { return db_; }

  [[noreturn]] void fail(const std::string& what);

  // PRAGMA quick_check; raises store_error listing the problems.
  void check_integrity();

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
  std::unordered_map<std::string, std::unique_ptr<statement>> cached_;
};

class statement {
 public:
  statement(database& db, std::string_view sql);
  ~statement();
  statement(statement&& other) noexcept;
  statement(const statement&) = delete;
  statement& operator=(const statement&) = delete;

  statement& bind(int pos, int64_t value);
  statement& bind(int pos, std::string_view text);
  statement& bind_blob(int pos, std::string_view bytes);

  // Steps once: true while a row is available.
  bool step();
  // Steps to completion and resets for reuse.
  void run();
  void reset();

  int64_t column_int(int col);
  bool column_null(int col);
  std::string column_blob(int col);
  std::string column_text(int col);

 private:
  database* db_;
  sqlite3_stmt* stmt_ = nullptr;
};

// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed uncommitted.
class transaction {
 public:
  explicit transaction(database& db);
  ~transaction();
  void commit();

 private:
  database& db_;
  bool done_ = false;
};

}  // namespace berth::sql
