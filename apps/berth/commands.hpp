// The shell's commands: parsing (CLI11), one request to berthd, output.
// Used by `berth COMMAND ...`; the same entry point will serve the
// interactive shell.
#pragma once

#include <string>
#include <vector>

namespace berth {

// Exit codes: what a script can branch on.
enum exit_code : int {
  exit_ok = 0,
  exit_internal = 1,
  exit_usage = 2,        // bad command line or bad input (fix it)
  exit_not_found = 3,    // the named volume, plugin or node does not exist
  exit_refused = 4,      // the rules refuse it in the current state
  exit_unreachable = 5,  // no berthd answered (or it is unavailable)
};

// Runs one command line (argv without the program name); returns the exit
// code.  Output goes to stdout, errors to stderr.
int run_command(const std::vector<std::string>& args);

}  // namespace berth
