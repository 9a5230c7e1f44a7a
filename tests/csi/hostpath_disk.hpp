#pragma once
// What berth-hostpath has on disk, read without changing anything: the
// snapshot BASE.json with the journal BASE.journal replayed over it (BASE:
// ROOT/state, or ROOT/nodes/NODE-ID with --shared-root).

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "journal.hpp"
#include "state.hpp"

namespace berth::test {

inline berth::hostpath::state hostpath_state_on_disk(const std::filesystem::path& base) {
  auto s = berth::hostpath::load_state(base.string() + ".json");
  std::ifstream in(base.string() + ".journal");
  std::stringstream bytes;
  bytes << in.rdbuf();
  berth::hostpath::replay_journal(bytes.str(), s, base.string() + ".journal");
  return s;
}

}  // namespace berth::test
