// The HTTP endpoint of every berthd: /metrics (Prometheus text format) and
// JSON views of the actor state under /v1/ (never secrets).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace prometheus {
class Registry;
}

namespace berth {

// A JSON view for a /v1/ path: the body and the HTTP status.
struct json_view {
  int status = 200;
  std::string body;
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

// A streamed /v1/ path: the query's parameters (URL-decoded; a repeated
// one joined with commas) and the stream to write the response to.
using stream_view =
    std::function<void(const std::map<std::string, std::string>& query, http_stream& out)>;

// Starts serving `registry` on bind:port for the life of the process and
// answers GET /v1/... through `views` (nullopt: 404), and GET
// /v1/event/stream through `events` (at most a few at once: 503 beyond);
// returns the port (useful with port 0).  Throws std::runtime_error naming
// the address when it cannot listen.
uint16_t serve_metrics(const std::string& bind, uint16_t port,
                       std::shared_ptr<prometheus::Registry> registry,
                       std::function<std::optional<json_view>(const std::string& path)> views,
                       stream_view events);

}  // namespace berth
