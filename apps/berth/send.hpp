// Running a command of the shell once its command line is parsed: the one
// request it sends, the answer shown as JSON or text, and every error as a
// `failure` whose errc gives the exit code.  No CLI11 here: this header is
// included by the commands, and CLI11 is slow to compile: commands.cpp alone
// includes it.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>

#include "messages/api.pb.h"
#include "messages/model.hpp"

#include "tls/tls.hpp"

namespace berth {

class client;

// The global options, as every command sees them.
struct globals {
  std::string address;
  bool json = false;
  std::string ns = "default";
  int timeout = 30;
  std::string token;  // --token (or BERTH_TOKEN): an ACL token's secret
  tls::files tls;  // --tls-ca, --tls-cert, --tls-key (or BERTH_CACERT, ...)
  client* shared = nullptr;  // the interactive shell's connection, if any
};

// What a command does: send `request`, then show the answer.  Both ways of
// showing it are given so that --json is decided in one place.
struct call {
  v1::Request request;
  std::string progress;  // said on a terminal while waiting ("" for nothing)
  // Under --json; a null value prints nothing.
  std::function<nlohmann::json(const v1::Response&)> as_json;
  // Otherwise: printed as it is ("" prints nothing).
  std::function<std::string(const v1::Response&)> as_text;
  // Keeps what the answer carries before it is shown (snapshot save's
  // file); a failure here is the command's failure.
  std::function<std::optional<failure>(const v1::Response&)> keep;
};

// A command as parsed: its call, or why it cannot be sent.
using plan = std::variant<call, failure>;

// Sends the call (on the shell's client when it talks to the same server
// with the same timeout) and shows the answer; returns the exit code.
int send(const globals& g, const plan& p);

// Prints a failure on stderr (as JSON under --json); returns its exit code.
int fail(const globals& g, const failure& f);

// Sends one request and returns its answer (an error answer as a failure),
// showing nothing: for commands that ask before they act.
std::variant<v1::Response, failure> answer(const globals& g, const v1::Request& req);

// Milliseconds since the epoch: "now" for the relative times shown.
int64_t now_ms();

}  // namespace berth
