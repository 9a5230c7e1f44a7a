#include "tls/https_front.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "log/log.hpp"
#include "tls/openssl_ptr.hpp"

namespace berth::tls {

void front_peers::add(uint16_t port) {
  std::lock_guard<std::mutex> lock(mutex_);
  ports_.insert(port);
}

void front_peers::remove(uint16_t port) {
  std::lock_guard<std::mutex> lock(mutex_);
  ports_.erase(port);
}

bool front_peers::contains(uint16_t port) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ports_.count(port) > 0;
}

namespace {

using steady = std::chrono::steady_clock;

int64_t ms_since(steady::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t).count();
}

std::string openssl_error() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no reason given";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

void set_nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Waits up to ms for `events` on fd: true when it is ready.
bool wait_for(int fd, short events, int64_t ms) {
  if (ms <= 0) return false;
  pollfd p{fd, events, 0};
  int r;
  do r = ::poll(&p, 1, static_cast<int>(ms));
  while (r < 0 && errno == EINTR);
  return r > 0;
}

struct front {
  https_front_options o;
  std::shared_ptr<front_peers> peers;
  ssl_ctx_ptr ctx;
  int listen_fd = -1;
  uint16_t port = 0;
  std::atomic<int> active{0};
  std::atomic<int64_t> last_full_warning{-1'000'000};
};

// Reads the plain-HTTP request's head (for a while, up to 8 KiB), answers
// the refusal and lets the client read it before closing.
void refuse_plain_http(const front& f, int fd) {
  auto start = steady::now();
  std::string head;
  char buf[2048];
  while (head.size() < 8192 && head.find("\r\n\r\n") == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      head.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return;
    if (!wait_for(fd, POLLIN, 2000 - ms_since(start))) break;
  }
  auto answer = plain_http_refusal(f.port);
  size_t sent = 0;
  while (sent < answer.size()) {
    ssize_t n = ::send(fd, answer.data() + sent, answer.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
        wait_for(fd, POLLOUT, 2000 - ms_since(start)))
      continue;
    return;
  }
  ::shutdown(fd, SHUT_WR);
  // Until the client closes (or a second): closing with unread bytes would
  // reset the connection before the client read the answer.
  auto drained = steady::now();
  while (wait_for(fd, POLLIN, 1000 - ms_since(drained)))
    if (::recv(fd, buf, sizeof buf, 0) <= 0) break;
}

// Relays bytes both ways until either side closes, or the connection
// stalls or idles (judge_quiet).
void relay(const front& f, SSL* ssl, int cfd, int bfd) {
  constexpr size_t cap = 64 * 1024;
  std::string up, down;  // client to server, server to client
  bool backend_eof = false;
  short read_wants = POLLIN, write_wants = POLLOUT;  // what SSL_read, SSL_write wait for
  auto last = steady::now();
  char buf[16384];
  for (;;) {
    bool progress = false;
    while (up.size() < cap) {
      int n = SSL_read(ssl, buf, sizeof buf);
      if (n > 0) {
        up.append(buf, static_cast<size_t>(n));
        progress = true;
        continue;
      }
      int e = SSL_get_error(ssl, n);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        read_wants = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        break;
      }
      ERR_clear_error();
      return;  // the client closed or broke the connection
    }
    while (!up.empty()) {
      ssize_t n = ::send(bfd, up.data(), up.size(), MSG_NOSIGNAL);
      if (n > 0) {
        up.erase(0, static_cast<size_t>(n));
        progress = true;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return;  // the HTTP server closed
    }
    while (!backend_eof && down.size() < cap) {
      ssize_t n = ::recv(bfd, buf, sizeof buf, 0);
      if (n > 0) {
        down.append(buf, static_cast<size_t>(n));
        progress = true;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      backend_eof = true;
    }
    while (!down.empty()) {
      // After a WANT_*, SSL_write is called again with at least the same
      // bytes (down only grows at its end): SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER.
      int n = SSL_write(ssl, down.data(), static_cast<int>(std::min(down.size(), cap)));
      if (n > 0) {
        down.erase(0, static_cast<size_t>(n));
        progress = true;
        continue;
      }
      int e = SSL_get_error(ssl, n);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        write_wants = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        break;
      }
      ERR_clear_error();
      return;  // the client went away
    }
    if (backend_eof && down.empty()) {
      SSL_shutdown(ssl);  // close_notify, once, without waiting for the client's
      return;
    }
    if (progress) {
      last = steady::now();
      continue;
    }
    size_t pending = up.size() + down.size();
    auto quiet = ms_since(last);
    switch (judge_quiet(f.o.limits, quiet, pending)) {
      case relay_verdict::close_stalled:
        logging::debug("https", "closing a stalled connection", {{"pending_bytes", pending}});
        return;
      case relay_verdict::close_idle:
        logging::debug("https", "closing an idle connection");
        return;
      case relay_verdict::keep:
        break;
    }
    short cev = 0, bev = 0;
    if (up.size() < cap) cev |= read_wants;
    if (!down.empty()) cev |= write_wants;
    if (!up.empty()) bev |= POLLOUT;
    if (!backend_eof && down.size() < cap) bev |= POLLIN;
    // A side with nothing to wait for is left out (-1), so that its hang-up
    // does not wake this loop again and again.
    pollfd p[2] = {{cev ? cfd : -1, cev, 0}, {bev ? bfd : -1, bev, 0}};
    int64_t limit = pending > 0 ? f.o.limits.stall_ms : f.o.limits.idle_ms;
    int r = ::poll(p, 2, static_cast<int>(std::max<int64_t>(1, limit - quiet)));
    if (r < 0 && errno != EINTR) return;
  }
}

