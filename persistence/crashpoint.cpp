#include "persistence/crashpoint.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include <unistd.h>

namespace berth::detail {

struct armed_crashpoint {
  std::string name;
  unsigned long hit_at = 1;  // the N-th pass stops the process
  std::atomic<unsigned long> passed{0};
};

namespace {

void say(std::string_view s) {
  // write(2), not stdio: nothing buffered may run after this point.
  while (!s.empty()) {
    auto n = ::write(STDERR_FILENO, s.data(), s.size());
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

armed_crashpoint* read_crashpoint_env() noexcept {
  const char* value = std::getenv("BERTH_CRASHPOINT");
  if (value == nullptr || *value == '\0') return nullptr;
  auto* armed = new armed_crashpoint;  // lives as long as the process
  std::string spec = value;
  auto at = spec.rfind('@');
  armed->name = spec.substr(0, at);
  if (at != std::string::npos) armed->hit_at = std::strtoul(spec.c_str() + at + 1, nullptr, 10);
  if (armed->hit_at == 0) armed->hit_at = 1;
  return armed;
}

void crashpoint_reached(armed_crashpoint& armed, std::string_view prefix,
                        std::string_view step) noexcept {
  std::string_view name = armed.name;
  if (step.empty()) {
    if (name != prefix) return;
  } else if (name.size() != prefix.size() + 1 + step.size() ||
             name.substr(0, prefix.size()) != prefix || name[prefix.size()] != '.' ||
             name.substr(prefix.size() + 1) != step) {
    return;
  }
  if (armed.passed.fetch_add(1) + 1 != armed.hit_at) return;
  // One write(2) of the whole line, so another thread's log line cannot
  // land inside it (tests look for it).
  std::string line = "crash point ";
  line.append(name);
  line.append(" reached: exiting with 137 as if killed\n");
  say(line);
  ::_exit(crashpoint_exit_code);
}

}  // namespace berth::detail

namespace berth {

int64_t hold_ms(std::string_view name) noexcept {
  static const std::string spec = [] {
    const char* value = std::getenv("BERTH_HOLD");
    return std::string(value == nullptr ? "" : value);
  }();
  auto eq = spec.rfind('=');
  if (eq == std::string::npos || std::string_view(spec).substr(0, eq) != name) return 0;
  return std::strtoll(spec.c_str() + eq + 1, nullptr, 10);
}

}  // namespace berth
