#include "control/catalog.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include "control/entries.hpp"
#include "messages/model.hpp"

namespace berth {

// --- volume_row -----------------------------------------------------------------

namespace {

// The bytes of a row's block, addressed from the block itself: they run
// past the declared one-byte array (the block is allocated to fit them).
template <class Block>
char* bytes_of(Block* b) {
  return reinterpret_cast<char*>(b) + offsetof(Block, data);
}

}  // namespace

volume_row::volume_row(const v1::Volume& v) {
  auto n = v.ByteSizeLong();
  block_ = static_cast<block*>(std::malloc(offsetof(block, data) + (n == 0 ? 1 : n)));
  if (block_ == nullptr) throw std::bad_alloc();
  new (&block_->refs) std::atomic<uint32_t>(1);
  block_->size = static_cast<uint32_t>(n);
  v.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(bytes_of(block_)));
}

volume_row volume_row::encoded(const std::string& bytes) {
  volume_row r;
  r.block_ = static_cast<block*>(
      std::malloc(offsetof(block, data) + (bytes.empty() ? 1 : bytes.size())));
  if (r.block_ == nullptr) throw std::bad_alloc();
  new (&r.block_->refs) std::atomic<uint32_t>(1);
  r.block_->size = static_cast<uint32_t>(bytes.size());
  std::memcpy(bytes_of(r.block_), bytes.data(), bytes.size());
  return r;
}

volume_row::volume_row(const volume_row& other) noexcept : block_(other.block_) {
  if (block_ != nullptr) block_->refs.fetch_add(1, std::memory_order_relaxed);
}

volume_row::volume_row(volume_row&& other) noexcept : block_(other.block_) {
  other.block_ = nullptr;
}

volume_row& volume_row::operator=(volume_row other) noexcept {
  std::swap(block_, other.block_);
  return *this;
}

volume_row::~volume_row() {
  if (block_ != nullptr && block_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    block_->refs.~atomic();
    std::free(block_);
  }
}

v1::Volume volume_row::get() const {
  v1::Volume v;
  if (block_ != nullptr && !v.ParseFromArray(bytes_of(block_), static_cast<int>(block_->size)))
    throw std::runtime_error("a catalog row does not decode");  // it was encoded here
  return v;
}

std::pair<std::string, std::string> volume_row::plugin_and_external_id() const {
  using google::protobuf::internal::WireFormatLite;
  std::pair<std::string, std::string> out;
  if (block_ == nullptr) return out;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes_of(block_)),
                                            static_cast<int>(block_->size));
  const int plugin_field = v1::Volume::kPluginIdFieldNumber;
  const int external_field = v1::Volume::kExternalIdFieldNumber;
  bool plugin = false, external = false;
  while (!(plugin && external)) {
    auto tag = in.ReadTag();
    if (tag == 0) break;
    auto field = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
    bool length_delimited =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    if (length_delimited && (field == plugin_field || field == external_field)) {
      auto& into = field == plugin_field ? out.first : out.second;
      if (!WireFormatLite::ReadString(&in, &into))
        throw std::runtime_error("a catalog row does not decode");
      (field == plugin_field ? plugin : external) = true;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      throw std::runtime_error("a catalog row does not decode");
    }
  }
  return out;
}

size_t volume_row::size() const { return block_ == nullptr ? 0 : block_->size; }

// --- row_exchange -----------------------------------------------------------------

void row_exchange::attach(party p) {
  std::lock_guard<std::mutex> guard(mtx_);
  ++attached_[p];
}

void row_exchange::detach(party p) {
  std::lock_guard<std::mutex> guard(mtx_);
  if (attached_[p] > 0) --attached_[p];
  if (attached_[p] == 0) {
    left_[0].clear();
    left_[1].clear();
  }
}

volume_row row_exchange::row(party p, uint64_t index, uint32_t position,
                             const v1::Volume& stamped) {
  auto other = p == machine ? leader : machine;
  slot at{index, position};
  {
    std::lock_guard<std::mutex> guard(mtx_);
    if (attached_[other] == 0) return volume_row(stamped);
    auto& theirs = left_[other];
    // What the other left for entries this party has passed (it started
    // from a copy after them) is never taken.
    theirs.erase(theirs.begin(), theirs.lower_bound(at));
    auto it = theirs.find(at);
    if (it != theirs.end()) {
      auto taken = std::move(it->second);
      theirs.erase(it);
      return taken;
    }
  }
  volume_row built(stamped);
  std::lock_guard<std::mutex> guard(mtx_);
  if (attached_[other] == 0) return built;
  auto& theirs = left_[other];
  auto it = theirs.find(at);  // built at the same time by both
  if (it != theirs.end()) {
    auto taken = std::move(it->second);
    theirs.erase(it);
    return taken;
  }
  left_[p].emplace(at, built);
  return built;
}

