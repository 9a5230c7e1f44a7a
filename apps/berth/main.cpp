// berth: the remote shell.  `berth COMMAND ...` runs one command against a
// berthd (see `berth --help`); `berth` alone on a terminal, or `berth
// shell`, opens the interactive shell.
#include <string>
#include <vector>

#include "apps/berth/commands.hpp"
#include "tls/caf_tls.hpp"

int main(int argc, char** argv) {
  berth::tls::keep_openssl_until_exit();
  std::vector<std::string> args(argv + 1, argv + argc);
  return berth::run_command(args);
}
