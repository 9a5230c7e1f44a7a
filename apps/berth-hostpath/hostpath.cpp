#include "hostpath.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <cstdio>

namespace berth::hostpath {

namespace fs = std::filesystem;

namespace {

// FNV-1a of `name` in 16 hex digits: stable across runs and builds
// (std::hash is not guaranteed to be).
std::string stable_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

std::string volume_id_for(const std::string& name) {
  return "hp-" + stable_hash(name);
}

std::string snapshot_id_for(const std::string& name) {
  return "snap-" + stable_hash(name);
}

std::string group_snapshot_id_for(const std::string& name) {
  return "group-" + stable_hash(name);
}

std::string member_snapshot_id_for(const std::string& group_name, const std::string& volume_id) {
  std::string key = group_name;
  key.push_back('\0');
  key += volume_id;
  return "gsnap-" + stable_hash(key);
}

std::string bad_mutable_parameters(const google::protobuf::Map<std::string, std::string>& params,
                                   const std::set<std::string>& supported) {
  for (const auto& [key, value] : params) {
    bool ok = !key.empty() && key.size() <= 63;
    for (unsigned char c : key)
      ok &= std::isalnum(c) || c == '.' || c == '_' || c == '/' || c == '-';
    if (!ok)
      return "mutable parameter key '" + key
             + "' is not supported: keys are 1 to 63 characters of [A-Za-z0-9._/-]";
    if (!supported.count(key)) {
      std::string names;
      for (const auto& k : supported) names += (names.empty() ? "" : ", ") + k;
      return "mutable parameter key '" + key + "' is not supported by this berth-hostpath (it "
             "supports: " + (names.empty() ? std::string("none") : names) +
             "; start it with --mutable-parameter-key KEY to accept another)";
    }
  }
  return {};
}

std::string unsupported(const v1::VolumeCapability& cap) {
  auto mode = cap.access_mode().mode();
  if (mode == v1::VolumeCapability::AccessMode::UNKNOWN)
    return "volume_capability.access_mode is required";
  if (cap.has_block())
    return "block volumes are not supported: berth-hostpath serves directories";
  if (!cap.has_mount())
    return "volume_capability needs an access type (mount)";
  return {};
}

bool single_node(int access_mode) {
  using m = v1::VolumeCapability::AccessMode;
  return access_mode == m::SINGLE_NODE_WRITER || access_mode == m::SINGLE_NODE_READER_ONLY
         || access_mode == m::SINGLE_NODE_SINGLE_WRITER
         || access_mode == m::SINGLE_NODE_MULTI_WRITER;
}

bool multi_publish(int access_mode) {
  return !single_node(access_mode)
         || access_mode == v1::VolumeCapability::AccessMode::SINGLE_NODE_MULTI_WRITER;
}

plugin::plugin(options opts)
    : opts_(std::move(opts)),
      mounter_(opts_.mode, opts_.root / ".spare" / (opts_.node_id.empty() ? "node" : opts_.node_id)) {
  fs::create_directories(opts_.root / "volumes");
  // Every call re-reads the journal with --shared-root: keep it short.
  const int64_t floor = opts_.shared_root ? int64_t{64} << 10 : int64_t{4} << 20;
  store_ = std::make_unique<store>(opts_.root / "state.json", opts_.root / "state.journal",
                                   opts_.journal_limit, floor);
  if (opts_.shared_root) {
    fs::create_directories(opts_.root / "nodes");
    auto node = opts_.root / "nodes" / opts_.node_id;
    node_store_ = std::make_unique<store>(node.string() + ".json", node.string() + ".journal",
                                          opts_.journal_limit, floor);
    auto lock = opts_.root / "state.lock";
    lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ < 0)
      throw std::runtime_error("cannot open " + lock.string() + ": " + std::strerror(errno));
    begin_call();
    // Announce this node to the controllers of the other processes.
    try {
      node_store_->create_snapshot_if_missing();
      sweep_unrecorded_members();
    } catch (...) {
      end_call();
      throw;
    }
    end_call();
  } else {
    state_ = store_->load();
    sweep_unrecorded_members();
  }
}

state plugin::load() {
  auto shared = store_->load();
  auto mine = node_store_->load();
  shared.stagings = std::move(mine.stagings);
  shared.publications = std::move(mine.publications);
  return shared;
}

void plugin::begin_call() {
  if (!opts_.shared_root)
    return;
  while (::flock(lock_fd_, LOCK_EX) != 0)
    if (errno != EINTR)
      throw std::runtime_error(std::string("cannot lock state.lock: ") + std::strerror(errno));
  try {
    auto fresh = load();
    std::lock_guard<std::mutex> lock(mu_);
    state_ = std::move(fresh);
    unsaved_.clear();
    durable_ = version_;  // what is in memory is what is on disk
  } catch (...) {
    ::flock(lock_fd_, LOCK_UN);
    throw;
  }
}

void plugin::end_call() {
  if (opts_.shared_root)
    ::flock(lock_fd_, LOCK_UN);
}

fs::path plugin::volume_dir(const std::string& volume_id) const {
  return opts_.root / "volumes" / volume_id;
}

fs::path plugin::snapshot_dir(const std::string& snapshot_id) const {
  return opts_.root / "snapshots" / snapshot_id;
}

void plugin::copy_tree(const fs::path& from, const fs::path& to) const {
  auto tmp = to.parent_path() / (".incoming-" + to.filename().string());
  fs::create_directories(to.parent_path());
  fs::remove_all(tmp);  // left by a crash during an earlier copy
  fs::copy(from, tmp, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  fs::remove_all(to);
  fs::rename(tmp, to);
}

v1::VolumeCondition plugin::condition_of(const std::string& volume_id) const {
  v1::VolumeCondition c;
  std::error_code ec;
  if (!fs::is_directory(volume_dir(volume_id), ec)) {
    c.set_abnormal(true);
    c.set_message("volume directory " + volume_dir(volume_id).string()
                  + " is missing: its data is gone");
  } else {
    c.set_message("volume directory present");
  }
  return c;
}

bool plugin::known_node(const std::string& node_id) const {
  std::error_code ec;
  if (opts_.shared_root && !node_id.empty() && node_id.find('/') == std::string::npos &&
      node_id != "." && node_id != ".." &&
      fs::exists(opts_.root / "nodes" / (node_id + ".json"), ec))
    return true;
  return node_id == opts_.node_id
         || std::find(opts_.peer_nodes.begin(), opts_.peer_nodes.end(), node_id)
                != opts_.peer_nodes.end();
}

void plugin::fill_volume(const std::string& id, const volume_record& rec, v1::Volume& out) const {
  out.set_volume_id(id);
  out.set_capacity_bytes(rec.capacity_bytes);
  if (!rec.source_snapshot_id.empty())
    out.mutable_content_source()->mutable_snapshot()->set_snapshot_id(rec.source_snapshot_id);
  else if (!rec.source_volume_id.empty())
    out.mutable_content_source()->mutable_volume()->set_volume_id(rec.source_volume_id);
  if (!opts_.topology.empty())
    out.add_accessible_topology()->mutable_segments()->insert(opts_.topology.begin(),
                                                              opts_.topology.end());
}

void plugin::fill_snapshot(const std::string& id, const snapshot_record& rec,
                           v1::Snapshot& out) const {
  out.set_snapshot_id(id);
  out.set_source_volume_id(rec.source_volume_id);
  out.set_size_bytes(rec.size_bytes);
  out.mutable_creation_time()->set_seconds(rec.creation_time_ns / 1000000000);
  out.mutable_creation_time()->set_nanos(static_cast<int32_t>(rec.creation_time_ns % 1000000000));
  out.set_ready_to_use(true);  // the copy is whole before CreateSnapshot answers
  if (!rec.group_snapshot_id.empty())
    out.set_group_snapshot_id(rec.group_snapshot_id);
}

void plugin::reserve(const std::string& path, bool stage) {
  pending_paths_.insert(path);
  pending_stages_ += stage ? 1 : 0;
}

void plugin::release(const std::string& path, bool stage) {
  pending_paths_.erase(path);
  pending_stages_ -= stage ? 1 : 0;
}

void plugin::apply(std::vector<record> change) {
  apply_change(state_, change);
  unsaved_.insert(unsaved_.end(), std::make_move_iterator(change.begin()),
                  std::make_move_iterator(change.end()));
  ++version_;
}

bool plugin::must_compact() const {
  return store_->must_compact() || (node_store_ && node_store_->must_compact());
}

void plugin::save(const std::vector<record>& change, const state* whole) {
  if (!opts_.shared_root) {
    if (whole)
      store_->compact(*whole);
    else
      store_->append(change);
    return;
  }
  std::vector<record> shared, mine;
  for (const auto& r : change)
    (node_local(r) ? mine : shared).push_back(r);
  try {
    if (whole && store_->must_compact())
      store_->compact(shared_part(*whole));
    else
      store_->append(shared);
    if (whole && node_store_->must_compact())
      node_store_->compact(node_part(*whole));
    else
      node_store_->append(mine);
  } catch (...) {
    // Part of this change may be on disk and part not: the next save
    // writes both whole.
    store_->mark_broken();
    node_store_->mark_broken();
    throw;
  }
}

grpc::Status plugin::wait_durable(int64_t v) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t failed_before = failed_saves_;
  while (durable_ < v) {
    if (failed_saves_ != failed_before && failed_covers_ >= v)
      return {grpc::StatusCode::INTERNAL, failed_why_};  // a save with our change failed
    if (saving_) {
      saved_.wait(lock);  // the save running may not hold `v`: look again after it
      continue;
    }
    // Become the saver: every change applied so far goes into this save;
    // changes applied while it runs wait for the next one.
    saving_ = true;
    const int64_t covers = version_;
    std::vector<record> change = std::move(unsaved_);
    unsaved_.clear();
    // A compaction writes the whole state as of `covers` (the stores are
    // only touched by the saver, so asking them here is safe).
    std::unique_ptr<state> whole;
    if (must_compact())
      whole = std::make_unique<state>(state_);
    lock.unlock();
    std::string why;
    try {
      save(change, whole.get());
    } catch (const std::exception& e) {
      why = e.what();
    }
    lock.lock();
    saving_ = false;
    if (why.empty()) {
      durable_ = std::max(durable_, covers);
    } else {
      // The changes stay in memory and the store now wants a compaction,
      // so the next save writes them whole; the calls they belong to
      // answer INTERNAL, and the CO retries them.
      ++failed_saves_;
      failed_covers_ = covers;
      failed_why_ = why;
    }
    saved_.notify_all();
    if (!why.empty())
      return {grpc::StatusCode::INTERNAL, why};
  }
  return grpc::Status::OK;
}

grpc::Status plugin::get_plugin_info(const v1::GetPluginInfoRequest&,
                                     v1::GetPluginInfoResponse& resp) {
  resp.set_name(name);
  resp.set_vendor_version(BERTH_VERSION);
  return grpc::Status::OK;
}

grpc::Status plugin::get_plugin_capabilities(const v1::GetPluginCapabilitiesRequest&,
                                             v1::GetPluginCapabilitiesResponse& resp) {
  using svc = v1::PluginCapability::Service;
  resp.add_capabilities()->mutable_service()->set_type(svc::CONTROLLER_SERVICE);
  // Served on the same socket, wherever the Controller service is.
  resp.add_capabilities()->mutable_service()->set_type(svc::GROUP_CONTROLLER_SERVICE);
  if (!opts_.topology.empty())
    resp.add_capabilities()->mutable_service()->set_type(svc::VOLUME_ACCESSIBILITY_CONSTRAINTS);
  // Capacity is bookkeeping: a volume grows while published.
  resp.add_capabilities()->mutable_volume_expansion()->set_type(
      v1::PluginCapability::VolumeExpansion::ONLINE);
  return grpc::Status::OK;
}

grpc::Status plugin::probe(const v1::ProbeRequest&, v1::ProbeResponse& resp) {
  // Ready as soon as it serves: the state was loaded before the socket opened.
  resp.mutable_ready()->set_value(true);
  return grpc::Status::OK;
}

}  // namespace berth::hostpath