size_t row_exchange::waiting() const {
  std::lock_guard<std::mutex> guard(mtx_);
  return left_[0].size() + left_[1].size();
}

namespace {

template <class Map, class Key, class T>
v1::Change put(Map& m, const Key& key, const T& x) {
  v1::Change before;
  auto it = m.find(key);
  if (it != m.end()) {
    before = upsert_change(it->second);
    it->second = x;
  } else {
    m.emplace(key, x);
  }
  return before;
}

template <class Map, class Key>
v1::Change erase(Map& m, const Key& key) {
  v1::Change before;
  auto it = m.find(key);
  if (it == m.end()) return before;
  before = upsert_change(it->second);
  m.erase(it);
  return before;
}

// The volume's row: what it was (the change a put or an erase reports)
// and what it becomes.
v1::Change put_volume(catalog& c, const volume_key& key, volume_row row) {
  v1::Change before;
  auto it = c.volumes.find(key);
  if (it != c.volumes.end()) {
    before = upsert_change(it->second.get());
    it->second = std::move(row);
  } else {
    c.volumes.emplace(key, std::move(row));
  }
  return before;
}

v1::Change erase_volume(catalog& c, const volume_key& key) {
  v1::Change before;
  auto it = c.volumes.find(key);
  if (it == c.volumes.end()) return before;
  before = upsert_change(it->second.get());
  c.volumes.erase(it);
  return before;
}

// Moves the volume's entries in claimed_on from what it was to what it is.
void index_claims(catalog& c, const volume_key& key, const v1::Volume* was, const v1::Volume* is) {
  if (was != nullptr)
    for (const auto& cl : was->claims()) {
      auto it = c.claimed_on.find({cl.node_id(), was->plugin_id()});
      if (it == c.claimed_on.end()) continue;
      it->second.erase(key);
      if (it->second.empty()) c.claimed_on.erase(it);
    }
  if (is != nullptr)
    for (const auto& cl : is->claims()) c.claimed_on[{cl.node_id(), is->plugin_id()}].insert(key);
  if (is != nullptr && is->availability() == v1::VOLUME_DRAIN)
    c.draining.insert(key);
  else
    c.draining.erase(key);
  if (is != nullptr && is->has_expansion() && is->expansion().required_bytes() > 0)
    c.expanding.insert(key);
  else
    c.expanding.erase(key);
  if (is != nullptr && is->condition().abnormal())
    c.abnormal.insert(key);
  else
    c.abnormal.erase(key);
  if (was != nullptr && !was->group().empty() && (is == nullptr || is->group() != was->group())) {
    auto it = c.volume_groups.find({key.first, was->group()});
    if (it != c.volume_groups.end()) {
      it->second.erase(key.second);
      if (it->second.empty()) c.volume_groups.erase(it);
    }
  }
  if (is != nullptr && !is->group().empty()) c.volume_groups[{key.first, is->group()}].insert(key.second);
}

}  // namespace

void add_volume(catalog& c, const v1::Volume& v) {
  volume_key key{v.namespace_(), v.id()};
  c.volumes[key] = volume_row(v);
  index_claims(c, key, nullptr, &v);
}

void add_volume(catalog& c, const v1::Volume& v, const std::string& bytes) {
  volume_key key{v.namespace_(), v.id()};
  c.volumes.emplace_hint(c.volumes.end(), key, volume_row::encoded(bytes));
  index_claims(c, key, nullptr, &v);
}

std::set<volume_key> volumes_claimed_on(const catalog& c, const std::string& node_id) {
  std::set<volume_key> out;
  for (auto it = c.claimed_on.lower_bound({node_id, std::string()});
       it != c.claimed_on.end() && it->first.first == node_id; ++it)
    out.insert(it->second.begin(), it->second.end());
  return out;
}

