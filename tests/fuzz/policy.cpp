// Fuzz target: the ACL policy parser (control/acl).  Whatever it accepts
// must hold only known capabilities and levels, and a policy made of what
// it accepted must authorize without crashing.
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "control/acl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = berth::acl::parse_policy(text);
  auto* rules = std::get_if<berth::v1::AclRules>(&parsed);
  if (!rules) {
    if (std::get<berth::failure>(parsed).message.empty()) std::abort();
    return 0;
  }
  const auto& known = berth::acl::namespace_capabilities();
  berth::acl::grant g;
  for (const auto& ns : rules->namespaces()) {
    if (ns.pattern().empty()) std::abort();
    for (const auto& cap : ns.capabilities())
      if (std::find(known.begin(), known.end(), cap) == known.end()) std::abort();
    g.namespaces.push_back(ns);
  }
  for (const auto* level : {&rules->node(), &rules->agent(), &rules->operator_()})
    if (!level->empty() && *level != "deny" && *level != "read" && *level != "write") std::abort();
  g.node = rules->node();
  g.plugin = rules->plugin();
  berth::catalog c;
  berth::v1::Request req;
  req.mutable_volume_claim()->set_namespace_("team-a");
  (void)berth::acl::authorize(c, g, req);
  (void)berth::acl::allows(g, "default", "csi-read-volume");
  return 0;
}
