#include "persistence/sqlite.hpp"

#include <sqlite3.h>

#include "persistence/file_modes.hpp"
#include "persistence/integrity.hpp"

namespace berth::sql {

namespace {

bool is_damage(int rc) {
  rc &= 0xff;  // the primary result code of an extended one
  return rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB;
}

}  // namespace

database::database(const std::string& path) : path_(path) {
  if (auto f = check_sqlite_header(path)) throw store_error(f->message);
  // Created 0600 before SQLite sees it: its -wal, -shm and -journal files
  // take the database file's mode.
  if (auto f = private_file(path)) throw store_error(f->message);
  int rc = sqlite3_open_v2(path.c_str(), &db_,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  try {
    if (rc != SQLITE_OK) fail("cannot open");
    sqlite3_extended_result_codes(db_, 1);
    sqlite3_busy_timeout(db_, 5000);
    check_integrity();
  } catch (...) {
    sqlite3_close_v2(db_);
    throw;
  }
}

void database::check_integrity() {
  // quick_check: every page and record is well formed, without comparing
  // indexes to their tables (integrity_check's extra, and costly, part).
  std::string problems;
  int lines = 0;
  {
    auto s = prepare("PRAGMA quick_check(5)");
    while (s.step()) {
      auto line = s.column_text(0);
      if (line == "ok") continue;
      if (lines++ > 0) problems += "; ";
      problems += line;
    }
  }
  if (!problems.empty())
    throw store_error(damage_message(path_, "PRAGMA quick_check: " + problems));
}

database::~database() {
  cached_.clear();  // finalized before the connection closes
  sqlite3_close_v2(db_);
}

statement& database::cached(std::string_view sql) {
  auto it = cached_.find(std::string(sql));
  if (it == cached_.end())
    it = cached_.emplace(std::string(sql), std::make_unique<statement>(*this, sql)).first;
  it->second->reset();  // a step that threw left it mid-way
  return *it->second;
}

void database::fail(const std::string& what) {
  std::string msg = path_ + ": " + what;
  if (db_ != nullptr) {
    if (is_damage(sqlite3_extended_errcode(db_)))
      throw store_error(damage_message(path_, what + ": " + sqlite3_errmsg(db_)));
    msg += ": " + std::string(sqlite3_errmsg(db_));
  }
  throw store_error(msg);
}

void database::exec(std::string_view sql) {
  char* err = nullptr;
  std::string text(sql);
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    if (is_damage(rc) || is_damage(sqlite3_extended_errcode(db_)))
      throw store_error(damage_message(path_, msg));
    throw store_error(path_ + ": " + msg + " (in: " + text.substr(0, 60) + ")");
  }
}

statement database::prepare(std::string_view sql) { return statement(*this, sql); }

statement::statement(database& db, std::string_view sql) : db_(&db) {
  if (sqlite3_prepare_v2(db.handle(), sql.data(), static_cast<int>(sql.size()), &stmt_,
                         nullptr) != SQLITE_OK)
    db.fail("cannot prepare '" + std::string(sql.substr(0, 60)) + "'");
}

statement::statement(statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) {
  other.stmt_ = nullptr;
}

statement::~statement() { sqlite3_finalize(stmt_); }

statement& statement::bind(int pos, int64_t value) {
  if (sqlite3_bind_int64(stmt_, pos, value) != SQLITE_OK) db_->fail("bind");
  return *this;
}

statement& statement::bind(int pos, std::string_view text) {
  if (sqlite3_bind_text(stmt_, pos, text.data(), static_cast<int>(text.size()),
                        SQLITE_TRANSIENT) != SQLITE_OK)
    db_->fail("bind");
  return *this;
}

statement& statement::bind_blob(int pos, std::string_view bytes) {
  if (sqlite3_bind_blob(stmt_, pos, bytes.data(), static_cast<int>(bytes.size()),
                        SQLITE_TRANSIENT) != SQLITE_OK)
    db_->fail("bind");
  return *this;
}

bool statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_->fail("step");
}

void statement::run() {
  while (step()) {
  }
  reset();
}

void statement::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t statement::column_int(int col) { return sqlite3_column_int64(stmt_, col); }

bool statement::column_null(int col) { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

std::string statement::column_blob(int col) {
  auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_, col));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : std::string();
}

std::string statement::column_text(int col) {
  auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : std::string();
}

transaction::transaction(database& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

transaction::~transaction() {
  if (!done_) {
    try {
      db_.exec("ROLLBACK");
    } catch (...) {
    }
  }
}

void transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace berth::sql