std::set<volume_key> claimed_volumes(const catalog& c) {
  std::set<volume_key> out;
  for (const auto& [node_plugin, keys] : c.claimed_on) out.insert(keys.begin(), keys.end());
  return out;
}

namespace {

void put_token(catalog& c, const v1::AclToken& t) {
  auto it = c.acl_tokens.find(t.accessor_id());
  if (it != c.acl_tokens.end()) c.acl_by_hash.erase(it->second.secret_hash());
  c.acl_tokens[t.accessor_id()] = t;
  c.acl_by_hash[t.secret_hash()] = t.accessor_id();
}

}  // namespace

void add_acl(catalog& c, std::vector<v1::AclPolicy> policies, std::vector<v1::AclToken> tokens,
             uint64_t bootstrap_index) {
  for (auto& p : policies) c.acl_policies[p.name()] = std::move(p);
  for (const auto& t : tokens) put_token(c, t);
  c.acl_bootstrap_index = bootstrap_index;
}

std::optional<v1::Change> alloc_after_release(const catalog& c, const std::string& alloc_id,
                                              const volume_key& volume) {
  const auto* known = find_alloc(c, alloc_id);
  if (known == nullptr || !known->command().empty() || known->namespace_() != volume.first)
    return std::nullopt;
  auto v = find_volume(c, volume);
  if (v && find_claim(*v, alloc_id) != nullptr) return std::nullopt;  // not freed
  auto a = *known;
  auto* vs = a.mutable_volumes();
  auto pos = std::find_if(vs->begin(), vs->end(), [&](const v1::AllocVolume& x) {
    return x.volume_id() == volume.second;
  });
  if (pos == vs->end()) return std::nullopt;
  vs->erase(pos);
  // Its node down, or back and not yet confirmed its unmounts: the alloc
  // stays (ended, without volumes), so that the node is told to unmount it.
  const auto* n = find_node(c, a.node_id());
  bool away = n != nullptr && n->has_client() &&
              (n->status() == v1::NODE_DOWN ||
               (n->down_at_ms() != 0 && alloc_terminal(a.state())));
  if (a.volumes().empty() && !away) return alloc_delete_change(a.id());
  return upsert_change(std::move(a));
}

std::optional<v1::Change> alloc_after_free(const catalog& c, const v1::AllocVolumeFreed& freed) {
  const auto* a = find_alloc(c, freed.alloc_id());
  if (a == nullptr || alloc_terminal(a->state())) return std::nullopt;
  return alloc_after_release(c, freed.alloc_id(),
                             {freed.volume().namespace_(), freed.volume().id()});
}

std::optional<v1::Change> alloc_after_claim(const catalog& c,
                                            const v1::AllocVolumeClaimed& claimed) {
  const auto& routed = claimed.alloc();
  const auto* known = find_alloc(c, routed.id());
  if (known == nullptr) return upsert_change(routed);
  auto has = [&](const v1::Alloc& a) {
    return std::any_of(a.volumes().begin(), a.volumes().end(), [&](const v1::AllocVolume& v) {
      return v.volume_id() == claimed.volume_id();
    });
  };
  if (has(*known)) return std::nullopt;
  auto a = *known;
  for (const auto& v : routed.volumes())
    if (v.volume_id() == claimed.volume_id()) *a.add_volumes() = v;
  a.set_modified_at_ms(std::max(a.modified_at_ms(), routed.modified_at_ms()));
  return upsert_change(std::move(a));
}

uint64_t version_in(const catalog& c, const v1::Expectation& e) {
  switch (e.object_case()) {
    case v1::Expectation::kAlloc: {
      const auto* a = find_alloc(c, e.alloc());
      return a ? a->modify_index() : 0;
    }
    case v1::Expectation::kNode: {
      const auto* n = find_node(c, e.node());
      return n ? n->modify_index() : 0;
    }
    case v1::Expectation::kPlugin: {
      const auto* p = find_plugin(c, e.plugin());
      return p ? p->modify_index() : 0;
    }
    case v1::Expectation::kVolume: {
      auto v = find_volume(c, {e.volume().namespace_(), e.volume().id()});
      return v ? v->modify_index() : 0;
    }
    case v1::Expectation::kAclPolicy: {
      auto it = c.acl_policies.find(e.acl_policy());
      return it == c.acl_policies.end() ? 0 : it->second.modify_index();
    }
    case v1::Expectation::kAclToken: {
      auto it = c.acl_tokens.find(e.acl_token());
      return it == c.acl_tokens.end() ? 0 : it->second.modify_index();
    }
    case v1::Expectation::kAclBootstrap:
      return c.acl_bootstrap_index;
    case v1::Expectation::kNodeAllocs: {
      uint64_t top = 0;
      for (const auto& [id, a] : c.allocs)
        if (a.node_id() == e.node_allocs()) top = std::max(top, a.modify_index());
      return top;
    }
    case v1::Expectation::OBJECT_NOT_SET:
      break;
  }
  return 0;
}

