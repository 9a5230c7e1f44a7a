// The interactive shell's pure parts: splitting a typed line into words and
// the tab completion candidates.  No I/O, so both are unit tested
// (tests/shell_test.cpp); apps/berth/shell.cpp wires them to readline.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "messages/model.hpp"

namespace berth {

// Splits a line into words the way a POSIX shell does, without expansions:
// blanks separate words; '...' keeps everything literally; "..." keeps
// everything but \" \\ \$ \` (backslash escapes them); outside quotes a
// backslash makes the next character literal.  Returns the words, or why
// the line does not split (errc::invalid: unterminated quote, trailing
// backslash).
std::variant<std::vector<std::string>, failure> split_line(const std::string& line);

// An option of a command, as the completer needs it.
struct option_info {
  std::string name;  // the long name with its dashes: "--alloc"
  bool takes_value = false;
};

// The command tree of the CLI (built from the CLI11 parser, see
// command_tree() in apps/berth/commands.hpp).
struct command_info {
  std::string name;
  std::string description;
  std::vector<option_info> options;
  std::vector<std::string> positionals;  // their names, in order: "id", "file"
  std::vector<command_info> subcommands;
};

// What the shell knows of the server's objects (refreshed after every
// command); alloc ids are those of the volumes' claims.
struct known_ids {
  std::vector<std::string> volumes, nodes, plugins, allocs;
};

struct completion {
  std::vector<std::string> candidates;  // sorted, without duplicates
  bool filenames = false;  // the word is a file name: complete from the disk
};

// The candidates for the word being typed (`prefix`) after the words
// before it (`before`: the part of the line before that word).  Completes
// command words, the shell's own words (help, exit, quit) at the start,
// command words after `help`, option names after a dash, and ids: an `id`
// positional of volume/plugin/node commands takes that kind's ids,
// --node takes node ids and --alloc alloc ids.
completion complete(const command_info& root, const std::string& before,
                    const std::string& prefix, const known_ids& ids);

// The first clause of a command's description, for `help`'s one line per
// command: "Register a volume from a spec file (JSON ...) ..." gives
// "Register a volume from a spec file".
std::string summary(const std::string& description);

}  // namespace berth
