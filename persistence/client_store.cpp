#include "persistence/client_store.hpp"

#include "persistence/sqlite.hpp"

namespace berth {

namespace {

const char* schema =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=FULL;"
    "CREATE TABLE IF NOT EXISTS mounts(alloc_id TEXT NOT NULL, namespace TEXT NOT NULL,"
    " volume_id TEXT NOT NULL, plugin_id TEXT NOT NULL, staging_path TEXT NOT NULL,"
    " target_path TEXT NOT NULL, request BLOB NOT NULL, published_at_ms INTEGER NOT NULL,"
    " PRIMARY KEY(alloc_id, namespace, volume_id));"
    "CREATE TABLE IF NOT EXISTS allocs(id TEXT PRIMARY KEY, alloc BLOB NOT NULL,"
    " pid INTEGER NOT NULL, exit_file TEXT NOT NULL, exited INTEGER NOT NULL,"
    " exit_code INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS fenced(alloc_id TEXT PRIMARY KEY, at_ms INTEGER NOT NULL);";

}  // namespace

client_store::client_store(const std::string& path)
    : path_(path), db_(std::make_unique<sql::database>(path)) {
  db_->exec(schema);
}

expected<std::unique_ptr<client_store>> client_store::open(const std::string& path) {
  return stored([&] { return std::unique_ptr<client_store>(new client_store(path)); });
}

client_store::~client_store() = default;

namespace {

void insert_mount(sql::database& db, const mount_record& m) {
  auto req = m.request;
  req.mutable_volume()->clear_secrets();
  db.prepare(
        "INSERT OR REPLACE INTO mounts(alloc_id, namespace, volume_id, plugin_id, staging_path,"
        " target_path, request, published_at_ms) VALUES(?,?,?,?,?,?,?,?)")
      .bind(1, m.alloc_id)
      .bind(2, m.ns)
      .bind(3, m.volume_id)
      .bind(4, m.plugin_id)
      .bind(5, m.staging_path)
      .bind(6, m.target_path)
      .bind_blob(7, req.SerializeAsString())
      .bind(8, m.published_at_ms)
      .run();
}

void remove_mount(sql::database& db, const std::string& alloc_id, const std::string& ns,
                  const std::string& volume_id) {
  db.prepare("DELETE FROM mounts WHERE alloc_id=? AND namespace=? AND volume_id=?")
      .bind(1, alloc_id)
      .bind(2, ns)
      .bind(3, volume_id)
      .run();
}

}  // namespace

std::optional<failure> client_store::write_mounts(const std::vector<mount_change>& changes) {
  return stored([&] {
    sql::transaction t(*db_);
    for (const auto& c : changes) {
      if (c.put)
        insert_mount(*db_, *c.put);
      else
        remove_mount(*db_, c.alloc_id, c.ns, c.volume_id);
    }
    t.commit();
  });
}

std::optional<failure> client_store::put_mount(const mount_record& m) {
  return stored([&] { insert_mount(*db_, m); });
}

std::optional<failure> client_store::delete_mount(const std::string& alloc_id,
                                                  const std::string& ns,
                                                  const std::string& volume_id) {
  return stored([&] { remove_mount(*db_, alloc_id, ns, volume_id); });
}

expected<std::vector<mount_record>> client_store::mounts() {
  return stored([&] {
    std::vector<mount_record> out;
    auto q = db_->prepare(
        "SELECT alloc_id, namespace, volume_id, plugin_id, staging_path, target_path, request,"
        " published_at_ms FROM mounts ORDER BY alloc_id, namespace, volume_id");
    while (q.step()) {
      mount_record m;
      m.alloc_id = q.column_text(0);
      m.ns = q.column_text(1);
      m.volume_id = q.column_text(2);
      m.plugin_id = q.column_text(3);
      m.staging_path = q.column_text(4);
      m.target_path = q.column_text(5);
      if (!m.request.ParseFromString(q.column_blob(6)))
        throw store_error(path_ + ": a mount record of alloc '" + m.alloc_id +
                          "' cannot be decoded");
      m.published_at_ms = q.column_int(7);
      out.push_back(std::move(m));
    }
    return out;
  });
}

std::optional<failure> client_store::put_alloc(const alloc_record& a) {
  return stored([&] {
    db_->prepare(
           "INSERT OR REPLACE INTO allocs(id, alloc, pid, exit_file, exited, exit_code)"
           " VALUES(?,?,?,?,?,?)")
        .bind(1, a.alloc.id())
        .bind_blob(2, a.alloc.SerializeAsString())
        .bind(3, a.pid)
        .bind(4, a.exit_file)
        .bind(5, a.exited ? 1 : 0)
        .bind(6, a.exit_code)
        .run();
  });
}

std::optional<failure> client_store::delete_alloc(const std::string& id) {
  return stored([&] { db_->prepare("DELETE FROM allocs WHERE id=?").bind(1, id).run(); });
}

expected<std::vector<alloc_record>> client_store::allocs() {
  return stored([&] {
    std::vector<alloc_record> out;
    auto q =
        db_->prepare("SELECT alloc, pid, exit_file, exited, exit_code FROM allocs ORDER BY id");
    while (q.step()) {
      alloc_record a;
      if (!a.alloc.ParseFromString(q.column_blob(0)))
        throw store_error(path_ + ": an alloc record cannot be decoded");
      a.pid = q.column_int(1);
      a.exit_file = q.column_text(2);
      a.exited = q.column_int(3) != 0;
      a.exit_code = static_cast<int32_t>(q.column_int(4));
      out.push_back(std::move(a));
    }
    return out;
  });
}

expected<uint64_t> client_store::leader_term() {
  return stored([&] {
    auto q = db_->prepare("SELECT value FROM meta WHERE key='leader_term'");
    return q.step() ? static_cast<uint64_t>(q.column_int(0)) : uint64_t{0};
  });
}

std::optional<failure> client_store::set_leader_term(uint64_t term) {
  return stored([&] {
    db_->prepare("INSERT OR REPLACE INTO meta(key, value) VALUES('leader_term', ?)")
        .bind(1, static_cast<int64_t>(term))
        .run();
  });
}

expected<int64_t> client_store::meta(const std::string& key) {
  return stored([&] {
    auto q = db_->prepare("SELECT value FROM meta WHERE key=?");
    q.bind(1, key);
    return q.step() ? q.column_int(0) : int64_t{0};
  });
}

std::optional<failure> client_store::set_meta(const std::string& key, int64_t value) {
  return stored([&] {
    db_->prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)")
        .bind(1, key)
        .bind(2, value)
        .run();
  });
}

std::optional<failure> client_store::put_fenced(const std::string& alloc_id, int64_t at_ms) {
  return stored([&] {
    db_->prepare("INSERT OR IGNORE INTO fenced(alloc_id, at_ms) VALUES(?, ?)")
        .bind(1, alloc_id)
        .bind(2, at_ms)
        .run();
  });
}

std::optional<failure> client_store::delete_fenced(const std::string& alloc_id) {
  return stored(
      [&] { db_->prepare("DELETE FROM fenced WHERE alloc_id=?").bind(1, alloc_id).run(); });
}

expected<std::map<std::string, int64_t>> client_store::fenced() {
  return stored([&] {
    std::map<std::string, int64_t> out;
    auto q = db_->prepare("SELECT alloc_id, at_ms FROM fenced");
    while (q.step()) out.emplace(q.column_text(0), q.column_int(1));
    return out;
  });
}

}  // namespace berth
