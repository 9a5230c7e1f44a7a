// The HTTP endpoint that serves /metrics (Prometheus text format).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace prometheus {
class Registry;
}

namespace berth {

// Starts serving `registry` on bind:port for the life of the process;
// returns the port (useful with port 0).  Throws std::runtime_error naming
// the address when it cannot listen.
uint16_t serve_metrics(const std::string& bind, uint16_t port,
                       std::shared_ptr<prometheus::Registry> registry);

}  // namespace berth
