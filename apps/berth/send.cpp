#include "apps/berth/send.hpp"

#include <unistd.h>

#include <chrono>
#include <iostream>

#include "apps/berth/client.hpp"
#include "apps/berth/commands.hpp"

namespace berth {

namespace {

using nlohmann::json;

int code_of(errc c) {
  switch (c) {
    case errc::invalid:
      return exit_usage;
    case errc::not_found:
      return exit_not_found;
    case errc::refused:
      return exit_refused;
    case errc::unavailable:
      return exit_unreachable;
    case errc::forbidden:
      return exit_forbidden;
    default:
      return exit_internal;
  }
}

const char* code_name(errc c) {
  switch (c) {
    case errc::invalid:
      return "invalid";
    case errc::not_found:
      return "not_found";
    case errc::refused:
      return "refused";
    case errc::unavailable:
      return "unavailable";
    case errc::forbidden:
      return "forbidden";
    default:
      return "internal";
  }
}

// Text from the server or the user may hold bytes that are not UTF-8 (a
// plugin's error, a file name): JSON shows them as U+FFFD, where dump()
// would throw out of main by default.
std::string dump(const json& j, int indent = -1) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

// A line on stderr for commands that take a while (CSI calls, waiting for
// releases), on a terminal only: quiet under --json and in scripts.
void progress(const globals& g, const std::string& text) {
  if (text.empty() || g.json || !isatty(STDERR_FILENO)) return;
  std::cerr << text << "\n";
}

}  // namespace

std::variant<v1::Response, failure> answer(const globals& g, const v1::Request& req) {
  // A shell line may name another server or timeout than the shell's.
  std::optional<client> own;
  client* c = g.shared;
  if (!c || c->address() != g.address || c->timeout() != g.timeout)
    c = &own.emplace(g.address, g.timeout);
  auto result = c->call(req);
  if (auto* f = std::get_if<failure>(&result)) return *f;
  auto& resp = std::get<v1::Response>(result);
  if (resp.error().code() != v1::OK) {
    failure f{static_cast<errc>(resp.error().code()), resp.error().message()};
    if (resp.error().maybe_applied()) {
      f.maybe_applied = true;
      f.message += "; the request may have been applied: check with `" +
                   check_command(req) + "`";
      if (safe_to_repeat(req)) f.message += " (it is safe to send again)";
    }
    return f;
  }
  return std::move(resp);
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

int fail(const globals& g, const failure& f) {
  if (g.json)
    std::cerr << dump(json{{"error",
                            {{"code", f.maybe_applied ? "maybe_applied" : code_name(f.code)},
                             {"message", f.message}}}})
              << "\n";
  else
    std::cerr << "Error: " << f.message << "\n";
  return f.maybe_applied ? exit_maybe_applied : code_of(f.code);
}

int send(const globals& g, const plan& p) {
  if (auto* f = std::get_if<failure>(&p)) return fail(g, *f);
  const auto& c = std::get<call>(p);
  progress(g, c.progress);
  auto result = answer(g, c.request);
  if (auto* f = std::get_if<failure>(&result)) return fail(g, *f);
  const auto& r = std::get<v1::Response>(result);
  if (c.keep)
    if (auto f = c.keep(r)) return fail(g, *f);
  if (!g.json) {
    std::cout << c.as_text(r);
  } else if (auto j = c.as_json(r); !j.is_null()) {
    std::cout << dump(j, 2) << "\n";
  }
  return exit_ok;
}

}  // namespace berth
