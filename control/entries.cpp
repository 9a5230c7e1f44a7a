#include "control/entries.hpp"

namespace berth {

v1::LogEntry make_entry(std::vector<v1::Change> changes) {
  v1::LogEntry e;
  e.set_format_version(entry_format_version);
  for (auto& c : changes) *e.add_changes() = std::move(c);
  return e;
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
