// The shell's connection to a berthd: one request, one response.
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
  // inside the Response.
  std::variant<v1::Response, failure> call(const v1::Request& req);

  const std::string& address() const { return address_; }

 private:
  struct impl;
  std::string address_;
  int timeout_;
  std::unique_ptr<impl> impl_;
};

}  // namespace berth
