// berth acl ...: bootstrap, policies and tokens (control/acl on the
// servers).  The shell makes a token's accessor id and secret itself.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>

#include "apps/berth/send.hpp"

namespace berth {

// Makes `build` the work of `cmd` when the command line chooses it.
using acl_sends = std::function<void(CLI::App* cmd, std::function<plan()> build)>;

void add_acl_commands(CLI::App& app, const acl_sends& sends);

}  // namespace berth
