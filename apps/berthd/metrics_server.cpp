#include "apps/berthd/metrics_server.hpp"

#include <stdexcept>

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

namespace berth {

uint16_t serve_metrics(const std::string& bind, uint16_t port,
                       std::shared_ptr<prometheus::Registry> registry) {
  // Lives as long as the process: berthd stops with _Exit.
  static std::unique_ptr<prometheus::Exposer> exposer;
  static std::shared_ptr<prometheus::Registry> keep;
  try {
    exposer = std::make_unique<prometheus::Exposer>(bind + ":" + std::to_string(port));
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot serve metrics on " + bind + ":" + std::to_string(port) +
                             ": " + e.what() + " (choose another --metrics-port)");
  }
  keep = std::move(registry);
  exposer->RegisterCollectable(keep);
  auto ports = exposer->GetListeningPorts();
  return ports.empty() ? port : static_cast<uint16_t>(ports.front());
}

}  // namespace berth
