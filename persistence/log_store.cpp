#include "persistence/log_store.hpp"

#include "persistence/integrity.hpp"

namespace berth {

namespace {

constexpr int64_t format_version = 1;

sql::database& init(sql::database& db) {
  db.exec(
      "PRAGMA journal_mode=WAL;"
      "PRAGMA synchronous=FULL;"
      "CREATE TABLE IF NOT EXISTS entries(idx INTEGER PRIMARY KEY, term INTEGER NOT NULL,"
      " data BLOB NOT NULL, crc INTEGER);"
      "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);");
  // Logs written before entries had a checksum get the column; their old
  // rows keep NULL (not checked), new rows are checked on every read.
  bool has_crc = false;
  for (auto cols = db.prepare("PRAGMA table_info(entries)"); cols.step();)
    has_crc = has_crc || cols.column_text(1) == "crc";
  if (!has_crc) db.exec("ALTER TABLE entries ADD COLUMN crc INTEGER");
  auto get = db.prepare("SELECT value FROM meta WHERE key='format_version'");
  if (get.step()) {
    auto text = get.column_text(0);
    if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos)
      throw store_error(damage_message(
          db.path(), "its format version '" + text.substr(0, 40) + "' is not a number"));
    auto v = std::stoll(text);
    if (v > format_version)
      throw store_error(db.path() + ": written by a newer berth (log format " + std::to_string(v) +
                        "); upgrade berthd to read it");
  } else {
    db.prepare("INSERT INTO meta(key, value) VALUES('format_version', ?)")
        .bind(1, std::to_string(format_version))
        .run();
  }
  return db;
}

// The checksum of a row: its index, term and data.
int64_t row_crc(uint64_t index, uint64_t term, const std::string& data) {
  std::string key;
  for (int i = 0; i < 8; ++i) key.push_back(static_cast<char>((index >> (8 * i)) & 0xff));
  for (int i = 0; i < 8; ++i) key.push_back(static_cast<char>((term >> (8 * i)) & 0xff));
  return crc32(data, crc32(key));
}

}  // namespace

log_store::log_store(const std::string& path)
    : db_(path), insert_(init(db_).prepare("INSERT OR REPLACE INTO entries(idx, term, data, crc) VALUES(?,?,?,?)")) {}

expected<std::unique_ptr<log_store>> log_store::open(const std::string& path) {
  return stored([&] { return std::unique_ptr<log_store>(new log_store(path)); });
}

std::optional<failure> log_store::write(const log_write& w) {
  return stored([&] {
    sql::transaction tx(db_);
    if (w.truncate_from != 0)
      db_.prepare("DELETE FROM entries WHERE idx >= ?")
          .bind(1, static_cast<int64_t>(w.truncate_from))
          .run();
    for (const auto& e : w.entries) {
      insert_.bind(1, static_cast<int64_t>(e.index))
          .bind(2, static_cast<int64_t>(e.term))
          .bind_blob(3, e.data);
      insert_.bind(4, row_crc(e.index, e.term, e.data));
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
  });
}

expected<uint64_t> log_store::first_index() {
  return stored([&] {
    auto s = db_.prepare("SELECT COALESCE(MIN(idx), 0) FROM entries");
    s.step();
    return static_cast<uint64_t>(s.column_int(0));
  });
}

expected<uint64_t> log_store::last_index() {
  return stored([&] {
    auto s = db_.prepare("SELECT COALESCE(MAX(idx), 0) FROM entries");
    s.step();
    return static_cast<uint64_t>(s.column_int(0));
  });
}

expected<std::vector<log_record>> log_store::read(uint64_t from, uint64_t to, size_t max) {
  return stored([&] {
    std::vector<log_record> out;
    auto s = db_.prepare(
        "SELECT idx, term, data, crc FROM entries WHERE idx >= ? AND idx <= ? ORDER BY idx");
    s.bind(1, static_cast<int64_t>(from))
        .bind(2, static_cast<int64_t>(std::min<uint64_t>(to, INT64_MAX)));
    while (out.size() < max && s.step()) {
      log_record r{static_cast<uint64_t>(s.column_int(0)), static_cast<uint64_t>(s.column_int(1)),
                   s.column_blob(2)};
      if (!s.column_null(3) && s.column_int(3) != row_crc(r.index, r.term, r.data))
        throw store_error(damage_message(
            path(), "log entry " + std::to_string(r.index) + " does not match its checksum"));
      out.push_back(std::move(r));
    }
    return out;
  });
}

expected<std::optional<std::string>> log_store::meta(const std::string& key) {
  return stored([&] {
    auto s = db_.prepare("SELECT value FROM meta WHERE key = ?");
    s.bind(1, key);
    return s.step() ? std::optional<std::string>(s.column_blob(0)) : std::nullopt;
  });
}

std::optional<failure> log_store::compact(uint64_t index) {
  return stored([&] {
    db_.prepare("DELETE FROM entries WHERE idx <= ?").bind(1, static_cast<int64_t>(index)).run();
  });
}

}  // namespace berth
