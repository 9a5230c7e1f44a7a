// Inside persistence/ only: how its functions stop midway.  The SQLite
// wrapper (sqlite.hpp) and the file checks raise store_error; every public
// function of persistence/ runs its body in stored(), which returns what
// was raised as a failure (messages/failure.hpp).  No exception leaves
// persistence/: its callers get values, and fail-stop on them where a
// store that cannot be written leaves nothing safe to do.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "messages/failure.hpp"

namespace berth {

// What() names the file, what is wrong and, for damage (damage_message in
// integrity.hpp), the way to recover.
struct store_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The value of `e`, or raises its failure: for a function inside
// persistence/ that calls another's public function within stored().
template <class T>
T need(expected<T> e) {
  if (!e) throw store_error(e.error().message);
  return std::move(*e);
}
inline void need(const std::optional<failure>& f) {
  if (f) throw store_error(f->message);
}

// Runs `f`: its value (or, for a void `f`, nothing) on success; a failure
// (errc::internal) with the store_error's message when it raised one.
template <class F>
auto stored(F&& f) {
  using R = std::invoke_result_t<F&>;
  if constexpr (std::is_void_v<R>) {
    try {
      f();
      return std::optional<failure>{};
    } catch (const store_error& e) {
      return std::optional<failure>{failure{errc::internal, e.what()}};
    }
  } else {
    try {
      return expected<R>{f()};
    } catch (const store_error& e) {
      return expected<R>{failure{errc::internal, e.what()}};
    }
  }
}

}  // namespace berth
