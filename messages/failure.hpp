// berth's one error type: what failed, for the operator, with the fix.  In a
// header of its own (no protobuf) so that the small libraries that do file
// I/O for berthd and berth-hostpath alike can return it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace berth {

// An object's name as messages quote it: 'name'.  (Not `quoted`: with a
// std::string argument, argument-dependent lookup would pick std::quoted
// wherever <iomanip> is visible.)
inline std::string quote_name(std::string_view name) {
  return "'" + std::string(name) + "'";
}

enum class errc : uint8_t {
  invalid = 1,      // bad input: fix the request
  not_found = 2,    // the named object does not exist
  refused = 3,      // the rules refuse it in the current state
  unavailable = 4,  // try again later
  internal = 5,
  forbidden = 6,    // the caller's ACL token lacks a capability (berthd --acl)
};

// Crosses every module boundary as a value (as caf::error between actors,
// as v1::Error to the shell, whose exit code is the code).
struct failure {
  errc code;
  std::string message;
  // Nothing was executed: sending the same request again is safe.
  bool retry = false;
  // The answer was lost after the request was sent: the change may or may
  // not have been made (the shell says how to check, exit code 7).
  bool maybe_applied = false;
};

// A value, or the failure that stopped it from being made: what a function
// that can fail returns when it has something to give back (one that has
// not returns std::optional<failure>, empty on success).
template <class T>
class expected {
 public:
  expected(T value) : value_(std::move(value)) {}
  expected(failure f) : error_(std::move(f)) {}

  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }

  // Only when ok().
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

  // Only when !ok().
  const failure& error() const { return *error_; }

 private:
  std::optional<T> value_;
  std::optional<failure> error_;
};

}  // namespace berth
