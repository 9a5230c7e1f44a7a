// Fuzz target: the shell's command parser without a network.  The input is
// one line as typed in the interactive shell: split like a POSIX shell
// (split_line), then parsed by the CLI (CLI11) exactly as run_command
// parses it, but without running the command (parse_command).
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "apps/berth/commands.hpp"
#include "apps/berth/line.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string line(reinterpret_cast<const char*>(data), size);
  auto split = berth::split_line(line);
  if (auto* words = std::get_if<std::vector<std::string>>(&split)) {
    int code = berth::parse_command(*words);
    if (code != berth::exit_ok && code != berth::exit_usage) __builtin_trap();
  }
  return 0;
}
