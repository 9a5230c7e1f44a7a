#include "apps/berthd/metrics_server.hpp"

#include "apps/berthd/ui_assets.hpp"
#include "tls/https_front.hpp"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <CivetServer.h>
#include <civetweb.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

namespace berth {

size_t body_limit(const std::string& path) {
  return path == "/v1/operator/snapshot" ? size_t{1} << 30 : size_t{64} * 1024;
}

namespace {

// civetweb's callbacks are plain function pointers: the views live here.
http_view views_fn;
stream_view events_fn;
// With HTTPS: the front's connections, the only ones answered.
std::shared_ptr<tls::front_peers> front_peers;

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
  std::string more;
  for (const auto& [name, value] : view.headers) {
    // A header is the server's own (never a caller's text), one line.
    if (name.find_first_of("\r\n:") != std::string::npos ||
        value.find_first_of("\r\n") != std::string::npos)
      continue;
    more += name + ": " + value + "\r\n";
  }
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\n%sConnection: close\r\n\r\n",
            view.status, view.status == 200 ? "OK" : "Error",
            view.content_type.find_first_of("\r\n") == std::string::npos
                ? view.content_type.c_str()
                : "application/octet-stream",
            view.body.size(), more.c_str());
  mg_write(conn, view.body.data(), view.body.size());
}

// The request as the API sees it; the body of a POST or PUT is read here.
http_request request_of(mg_connection* conn, const mg_request_info* info, bool token_in_query) {
  http_request req;
  req.method = info->request_method;
  req.path = info->local_uri;
  req.query = query_of(info->query_string);
  if (const char* t = mg_get_header(conn, "X-Berth-Token")) {
    req.token = t;
  } else if (const char* n = mg_get_header(conn, "X-Nomad-Token")) {
    req.token = n;
    req.nomad_token = true;
  } else if (const char* a = mg_get_header(conn, "Authorization")) {
    std::string auth = a;
    if (auth.rfind("Bearer ", 0) == 0) req.token = auth.substr(7);
  }
  auto q = req.query.find("token");
  if (q != req.query.end()) {
    if (token_in_query && req.token.empty()) req.token = q->second;
    req.query.erase(q);
  }
  if (const char* cs = mg_get_header(conn, "X-Nomad-CSI-Secrets")) req.csi_secrets = cs;
  if (const char* ct = mg_get_header(conn, "Content-Type")) {
    req.content_type = ct;
    req.content_type = req.content_type.substr(0, req.content_type.find(';'));
    while (!req.content_type.empty() && req.content_type.back() == ' ') req.content_type.pop_back();
  }
  if (const char* k = mg_get_header(conn, "Idempotency-Key")) req.idempotency_key = k;
  if (req.method == "POST" || req.method == "PUT") {
    const size_t most = body_limit(req.path);
    char buf[16384];
    int n;
    if (info->content_length > 0 && static_cast<uint64_t>(info->content_length) > most) {
      // Read and dropped, so that the refusal reaches the caller (a
      // connection closed with unread data is reset).
      req.body_too_large = true;
      while (mg_read(conn, buf, sizeof buf) > 0) {
      }
      return req;
    }
    while (req.body.size() <= most && (n = mg_read(conn, buf, sizeof buf)) > 0)
      req.body.append(buf, static_cast<size_t>(n));
    if (req.body.size() > most) {
      req.body_too_large = true;
      req.body.clear();
      while (mg_read(conn, buf, sizeof buf) > 0) {
      }
    }
  }
  return req;
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
  events_fn(request_of(conn, info, true), out);
  out.end();
  --streams;
  return 200;
}

