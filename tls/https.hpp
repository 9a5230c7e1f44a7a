// The HTTPS port's decisions as pure functions (tests/tls_test.cpp): what
// the first bytes on the port are, the answer a plain-HTTP request gets,
// whether --tls-verify-http-client is usable, and the front's limits.  The
// sockets and OpenSSL calls are in tls/https_front.hpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "messages/failure.hpp"
#include "tls/tls.hpp"

namespace berth::tls {

// What a client sent first on the HTTPS port.
enum class first_bytes {
  need_more,   // nothing yet
  tls,         // a TLS handshake record (0x16, then major version 3)
  plain_http,  // an HTTP method's first letter: a plain-HTTP request
  other,       // anything else: close
};

// Decided from the first two bytes at most: a ClientHello starts with the
// handshake record type 0x16 and the major version 3; every HTTP method
// starts with an upper-case letter.
first_bytes classify_first_bytes(std::string_view head);

// The whole answer (status line, headers, body) to a plain-HTTP request on
// the HTTPS port `port`: 400, saying to use https://.
std::string plain_http_refusal(uint16_t port);

// --tls-verify-http-client needs the --tls-* options (the CA it verifies
// against).
std::optional<failure> check_https_options(const files& f, bool verify_http_client);

// How much the front holds, and for how long.
struct https_limits {
  int max_connections = 64;   // beyond: closed at once
  int handshake_ms = 10'000;  // first byte and TLS handshake, together
  int stall_ms = 30'000;      // bytes waiting to be written that nobody takes
  int idle_ms = 300'000;      // nothing either way (the event stream beats every 10 s)
};

// What a relayed connection does after `quiet_ms` without progress, with
// `pending` bytes waiting to be written to one side or the other.
enum class relay_verdict { keep, close_stalled, close_idle };
relay_verdict judge_quiet(const https_limits& l, int64_t quiet_ms, size_t pending);

}  // namespace berth::tls
