#include "apps/berthd/metrics_server.hpp"

#include <cstring>
#include <stdexcept>

#include <CivetServer.h>
#include <civetweb.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

namespace berth {

namespace {

// civetweb's callbacks are plain function pointers: the views live here.
std::function<std::optional<json_view>(const std::string&)> views_fn;

int begin_request(mg_connection* conn) {
  const auto* info = mg_get_request_info(conn);
  if (info == nullptr || info->local_uri == nullptr) return 0;
  std::string path = info->local_uri;
  if (path.rfind("/v1/", 0) != 0) return 0;  // /metrics: prometheus-cpp's
  json_view view{404, "{\"error\":\"no such view; try /v1/status, /v1/volumes, /v1/plugins, "
                      "/v1/nodes\"}"};
  if (std::strcmp(info->request_method, "GET") != 0) {
    view = {405, "{\"error\":\"only GET\"}"};
  } else if (views_fn) {
    if (auto v = views_fn(path)) view = std::move(*v);
  }
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n",
            view.status, view.status == 200 ? "OK" : "Error", view.body.size());
  mg_write(conn, view.body.data(), view.body.size());
  return view.status;
}

}  // namespace

uint16_t serve_metrics(const std::string& bind, uint16_t port,
                       std::shared_ptr<prometheus::Registry> registry,
                       std::function<std::optional<json_view>(const std::string& path)> views) {
  // Lives as long as the process: berthd stops with _Exit.
  static std::unique_ptr<prometheus::Exposer> exposer;
  static std::shared_ptr<prometheus::Registry> keep;
  static CivetCallbacks callbacks;
  views_fn = std::move(views);
  callbacks.begin_request = begin_request;
  try {
    exposer = std::make_unique<prometheus::Exposer>(bind + ":" + std::to_string(port), 2,
                                                    &callbacks);
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
