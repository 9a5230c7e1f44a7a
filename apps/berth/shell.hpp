// The interactive shell: `berth` without a command (on a terminal) or
// `berth shell`.  A readline loop that runs each line as `berth LINE`.
#pragma once

#include <string>
#include <vector>

namespace berth {

struct shell_options {
  std::vector<std::string> global_args;  // put before every line's words
  std::string address;                   // the server the shell talks to
  int timeout_seconds = 30;
};

// Runs until exit, quit or end of input; returns the exit code of the last
// command.
int run_shell(const shell_options& opts);

}  // namespace berth
