// The route table of the /v1/ HTTP API (apps/berthd/http_api.cpp serves
// it, apps/berthd/http_commands.cpp adds the shell's commands to it): what
// one route is, and the helpers its builders and renderers share.  The
// table is also the source of /v1/openapi.json.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "actors/actors.hpp"
#include "apps/berthd/metrics_server.hpp"
#include "messages/api.pb.h"

namespace caf {
class actor_system;
}

namespace berth::http {

using nlohmann::json;
using params = std::map<std::string, std::string>;

// A request as the shell builds it, or what is wrong with the parameters.
using built = std::variant<v1::Request, std::string>;

// What a route answers: the body (JSON unless content_type says otherwise)
// and more headers.
struct answer {
  std::string body;
  std::map<std::string, std::string> headers = {};
  std::string content_type = "application/json";
};
using renderer = std::function<answer(const v1::Response&, const params&)>;

// A parameter as /v1/openapi.json documents it.
struct param_doc {
  const char* name;
  const char* in;  // "query", or "body" (a field of a POST's JSON body, or the query)
  const char* description;
  bool required = false;
  // The JSON type of a body field: string, boolean, integer, array (of
  // strings) or object (strings to strings).
  const char* type = "string";
};

// The servers as one HTTP caller asks them: its token, one timeout.
struct caller {
  caf::actor_system& sys;
  const api_actor& api;
  std::string token;
  std::chrono::seconds timeout;
  // The answer, or the refusal as the HTTP answer (status and error).
  std::variant<v1::Response, json_view> ask(v1::Request req) const;
};

// One path of the API: the method, the path (":NAME" segments are
// parameters: /v1/volume/csi/:id), the query parameter that selects this
// route among several on one path (`when`, e.g. type=csi), the shell's
// request it sends (built from the parameters: the path's, the query's, and
// for POST the JSON body's fields) and how its answer is shown.  A `local`
// route answers without asking the servers.
struct route {
  const char* method;
  const char* path;
  const char* summary;
  std::vector<param_doc> docs;
  std::function<built(const params&)> build;
  renderer render;
  std::chrono::seconds timeout{10};
  std::pair<const char*, const char*> when{nullptr, nullptr};
  // Nomad's blocking query (?index=N&wait=D): the topics whose events end
  // the wait (none: the route does not block).
  std::vector<v1::EventTopic> wakes_on = {};
  std::function<answer()> local = nullptr;
  // Nomad's writes: the requests of the body (one per volume), sent in
  // order, and the answer of them all.
  std::function<std::variant<std::vector<v1::Request>, std::string>(const params&,
                                                                    const http_request&)>
      batch = nullptr;
  std::function<answer(const std::vector<v1::Response>&)> render_batch = nullptr;
  // A POST whose JSON body holds arrays or objects (the fields `docs`
  // names, nothing else): the request, from the scalar parameters, the
  // whole body and the HTTP request (its Idempotency-Key).
  std::function<built(const params&, const json& body, const http_request&)> build_body = nullptr;
  // A POST that asks more than once (e.g. a create of N volumes, each
  // looked up first): its whole answer.
  std::function<json_view(const caller&, const params&, const json& body, const http_request&)>
      exec = nullptr;
  // exec takes the body as bytes (any Content-Type), not as JSON.
  bool raw_body = false;
};

// A path of Nomad's API (its reads block, or its requests are built by
// `batch`): it takes what Nomad's clients send beside the request's own
// fields (QueryOptions, WriteRequest: messages/nomad's parse_nomad_write,
// nomad_read_problem) and answers Nomad's X-Nomad-* headers.
inline bool is_nomad(const route& r) {
  return r.batch != nullptr || !r.wakes_on.empty();
}

// The shell's commands beyond the reads and the first actions
// (apps/berthd/http_commands.cpp).
void add_shell_commands(std::vector<route>& v);

// JSON text; invalid UTF-8 replaced, never a throw on a civetweb thread.
std::string dump(const json& j);
json_view error_view(int status, const std::string& message);
// An answer's error code as an HTTP status (400, 403, 404, 409, 500, 503).
int http_status_of(v1::ErrorCode code);
// A renderer of a JSON view (the shell's --json renderers).
renderer as_json(std::function<json(const v1::Response&)> f);
std::string param(const params& p, const std::string& key);
// "true" or "1".
bool flag(const params& p, const std::string& key);
// The missing one of `keys`, as the error names it ("" when all are there).
std::string missing(const params& p, std::initializer_list<const char*> keys);
// `j` (an object, or a new one) with the answer's message.
json with_message(json j, const v1::Response& r);
// The namespace of one volume: "default" unless given, as the shell's.
std::string volume_namespace(const params& p);

}  // namespace berth::http
