#include "actors/alloc_process.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "messages/model.hpp"

extern char** environ;

namespace berth {

namespace fs = std::filesystem;

std::string default_alloc_supervisor() {
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (!ec)
    for (const auto& candidate :
         {self / "berth-alloc", self / ".." / "berth-alloc" / "berth-alloc"})
      if (fs::exists(candidate, ec)) return fs::weakly_canonical(candidate, ec).string();
  return "berth-alloc";  // from PATH
}

alloc_spawn start_alloc_process(const v1::Alloc& alloc, const std::string& dir,
                                const alloc_supervision& supervision) {
  alloc_spawn out;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    out.error = "cannot create " + dir + ": " + ec.message();
    return out;
  }
  out.exit_file = (fs::path(dir) / "exit").string();
  fs::remove(out.exit_file, ec);
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("BERTH_VOLUME_", 0) == 0 || kv.rfind("BERTH_ALLOC_", 0) == 0) continue;
    env.push_back(std::move(kv));
  }
  env.push_back("BERTH_ALLOC_ID=" + alloc.id());
  for (const auto& v : alloc.volumes())
    env.push_back(volume_env_name(v.name()) + "=" + v.published_path());
  // The supervisor's go (see alloc_spawn::start_fd): both ends close on
  // exec, so no other child keeps the pipe open; the read end is dup'ed to
  // fd 3 in the supervisor (dup2 clears close-on-exec there).
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0) {
    out.error = std::string("cannot make its start pipe: ") + std::strerror(errno);
    return out;
  }
  std::vector<std::string> args{"berth-alloc", "--exit-file", out.exit_file, "--start-fd", "3"};
  if (!supervision.lease_file.empty()) {
    args.insert(args.end(), {"--lease-file", supervision.lease_file, "--kill-timeout-ms",
                             std::to_string(supervision.kill_timeout_ms)});
  }
  args.push_back("--");
  args.insert(args.end(), alloc.command().begin(), alloc.command().end());
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  auto out_path = (fs::path(dir) / "stdout").string();
  auto err_path = (fs::path(dir) / "stderr").string();
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, go[0], 3);
  posix_spawn_file_actions_addchdir_np(&fa, dir.c_str());
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t dflt;
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGTERM);
  sigaddset(&dflt, SIGINT);
  sigaddset(&dflt, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &dflt);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, supervision.binary.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(go[0]);
  if (rc != 0) {
    close(go[1]);
    out.error = "cannot start its supervisor " + supervision.binary + ": " + std::strerror(rc) +
                " (install berth-alloc next to berthd or in PATH)";
    return out;
  }
  out.pid = pid;
  out.start_fd = go[1];
  return out;
}

void release_alloc_process(alloc_spawn& s, bool go) {
  if (s.start_fd < 0) return;
  if (go) {
    // A supervisor that died already (killed) makes the write fail with
    // EPIPE: its SIGPIPE, which would end this process, is blocked here
    // and taken back (the alloc is recorded: its exit is seen as any other).
    sigset_t pipe_signal, old;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
    char byte = 1;
    ssize_t n;
    do {
      n = write(s.start_fd, &byte, 1);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EPIPE) {
      timespec now{0, 0};
      sigtimedwait(&pipe_signal, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  close(s.start_fd);
  s.start_fd = -1;
}

alloc_exit check_alloc_process(int64_t pid, const std::string& exit_file) {
  alloc_exit out;
  if (pid <= 0) return out;
  int status = 0;
  auto r = waitpid(static_cast<pid_t>(pid), &status, WNOHANG);
  if (r == static_cast<pid_t>(pid)) {
    out.exited = true;
    if (WIFEXITED(status)) {
      out.exit_code = WEXITSTATUS(status);
      out.how = "exited with " + std::to_string(out.exit_code);
    } else if (WIFSIGNALED(status)) {
      out.exit_code = 128 + WTERMSIG(status);
      out.how = "killed by signal " + std::to_string(WTERMSIG(status));
    }
    return out;
  }
  if (r == 0) return out;  // our child, still running
  // Not our child (this client restarted since): the supervisor's file tells.
  std::ifstream in(exit_file);
  int code = 0;
  if (in >> code) {
    out.exited = true;
    out.exit_code = code;
    out.how = "exited with " + std::to_string(code);
    return out;
  }
  if (kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH) {
    out.exited = true;
    out.exit_code = -1;
    out.how = "ended without an exit code (killed while the client was down)";
  }
  return out;
}

void signal_alloc_process(int64_t pid, int sig) {
  if (pid > 0) kill(-static_cast<pid_t>(pid), sig);
}

}  // namespace berth