bool expectations_hold(const catalog& c, const v1::LogEntry& entry) {
  return expectations_hold(entry, [&](const v1::Expectation& e) { return version_in(c, e); });
}

std::vector<v1::Expectation> expectations_of(const catalog& c,
                                             const std::vector<v1::Change>& changes,
                                             bool node_allocs) {
  std::vector<v1::Expectation> out;
  std::set<std::string> seen;
  auto add = [&](v1::Expectation e) {
    if (!seen.insert(expectation_key(e)).second) return;
    e.set_modify_index(version_in(c, e));
    out.push_back(std::move(e));
  };
  for (const auto& ch : changes) {
    v1::Expectation e;
    switch (ch.change_case()) {
      case v1::Change::kVolumeUpsert:
        e.mutable_volume()->set_namespace_(ch.volume_upsert().namespace_());
        e.mutable_volume()->set_id(ch.volume_upsert().id());
        break;
      case v1::Change::kVolumeDelete:
        *e.mutable_volume() = ch.volume_delete();
        break;
      case v1::Change::kPluginUpsert:
        e.set_plugin(ch.plugin_upsert().id());
        break;
      case v1::Change::kPluginDelete:
        e.set_plugin(ch.plugin_delete());
        break;
      case v1::Change::kNodeUpsert:
        e.set_node(ch.node_upsert().id());
        if (node_allocs) add(expect_node_allocs(ch.node_upsert().id(), 0));
        break;
      case v1::Change::kNodeDelete:
        e.set_node(ch.node_delete());
        add(expect_node_allocs(ch.node_delete(), 0));
        break;
      case v1::Change::kAllocUpsert:
        e.set_alloc(ch.alloc_upsert().id());
        break;
      case v1::Change::kAllocDelete:
        e.set_alloc(ch.alloc_delete());
        break;
      case v1::Change::kAllocVolumeFreed:
        e.set_alloc(ch.alloc_volume_freed().alloc_id());
        break;
      case v1::Change::kAllocVolumeClaimed:
        e.set_alloc(ch.alloc_volume_claimed().alloc().id());
        break;
      case v1::Change::kAclPolicyUpsert:
        e.set_acl_policy(ch.acl_policy_upsert().name());
        break;
      case v1::Change::kAclPolicyDelete:
        e.set_acl_policy(ch.acl_policy_delete());
        break;
      case v1::Change::kAclTokenUpsert:
        e.set_acl_token(ch.acl_token_upsert().accessor_id());
        break;
      case v1::Change::kAclTokenDelete:
        e.set_acl_token(ch.acl_token_delete());
        break;
      case v1::Change::kAclBootstrap:
        e.set_acl_bootstrap(true);
        break;
      case v1::Change::kRestoreState:
      case v1::Change::CHANGE_NOT_SET:
        continue;
    }
    add(std::move(e));
  }
  return out;
}

bool take_refused(catalog& c, uint64_t index) {
  return c.refused.erase(index) > 0;
}

