#include "control/views.hpp"

namespace berth {

namespace {

std::string quoted(const std::string& s) { return "'" + s + "'"; }

v1::Response not_found(std::string message) {
  return error_response(failure{errc::not_found, std::move(message)});
}

v1::Node node_view(const v1::Node& n,
                   const std::function<int64_t(const std::string&)>& last_seen_ms) {
  auto out = n;
  if (auto seen = last_seen_ms(n.id())) out.set_last_seen_ms(seen);
  return out;
}

}  // namespace

v1::Response error_response(const failure& f) {
  v1::Response r;
  r.mutable_error()->set_code(static_cast<v1::ErrorCode>(f.code));
  r.mutable_error()->set_message(f.message);
  if (f.retry) r.mutable_error()->set_retry(true);
  return r;
}

void add_volume(const catalog& c, v1::Response& r, const v1::Volume& v) {
  *r.add_volumes() = redacted(v);
  const auto* p = find_plugin(c, v.plugin_id());
  if (p == nullptr) return;
  for (const auto& known : r.plugins())
    if (known.id() == v.plugin_id()) return;
  *r.add_plugins() = *p;
}

v1::Response volume_response(const catalog& c, const v1::Volume& v, std::string message) {
  v1::Response r;
  add_volume(c, r, v);
  r.set_message(std::move(message));
  return r;
}

v1::Response alloc_response(const v1::Alloc& a, std::string message) {
  v1::Response r;
  *r.add_allocs() = a;
  r.set_message(std::move(message));
  return r;
}

volume_lookup lookup_volume(const catalog& c, const std::string& ns, const std::string& id) {
  volume_key key{ns_or_default(ns), id};
  if (id.empty()) return {failure{errc::invalid, "a volume id is required"}, key};
  if (find_volume(c, key) == nullptr)
    return {failure{errc::not_found, "volume " + quoted(id) + " is not registered in namespace " +
                                         quoted(key.first) +
                                         " (list volumes with: berth volume status)"},
            key};
  return {std::nullopt, key};
}

std::optional<v1::Response> answer_read(
    const catalog& c, const v1::Request& req,
    const std::function<int64_t(const std::string&)>& last_seen_ms) {
  switch (req.command_case()) {
    case v1::Request::kVolumeStatus: {
      auto found = lookup_volume(c, req.volume_status().namespace_(), req.volume_status().id());
      if (found.error) return error_response(*found.error);
      return volume_response(c, c.volumes.at(found.key), "");
    }
    case v1::Request::kVolumeList: {
      v1::Response r;
      const auto& ns = req.volume_list().namespace_();
      for (const auto& [key, v] : c.volumes)
        if (ns.empty() || key.first == ns) add_volume(c, r, v);
      return r;
    }
    case v1::Request::kAllocStatus: {
      const auto* a = find_alloc(c, req.alloc_status());
      if (a == nullptr)
        return not_found("alloc " + quoted(req.alloc_status()) +
                         " does not exist (list allocs with: berth alloc status)");
      v1::Response r;
      *r.add_allocs() = *a;
      for (const auto& av : a->volumes())
        if (const auto* v = find_volume(c, {a->namespace_(), av.volume_id()})) add_volume(c, r, *v);
      return r;
    }
    case v1::Request::kAllocList: {
      v1::Response r;
      const auto& ns = req.alloc_list().namespace_();
      for (const auto& [id, a] : c.allocs)
        if (ns.empty() || a.namespace_() == ns) *r.add_allocs() = a;
      return r;
    }
    case v1::Request::kPluginStatus: {
      const auto* p = find_plugin(c, req.plugin_status());
      if (p == nullptr)
        return not_found("plugin " + quoted(req.plugin_status()) +
                         " is not registered (list plugins with: berth plugin status)");
      v1::Response r;
      *r.add_plugins() = *p;
      return r;
    }
    case v1::Request::kPluginList: {
      v1::Response r;
      for (const auto& [id, p] : c.plugins) *r.add_plugins() = p;
      return r;
    }
    case v1::Request::kNodeStatus: {
      const auto* n = find_node(c, req.node_status());
      if (n == nullptr)
        return not_found("node " + quoted(req.node_status()) +
                         " is not known (list nodes with: berth node status)");
      v1::Response r;
      *r.add_nodes() = node_view(*n, last_seen_ms);
      for (const auto& [id, a] : c.allocs)
        if (a.node_id() == n->id()) *r.add_allocs() = a;
      for (const auto& [key, v] : c.volumes)
        for (const auto& claim : v.claims())
          if (claim.node_id() == n->id()) {
            add_volume(c, r, v);
            break;
          }
      return r;
    }
    case v1::Request::kNodeList: {
      v1::Response r;
      for (const auto& [id, n] : c.nodes) *r.add_nodes() = node_view(n, last_seen_ms);
      return r;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace berth
