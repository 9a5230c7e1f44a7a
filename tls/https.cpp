#include "tls/https.hpp"

namespace berth::tls {

first_bytes classify_first_bytes(std::string_view head) {
  if (head.empty()) return first_bytes::need_more;
  auto b0 = static_cast<unsigned char>(head[0]);
  if (b0 == 0x16) return head.size() < 2 || head[1] == 0x03 ? first_bytes::tls : first_bytes::other;
  if (b0 >= 'A' && b0 <= 'Z') return first_bytes::plain_http;
  return first_bytes::other;
}

std::string plain_http_refusal(uint16_t port) {
  std::string body = "this port serves HTTPS (berthd has --tls-* options): use https://HOST:" +
                     std::to_string(port) + "/ and trust the cluster's CA (berth-agent-ca.pem)\n";
  return "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

std::optional<failure> check_https_options(const files& f, bool verify_http_client) {
  if (verify_http_client && !f.enabled())
    return failure{errc::invalid,
                   "--tls-verify-http-client needs --tls-ca, --tls-cert and --tls-key (the HTTP "
                   "port serves HTTPS only with TLS): add them, or drop "
                   "--tls-verify-http-client"};
  return std::nullopt;
}

relay_verdict judge_quiet(const https_limits& l, int64_t quiet_ms, size_t pending) {
  if (pending > 0)
    return quiet_ms >= l.stall_ms ? relay_verdict::close_stalled : relay_verdict::keep;
  return quiet_ms >= l.idle_ms ? relay_verdict::close_idle : relay_verdict::keep;
}

}  // namespace berth::tls