std::vector<applied_change> apply(catalog& c, uint64_t index, const v1::LogEntry& entry) {
  std::vector<applied_change> out;
  if (index <= c.applied_index) return out;
  c.applied_index = index;
  constexpr uint64_t refused_kept = 65'536;
  while (!c.refused.empty() && *c.refused.begin() + refused_kept < index)
    c.refused.erase(c.refused.begin());
  if (!expectations_hold(c, entry)) {
    c.refused.insert(index);
    return out;
  }
  uint32_t position = 0;
  for (auto change : entry.changes()) {
    ++position;
    if (change.has_alloc_volume_freed() || change.has_alloc_volume_claimed()) {
      auto resolved = change.has_alloc_volume_freed()
                          ? alloc_after_free(c, change.alloc_volume_freed())
                          : alloc_after_claim(c, change.alloc_volume_claimed());
      if (!resolved) continue;
      change = std::move(*resolved);
    }
    stamp(change, index);
    v1::Change before;
    switch (change.change_case()) {
      case v1::Change::kVolumeUpsert: {
        const auto& v = change.volume_upsert();
        volume_key key{v.namespace_(), v.id()};
        before = put_volume(c, key,
                            c.rows ? c.rows->row(c.party, index, position, v) : volume_row(v));
        index_claims(c, key, before.has_volume_upsert() ? &before.volume_upsert() : nullptr, &v);
        c.volumes_index = index;
        break;
      }
      case v1::Change::kVolumeDelete: {
        volume_key key{change.volume_delete().namespace_(), change.volume_delete().id()};
        before = erase_volume(c, key);
        if (before.has_volume_upsert()) index_claims(c, key, &before.volume_upsert(), nullptr);
        c.volumes_index = index;
        break;
      }
      case v1::Change::kPluginUpsert:
        before = put(c.plugins, change.plugin_upsert().id(), change.plugin_upsert());
        c.plugins_index = index;
        break;
      case v1::Change::kPluginDelete:
        before = erase(c.plugins, change.plugin_delete());
        c.plugins_index = index;
        break;
      case v1::Change::kNodeUpsert:
        before = put(c.nodes, change.node_upsert().id(), change.node_upsert());
        break;
      case v1::Change::kNodeDelete:
        before = erase(c.nodes, change.node_delete());
        break;
      case v1::Change::kAllocUpsert:
        before = put(c.allocs, change.alloc_upsert().id(), change.alloc_upsert());
        break;
      case v1::Change::kAllocDelete:
        before = erase(c.allocs, change.alloc_delete());
        break;
      case v1::Change::kAclPolicyUpsert:
        before = put(c.acl_policies, change.acl_policy_upsert().name(), change.acl_policy_upsert());
        break;
      case v1::Change::kAclPolicyDelete:
        before = erase(c.acl_policies, change.acl_policy_delete());
        break;
      case v1::Change::kAclBootstrap:
        c.acl_bootstrap_index = index;
        put_token(c, change.acl_bootstrap());
        break;
      case v1::Change::kAclTokenUpsert:
        put_token(c, change.acl_token_upsert());
        break;
      case v1::Change::kAclTokenDelete: {
        auto it = c.acl_tokens.find(change.acl_token_delete());
        if (it != c.acl_tokens.end()) {
          c.acl_by_hash.erase(it->second.secret_hash());
          c.acl_tokens.erase(it);
        }
        break;
      }
      case v1::Change::kRestoreState:
        c.restored = true;
        change.set_restore_state("");  // the bytes stay in the log, not here
        break;
      case v1::Change::kAllocVolumeFreed:  // resolved above
      case v1::Change::kAllocVolumeClaimed:
      case v1::Change::CHANGE_NOT_SET:
        continue;
    }
    out.push_back({std::move(change), std::move(before)});
  }
  return out;
}

std::optional<v1::Volume> find_volume(const catalog& c, const volume_key& key) {
  auto it = c.volumes.find(key);
  if (it == c.volumes.end()) return std::nullopt;
  return it->second.get();
}

bool has_volume(const catalog& c, const volume_key& key) { return c.volumes.count(key) > 0; }

v1::Volume volume_at(const catalog& c, const volume_key& key) { return c.volumes.at(key).get(); }

const v1::Alloc* find_alloc(const catalog& c, const std::string& id) {
  auto it = c.allocs.find(id);
  return it == c.allocs.end() ? nullptr : &it->second;
}

const v1::Node* find_node(const catalog& c, const std::string& id) {
  auto it = c.nodes.find(id);
  return it == c.nodes.end() ? nullptr : &it->second;
}

const v1::Plugin* find_plugin(const catalog& c, const std::string& id) {
  auto it = c.plugins.find(id);
  return it == c.plugins.end() ? nullptr : &it->second;
}

std::string ns_or_default(const std::string& ns) { return ns.empty() ? "default" : ns; }

void alloc_upserts_first(std::vector<applied_change>& changes) {
  std::stable_partition(changes.begin(), changes.end(),
                        [](const applied_change& a) { return a.change.has_alloc_upsert(); });
}

}  // namespace berth
