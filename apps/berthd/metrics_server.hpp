// The HTTP endpoint of every berthd: /metrics (Prometheus text format),
// the /v1/ API (JSON views and actions, never secrets; apps/berthd/http_api)
// and the web UI under /ui/ (the files of ui/, embedded at build time).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "tls/tls.hpp"

namespace prometheus {
class Collectable;
}

namespace berth {

// A JSON view for a /v1/ path: the body and the HTTP status.
struct json_view {
  int status = 200;
  std::string body;
  // More response headers (name, value), e.g. Nomad's X-Nomad-Index.
  std::map<std::string, std::string> headers = {};
  std::string content_type = "application/json";
};

// The most bytes a POST's or PUT's body may have on `path`: 64 KiB, and for
// PUT /v1/operator/snapshot (a snapshot's bytes) 1 GiB.
size_t body_limit(const std::string& path);

// A /v1/ request as the API sees it.
struct http_request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // "/v1/volumes"
  // The query's parameters (URL-decoded; a repeated one joined with
  // commas), without `token`.
  std::map<std::string, std::string> query;
  // The caller's ACL token: the X-Berth-Token header, else X-Nomad-Token,
  // else `Authorization: Bearer TOKEN`; for the event stream also the
  // `token` query parameter (EventSource cannot set headers).
  std::string token;
  bool nomad_token = false;  // the token came in X-Nomad-Token (a Nomad client)
  // Nomad's X-Nomad-CSI-Secrets header ("k1=v1,k2=v2"): the plugin's
  // secrets for a snapshot list or delete; never logged or shown.
  std::string csi_secrets;
  std::string content_type;  // without parameters ("application/json")
  std::string body;          // POST, PUT: at most body_limit(path)
  bool body_too_large = false;  // more was sent: refused (413), never cut
  // The Idempotency-Key header: a retried write with the same key is the
  // same write (an alloc's id, a snapshot's name made from it).
  std::string idempotency_key;
};

// A response written while it is produced (chunked, held open): the first
// `start` sends the status line and headers; `write` sends a chunk and
// returns false once the client went away.
class http_stream {
 public:
  virtual ~http_stream() = default;
  virtual void start(int status, const std::string& content_type) = 0;
  virtual bool write(std::string_view chunk) = 0;
};

// A /v1/ path answered at once (nullopt: no such path).
using http_view = std::function<std::optional<json_view>(const http_request& req)>;
// A streamed /v1/ path: the request and the stream to write the response to.
using stream_view = std::function<void(const http_request& req, http_stream& out)>;

// With TLS: the port serves HTTPS (tls/https_front.hpp).
struct https_options {
  tls::files tls;              // --tls-ca, --tls-cert, --tls-key
  bool verify_client = false;  // --tls-verify-http-client
};

// Starts serving `registry` on bind:port for the life of the process and
// answers /v1/... through `views` (nullopt: 404), GET /v1/event/stream
// through `events` (at most a few at once: 503 beyond), and GET /ui/... from
// the embedded files of ui/ (apps/berthd/ui_assets.hpp); returns the port
// (useful with port 0).  With `https`, bind:port is the HTTPS front and the
// HTTP server listens on an ephemeral port of 127.0.0.1, answering only the
// front's connections.  Throws std::runtime_error naming the address or
// file and the fix when it cannot serve.
uint16_t serve_metrics(const std::string& bind, uint16_t port,
                       std::shared_ptr<prometheus::Collectable> registry, http_view views,
                       stream_view events, const std::optional<https_options>& https);

}  // namespace berth