void redirect(mg_connection* conn, const char* to) {
  mg_printf(conn,
            "HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            to);
}

// GET /ui/NAME: a file of ui/ from memory (/ui/ is index.html).  The pages
// may load nothing but this server's files (the Content-Security-Policy).
int serve_ui(mg_connection* conn, const std::string& path, bool head) {
  auto name = path.substr(4);
  const ui_asset* a = find_ui_asset(name.empty() ? "index.html" : name);
  if (a == nullptr) {
    static const std::string none = "no such file of the web UI; open /ui/\n";
    mg_printf(conn,
              "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n"
              "Content-Length: %zu\r\nConnection: close\r\n\r\n",
              none.size());
    if (!head) mg_write(conn, none.data(), none.size());
    return 404;
  }
  mg_printf(conn,
            "HTTP/1.1 200 OK\r\nContent-Type: %.*s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n"
            "X-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n"
            "Content-Security-Policy: default-src 'self'; img-src 'self' data:; "
            "frame-ancestors 'none'\r\nConnection: close\r\n\r\n",
            static_cast<int>(a->content_type.size()), a->content_type.data(), a->body.size());
  if (!head) mg_write(conn, a->body.data(), a->body.size());
  return 200;
}

int begin_request(mg_connection* conn) {
  const auto* info = mg_get_request_info(conn);
  if (info == nullptr || info->local_uri == nullptr) return 0;
  if (front_peers && !(std::strcmp(info->remote_addr, "127.0.0.1") == 0 &&
                       info->remote_port > 0 && info->remote_port < 65536 &&
                       front_peers->contains(static_cast<uint16_t>(info->remote_port)))) {
    reply(conn, {403, "{\"error\":\"this is berthd's internal HTTP port: use the HTTPS port "
                      "(--metrics-bind, --metrics-port)\"}"});
    return 403;
  }
  std::string path = info->local_uri;
  std::string method = info->request_method;
  if (path == "/" || path == "/ui") {
    redirect(conn, "/ui/");
    return 302;
  }
  if (path.rfind("/ui/", 0) == 0) {
    if (method != "GET" && method != "HEAD") {
      reply(conn, {405, "{\"error\":\"the web UI's files are GET only\"}"});
      return 405;
    }
    return serve_ui(conn, path, method == "HEAD");
  }
  if (path.rfind("/v1/", 0) != 0) return 0;  // /metrics: prometheus-cpp's
  if (path == "/v1/event/stream" || path == "/v1/agent/monitor") {
    if (method == "GET") return stream_events(conn, info);
    reply(conn, {405, "{\"error\":\"" + path + " is GET only\"}"});
    return 405;
  }
  std::optional<json_view> view;
  if (views_fn) view = views_fn(request_of(conn, info, false));
  if (!view)
    view = json_view{404, "{\"error\":\"no such path\"}"};
  reply(conn, *view);
  return view->status;
}

}  // namespace

uint16_t serve_metrics(const std::string& bind, uint16_t port,
                       std::shared_ptr<prometheus::Collectable> registry,
                       http_view views, stream_view events,
                       const std::optional<https_options>& https) {
  // Lives as long as the process: berthd stops with _Exit.
  static std::unique_ptr<prometheus::Exposer> exposer;
  static std::shared_ptr<prometheus::Collectable> keep;
  static CivetCallbacks callbacks;
  views_fn = std::move(views);
  events_fn = std::move(events);
  callbacks.begin_request = begin_request;
  if (https) front_peers = std::make_shared<tls::front_peers>();
  // Behind the HTTPS front: loopback only, any free port.
  auto listen = https ? std::string("127.0.0.1:0") : bind + ":" + std::to_string(port);
  try {
    exposer = std::make_unique<prometheus::Exposer>(listen, http_threads, &callbacks);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot serve metrics on " + listen + ": " + e.what() +
                             " (choose another --metrics-port)");
  }
  keep = std::move(registry);
  exposer->RegisterCollectable(keep);
  auto ports = exposer->GetListeningPorts();
  uint16_t http_port = ports.empty() ? port : static_cast<uint16_t>(ports.front());
  if (!https) return http_port;
  tls::https_front_options o;
  o.bind = bind;
  o.port = port;
  o.tls = https->tls;
  o.verify_client = https->verify_client;
  o.backend_port = http_port;
  auto started = tls::start_https_front(o, front_peers);
  if (auto* f = std::get_if<failure>(&started)) throw std::runtime_error(f->message);
  return std::get<uint16_t>(started);
}

}  // namespace berth
