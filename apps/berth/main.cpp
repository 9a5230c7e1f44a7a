// berth: the remote shell.  `berth COMMAND ...` runs one command against a
// berthd (see `berth --help`); `berth` alone on a terminal, or `berth
// shell`, opens the interactive shell.
#include <string>
#include <vector>

#include "apps/berth/commands.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return berth::run_command(args);
}
