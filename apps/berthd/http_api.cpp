#include "apps/berthd/http_api.hpp"

#include <chrono>
#include <functional>
#include <variant>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <nlohmann/json.hpp>

#include "actors/types.hpp"
#include "messages/codec.hpp"

namespace berth {

namespace {

// The paths, as a 404 names them.
const char* const http_paths =
    "GET /v1/status, /v1/volumes, /v1/volume?namespace=NS&id=ID, /v1/plugins, "
    "/v1/plugin?id=ID, /v1/nodes, /v1/node?id=ID, /v1/allocs, /v1/alloc?id=ID, "
    "/v1/raft/peers, /v1/event/stream; POST /v1/alloc/stop, /v1/volume/detach, /v1/node/drain";

using nlohmann::json;
using params = std::map<std::string, std::string>;

std::string dump(const json& j) {
  // Invalid UTF-8 (never accepted by the spec parser, but a view must not
  // throw on a civetweb thread): replaced, not fatal.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json_view error_view(int status, const std::string& message) {
  return {status, dump(json{{"error", message}})};
}

// An answer's error code as an HTTP status: FORBIDDEN is 403 (the UI then
// asks for a token), the rules' refusals 409.
int http_status_of(v1::ErrorCode code) {
  switch (code) {
    case v1::OK: return 200;
    case v1::INVALID: return 400;
    case v1::NOT_FOUND: return 404;
    case v1::REFUSED: return 409;
    case v1::FORBIDDEN: return 403;
    case v1::INTERNAL: return 500;
    default: return 503;
  }
}

// A request as the shell builds it, or what is wrong with the parameters.
using built = std::variant<v1::Request, std::string>;

// One path of the API: the method, the shell's request it sends (built from
// the parameters: the query, and for POST the JSON body's fields) and how
// its answer is shown (the shell's --json renderer).
struct route {
  const char* method;
  const char* path;
  std::function<built(const params&)> build;
  std::function<json(const v1::Response&)> render;
  std::chrono::seconds timeout{10};
};

std::string param(const params& p, const std::string& key) {
  auto it = p.find(key);
  return it == p.end() ? std::string() : it->second;
}

bool flag(const params& p, const std::string& key) {
  auto v = param(p, key);
  return v == "true" || v == "1";
}

// The missing one of `keys`, as the error names it ("" when all are there).
std::string missing(const params& p, std::initializer_list<const char*> keys) {
  for (const auto* k : keys)
    if (param(p, k).empty()) return std::string("parameter '") + k + "' is missing";
  return "";
}

template <class Items, class ToJson>
json array_of(const Items& items, ToJson to_json) {
  json out = json::array();
  for (const auto& x : items) out.push_back(to_json(x));
  return out;
}

json with_message(json j, const v1::Response& r) {
  if (!j.is_object()) j = json::object();
  j["message"] = r.message();
  return j;
}

// The namespace of one volume: "default" unless given, as the shell's.
std::string volume_namespace(const params& p) {
  auto ns = param(p, "namespace");
  return ns.empty() ? "default" : ns;
}

// The namespace of a list: "" and "*" are every namespace.
std::string list_namespace(const params& p) {
  auto ns = param(p, "namespace");
  return ns == "*" ? "" : ns;
}

const std::vector<route>& routes() {
  static const std::vector<route> all = {
      {"GET", "/v1/status",
       [](const params&) -> built {
         v1::Request r;
         r.mutable_agent_status();
         return r;
       },
       [](const v1::Response& r) { return agent_json(r.agent()); }},
      {"GET", "/v1/volumes",
       [](const params& p) -> built {
         v1::Request r;
         r.mutable_volume_list()->set_namespace_(list_namespace(p));
         return r;
       },
       volumes_json},
      {"GET", "/v1/volume",
       [](const params& p) -> built {
         if (auto m = missing(p, {"id"}); !m.empty()) return m;
         v1::Request r;
         r.mutable_volume_status()->set_namespace_(volume_namespace(p));
         r.mutable_volume_status()->set_id(param(p, "id"));
         return r;
       },
       single_volume_json},
      {"GET", "/v1/plugins",
       [](const params&) -> built {
         v1::Request r;
         r.mutable_plugin_list();
         return r;
       },
       [](const v1::Response& r) { return array_of(r.plugins(), plugin_json); }},
      {"GET", "/v1/plugin",
       [](const params& p) -> built {
         if (auto m = missing(p, {"id"}); !m.empty()) return m;
         v1::Request r;
         r.set_plugin_status(param(p, "id"));
         return r;
       },
       [](const v1::Response& r) { return r.plugins().empty() ? json() : plugin_json(r.plugins(0)); }},
      {"GET", "/v1/nodes",
       [](const params&) -> built {
         v1::Request r;
         r.mutable_node_list();
         return r;
       },
       [](const v1::Response& r) { return array_of(r.nodes(), node_json); }},
      {"GET", "/v1/node",
       [](const params& p) -> built {
         if (auto m = missing(p, {"id"}); !m.empty()) return m;
         v1::Request r;
         r.set_node_status(param(p, "id"));
         return r;
       },
       [](const v1::Response& r) { return r.nodes().empty() ? json() : node_with_volumes_json(r); }},
      {"GET", "/v1/allocs",
       [](const params& p) -> built {
         v1::Request r;
         r.mutable_alloc_list()->set_namespace_(list_namespace(p));
         return r;
       },
       [](const v1::Response& r) { return array_of(r.allocs(), alloc_json); }},
      {"GET", "/v1/alloc",
       [](const params& p) -> built {
         if (auto m = missing(p, {"id"}); !m.empty()) return m;
         v1::Request r;
         r.set_alloc_status(param(p, "id"));
         return r;
       },
       // The id is the alloc's own (the answer names it).
       [](const v1::Response& r) {
         return r.allocs().empty() ? json() : alloc_with_claims_json(r, r.allocs(0).id());
       }},
      {"GET", "/v1/raft/peers",
       [](const params&) -> built {
         v1::Request r;
         r.set_raft_list_peers(true);
         return r;
       },
       [](const v1::Response& r) { return array_of(r.raft(), raft_json); }},
      // berth alloc stop ID: waits for the releases (up to 30 s).
      {"POST", "/v1/alloc/stop",
       [](const params& p) -> built {
         if (auto m = missing(p, {"id"}); !m.empty()) return m;
         v1::Request r;
         r.set_alloc_stop(param(p, "id"));
         return r;
       },
       [](const v1::Response& r) {
         return with_message(r.allocs().empty() ? json() : alloc_json(r.allocs(0)), r);
       },
       std::chrono::seconds(60)},
      // berth volume detach ID NODE [--namespace NS]
      {"POST", "/v1/volume/detach",
       [](const params& p) -> built {
         if (auto m = missing(p, {"id", "node"}); !m.empty()) return m;
         v1::Request r;
         auto* d = r.mutable_volume_detach();
         d->set_namespace_(volume_namespace(p));
         d->set_volume_id(param(p, "id"));
         d->set_node_id(param(p, "node"));
         return r;
       },
       [](const v1::Response& r) { return with_message(single_volume_json(r), r); },
       std::chrono::seconds(60)},
      // berth node drain ID [--deadline D | --no-deadline | --force] [--disable]
      {"POST", "/v1/node/drain",
       [](const params& p) -> built {
         if (auto m = missing(p, {"id"}); !m.empty()) return m;
         v1::Request r;
         auto* d = r.mutable_node_drain();
         d->set_node_id(param(p, "id"));
         d->set_keep_plugins(flag(p, "keep_plugins"));
         if (flag(p, "disable")) {
           d->set_disable(true);
           d->set_keep_ineligible(flag(p, "keep_ineligible"));
         } else if (flag(p, "no_deadline")) {
           d->set_no_deadline(true);
         } else if (!flag(p, "force")) {
           auto text = param(p, "deadline").empty() ? "1h" : param(p, "deadline");
           auto ms = parse_duration_ms(text);
           if (!ms || *ms == 0)
             return "deadline '" + text +
                    "' is not a duration such as 30m, 1h or 90s (for none: no_deadline=true; "
                    "for now: force=true)";
           d->set_deadline_ms(*ms);
         }
         return r;
       },
       node_message_json, std::chrono::seconds(30)},
  };
  return all;
}

// A POST's parameters: the query's, and the JSON body's fields (strings,
// numbers and booleans).  Only application/json is taken: a form another
// site's page posts cross-origin is text/plain or form data, and a JSON
// request from another origin needs a preflight this server never allows.
std::variant<params, json_view> post_params(const http_request& req) {
  if (req.content_type != "application/json")
    return error_view(415, "send the parameters as a JSON object with Content-Type: "
                           "application/json");
  params p = req.query;
  if (req.body.empty()) return p;
  auto body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object())
    return error_view(400, "the body is not a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (value.is_string())
      p[key] = value.get<std::string>();
    else if (value.is_boolean() || value.is_number())
      p[key] = value.dump();
    else
      return error_view(400, "field '" + key + "' must be a string, a number or a boolean");
  }
  return p;
}

json_view send(caf::actor_system& sys, const api_actor& api, v1::Request req, const route& r) {
  json_view out = error_view(503, "no answer");
  caf::scoped_actor self{sys};
  self->request(api, r.timeout, api_atom::value, wrap(std::move(req)))
      .receive(
          [&](pb<v1::Response>& x) {
            const auto& resp = x.msg;
            if (resp.error().code() != v1::OK) {
              out = error_view(http_status_of(resp.error().code()), resp.error().message());
              return;
            }
            out = {200, dump(r.render(resp))};
          },
          [&](caf::error& e) { out = error_view(503, to_failure(e).message); });
  return out;
}

}  // namespace

