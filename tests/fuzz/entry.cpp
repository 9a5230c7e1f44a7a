// Fuzz target: the durable entry decoder and its apply path.  The input is
// the bytes of a log entry as the state machine gets them (an encoded
// v1::LogEntry); it is applied to a fresh state database (the same path as
// committed entries at start-up and in the state_machine actor), twice at
// successive indexes (a second upsert over the first), then the tables are
// loaded and digested as the leader and `operator raft` do.
//
// Bad input may be refused with an exception (berthd then stops, naming
// the entry); it must never crash or corrupt memory.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "persistence/state_store.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path& work_dir() {
  static const fs::path dir = [] {
    fs::path base = fs::exists("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
    auto d = base / ("berth-fuzz-entry-" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::atexit([] { fs::remove_all(work_dir()); });
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  auto path = (work_dir() / "state.db").string();
  for (const char* suffix : {"", "-wal", "-shm", ".incoming", ".snapshot"}) fs::remove(path + suffix);
  // A failure is a refusal (berthd stops with its message), not a bug;
  // nothing may throw or crash.
  auto store = berth::state_store::open(path);
  if (!store) return 0;
  if ((*store)->apply({{1, bytes}, {2, bytes}})) return 0;
  (void)(*store)->load();
  (void)(*store)->digest();
  return 0;
}
