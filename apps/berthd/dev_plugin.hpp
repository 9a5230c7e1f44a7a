// `berthd --dev` runs berth-hostpath itself, so that a dev agent has a
// working CSI plugin with no extra step.  The plugin is a child process that
// dies with berthd and is restarted if it exits on its own.
#pragma once

#include <string>

namespace berth {

// Starts berth-hostpath (the binary `bin`, or one found next to berthd or
// on PATH when empty) with its root and socket under DATA/plugins/hostpath
// and the given CSI node id; returns the socket path once it exists.
// Throws std::runtime_error naming what is missing.
std::string start_dev_plugin(const std::string& bin, const std::string& data_dir,
                             const std::string& node_id);

}  // namespace berth
