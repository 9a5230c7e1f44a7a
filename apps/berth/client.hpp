// The shell's connection to a berthd: one request, one response.  One
// client (one CAF actor system) serves every command of an interactive
// shell; it connects on the first call and reconnects after losing the
// server.
#pragma once

#include <memory>
#include <string>
#include <variant>

#include "messages/api.pb.h"
#include "messages/model.hpp"

namespace berth {

class client {
 public:
  // address: HOST:PORT.  timeout: seconds to wait for each response.
  client(std::string address, int timeout_seconds);
  ~client();

  // Sends one request.  A failure is unreachable (errc::unavailable) when
  // no berthd answers at the address; errors the server reports come back
  // inside the Response.  A failed call drops the connection, so the next
  // call connects again (to a restarted berthd, say).
  std::variant<v1::Response, failure> call(const v1::Request& req);

  const std::string& address() const { return address_; }
  int timeout() const { return timeout_; }

 private:
  std::variant<v1::Response, failure> call_once(const v1::Request& req);
  struct impl;
  std::string address_;
  int timeout_;
  std::unique_ptr<impl> impl_;
};

}  // namespace berth
