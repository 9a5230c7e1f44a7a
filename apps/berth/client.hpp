// The shell's connection to a berthd: one request, one response.  One
// client (one CAF actor system) serves every command of an interactive
// shell; it connects on the first call and reconnects after losing the
// server.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <variant>

#include "messages/api.pb.h"
#include "messages/model.hpp"
#include "tls/tls.hpp"

namespace berth {

// Whether the request changes anything (everything but status and lists).
bool changes_state(const v1::Request& req);

// Whether sending the request again after its answer was lost ends in one
// effect, not two: reads, and the commands berthd answers as done when
// their work is found done (alloc run with its id, alloc stop, volume
// claim, release, detach, deregister and delete).
bool safe_to_repeat(const v1::Request& req);

// The command that shows whether a request whose answer was lost took
// effect, e.g. "berth alloc status web-1".
std::string check_command(const v1::Request& req);

// TLS for every client of this process (the shell's --tls-* options):
// set once, before the first client is made; the files are checked already.
void use_tls(const tls::files& f);

class client {
 public:
  // address: HOST:PORT.  timeout: seconds to wait for each response.
  client(std::string address, int timeout_seconds);
  ~client();

  // Sends one request.  A failure is unreachable (errc::unavailable) when
  // no berthd answers at the address; errors the server reports come back
  // inside the Response.  A failed call drops the connection, so the next
  // call connects again (to a restarted berthd, say).  An answer lost after
  // the request was sent comes back as a Response whose error has
  // maybe_applied set (unless the request is a read); requests that are
  // safe_to_repeat are sent again until the timeout, so one effect results.
  std::variant<v1::Response, failure> call(const v1::Request& req);

  // The ACL token's secret every request of this process carries (berth
  // --token, BERTH_TOKEN) unless it has its own.
  static void set_token(std::string secret);

  const std::string& address() const { return address_; }
  int timeout() const { return timeout_; }

 private:
  std::variant<v1::Response, failure> call_once(const v1::Request& req,
                                                std::chrono::milliseconds wait);
  struct impl;
  std::string address_;
  int timeout_;
  std::unique_ptr<impl> impl_;
};

}  // namespace berth
