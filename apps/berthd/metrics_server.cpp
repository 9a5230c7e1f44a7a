#include "apps/berthd/metrics_server.hpp"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <CivetServer.h>
#include <civetweb.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

namespace berth {

namespace {

// civetweb's callbacks are plain function pointers: the views live here.
std::function<std::optional<json_view>(const std::string&)> views_fn;
stream_view events_fn;

// Worker threads of the HTTP server, and how many of them event streams
// may hold at once (the others keep serving /metrics and the views).
constexpr int http_threads = 8;
constexpr int most_streams = 4;
std::atomic<int> streams{0};

class chunked_stream : public http_stream {
 public:
  explicit chunked_stream(mg_connection* conn) : conn_(conn) {}
  void start(int status, const std::string& content_type) override {
    started_ = true;
    mg_printf(conn_,
              "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n"
              "Cache-Control: no-cache\r\nConnection: close\r\n\r\n",
              status, status == 200 ? "OK" : "Error", content_type.c_str());
  }
  bool write(std::string_view chunk) override {
    if (chunk.empty()) return true;
    return mg_send_chunk(conn_, chunk.data(), static_cast<unsigned>(chunk.size())) > 0;
  }
  void end() {
    if (!started_) start(500, "application/json");
    mg_send_chunk(conn_, "", 0);
  }

 private:
  mg_connection* conn_;
  bool started_ = false;
};

std::map<std::string, std::string> query_of(const char* query) {
  std::map<std::string, std::string> out;
  if (query == nullptr) return out;
  std::string q = query;
  size_t start = 0;
  while (start < q.size()) {
    auto amp = q.find('&', start);
    auto part = q.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
    start = amp == std::string::npos ? q.size() : amp + 1;
    auto eq = part.find('=');
    auto decode = [](const std::string& s) {
      std::vector<char> buf(s.size() + 1);
      int n = mg_url_decode(s.c_str(), static_cast<int>(s.size()), buf.data(),
                            static_cast<int>(buf.size()), 1);
      return n < 0 ? std::string() : std::string(buf.data(), static_cast<size_t>(n));
    };
    auto key = decode(part.substr(0, eq));
    auto value = eq == std::string::npos ? std::string() : decode(part.substr(eq + 1));
    auto& slot = out[key];
    slot = slot.empty() ? value : slot + "," + value;
  }
  return out;
}

void reply(mg_connection* conn, const json_view& view) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n",
            view.status, view.status == 200 ? "OK" : "Error", view.body.size());
  mg_write(conn, view.body.data(), view.body.size());
}

int stream_events(mg_connection* conn, const mg_request_info* info) {
  if (!events_fn) {
    reply(conn, {404, "{\"error\":\"this berthd is a client; ask a server\"}"});
    return 404;
  }
  if (++streams > most_streams) {
    --streams;
    reply(conn, {503, "{\"error\":\"too many event streams on this server; use another "
                      "server or the shell (berth event stream)\"}"});
    return 503;
  }
  chunked_stream out(conn);
  events_fn(query_of(info->query_string), out);
  out.end();
  --streams;
  return 200;
}

int begin_request(mg_connection* conn) {
  const auto* info = mg_get_request_info(conn);
  if (info == nullptr || info->local_uri == nullptr) return 0;
  std::string path = info->local_uri;
  if (path.rfind("/v1/", 0) != 0) return 0;  // /metrics: prometheus-cpp's
  if (path == "/v1/event/stream" && std::strcmp(info->request_method, "GET") == 0)
    return stream_events(conn, info);
  json_view view{404, "{\"error\":\"no such view; try /v1/status, /v1/volumes, /v1/plugins, "
                      "/v1/nodes, /v1/event/stream\"}"};
  if (std::strcmp(info->request_method, "GET") != 0) {
    view = {405, "{\"error\":\"only GET\"}"};
  } else if (views_fn) {
    if (auto v = views_fn(path)) view = std::move(*v);
  }
  reply(conn, view);
  return view.status;
}

}  // namespace

uint16_t serve_metrics(const std::string& bind, uint16_t port,
                       std::shared_ptr<prometheus::Registry> registry,
                       std::function<std::optional<json_view>(const std::string& path)> views,
                       stream_view events) {
  // Lives as long as the process: berthd stops with _Exit.
  static std::unique_ptr<prometheus::Exposer> exposer;
  static std::shared_ptr<prometheus::Registry> keep;
  static CivetCallbacks callbacks;
  views_fn = std::move(views);
  events_fn = std::move(events);
  callbacks.begin_request = begin_request;
  try {
    exposer = std::make_unique<prometheus::Exposer>(bind + ":" + std::to_string(port), http_threads,
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
