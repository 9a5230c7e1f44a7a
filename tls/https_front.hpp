// berthd's HTTPS front: with --tls-*, berthd's HTTP port (/metrics, the /v1/
// API, the event stream, the web UI) is served in TLS by this front, which
// forwards each decrypted connection to the HTTP server (civetweb under
// prometheus-cpp's Exposer), then listening on an ephemeral port of
// 127.0.0.1 only.  civetweb's own TLS cannot be used: Debian's civetweb 1.15
// loads libssl at run time with OpenSSL 1.1's function table, and
// SSL_get_peer_certificate does not exist in OpenSSL 3 (a null call on the
// first TLS connection).
//
// One detached thread per connection, at most https_limits::max_connections
// at once (beyond: closed at once); the first byte and the handshake must
// arrive within handshake_ms; a relayed connection whose bytes nobody takes
// for stall_ms, or with nothing either way for idle_ms, is closed.  Bytes
// are relayed as they arrive (the event stream streams).  A plain-HTTP
// request gets a 400 saying the port serves HTTPS.  Client certificates are
// verified against --tls-ca when presented, and required with
// --tls-verify-http-client.
//
// The loopback port: anything on the host can connect to it, so the HTTP
// server answers a connection only from a local port of one of the front's
// own connections now open (front_peers), which no other socket can hold
// while it is open.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <variant>

#include "messages/failure.hpp"
#include "tls/https.hpp"
#include "tls/tls.hpp"

namespace berth::tls {

// The local ports (on 127.0.0.1) of the front's connections to the HTTP
// server now open.  Thread-safe.
class front_peers {
 public:
  void add(uint16_t port);
  void remove(uint16_t port);
  bool contains(uint16_t port) const;

 private:
  mutable std::mutex mutex_;
  std::set<uint16_t> ports_;
};

struct https_front_options {
  std::string bind;   // the HTTP port's address (--metrics-bind)
  uint16_t port = 0;  // --metrics-port (0: any free port)
  files tls;  // the CA clients' certificates are verified against, this berthd's certificate
  bool verify_client = false;  // --tls-verify-http-client: a client certificate is required
  uint16_t backend_port = 0;   // the HTTP server, on 127.0.0.1
  https_limits limits;
};

// Starts serving for the life of the process; returns the port it listens
// on, or a failure naming the file or address and the fix.
std::variant<uint16_t, failure> start_https_front(const https_front_options& options,
                                                  std::shared_ptr<front_peers> peers);

}  // namespace berth::tls
