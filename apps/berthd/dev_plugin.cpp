#include "apps/berthd/dev_plugin.hpp"

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace berth {

namespace {

namespace fs = std::filesystem;

std::string find_hostpath(const std::string& bin) {
  if (!bin.empty()) {
    if (!fs::exists(bin))
      throw std::runtime_error("--hostpath-bin " + bin + " does not exist");
    return bin;
  }
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (auto candidate : {self / "berth-hostpath", self / ".." / "berth-hostpath" / "berth-hostpath"})
    if (fs::exists(candidate)) return fs::canonical(candidate).string();
  return "berth-hostpath";  // from PATH
}

pid_t spawn(const std::vector<std::string>& argv) {
  pid_t pid = fork();
  if (pid == 0) {
    // The plugin must not outlive berthd (berthd stops with _Exit).
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

std::string start_dev_plugin(const std::string& bin, const std::string& data_dir,
                             const std::string& node_id) {
  auto dir = fs::absolute(fs::path(data_dir) / "plugins" / "hostpath");
  fs::create_directories(dir);
  auto socket = (dir / "csi.sock").string();
  std::vector<std::string> argv{find_hostpath(bin), "--endpoint", "unix://" + socket,
                                "--root", (dir / "root").string(), "--node-id", node_id};
  pid_t pid = spawn(argv);
  if (pid < 0) throw std::runtime_error("cannot start berth-hostpath: fork failed");
  // Wait for its socket (or its early death) before the node fingerprints it.
  for (int i = 0; i < 100; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
      throw std::runtime_error("berth-hostpath (" + argv[0] + ") exited at start with status " +
                               std::to_string(WEXITSTATUS(status)) +
                               "; pass --hostpath-bin or --plugin ID=TYPE:SOCKET");
    if (fs::exists(socket)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Supervise: restart it when it exits (a crash must not leave the dev
  // agent without its plugin); the node actor sees it unhealthy meanwhile.
  std::thread([pid, argv]() mutable {
    for (;;) {
      int status = 0;
      if (waitpid(pid, &status, 0) != pid) return;
      std::this_thread::sleep_for(std::chrono::seconds(1));
      pid = spawn(argv);
      if (pid < 0) return;
    }
  }).detach();
  return socket;
}

}  // namespace berth
