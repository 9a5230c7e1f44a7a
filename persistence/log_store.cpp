#include "persistence/log_store.hpp"

namespace berth {

namespace {

constexpr int64_t format_version = 1;

sql::database& init(sql::database& db) {
  db.exec(
      "PRAGMA journal_mode=WAL;"
      "PRAGMA synchronous=FULL;"
      "CREATE TABLE IF NOT EXISTS entries(idx INTEGER PRIMARY KEY, term INTEGER NOT NULL,"
      " data BLOB NOT NULL);"
      "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);");
  auto get = db.prepare("SELECT value FROM meta WHERE key='format_version'");
  if (get.step()) {
    auto v = std::stoll(get.column_text(0));
    if (v > format_version)
      throw sql::sqlite_error(db.path() + ": written by a newer berth (log format " +
                              std::to_string(v) + "); upgrade berthd to read it");
  } else {
    db.prepare("INSERT INTO meta(key, value) VALUES('format_version', ?)")
        .bind(1, std::to_string(format_version))
        .run();
  }
  return db;
}

}  // namespace

log_store::log_store(const std::string& path)
    : db_(path), insert_(init(db_).prepare("INSERT OR REPLACE INTO entries(idx, term, data) VALUES(?,?,?)")) {}

void log_store::write(const log_write& w) {
  sql::transaction tx(db_);
  if (w.truncate_from != 0)
    db_.prepare("DELETE FROM entries WHERE idx >= ?").bind(1, static_cast<int64_t>(w.truncate_from)).run();
  for (const auto& e : w.entries) {
    insert_.bind(1, static_cast<int64_t>(e.index)).bind(2, static_cast<int64_t>(e.term)).bind_blob(3, e.data);
    insert_.run();
  }
  if (!w.meta.empty()) {
    auto put = db_.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
    for (const auto& [k, v] : w.meta) {
      put.bind(1, k).bind_blob(2, v);
      put.run();
    }
  }
  tx.commit();
}

uint64_t log_store::first_index() {
  auto s = db_.prepare("SELECT COALESCE(MIN(idx), 0) FROM entries");
  s.step();
  return static_cast<uint64_t>(s.column_int(0));
}

uint64_t log_store::last_index() {
  auto s = db_.prepare("SELECT COALESCE(MAX(idx), 0) FROM entries");
  s.step();
  return static_cast<uint64_t>(s.column_int(0));
}

std::vector<log_record> log_store::read(uint64_t from, uint64_t to, size_t max) {
  std::vector<log_record> out;
  auto s = db_.prepare("SELECT idx, term, data FROM entries WHERE idx >= ? AND idx <= ? ORDER BY idx");
  s.bind(1, static_cast<int64_t>(from)).bind(2, static_cast<int64_t>(std::min<uint64_t>(to, INT64_MAX)));
  while (out.size() < max && s.step())
    out.push_back({static_cast<uint64_t>(s.column_int(0)), static_cast<uint64_t>(s.column_int(1)),
                   s.column_blob(2)});
  return out;
}

std::optional<std::string> log_store::meta(const std::string& key) {
  auto s = db_.prepare("SELECT value FROM meta WHERE key = ?");
  s.bind(1, key);
  if (!s.step()) return std::nullopt;
  return s.column_blob(0);
}

void log_store::compact(uint64_t index) {
  db_.prepare("DELETE FROM entries WHERE idx <= ?").bind(1, static_cast<int64_t>(index)).run();
}

}  // namespace berth