std::optional<json_view> answer_http(caf::actor_system& sys, const api_actor& api,
                                     const std::string& node_name, const http_request& req) {
  const route* found = nullptr;
  bool other_method = false;
  for (const auto& r : routes()) {
    if (req.path != r.path) continue;
    if (req.method == r.method)
      found = &r;
    else
      other_method = true;
  }
  if (found == nullptr) {
    if (!other_method) return error_view(404, std::string("no such path; the API is ") + http_paths);
    return error_view(405, "method " + req.method + " is not allowed on " + req.path +
                               " (the views are GET, the actions POST)");
  }
  if (!api) {
    if (req.path == "/v1/status")
      return json_view{200, dump(json{{"node_name", node_name}, {"server", false}})};
    return error_view(404, "this berthd is a client; ask a server");
  }
  params p = req.query;
  if (req.method == "POST") {
    auto pp = post_params(req);
    if (auto* refused = std::get_if<json_view>(&pp)) return *refused;
    p = std::move(std::get<params>(pp));
  }
  auto b = found->build(p);
  if (auto* problem = std::get_if<std::string>(&b)) return error_view(400, *problem);
  auto& request = std::get<v1::Request>(b);
  request.set_token(req.token);
  return send(sys, api, std::move(request), *found);
}

// Answered by this server from its own journal, like the shell's; a `{}`
// line every 10 s without events is a heartbeat: the stream notices a
// client that went away.
void event_stream_view(caf::actor_system& sys, const api_actor& api, const http_request& http,
                       http_stream& out) {
  auto refuse = [&](int status, json body) {
    out.start(status, "application/json");
    out.write(dump(body) + "\n");
  };
  auto number = [](const std::string& s) -> std::optional<uint64_t> {
    if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    return std::stoull(s);
  };
  v1::EventStreamRequest req;
  uint64_t until = 0;
  for (const auto& [key, value] : http.query) {
    if (key == "index" || key == "until_index") {
      auto n = number(value);
      if (!n) return refuse(400, {{"error", key + " must be a log index (a number)"}});
      if (key == "index")
        req.set_index(*n);
      else
        until = *n;
    } else if (key == "namespace") {
      req.set_namespace_(value);
    } else if (key == "topic") {
      size_t start = 0;
      while (start <= value.size()) {
        auto comma = value.find(',', start);
        auto t = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        start = comma == std::string::npos ? value.size() + 1 : comma + 1;
        if (t.empty()) continue;
        auto topic = parse_event_topic(t);
        if (!topic || *topic == v1::EVENT_STATE)
          return refuse(400, {{"error", "topic '" + t + "' is not a topic; the topics are volume, "
                                                        "claim, alloc, node, plugin"}});
        req.add_topics(*topic);
      }
    } else {
      return refuse(400, {{"error", "unknown parameter '" + key +
                                        "'; the parameters are index, topic, namespace, "
                                        "until_index, token"}});
    }
  }
  caf::scoped_actor self{sys};
  bool started = false;
  for (;;) {
    if (until != 0 && req.index() > until) {
      if (!started) out.start(200, "application/x-ndjson");
      return;
    }
    // The first poll does not wait: the status line goes out at once.
    req.set_wait_ms(started ? 10'000 : 0);
    v1::Request r;
    *r.mutable_event_stream() = req;
    r.set_token(http.token);
    std::optional<v1::Response> resp;
    std::string why = "no answer";
    self->request(api, std::chrono::seconds(30), api_atom::value, wrap(std::move(r)))
        .receive([&](pb<v1::Response>& x) { resp = std::move(x.msg); },
                 [&](caf::error& e) { why = to_failure(e).message; });
    if (resp && resp->error().code() != v1::OK) why = resp->error().message();
    if (!resp || resp->error().code() != v1::OK) {
      json body{{"error", why}};
      if (resp && resp->journal_first_index() != 0) body["first_index"] = resp->journal_first_index();
      if (!started) {
        int status = resp && resp->journal_first_index() != 0 ? 410
                     : resp && resp->error().code() == v1::FORBIDDEN ? 403
                                                                      : 503;
        return refuse(status, body);
      }
      out.write(dump(body) + "\n");
      return;
    }
    if (!started) out.start(200, "application/x-ndjson");
    std::string lines;
    for (const auto& e : resp->events()) {
      if (until != 0 && e.index() > until) break;
      lines += dump(event_json(e)) + "\n";
    }
    if (lines.empty() && started) lines = "{}\n";
    started = true;
    if (!out.write(lines)) return;
    req.set_index(std::max(req.index(), resp->next_index()));
  }
}

}  // namespace berth
