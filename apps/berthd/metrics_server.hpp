// The HTTP endpoint of every berthd: /metrics (Prometheus text format) and
// JSON views of the actor state under /v1/ (never secrets).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace prometheus {
class Registry;
}

namespace berth {

// A JSON view for a /v1/ path: the body and the HTTP status.
struct json_view {
  int status = 200;
  std::string body;
};

// Starts serving `registry` on bind:port for the life of the process and
// answers GET /v1/... through `views` (nullopt: 404); returns the port
// (useful with port 0).  Throws std::runtime_error naming the address when
// it cannot listen.
uint16_t serve_metrics(const std::string& bind, uint16_t port,
                       std::shared_ptr<prometheus::Registry> registry,
                       std::function<std::optional<json_view>(const std::string& path)> views);

}  // namespace berth
