#include "control/views.hpp"

#include <iterator>
#include <set>

#include <nlohmann/json.hpp>

#include "control/drain.hpp"
#include "control/filter.hpp"
#include "control/health.hpp"
#include "messages/codec.hpp"

namespace berth {

namespace {

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

v1::Response not_found(std::string message) {
  return error_response(failure{errc::not_found, std::move(message)});
}

v1::Node node_view(const catalog& c, const v1::Node& n,
                   const std::function<int64_t(const std::string&)>& last_seen_ms) {
  auto out = n;
  if (auto seen = last_seen_ms(n.id())) out.set_last_seen_ms(seen);
  if (n.has_drain()) *out.mutable_drain_progress() = drain_progress(c, n.id());
  return out;
}

// A list's value as its filters and renderers take it: a volume decoded
// from its row, anything else as the catalog holds it.
v1::Volume value_of(const volume_row& row) { return row.get(); }
template <class T>
const T& value_of(const T& x) {
  return x;
}

// One page of a list: the objects in [from, to) (ordered by key) after
// the page token that the filter matches, at most per_page; the token of
// the next page when more remain.  Reads from the token on, not the whole
// range.
template <class It, class Keep, class Token, class Json, class Add>
v1::Response page(It from, It to, const v1::ListRequest& q, Keep keep, Token token_of,
                  Json json_of, Add add) {
  auto parsed = parse_filter(q.filter());
  if (auto* f = std::get_if<failure>(&parsed)) return error_response(*f);
  const auto& flt = std::get<filter>(parsed);
  v1::Response r;
  uint32_t taken = 0;
  for (auto it = from; it != to; ++it) {
    decltype(auto) value = value_of(it->second);
    if (!keep(value) || (!flt.empty() && !flt.matches(json_of(value)))) continue;
    if (q.per_page() != 0 && taken == q.per_page()) {
      r.set_next_page_token(token_of(std::prev(it)->first));
      break;
    }
    add(r, value);
    ++taken;
  }
  return r;
}

volume_key volume_key_of(const std::string& token) {
  auto slash = token.find('/');
  if (slash == std::string::npos) return {token, ""};
  return {token.substr(0, slash), token.substr(slash + 1)};
}

}  // namespace

v1::Response error_response(const failure& f) {
  v1::Response r;
  r.mutable_error()->set_code(static_cast<v1::ErrorCode>(f.code));
  r.mutable_error()->set_message(f.message);
  if (f.retry) r.mutable_error()->set_retry(true);
  if (f.maybe_applied) r.mutable_error()->set_maybe_applied(true);
  return r;
}

void add_volume(const catalog& c, v1::Response& r, const v1::Volume& v) {
  auto* out = r.add_volumes();
  *out = redacted(v);
  out->clear_usage();
  for (auto& u : usage_of(c, {v.namespace_(), v.id()})) *out->add_usage() = std::move(u);
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
  if (!has_volume(c, key))
    return {failure{errc::not_found, "volume " + in_quotes(id) + " is not registered in namespace " +
                                         in_quotes(key.first) +
                                         " (list volumes with: berth volume status)"},
            key};
  return {std::nullopt, key};
}

bool is_read(const v1::Request& r) {
  switch (r.command_case()) {
    case v1::Request::kVolumeStatus:
    case v1::Request::kVolumeList:
    case v1::Request::kPluginStatus:
    case v1::Request::kPluginList:
    case v1::Request::kNodeStatus:
    case v1::Request::kNodeList:
    case v1::Request::kAllocStatus:
    case v1::Request::kAllocList:
      return true;
    default:
      return false;
  }
}

std::optional<v1::Response> answer_read(
    const catalog& c, const v1::Request& req,
    const std::function<int64_t(const std::string&)>& last_seen_ms) {
  switch (req.command_case()) {
    case v1::Request::kVolumeStatus: {
      auto found = lookup_volume(c, req.volume_status().namespace_(), req.volume_status().id());
      if (found.error) return error_response(*found.error);
      const auto v = volume_at(c, found.key);
      auto r = volume_response(c, v, "");
      // The allocs of its claims (Nomad's CSIVolume lists their stubs).
      std::set<std::string> seen;
      for (const auto& cl : v.claims())
        if (const auto* a = find_alloc(c, cl.alloc_id()); a && seen.insert(a->id()).second)
          *r.add_allocs() = *a;
      return r;
    }
    case v1::Request::kVolumeList: {
      const auto& q = req.volume_list();
      const auto& ns = q.namespace_();
      // One namespace is one range of the map (keys are namespace, id).
      auto from = ns.empty() ? c.volumes.begin() : c.volumes.lower_bound({ns, ""});
      auto to = ns.empty() ? c.volumes.end() : c.volumes.lower_bound({ns + '\0', ""});
      auto& m = c.volumes;
      auto later = [&m](auto a, auto b) {  // the later of two positions
        if (a == m.end() || b == m.end()) return m.end();
        return m.key_comp()(a->first, b->first) ? b : a;
      };
      if (!q.page_token().empty()) from = later(from, m.upper_bound(volume_key_of(q.page_token())));
      if (to != m.end() && later(from, to) != to) from = to;
      if (to != m.end() && from == m.end()) from = to;
      auto r = page(
          from, to, q, [](const v1::Volume&) { return true; },
          [](const volume_key& k) { return k.first + "/" + k.second; },
          [&c](const v1::Volume& v) {
            return volume_json(redacted(v), find_plugin(c, v.plugin_id()));
          },
          [&c](v1::Response& r, const v1::Volume& v) { add_volume(c, r, v); });
      r.set_index(c.volumes_index);
      return r;
    }
    case v1::Request::kAllocStatus: {
      const auto* a = find_alloc(c, req.alloc_status());
      if (a == nullptr)
        return not_found("alloc " + in_quotes(req.alloc_status()) +
                         " does not exist (list allocs with: berth alloc status)");
      v1::Response r;
      *r.add_allocs() = *a;
      for (const auto& av : a->volumes())
        if (auto v = find_volume(c, {a->namespace_(), av.volume_id()})) add_volume(c, r, *v);
      return r;
    }
    case v1::Request::kAllocList: {
      const auto& q = req.alloc_list();
      const auto& ns = q.namespace_();
      return page(
          q.page_token().empty() ? c.allocs.begin() : c.allocs.upper_bound(q.page_token()),
          c.allocs.end(), q,
          [&ns](const v1::Alloc& a) { return ns.empty() || a.namespace_() == ns; },
          [](const std::string& id) { return id; }, [](const v1::Alloc& a) { return alloc_json(a); },
          [](v1::Response& r, const v1::Alloc& a) { *r.add_allocs() = a; });
    }
    case v1::Request::kPluginStatus: {
      const auto* p = find_plugin(c, req.plugin_status());
      if (p == nullptr)
        return not_found("plugin " + in_quotes(req.plugin_status()) +
                         " is not registered (list plugins with: berth plugin status)");
      v1::Response r;
      *r.add_plugins() = *p;
      return r;
    }
    case v1::Request::kPluginList: {
      const auto& q = req.plugin_list();
      auto r = page(
          q.page_token().empty() ? c.plugins.begin() : c.plugins.upper_bound(q.page_token()),
          c.plugins.end(), q, [](const v1::Plugin&) { return true; },
          [](const std::string& id) { return id; },
          [](const v1::Plugin& p) { return plugin_json(p); },
          [](v1::Response& r, const v1::Plugin& p) { *r.add_plugins() = p; });
      r.set_index(c.plugins_index);
      return r;
    }
    case v1::Request::kNodeStatus: {
      const auto* n = find_node(c, req.node_status());
      if (n == nullptr)
        return not_found("node " + in_quotes(req.node_status()) +
                         " is not known (list nodes with: berth node status)");
      v1::Response r;
      *r.add_nodes() = node_view(c, *n, last_seen_ms);
      for (const auto& [id, a] : c.allocs)
        if (a.node_id() == n->id()) *r.add_allocs() = a;
      for (const auto& key : volumes_claimed_on(c, n->id()))
        if (auto v = find_volume(c, key)) add_volume(c, r, *v);
      return r;
    }
    case v1::Request::kNodeList: {
      const auto& q = req.node_list();
      return page(
          q.page_token().empty() ? c.nodes.begin() : c.nodes.upper_bound(q.page_token()),
          c.nodes.end(), q, [](const v1::Node&) { return true; },
          [](const std::string& id) { return id; },
          [&c, &last_seen_ms](const v1::Node& n) { return node_json(node_view(c, n, last_seen_ms)); },
          [&c, &last_seen_ms](v1::Response& r, const v1::Node& n) {
            *r.add_nodes() = node_view(c, n, last_seen_ms);
          });
    }
    default:
      return std::nullopt;
  }
}

}  // namespace berth
