#include "actors/node_mounts.hpp"

#include <set>

#include <exception>
#include <filesystem>

namespace berth {

namespace {

namespace fs = std::filesystem;

std::string mode_dir(const v1::NodeVolumeRequest& r) {
  return std::string(name_of(r.access_mode())) + "-" + std::string(name_of(r.attachment_mode()));
}

std::string describe(const mount_key& k) {
  return "the publication of volume '" + std::get<2>(k) + "' (namespace '" + std::get<1>(k) +
         "') for alloc '" + std::get<0>(k) + "'";
}

}  // namespace

claim_paths paths_of(const std::string& csi_root, const v1::NodeVolumeRequest& r) {
  auto root = fs::path(csi_root) / r.plugin_id();
  const auto& v = r.volume();
  return {(root / "staging" / v.namespace_() / v.id() / mode_dir(r)).string(),
          (root / "per-alloc" / r.alloc_id() / v.namespace_() / v.id() / mode_dir(r)).string()};
}

mount_key key_of(const v1::NodeVolumeRequest& r) {
  return {r.alloc_id(), r.volume().namespace_(), r.volume().id()};
}

mount_key key_of(const mount_record& m) {
  return {m.alloc_id, m.ns, m.volume_id};
}

std::vector<std::string> unpublished_volumes(const mount_table& mounts,
                                             const std::set<mount_key>& unmounting,
                                             const v1::Alloc& a) {
  std::vector<std::string> out;
  for (const auto& v : a.volumes()) {
    if (v.published_path().empty()) continue;  // claimed on a node without a berth client
    mount_key k{a.id(), a.namespace_(), v.volume_id()};
    auto it = mounts.find(k);
    if (it == mounts.end() || it->second.published_at_ms == 0 || unmounting.count(k))
      out.push_back(v.volume_id());
  }
  return out;
}

bool staging_in_use(const mount_table& mounts, const std::string& staging,
                    const mount_key& except) {
  for (const auto& [k, m] : mounts)
    if (k != except && m.staging_path == staging) return true;
  return false;
}

bool published_already(const mount_table& mounts, const v1::NodeVolumeRequest& r,
                       const claim_paths& paths, bool target_exists) {
  auto it = mounts.find(key_of(r));
  return it != mounts.end() && it->second.published_at_ms != 0 &&
         it->second.target_path == paths.target && target_exists;
}

mount_record intent_of(const v1::NodeVolumeRequest& r, const claim_paths& paths) {
  return record_of(r, paths, true, 0);
}

mount_record record_of(const v1::NodeVolumeRequest& r, const claim_paths& paths, bool staged,
                       int64_t now_ms) {
  mount_record m;
  m.alloc_id = r.alloc_id();
  m.ns = r.volume().namespace_();
  m.volume_id = r.volume().id();
  m.plugin_id = r.plugin_id();
  m.staging_path = staged ? paths.staging : "";
  m.target_path = paths.target;
  m.request = r;
  m.request.mutable_volume()->clear_secrets();
  m.published_at_ms = now_ms;
  return m;
}

bool unstage_after_unpublish(bool plugin_stages, bool others_use_staging) {
  return plugin_stages && !others_use_staging;
}

bool unstage_last_out(bool unstaged_with_unpublish, bool others_use_staging_now) {
  return !unstaged_with_unpublish && !others_use_staging_now;
}

bool has_mounts(const mount_table& mounts, const std::string& alloc_id) {
  for (const auto& [k, m] : mounts)
    if (std::get<0>(k) == alloc_id) return true;
  return false;
}

std::vector<unmount> unmounts_where(const mount_table& mounts,
                                    const std::function<bool(const mount_record&)>& pick) {
  std::vector<unmount> out;
  for (const auto& [k, m] : mounts)
    if (pick(m)) out.push_back({k, m, false});
  // The last of the picked on a staging path unstages it, when no
  // publication left out uses it (the calls of one volume run in order).
  std::set<std::string> seen;
  for (auto it = out.rbegin(); it != out.rend(); ++it) {
    const auto& staging = it->record.staging_path;
    if (staging.empty() || !seen.insert(staging).second) continue;
    bool kept = false;
    for (const auto& [k, m] : mounts)
      if (m.staging_path == staging && !pick(m)) kept = true;
    it->unstage = !kept;
  }
  return out;
}

std::vector<unmount> unmounts_of(const mount_table& mounts, const std::string& alloc_id) {
  return unmounts_where(mounts, [&](const mount_record& m) { return m.alloc_id == alloc_id; });
}

std::optional<failure> load_mounts(client_store& store, mount_table& mounts) {
  auto read = store.mounts();
  if (!read) return store_failure(store, "read its publications", read.error());
  for (auto& m : *read) {
    auto k = key_of(m);
    mounts.insert_or_assign(std::move(k), std::move(m));
  }
  return std::nullopt;
}

std::optional<failure> save_mount(client_store& store, mount_table& mounts, mount_record m) {
  auto k = key_of(m);
  if (auto e = store.put_mount(m)) {
    auto f = store_failure(store, "record " + describe(k), *e);
    f.message = "published, but " + f.message;
    return f;
  }
  mounts.insert_or_assign(std::move(k), std::move(m));
  return std::nullopt;
}

std::optional<failure> forget_mount(client_store& store, mount_table& mounts, const mount_key& k) {
  if (auto e = store.delete_mount(std::get<0>(k), std::get<1>(k), std::get<2>(k))) {
    auto f = store_failure(store, "forget " + describe(k), *e);
    f.message = "unpublished, but " + f.message;
    return f;
  }
  mounts.erase(k);
  return std::nullopt;
}

void apply_mount_write(mount_table& mounts, mount_write& w) {
  auto it = mounts.find(w.key);
  w.before = it == mounts.end() ? std::nullopt : std::optional<mount_record>(it->second);
  if (w.put)
    mounts.insert_or_assign(w.key, *w.put);
  else if (it != mounts.end())
    mounts.erase(it);
}

std::optional<failure> commit_mount_writes(client_store& store, mount_table& mounts,
                                           const std::vector<mount_write>& writes) {
  if (writes.empty()) return std::nullopt;
  std::vector<client_store::mount_change> changes;
  changes.reserve(writes.size());
  for (const auto& w : writes)
    changes.push_back({w.put, std::get<0>(w.key), std::get<1>(w.key), std::get<2>(w.key)});
  auto e = store.write_mounts(changes);
  if (!e) return std::nullopt;
  // The table had them already: undo them, last first.
  for (auto it = writes.rbegin(); it != writes.rend(); ++it) {
    if (it->before)
      mounts.insert_or_assign(it->key, *it->before);
    else
      mounts.erase(it->key);
  }
  const auto& first = writes.front();
  std::string what = (first.put ? "record " : "forget ") + describe(first.key);
  if (writes.size() > 1) what += " (and " + std::to_string(writes.size() - 1) + " more)";
  auto f = store_failure(store, what, *e);
  f.message = (first.put ? "published, but " : "unpublished, but ") + f.message;
  return f;
}

failure store_failure(const client_store& store, const std::string& what, const failure& f) {
  return failure{errc::internal, "the client could not " + what + " in " + store.path() + ": " +
                                     f.message +
                                     " (check the disk; restart the client once "
                                     "the file is writable)"};
}

}  // namespace berth
