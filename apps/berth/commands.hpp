// The shell's commands: parsing (CLI11), one request to berthd, output.
// Used by `berth COMMAND ...` and, line by line, by the interactive shell:
// one parsing path for both.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "apps/berth/line.hpp"
#include "messages/api.pb.h"
#include "messages/model.hpp"

namespace berth {

class client;

// Exit codes: what a script can branch on.
enum exit_code : int {
  exit_ok = 0,
  exit_internal = 1,
  exit_usage = 2,        // bad command line or bad input (fix it)
  exit_not_found = 3,    // the named volume, plugin or node does not exist
  exit_refused = 4,      // the rules refuse it in the current state
  exit_unreachable = 5,  // no berthd answered (or it is unavailable)
  exit_forbidden = 6,    // ACLs: the token lacks the capability (or is unknown)
  exit_maybe_applied = 7,  // the answer was lost: the change may have been made; check
};

// Runs one command line (argv without the program name); returns the exit
// code.  Output goes to stdout, errors to stderr.  `shared`: the interactive
// shell's client, used for the requests (null: a client for this command).
// Without a command, and with stdin a terminal, opens the shell (unless
// already in it).
int run_command(const std::vector<std::string>& args, client* shared = nullptr);

// Parses a command line exactly as run_command does, without running the
// command (no network, no files read): exit_ok when it would run one (or printed help),
// exit_usage after printing the usage error.  For tests and the fuzzer
// (tests/fuzz/shell.cpp).
int parse_command(const std::vector<std::string>& args);

// The request the command line would send, built as run_command builds it
// (reading the files it names) but not sent; a failure when it would send
// none: a usage error (CLI11's message), help, a command that sends
// nothing (shell), or bad input (the message run_command would print).
// For tests of every command's request.
std::variant<v1::Request, failure> request_of(const std::vector<std::string>& args);

// The commands, their options and positionals, as the CLI defines them.
command_info command_tree();

}  // namespace berth
