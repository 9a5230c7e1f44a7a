// Crash points for the durability tests: BERTH_CRASHPOINT=NAME makes the
// process _exit(137) (what a kill -9 leaves behind) the first time it passes
// crashpoint("NAME"); NAME@N, the N-th time.  The variable is read once; when
// it is unset a crash point costs one comparison of a pointer with null.
// The names and the tests that use them: docs/testing.md#crash-points.
#pragma once

#include <cstdint>
#include <string_view>

namespace berth {

namespace detail {
struct armed_crashpoint;
// Null unless BERTH_CRASHPOINT is set.
armed_crashpoint* read_crashpoint_env() noexcept;
// Read at the first crash point passed (an inline function's static is one
// object in the whole program).
inline armed_crashpoint* crashpoint_armed() noexcept {
  static armed_crashpoint* const armed = read_crashpoint_env();
  return armed;
}
void crashpoint_reached(armed_crashpoint& armed, std::string_view prefix,
                        std::string_view step) noexcept;
}  // namespace detail

// The exit code of a process stopped at a crash point.
inline constexpr int crashpoint_exit_code = 137;

inline void crashpoint(std::string_view name) noexcept {
  if (auto* armed = detail::crashpoint_armed()) detail::crashpoint_reached(*armed, name, {});
}

// The crash point "PREFIX.STEP" (no string is built unless one is armed).
inline void crashpoint(std::string_view prefix, std::string_view step) noexcept {
  if (prefix.empty()) return;
  if (auto* armed = detail::crashpoint_armed()) detail::crashpoint_reached(*armed, prefix, step);
}

// Hold points, for the tests that stage a race between real processes:
// BERTH_HOLD=NAME=MS makes the hold point NAME wait MS milliseconds (how,
// its caller says: an actor delays an answer, never blocks its thread).
// Read once; 0 when unset or another point is named.  The names and the
// tests that use them: docs/testing.md#crash-points.
int64_t hold_ms(std::string_view name) noexcept;

}  // namespace berth