void serve(front& f, int fd) {
  fd_guard client{fd};
  set_nonblocking(fd);
  set_nodelay(fd);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  auto start = steady::now();
  auto left = [&] { return f.o.limits.handshake_ms - ms_since(start); };
  char head[2];
  ssize_t n;
  for (;;) {
    n = ::recv(fd, head, sizeof head, MSG_PEEK);
    if (n > 0) break;
    if (n == 0) return;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return;
    if (!wait_for(fd, POLLIN, left())) return;
  }
  switch (classify_first_bytes({head, static_cast<size_t>(n)})) {
    case first_bytes::tls:
      break;
    case first_bytes::plain_http:
      logging::debug("https", "refused a plain-HTTP request on the HTTPS port");
      refuse_plain_http(f, fd);
      return;
    case first_bytes::need_more:
    case first_bytes::other:
      return;
  }
  ssl_ptr ssl{SSL_new(f.ctx.get())};
  if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) return;
  for (;;) {
    int r = SSL_accept(ssl.get());
    if (r == 1) break;
    int e = SSL_get_error(ssl.get(), r);
    short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    if (ev == 0) {
      logging::debug("https", "TLS handshake failed", {{"error", openssl_error()}});
      return;
    }
    if (!wait_for(fd, ev, left())) {
      logging::debug("https", "TLS handshake timed out");
      return;
    }
  }
  fd_guard backend{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (backend.fd < 0) return;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(f.o.backend_port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(backend.fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    logging::warn("https", "cannot reach the HTTP server behind the HTTPS port",
                  {{"port", f.o.backend_port}, {"error", std::strerror(errno)}});
    return;
  }
  sockaddr_in local{};
  socklen_t len = sizeof local;
  if (::getsockname(backend.fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return;
  uint16_t local_port = ntohs(local.sin_port);
  // Admitted by the HTTP server from here until just before the socket
  // closes (peer is destroyed before backend).
  f.peers->add(local_port);
  struct admitted {
    front_peers& peers;
    uint16_t port;
    ~admitted() { peers.remove(port); }
  } peer{*f.peers, local_port};
  set_nonblocking(backend.fd);
  set_nodelay(backend.fd);
  relay(f, ssl.get(), fd, backend.fd);
}

void accept_loop(front& f) {
  for (;;) {
    int fd = ::accept4(f.listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      logging::warn("https", "cannot accept a connection on the HTTPS port",
                    {{"error", std::strerror(errno)}});
      // Out of file descriptors: the connections in flight must end first.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (f.active.load() >= f.o.limits.max_connections) {
      ::close(fd);
      auto now =
          std::chrono::duration_cast<std::chrono::milliseconds>(steady::now().time_since_epoch())
              .count();
      if (now - f.last_full_warning.load() > 10'000) {
        f.last_full_warning = now;
        logging::warn("https", "HTTPS port at its connection limit: closing new connections",
                      {{"limit", f.o.limits.max_connections}});
      }
      continue;
    }
    ++f.active;
    try {
      std::thread([&f, fd] {
        serve(f, fd);
        --f.active;
      }).detach();
    } catch (const std::exception&) {
      --f.active;
      ::close(fd);
    }
  }
}

std::variant<ssl_ctx_ptr, failure> make_context(const https_front_options& o) {
  auto refuse = [](const std::string& what) {
    return failure{errc::invalid,
                   "cannot serve HTTPS on the metrics port: " + what + ": " + openssl_error()};
  };
  ssl_ctx_ptr ctx{SSL_CTX_new(TLS_server_method())};
  if (!ctx) return refuse("no TLS context");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), o.tls.cert.c_str()) != 1)
    return refuse("--tls-cert '" + o.tls.cert +
                  "' is not a PEM certificate (make one with berth tls cert create)");
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), o.tls.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx.get()) != 1)
    return refuse("--tls-key '" + o.tls.key + "' is not the key of --tls-cert '" + o.tls.cert +
                  "' (give the -key.pem file written with it)");
  if (SSL_CTX_load_verify_locations(ctx.get(), o.tls.ca.c_str(), nullptr) != 1)
    return refuse("--tls-ca '" + o.tls.ca + "' is not a PEM certificate (give berth-agent-ca.pem)");
  if (auto* names = SSL_load_client_CA_file(o.tls.ca.c_str()))
    SSL_CTX_set_client_CA_list(ctx.get(), names);
  SSL_CTX_set_verify(ctx.get(),
                     SSL_VERIFY_PEER | (o.verify_client ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
                     nullptr);
  static const unsigned char session_context[] = "berth-https";
  SSL_CTX_set_session_id_context(ctx.get(), session_context, sizeof session_context - 1);
  if (X509* cert = SSL_CTX_get0_certificate(ctx.get());
      cert != nullptr && X509_check_purpose(cert, X509_PURPOSE_SSL_SERVER, 0) != 1)
    logging::warn("https",
                  "this berthd's certificate may not serve (no extended key usage serverAuth): "
                  "HTTPS clients that check it (curl, Prometheus, browsers) refuse the metrics "
                  "port",
                  {{"cert", o.tls.cert}});
  ERR_clear_error();
  return ctx;
}

