#pragma once
// Test harness: runs the real berth-hostpath executable on a socket in a
// fresh temporary directory, and cleans up after itself even when a test
// fails: kills the process, unmounts every mount under the directory
// (deepest first) and only then removes the directory.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace berth::test {

class plugin_process {
 public:
  // `extra` are flags beyond --endpoint/--root/--node-id/--call-log.
  explicit plugin_process(std::vector<std::string> extra = {}, std::string node_id = "n1");
  ~plugin_process();
  plugin_process(const plugin_process&) = delete;
  plugin_process& operator=(const plugin_process&) = delete;

  // Starts the plugin and waits until Probe answers. Throws on failure.
  void start();
  // SIGKILL, as a crash would: no cleanup by the plugin.
  void kill9();
  // SIGSTOP / SIGCONT: a plugin that accepts connections but never answers.
  void pause();
  void resume();
  // SIGTERM and wait; returns the exit status (as from waitpid).
  int terminate();
  // Waits up to `timeout` for the plugin to exit by itself; returns the exit
  // status (as from waitpid), or -1 (and kills it) if it is still running.
  int wait_exit(std::chrono::milliseconds timeout);

  std::filesystem::path dir;       // the temporary directory
  std::filesystem::path root;      // --root
  std::filesystem::path socket;    // the unix socket
  std::filesystem::path call_log;  // --call-log
  std::string endpoint;            // unix://<socket>
  std::string node_id;

 private:
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

// Mount points under `dir` per /proc/self/mountinfo.
std::vector<std::string> mounts_under(const std::filesystem::path& dir);

// True when the tests may use bind mounts (root).
bool can_bind_mount();

// A root-only case run without root: prints "SKIPPED (not root): what" (ctest
// then reports the case skipped, not passed: tests/csi/CMakeLists.txt) and
// returns true; returns false as root.
bool skipped_unless_root(const char* what);

}  // namespace berth::test
