#include "plugin_process.hpp"
#include "tests/test_bins.hpp"

#include <cstdlib>
#include <fcntl.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "csi/client.hpp"

namespace berth::test {

namespace fs = std::filesystem;

bool can_bind_mount() {
  return ::geteuid() == 0;
}

bool skipped_unless_root(const char* what) {
  if (can_bind_mount()) return false;
  std::printf("SKIPPED (not root): %s\n", what);
  std::fflush(stdout);
  return true;
}

std::vector<std::string> mounts_under(const fs::path& dir) {
  std::vector<std::string> found;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  auto prefix = dir.string() + "/";
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, devno, source_root, mount_point;
    fields >> id >> parent >> devno >> source_root >> mount_point;
    if (mount_point.rfind(prefix, 0) == 0)
      found.push_back(mount_point);
  }
  return found;
}

plugin_process::plugin_process(std::vector<std::string> extra, std::string node)
    : node_id(std::move(node)), extra_(std::move(extra)) {
  char tmpl[] = "/tmp/berth-csi-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr)
    throw std::runtime_error("mkdtemp failed");
  dir = tmpl;
  root = dir / "root";
  socket = dir / "plugin" / "csi.sock";
  call_log = dir / "calls.jsonl";
  endpoint = "unix://" + socket.string();
}

plugin_process::~plugin_process() {
  if (pid_ > 0)
    kill9();
  // Stacked mounts need several passes; deepest paths go first.
  for (int pass = 0; pass < 8; ++pass) {
    auto mounts = mounts_under(dir);
    if (mounts.empty())
      break;
    std::sort(mounts.begin(), mounts.end(),
              [](const auto& a, const auto& b) { return a.size() > b.size(); });
    for (const auto& m : mounts)
      ::umount2(m.c_str(), MNT_DETACH);
  }
  // Never recurse into a mount we failed to remove: it could reach outside.
  if (mounts_under(dir).empty()) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
}

void plugin_process::start() {
  std::vector<std::string> args = {berth::test_bins::hostpath,     "--endpoint", endpoint,
                                   "--root",               root.string(),
                                   "--node-id",            node_id,
                                   "--call-log",           call_log.string()};
  args.insert(args.end(), extra_.begin(), extra_.end());
  auto log = (dir / "plugin.stderr").string();
  pid_ = ::fork();
  if (pid_ < 0)
    throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // Dies with the test: a test process a sanitizer aborts runs no
    // destructor, and a plugin left holding ctest's output pipe made ctest
    // wait out its whole timeout (two node_test cases under ASan).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  // 10 s, stretched under a sanitizer (BERTH_TEST_TIME_SCALE): a TSan
  // berth-hostpath beside an ASan run of the integration tests took longer.
  const char* scale_env = std::getenv("BERTH_TEST_TIME_SCALE");
  double scale = scale_env ? std::atof(scale_env) : 1.0;
  auto wait = std::chrono::milliseconds(static_cast<int64_t>(10000 * (scale > 1.0 ? scale : 1.0)));
  auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("berth-hostpath exited early; see " + log);
    }
    // A fresh channel per attempt: a channel that failed to connect waits
    // out gRPC's reconnect backoff (seconds) before it tries again.
    if (fs::exists(socket) && csi::client(endpoint, std::chrono::milliseconds(500)).probe().ok())
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("berth-hostpath did not answer Probe within " +
                           std::to_string(wait.count() / 1000) + " s");
}

void plugin_process::kill9() {
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

// kill() only queues the signal: each of the plugin's threads stops when it
// next runs, which on a loaded machine can be after the test's first call
// reached it (it answered OK: client_test under load).  waitpid reports the
// stop once every thread has stopped.
void plugin_process::pause() {
  ::kill(pid_, SIGSTOP);
  int status = 0;
  while (::waitpid(pid_, &status, WUNTRACED) == -1 && errno == EINTR) {
  }
}

void plugin_process::resume() {
  ::kill(pid_, SIGCONT);
  int status = 0;
  while (::waitpid(pid_, &status, WCONTINUED) == -1 && errno == EINTR) {
  }
}

int plugin_process::terminate() {
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

int plugin_process::wait_exit(std::chrono::milliseconds timeout) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill9();
  return -1;
}

}  // namespace berth::test
