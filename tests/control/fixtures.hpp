// The objects the control modules' tests build (tests/control/): a volume,
// its claims, an alloc, a node, a plugin with controllers, and commit(),
// which applies one entry of changes at the catalog's next index.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "control/catalog.hpp"
#include "control/entries.hpp"

namespace berth::test {

inline v1::Volume make_volume(const std::string& id, const std::string& plugin = "p") {
  v1::Volume v;
  v.set_id(id);
  v.set_namespace_("default");
  v.set_plugin_id(plugin);
  v.set_external_id("ext-" + id);
  auto* cap = v.add_capabilities();
  cap->set_access_mode(v1::SINGLE_NODE_WRITER);
  cap->set_attachment_mode(v1::FILE_SYSTEM);
  return v;
}

inline v1::Claim* add_claim(v1::Volume& v, const std::string& alloc, const std::string& node,
                            v1::ClaimState state = v1::CLAIM_TAKEN) {
  auto* c = v.add_claims();
  c->set_alloc_id(alloc);
  c->set_node_id(node);
  c->set_state(state);
  c->set_mode(v1::CLAIM_WRITE);
  c->set_access_mode(v1::SINGLE_NODE_WRITER);
  return c;
}

inline v1::Alloc make_alloc(const std::string& id, const std::string& node, v1::AllocState state,
                            std::vector<std::string> volumes = {}) {
  v1::Alloc a;
  a.set_id(id);
  a.set_namespace_("default");
  a.set_node_id(node);
  a.set_state(state);
  for (const auto& v : volumes) {
    auto* av = a.add_volumes();
    av->set_name(v);
    av->set_volume_id(v);
  }
  return a;
}

inline v1::Node make_node(const std::string& id, v1::NodeStatus status = v1::NODE_READY,
                          bool client = true) {
  v1::Node n;
  n.set_id(id);
  n.set_status(status);
  n.set_has_client(client);
  return n;
}

inline void commit(catalog& c, std::vector<v1::Change> changes) {
  apply(c, c.applied_index + 1, make_entry(std::move(changes)));
}

inline v1::Plugin controller_plugin(std::vector<std::pair<std::string, bool>> controllers) {
  v1::Plugin p;
  p.set_id("p");
  p.set_controller_required(true);
  for (const auto& [node, healthy] : controllers) {
    auto* c = p.add_controllers();
    c->set_node_id(node);
    c->set_healthy(healthy);
  }
  return p;
}

}  // namespace berth::test
