#include "persistence/state_store.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>

#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "persistence/crashpoint.hpp"
#include "persistence/durable_file.hpp"
#include "persistence/file_modes.hpp"
#include "persistence/integrity.hpp"
#include "persistence/snapshot_file.hpp"
#include "persistence/store_error.hpp"

namespace berth {

namespace {

// One row's message, or the damage error naming the file and the query.
template <class T>
void decode_row(const std::string& path, const char* query, const std::string& bytes, T& out) {
  if (!out.ParseFromString(bytes))
    throw store_error(damage_message(path, std::string("a row cannot be decoded (") + query + ")"));
}

constexpr int64_t format_version = 1;

const char* schema =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS volumes(namespace TEXT NOT NULL, id TEXT NOT NULL,"
    " plugin_id TEXT NOT NULL, modify_index INTEGER NOT NULL, data BLOB NOT NULL,"
    " PRIMARY KEY(namespace, id));"
    "CREATE TABLE IF NOT EXISTS claims(namespace TEXT NOT NULL, volume_id TEXT NOT NULL,"
    " alloc_id TEXT NOT NULL, node_id TEXT NOT NULL, mode TEXT NOT NULL, state TEXT NOT NULL,"
    " PRIMARY KEY(namespace, volume_id, alloc_id));"
    "CREATE INDEX IF NOT EXISTS claims_by_node ON claims(node_id);"
    "CREATE TABLE IF NOT EXISTS plugins(id TEXT PRIMARY KEY, modify_index INTEGER NOT NULL,"
    " data BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS nodes(id TEXT PRIMARY KEY, modify_index INTEGER NOT NULL,"
    " data BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS allocs(id TEXT PRIMARY KEY, modify_index INTEGER NOT NULL,"
    " data BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS acl_policies(name TEXT PRIMARY KEY, modify_index INTEGER NOT NULL,"
    " data BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS acl_tokens(accessor_id TEXT PRIMARY KEY,"
    " modify_index INTEGER NOT NULL, data BLOB NOT NULL);";

const char* claim_mode_name(v1::ClaimMode m) {
  return m == v1::CLAIM_WRITE ? "write" : m == v1::CLAIM_READ ? "read" : "unknown";
}

}  // namespace

state_store::state_store(const std::string& path) : path_(path) {
  reopen();
}

expected<std::unique_ptr<state_store>> state_store::open(const std::string& path) {
  return stored([&] { return std::unique_ptr<state_store>(new state_store(path)); });
}

void state_store::reopen() {
  db_ = std::make_unique<sql::database>(path_);
  db_->exec(schema);
  auto get = db_->prepare("SELECT value FROM meta WHERE key='format_version'");
  if (get.step()) {
    auto text = get.column_text(0);
    if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos)
      throw store_error(
          damage_message(path_, "its format version '" + text.substr(0, 40) + "' is not a number"));
    auto v = std::stoll(text);
    if (v > format_version)
      throw store_error(path_ + ": written by a newer berth (state format " + std::to_string(v) +
                        "); upgrade berthd to read it");
  } else {
    db_->prepare("INSERT INTO meta(key, value) VALUES('format_version', ?)")
        .bind(1, std::to_string(format_version))
        .run();
  }
}

expected<uint64_t> state_store::rows(const std::string& table) {
  if (table.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") != std::string::npos)
    return failure{errc::invalid, "no state table named '" + table + "'"};
  return stored([&] {
    auto s = db_->prepare("SELECT COUNT(*) FROM " + table);
    return s.step() ? static_cast<uint64_t>(s.column_int(0)) : 0;
  });
}

expected<uint64_t> state_store::applied_index() {
  return stored([&] { return applied(); });
}

uint64_t state_store::applied() {
  auto s = db_->prepare("SELECT value FROM meta WHERE key='applied_index'");
  if (!s.step()) return 0;
  auto text = s.column_text(0);
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos)
    throw store_error(
        damage_message(path_, "its applied index '" + text.substr(0, 40) + "' is not a number"));
  return static_cast<uint64_t>(std::stoull(text));
}

expected<v1::LogEntry> state_store::decode_entry(uint64_t index, const std::string& bytes) {
  v1::LogEntry entry;
  if (!entry.ParseFromString(bytes))
    return failure{errc::internal, "log entry " + std::to_string(index) +
                                       " cannot be decoded; the log is damaged (restore a "
                                       "snapshot or rejoin the cluster)"};
  if (entry.format_version() > entry_format_newest)
    return failure{errc::internal, "log entry " + std::to_string(index) + " has format " +
                                       std::to_string(entry.format_version()) +
                                       ", newer than this berthd " + "applies (" +
                                       std::to_string(entry_format_newest) +
                                       "): upgrade berthd on this server to the cluster's version"};
  return entry;
}

expected<state_store::decoded> state_store::decode(
    const std::vector<std::pair<uint64_t, std::string>>& entries, uint64_t after) {
  decoded out;
  out.reserve(entries.size());
  for (const auto& [index, bytes] : entries) {
    if (index <= after) continue;
    auto entry = decode_entry(index, bytes);
    if (!entry) return entry.error();
    out.emplace_back(index, std::make_shared<const v1::LogEntry>(std::move(*entry)));
  }
  return out;
}

std::optional<failure> state_store::apply(
    const std::vector<std::pair<uint64_t, std::string>>& entries) {
  auto at = applied_index();
  if (!at) return at.error();
  auto out = decode(entries, *at);
  if (!out) return out.error();
  return apply(out->cbegin(), out->cend());
}

std::optional<failure> state_store::apply(decoded::const_iterator first,
                                          decoded::const_iterator last) {
  return stored([&] { apply_all(first, last); });
}

void state_store::apply_all(decoded::const_iterator first, decoded::const_iterator last) {
  // A restore replaces the database: apply what comes before it, install
  // it, and go on from its index.
  uint64_t applied = this->applied();
  auto start = first;
  for (auto it = first; it != last; ++it) {
    if (it->first <= applied) continue;
    for (const auto& c : it->second->changes()) {
      if (c.change_case() != v1::Change::kRestoreState) continue;
      apply_batch(start, it);
      install_bytes(c.restore_state());
      sql::transaction tx(*db_);
      db_->cached("INSERT OR REPLACE INTO meta(key, value) VALUES('applied_index', ?)")
          .bind(1, std::to_string(it->first))
          .run();
      tx.commit();
      applied = it->first;
      start = it + 1;
      break;
    }
  }
  apply_batch(start, last);
}

void state_store::apply_batch(decoded::const_iterator first, decoded::const_iterator last) {
  if (first == last) return;
  sql::transaction tx(*db_);
  uint64_t applied = this->applied();
  for (auto it = first; it != last; ++it) {
    if (it->first <= applied) continue;
    applying_index_ = it->first;
    // Refused as the catalog refuses it: nothing of it applies.
    if (!expectations_hold(*it->second, [&](const v1::Expectation& e) { return version_of(e); })) {
      applied = it->first;
      continue;
    }
    for (auto change : it->second->changes()) {
      stamp(change, it->first);
      apply_change(change);
    }
    applied = it->first;
  }
  db_->cached("INSERT OR REPLACE INTO meta(key, value) VALUES('applied_index', ?)")
      .bind(1, std::to_string(applied))
      .run();
  tx.commit();
}

void state_store::apply_change(const v1::Change& c) {
  switch (c.change_case()) {
    case v1::Change::kVolumeUpsert: {
      const auto& v = c.volume_upsert();
      db_->cached("INSERT OR REPLACE INTO volumes(namespace, id, plugin_id, modify_index, data)"
                  " VALUES(?,?,?,?,?)")
          .bind(1, v.namespace_())
          .bind(2, v.id())
          .bind(3, v.plugin_id())
          .bind(4, static_cast<int64_t>(v.modify_index()))
          .bind_blob(5, v.SerializeAsString())
          .run();
      db_->cached("DELETE FROM claims WHERE namespace=? AND volume_id=?")
          .bind(1, v.namespace_())
          .bind(2, v.id())
          .run();
      auto& ins = db_->cached(
          "INSERT INTO claims(namespace, volume_id, alloc_id, node_id, mode, state)"
          " VALUES(?,?,?,?,?,?)");
      for (const auto& cl : v.claims()) {
        ins.bind(1, v.namespace_())
            .bind(2, v.id())
            .bind(3, cl.alloc_id())
            .bind(4, cl.node_id())
            .bind(5, claim_mode_name(cl.mode()))
            .bind(6, v1::ClaimState_Name(cl.state()));
        ins.run();
      }
      break;
    }
    case v1::Change::kVolumeDelete: {
      const auto& k = c.volume_delete();
      db_->cached("DELETE FROM volumes WHERE namespace=? AND id=?").bind(1, k.namespace_()).bind(2, k.id()).run();
      db_->cached("DELETE FROM claims WHERE namespace=? AND volume_id=?").bind(1, k.namespace_()).bind(2, k.id()).run();
      break;
    }
    case v1::Change::kPluginUpsert: {
      const auto& p = c.plugin_upsert();
      db_->cached("INSERT OR REPLACE INTO plugins(id, modify_index, data) VALUES(?,?,?)")
          .bind(1, p.id())
          .bind(2, static_cast<int64_t>(p.modify_index()))
          .bind_blob(3, p.SerializeAsString())
          .run();
      break;
    }
    case v1::Change::kPluginDelete:
      db_->cached("DELETE FROM plugins WHERE id=?").bind(1, c.plugin_delete()).run();
      break;
    case v1::Change::kNodeUpsert: {
      const auto& n = c.node_upsert();
      db_->cached("INSERT OR REPLACE INTO nodes(id, modify_index, data) VALUES(?,?,?)")
          .bind(1, n.id())
          .bind(2, static_cast<int64_t>(n.modify_index()))
          .bind_blob(3, n.SerializeAsString())
          .run();
      break;
    }
    case v1::Change::kNodeDelete:
      db_->cached("DELETE FROM nodes WHERE id=?").bind(1, c.node_delete()).run();
      break;
    case v1::Change::kAllocUpsert: {
      const auto& a = c.alloc_upsert();
      db_->cached("INSERT OR REPLACE INTO allocs(id, modify_index, data) VALUES(?,?,?)")
          .bind(1, a.id())
          .bind(2, static_cast<int64_t>(a.modify_index()))
          .bind_blob(3, a.SerializeAsString())
          .run();
      break;
    }
    case v1::Change::kAllocDelete:
      db_->cached("DELETE FROM allocs WHERE id=?").bind(1, c.alloc_delete()).run();
      break;
    case v1::Change::kAclPolicyUpsert: {
      const auto& x = c.acl_policy_upsert();
      db_->cached("INSERT OR REPLACE INTO acl_policies(name, modify_index, data) VALUES(?,?,?)")
          .bind(1, x.name())
          .bind(2, static_cast<int64_t>(x.modify_index()))
          .bind_blob(3, x.SerializeAsString())
          .run();
      break;
    }
    case v1::Change::kAclPolicyDelete:
      db_->cached("DELETE FROM acl_policies WHERE name=?").bind(1, c.acl_policy_delete()).run();
      break;
    case v1::Change::kAclBootstrap:
    case v1::Change::kAclTokenUpsert: {
      const auto& x = c.has_acl_bootstrap() ? c.acl_bootstrap() : c.acl_token_upsert();
      db_->cached("INSERT OR REPLACE INTO acl_tokens(accessor_id, modify_index, data) VALUES(?,?,?)")
          .bind(1, x.accessor_id())
          .bind(2, static_cast<int64_t>(x.modify_index()))
          .bind_blob(3, x.SerializeAsString())
          .run();
      if (c.has_acl_bootstrap())
        db_->cached("INSERT OR REPLACE INTO meta(key, value) VALUES('acl_bootstrap_index', ?)")
            .bind(1, std::to_string(x.modify_index()))
            .run();
      break;
    }
    case v1::Change::kAclTokenDelete:
      db_->cached("DELETE FROM acl_tokens WHERE accessor_id=?").bind(1, c.acl_token_delete()).run();
      break;
    case v1::Change::kAllocVolumeFreed:
      if (auto resolved = alloc_after_free(rows_for(c.alloc_volume_freed()), c.alloc_volume_freed())) {
        stamp(*resolved, applying_index_);
        apply_change(*resolved);
      }
      break;
    case v1::Change::kAllocVolumeClaimed: {
      // The alloc's row as the tables hold it, as a catalog of just it.
      catalog rows;
      auto& st = db_->cached("SELECT data FROM allocs WHERE id=?");
      st.bind(1, c.alloc_volume_claimed().alloc().id());
      bool found = st.step();
      auto bytes = found ? st.column_blob(0) : std::string();
      st.reset();
      if (found) {
        v1::Alloc a;
        decode_row(path_, "SELECT data FROM allocs WHERE id=?", bytes, a);
        rows.allocs.emplace(a.id(), std::move(a));
      }
      if (auto resolved = alloc_after_claim(rows, c.alloc_volume_claimed())) {
        stamp(*resolved, applying_index_);
        apply_change(*resolved);
      }
      break;
    }
    case v1::Change::kRestoreState:  // handled by apply()
    case v1::Change::CHANGE_NOT_SET:
      break;
  }
}

namespace {

template <class T, class F>
void each_row(sql::database& db, const char* query, F&& f) {
  auto s = db.prepare(query);
  T x;
  while (s.step()) {
    auto bytes = s.column_blob(0);
    decode_row(db.path(), query, bytes, x);
    f(x, bytes);
  }
}

template <class T>
std::vector<T> load_table(sql::database& db, const char* query) {
  std::vector<T> out;
  each_row<T>(db, query, [&](T& x, const std::string&) { out.push_back(std::move(x)); });
  return out;
}

}  // namespace

uint64_t state_store::version_of(const v1::Expectation& e) {
  auto one = [&](const char* query, auto bind) -> uint64_t {
    auto& st = db_->cached(query);
    bind(st);
    uint64_t v = st.step() ? static_cast<uint64_t>(st.column_int(0)) : 0;
    st.reset();
    return v;
  };
  auto by_id = [&](const char* query, const std::string& id) {
    return one(query, [&](sql::statement& st) { st.bind(1, id); });
  };
  switch (e.object_case()) {
    case v1::Expectation::kAlloc:
      return by_id("SELECT modify_index FROM allocs WHERE id=?", e.alloc());
    case v1::Expectation::kNode:
      return by_id("SELECT modify_index FROM nodes WHERE id=?", e.node());
    case v1::Expectation::kPlugin:
      return by_id("SELECT modify_index FROM plugins WHERE id=?", e.plugin());
    case v1::Expectation::kVolume:
      return one("SELECT modify_index FROM volumes WHERE namespace=? AND id=?",
                 [&](sql::statement& st) {
                   st.bind(1, e.volume().namespace_());
                   st.bind(2, e.volume().id());
                 });
    case v1::Expectation::kAclPolicy:
      return by_id("SELECT modify_index FROM acl_policies WHERE name=?", e.acl_policy());
    case v1::Expectation::kAclToken:
      return by_id("SELECT modify_index FROM acl_tokens WHERE accessor_id=?", e.acl_token());
    case v1::Expectation::kAclBootstrap: {
      auto& st = db_->cached("SELECT value FROM meta WHERE key='acl_bootstrap_index'");
      auto text = st.step() ? st.column_text(0) : std::string();
      st.reset();
      return text.empty() ? 0 : std::stoull(text);
    }
    case v1::Expectation::kNodeAllocs: {
      // Rare (mark-down, forced drains, node collection): every alloc read.
      uint64_t top = 0;
      auto& st = db_->cached("SELECT data FROM allocs");
      v1::Alloc a;
      while (st.step()) {
        decode_row(path_, "SELECT data FROM allocs", st.column_blob(0), a);
        if (a.node_id() == e.node_allocs()) top = std::max(top, a.modify_index());
      }
      st.reset();
      return top;
    }
    case v1::Expectation::OBJECT_NOT_SET:
      break;
  }
  return 0;
}

catalog state_store::rows_for(const v1::AllocVolumeFreed& f) {
  catalog c;
  auto one = [&](const char* query, auto bind, auto& out) {
    auto& st = db_->cached(query);
    bind(st);
    bool found = st.step();
    auto bytes = found ? st.column_blob(0) : std::string();
    st.reset();  // no statement left open on the database
    if (found) decode_row(path_, query, bytes, out);
    return found;
  };
  v1::Alloc a;
  if (!one("SELECT data FROM allocs WHERE id=?", [&](sql::statement& st) { st.bind(1, f.alloc_id()); }, a))
    return c;
  v1::Node n;
  if (one("SELECT data FROM nodes WHERE id=?", [&](sql::statement& st) { st.bind(1, a.node_id()); }, n))
    c.nodes.emplace(n.id(), std::move(n));
  v1::Volume v;
  if (one("SELECT data FROM volumes WHERE namespace=? AND id=?",
          [&](sql::statement& st) {
            st.bind(1, f.volume().namespace_());
            st.bind(2, f.volume().id());
          },
          v))
    add_volume(c, v);
  c.allocs.emplace(a.id(), std::move(a));
  return c;
}


std::optional<failure> state_store::each_volume(
    const std::function<void(const v1::Volume&, const std::string&)>& f) {
  return stored([&] {
    each_row<v1::Volume>(*db_, "SELECT data FROM volumes ORDER BY namespace, id",
                         [&](const v1::Volume& v, const std::string& bytes) { f(v, bytes); });
  });
}

expected<state_contents> state_store::load(bool volumes) {
  return stored([&] {
    state_contents c;
    c.applied_index = applied();
    if (volumes)
      c.volumes = load_table<v1::Volume>(*db_, "SELECT data FROM volumes ORDER BY namespace, id");
    c.plugins = load_table<v1::Plugin>(*db_, "SELECT data FROM plugins ORDER BY id");
    c.nodes = load_table<v1::Node>(*db_, "SELECT data FROM nodes ORDER BY id");
    c.allocs = load_table<v1::Alloc>(*db_, "SELECT data FROM allocs ORDER BY id");
    c.acl_policies = load_table<v1::AclPolicy>(*db_, "SELECT data FROM acl_policies ORDER BY name");
    c.acl_tokens =
        load_table<v1::AclToken>(*db_, "SELECT data FROM acl_tokens ORDER BY accessor_id");
    auto s = db_->prepare("SELECT value FROM meta WHERE key='acl_bootstrap_index'");
    if (s.step()) {
      auto text = s.column_text(0);
      if (text.empty() || text.size() > 19 ||
          text.find_first_not_of("0123456789") != std::string::npos)
        throw store_error(damage_message(path_, "its ACL bootstrap index is not a number"));
      c.acl_bootstrap_index = std::stoull(text);
    }
    return c;
  });
}

expected<std::string> state_store::digest() {
  return stored([&] {
    // FNV-1a over every row in key order: cheap and enough to compare servers.
    uint64_t h = 1469598103934665603ULL;
    auto mix = [&](const std::string& s) {
      for (unsigned char ch : s) {
        h ^= ch;
        h *= 1099511628211ULL;
      }
      h ^= 0xff;
      h *= 1099511628211ULL;
    };
    for (const char* q :
         {"SELECT data FROM volumes ORDER BY namespace, id",
          "SELECT alloc_id || node_id || mode || state FROM claims"
          " ORDER BY namespace, volume_id, alloc_id",
          "SELECT data FROM plugins ORDER BY id", "SELECT data FROM nodes ORDER BY id",
          "SELECT data FROM allocs ORDER BY id", "SELECT data FROM acl_policies ORDER BY name",
          "SELECT data FROM acl_tokens ORDER BY accessor_id"}) {
      auto s = db_->prepare(q);
      while (s.step()) mix(s.column_blob(0));
    }
    char buf[17];
    snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return std::string(buf);
  });
}

std::optional<failure> state_store::snapshot_to(const std::string& path) {
  return stored([&] { copy_to(path); });
}

void state_store::copy_to(const std::string& path) {
  // VACUUM INTO would create it with SQLite's default mode (0644): the copy
  // holds the volumes' secrets, so it is made empty and 0600 first.
  if (auto f = fresh_private_file(path)) throw store_error(f->message);
  db_->prepare("VACUUM INTO ?").bind(1, path).run();
}

expected<std::string> state_store::snapshot() {
  auto tmp = path_ + ".snapshot";
  if (auto f = snapshot_to(tmp)) return *f;
  std::ifstream in(tmp, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(tmp.c_str());
  if (bytes.empty()) return failure{errc::internal, "cannot read the copy " + tmp};
  return bytes;
}

std::optional<failure> state_store::install(const std::string& bytes) {
  return stored([&] { install_bytes(bytes); });
}

void state_store::install_bytes(const std::string& bytes) {
  static const std::string magic = "SQLite format 3";
  if (bytes.compare(0, magic.size(), magic) != 0)
    throw store_error("the snapshot is not a berth state database");
  auto tmp = path_ + ".incoming";
  if (auto f = write_and_fsync(tmp, bytes)) throw store_error(f->message);
  replace_with(tmp);
}

std::optional<failure> state_store::install_snapshot_file(const std::string& snapshot_path) {
  auto parts = read_snapshot_file_parts(snapshot_path, false);
  if (!parts) return parts.error();
  auto tmp = path_ + ".incoming";
  if (auto f = extract_snapshot_db(snapshot_path, *parts, tmp)) return f;
  return stored([&] { replace_with(tmp); });
}

void state_store::replace_with(const std::string& tmp) {
  crashpoint("state_db.after_temp_fsync");
  db_.reset();  // closes the database (and checkpoints its WAL)
  std::remove((path_ + "-wal").c_str());
  std::remove((path_ + "-shm").c_str());
  // The old WAL must be gone from the disk before the new database is in
  // place: SQLite would replay its frames onto the new file.
  if (auto f = fsync_dir_of(path_)) throw store_error(f->message);
  // Only once the rename is durable does anything read the new state (and
  // the applied index in it).
  if (auto f = rename_durably(tmp, path_, "state_db"))
    throw store_error(path_ + ": cannot replace it with the snapshot: " + f->message);
  reopen();
}

}  // namespace berth
