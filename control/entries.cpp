#include "control/entries.hpp"

#include <algorithm>

namespace berth {

v1::LogEntry make_entry(std::vector<v1::Change> changes, std::vector<v1::Expectation> expect) {
  v1::LogEntry e;
  bool newer = !expect.empty() || std::any_of(changes.begin(), changes.end(), [](const auto& c) {
    return c.has_alloc_volume_claimed();
  });
  e.set_format_version(newer ? entry_format_expectations : entry_format_version);
  for (auto& c : changes) *e.add_changes() = std::move(c);
  for (auto& x : expect) *e.add_expect() = std::move(x);
  return e;
}

std::string expectation_key(const v1::Expectation& e) {
  switch (e.object_case()) {
    case v1::Expectation::kAlloc:
      return "alloc/" + e.alloc();
    case v1::Expectation::kNode:
      return "node/" + e.node();
    case v1::Expectation::kPlugin:
      return "plugin/" + e.plugin();
    case v1::Expectation::kVolume:
      return "volume/" + e.volume().namespace_() + "/" + e.volume().id();
    case v1::Expectation::kAclPolicy:
      return "acl_policy/" + e.acl_policy();
    case v1::Expectation::kAclToken:
      return "acl_token/" + e.acl_token();
    case v1::Expectation::kAclBootstrap:
      return "acl_bootstrap";
    case v1::Expectation::kNodeAllocs:
      return "node_allocs/" + e.node_allocs();
    case v1::Expectation::OBJECT_NOT_SET:
      break;
  }
  return "";
}

v1::Expectation expect_node(const std::string& id, uint64_t version) {
  v1::Expectation e;
  e.set_node(id);
  e.set_modify_index(version);
  return e;
}

v1::Expectation expect_node_allocs(const std::string& node_id, uint64_t version) {
  v1::Expectation e;
  e.set_node_allocs(node_id);
  e.set_modify_index(version);
  return e;
}

bool expectations_hold(const v1::LogEntry& entry,
                       const std::function<uint64_t(const v1::Expectation&)>& version) {
  for (const auto& x : entry.expect()) {
    // An expectation this berth cannot read (a newer one's) never holds.
    if (x.object_case() == v1::Expectation::OBJECT_NOT_SET) return false;
    if (version(x) != x.modify_index()) return false;
  }
  return true;
}

v1::Change upsert_change(v1::Volume v) {
  v1::Change c;
  *c.mutable_volume_upsert() = std::move(v);
  return c;
}

v1::Change upsert_change(v1::Plugin p) {
  v1::Change c;
  *c.mutable_plugin_upsert() = std::move(p);
  return c;
}

v1::Change upsert_change(v1::Node n) {
  v1::Change c;
  *c.mutable_node_upsert() = std::move(n);
  return c;
}

v1::Change upsert_change(v1::Alloc a) {
  v1::Change c;
  *c.mutable_alloc_upsert() = std::move(a);
  return c;
}

v1::Change upsert_change(v1::AclPolicy p) {
  v1::Change c;
  *c.mutable_acl_policy_upsert() = std::move(p);
  return c;
}

v1::Change volume_delete_change(const std::string& ns, const std::string& id) {
  v1::Change c;
  c.mutable_volume_delete()->set_namespace_(ns);
  c.mutable_volume_delete()->set_id(id);
  return c;
}

v1::Change plugin_delete_change(const std::string& id) {
  v1::Change c;
  c.set_plugin_delete(id);
  return c;
}

v1::Change alloc_delete_change(const std::string& id) {
  v1::Change c;
  c.set_alloc_delete(id);
  return c;
}

v1::Change node_delete_change(const std::string& id) {
  v1::Change c;
  c.set_node_delete(id);
  return c;
}

v1::Change alloc_volume_freed_change(const std::string& alloc_id, const std::string& ns,
                                     const std::string& volume_id) {
  v1::Change c;
  auto* f = c.mutable_alloc_volume_freed();
  f->set_alloc_id(alloc_id);
  f->mutable_volume()->set_namespace_(ns);
  f->mutable_volume()->set_id(volume_id);
  return c;
}

v1::Change alloc_volume_claimed_change(v1::Alloc alloc, const std::string& volume_id) {
  v1::Change c;
  auto* x = c.mutable_alloc_volume_claimed();
  *x->mutable_alloc() = std::move(alloc);
  x->set_volume_id(volume_id);
  return c;
}

v1::Change restore_change(std::string state_db) {
  v1::Change c;
  c.set_restore_state(std::move(state_db));
  return c;
}

namespace {

template <class T>
void stamp_object(T& x, uint64_t index) {
  if (x.create_index() == 0) x.set_create_index(index);
  x.set_modify_index(index);
}

}  // namespace

void stamp(v1::Change& change, uint64_t index) {
  switch (change.change_case()) {
    case v1::Change::kVolumeUpsert: stamp_object(*change.mutable_volume_upsert(), index); break;
    case v1::Change::kPluginUpsert: stamp_object(*change.mutable_plugin_upsert(), index); break;
    case v1::Change::kNodeUpsert: stamp_object(*change.mutable_node_upsert(), index); break;
    case v1::Change::kAllocUpsert: stamp_object(*change.mutable_alloc_upsert(), index); break;
    case v1::Change::kAclPolicyUpsert: stamp_object(*change.mutable_acl_policy_upsert(), index); break;
    case v1::Change::kAclTokenUpsert: stamp_object(*change.mutable_acl_token_upsert(), index); break;
    case v1::Change::kAclBootstrap: stamp_object(*change.mutable_acl_bootstrap(), index); break;
    default: break;
  }
}

}  // namespace berth
