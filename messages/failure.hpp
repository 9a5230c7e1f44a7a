// berth's one error type: what failed, for the operator, with the fix.  In a
// header of its own (no protobuf) so that the small libraries that do file
// I/O for berthd and berth-hostpath alike can return it.
#pragma once

#include <cstdint>
#include <string>

namespace berth {

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

}  // namespace berth
