// berthd's operator log: one line per event that matters, with a level, the
// time (UTC), the component and the ids involved, to stderr (journald takes
// it from there under systemd) and into a ring of recent lines that
// `berth monitor` reads.  Text by default, JSON lines with --log-json:
//
//   2026-11-23T17:00:00.123Z info leader volume claimed namespace=default volume=db alloc=a1
//   {"time":"2026-11-23T17:00:00.123Z","level":"info","component":"leader","message":"volume claimed","namespace":"default","volume":"db","alloc":"a1"}
//
// spdlog does the sinks, the timestamps and the locking; this header keeps
// it out of the files that log (compile time).  Thread-safe.  Until setup()
// runs nothing is written (unit tests, the shell, berth-hostpath).
//
// Never pass a volume's secrets, parameters, context or mount flags, nor a
// whole protobuf, as a field: every field is written as it is given.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace berth::logging {

enum class level : uint8_t { trace, debug, info, warn, error };

std::string_view level_name(level l);
// "trace", "debug", "info", "warn" (or "warning"), "error".
std::optional<level> parse_level(std::string_view name);

// One key=value of a line: an id, a code, a count.
struct field {
  std::string_view key;
  std::string value;

  field(std::string_view k, std::string v) : key(k), value(std::move(v)) {}
  field(std::string_view k, std::string_view v) : key(k), value(v) {}
  field(std::string_view k, const char* v) : key(k), value(v) {}
  template <class Int, class = std::enable_if_t<std::is_arithmetic_v<Int>>>
  field(std::string_view k, Int v) : key(k), value(std::to_string(v)) {}
};
using fields = std::initializer_list<field>;

// Starts logging at `min` (lines below it are dropped), as text or JSON.
// Called once, by berthd's main, before any actor runs.
void setup(level min, bool json);

// Whether a line at `l` would be written anywhere (the configured level, or
// a lower one a monitor asked for).  write() checks it too; call it first
// only to skip building expensive fields.
bool enabled(level l);

void write(level l, std::string_view component, std::string_view message, fields f = {});

inline void trace(std::string_view c, std::string_view m, fields f = {}) { write(level::trace, c, m, f); }
inline void debug(std::string_view c, std::string_view m, fields f = {}) { write(level::debug, c, m, f); }
inline void info(std::string_view c, std::string_view m, fields f = {}) { write(level::info, c, m, f); }
inline void warn(std::string_view c, std::string_view m, fields f = {}) { write(level::warn, c, m, f); }
inline void error(std::string_view c, std::string_view m, fields f = {}) { write(level::error, c, m, f); }

// --- the ring of recent lines (berth monitor) ---------------------------------

// Lines are numbered from 1 in the order written.
struct recent {
  std::vector<std::string> lines;  // as written to stderr, without the newline
  uint64_t last = 0;               // the number of the newest line (0: none yet);
                                   // below `after`: the process restarted
  uint64_t dropped = 0;            // lines after `after` already gone from the ring
};

// The lines after number `after` at `min` or above; with after == 0, only the
// newest `tail` of them.
recent lines_after(uint64_t after, level min, size_t tail);

// A monitor streams at `min`: lines down to it are produced (into the ring
// only, stderr keeps the configured level) until `until` passes.
void want(level min, std::chrono::steady_clock::time_point until);

// Called after each line enters the ring (on the writing thread, so it must
// only hand the news on, e.g. send a message) while armed.
void on_line(std::function<void()> wake);
void arm(bool armed);

}  // namespace berth::logging