std::variant<int, failure> listen_on(const std::string& bind, uint16_t port) {
  auto where = bind + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int e = ::getaddrinfo(bind.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0)
    return failure{errc::invalid, "cannot serve HTTPS on " + where + ": " + ::gai_strerror(e) +
                                      " (give --metrics-bind an address of this host)"};
  std::string error = "no address";
  for (auto* a = res; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return failure{errc::unavailable, "cannot serve HTTPS on " + where + ": " + error +
                                        " (choose another --metrics-port)"};
}

}  // namespace

std::variant<uint16_t, failure> start_https_front(const https_front_options& options,
                                                  std::shared_ptr<front_peers> peers) {
  // SSL_write on a connection the client closed must fail, not kill berthd
  // (civetweb ignores SIGPIPE too; alloc commands get it back by default,
  // actors/alloc_process.cpp).
  std::signal(SIGPIPE, SIG_IGN);
  auto ctx = make_context(options);
  if (auto* f = std::get_if<failure>(&ctx)) return *f;
  auto fd = listen_on(options.bind, options.port);
  if (auto* f = std::get_if<failure>(&fd)) return *f;
  // Lives as long as the process: berthd stops with _Exit.
  auto* f = new front;
  f->o = options;
  f->peers = std::move(peers);
  f->ctx = std::move(std::get<ssl_ctx_ptr>(ctx));
  f->listen_fd = std::get<int>(fd);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  ::getsockname(f->listen_fd, reinterpret_cast<sockaddr*>(&local), &len);
  f->port = ntohs(local.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&local)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  std::thread([f] { accept_loop(*f); }).detach();
  return f->port;
}

}  // namespace berth::tls
