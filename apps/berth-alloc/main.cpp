// berth-alloc: the supervisor of one alloc's command on a client's host.
// The agent (berthd --client) starts it in a process group of its own, the
// group it signals to stop the alloc; it runs the command as its child and
// outlives the agent:
//   - the command's exit code goes to the exit file (durably), so an agent
//     restarted while the command ran still learns how it ended;
//   - with --lease-file, the alloc writes a single-writer volume: when the
//     client's lease (the file the agent renews) runs out, it sends SIGTERM
//     to the group and SIGKILL after the kill timeout (control/lease:
//     guard_step, lease_until_in_file), whether or not the agent is alive
//     to fence.  A killed or frozen agent no longer leaves a writer running
//     after the servers handed its volume to another node.
//   - the command dies with it (PR_SET_PDEATHSIG): a writer never runs
//     without its guard.
//   - with --start-fd N, the command starts only once the agent wrote a
//     byte to that pipe, which it does once the alloc's record (its pid) is
//     durable in client.db; an agent that dies before (the pipe's end
//     reads EOF) leaves no command behind that no restarted agent knows
//     of and could stop (fault.short: a client killed between starting
//     an alloc's supervisor and recording it; the alloc's stop found no
//     record, its claims were released, its command read on).
// It ignores SIGTERM, SIGINT and SIGHUP itself (they are for the command:
// it reports the command's end) and ends the way the command ended.
//
//   berth-alloc --exit-file FILE [--lease-file FILE --kill-timeout-ms MS] [--start-fd N]
//               -- COMMAND [ARGS...]
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "control/lease.hpp"
#include "persistence/durable_file.hpp"

namespace {

constexpr auto poll_period = std::chrono::milliseconds(50);

int64_t steady_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return in ? out.str() : std::string();
}

std::string boot_id() {
  auto text = read_text("/proc/sys/kernel/random/boot_id");
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "berth-alloc: %s\n"
               "usage: berth-alloc --exit-file FILE [--lease-file FILE --kill-timeout-ms MS] "
               "[--start-fd N] -- COMMAND [ARGS...]\n"
               "(started by berthd for each alloc's command; not for use by hand)\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string exit_file, lease_file;
  int64_t kill_timeout_ms = 5000;
  int start_fd = -1;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) return usage(("option " + a + " needs a value").c_str());
    if (a == "--exit-file")
      exit_file = argv[++i];
    else if (a == "--lease-file")
      lease_file = argv[++i];
    else if (a == "--kill-timeout-ms")
      kill_timeout_ms = std::atoll(argv[++i]);
    else if (a == "--start-fd")
      start_fd = std::atoi(argv[++i]);
    else
      return usage(("unknown option " + a).c_str());
  }
  if (exit_file.empty()) return usage("--exit-file is required");
  if (i >= argc) return usage("no command after --");

  // The signals that stop the alloc are for the command; this process
  // reports how it ended.  Blocked (not ignored) so that the child starts
  // with them at their defaults after restoring the mask.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  sigprocmask(SIG_BLOCK, &stop_signals, &old_mask);
  // The group this process leads is the alloc's: the agent signals it,
  // and the fence's SIGKILL takes everything the command started.
  if (getpgrp() != getpid()) setpgid(0, 0);
  if (start_fd >= 0) {
    char go = 0;
    ssize_t n;
    do {
      n = read(start_fd, &go, 1);
    } while (n < 0 && errno == EINTR);
    close(start_fd);
    if (n != 1) {
      std::fprintf(stderr,
                   "berth-alloc: the agent ended before it recorded this alloc; its command %s "
                   "is not started\n",
                   argv[i]);
      return 125;
    }
  }
  const pid_t supervisor = getpid();
  // The lease as it stands when the command starts (read again each time
  // what was read has run out).
  const std::string boot = lease_file.empty() ? std::string() : boot_id();
  int64_t until = 0, term_at = 0, kill_at = 0;
  if (!lease_file.empty())
    until = berth::supervisor_lease_until(
        0, berth::lease_until_in_file(read_text(lease_file), boot), false);
  pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "berth-alloc: cannot start %s: fork failed: %s\n", argv[i],
                 std::strerror(errno));
    return 127;
  }
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != supervisor) _exit(137);  // the supervisor died already
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(argv[i], argv + i);
    std::fprintf(stderr, "berth-alloc: cannot run %s: %s\n", argv[i], std::strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  // A stop signal sent to the group after the mask above and before the
  // fork (an `alloc stop` right after the agent's go) waits here, blocked,
  // and the command, which did not exist yet, never got it: it ran on until
  // the agent's SIGKILL (node_test "allocs: SIGTERM stops a command's
  // process group", flaky under load since the go).  Handed on to the
  // command now; it is blocked there until the command restores its mask,
  // so it is not lost either.
  {
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
      if (sigismember(&pending, sig) != 1) continue;
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      struct timespec now_only {};
      sigtimedwait(&one, nullptr, &now_only);  // taken: this process ends as the command does
      kill(child, sig);
    }
  }

  for (;;) {
    int status = 0;
    pid_t r = waitpid(child, &status, WNOHANG);
    if (r == child) {
      int code = WIFEXITED(status) ? WEXITSTATUS(status)
                                   : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1);
      if (auto f = berth::write_file_durably(exit_file, std::to_string(code)))
        std::fprintf(stderr, "berth-alloc: cannot record the exit code %d: %s\n", code,
                     f->message.c_str());
      if (WIFSIGNALED(status)) {  // end as the command ended
        int sig = WTERMSIG(status);
        std::signal(sig, SIG_DFL);
        sigset_t only;
        sigemptyset(&only);
        sigaddset(&only, sig);
        sigprocmask(SIG_UNBLOCK, &only, nullptr);
        kill(supervisor, sig);
      }
      return code;
    }
    if (r < 0 && errno != EINTR) {
      std::fprintf(stderr, "berth-alloc: lost its command: %s\n", std::strerror(errno));
      return 1;
    }
    if (!lease_file.empty()) {
      auto now = steady_ms();
      // The file is read only once what was read before has run out: a
      // renewal is only needed then.
      if (now >= until)
        until = berth::supervisor_lease_until(
            until, berth::lease_until_in_file(read_text(lease_file), boot), term_at != 0);
      switch (berth::guard_step(now, until, kill_timeout_ms, term_at, kill_at)) {
        case berth::guard_signal::none:
          break;
        case berth::guard_signal::term:
          std::fprintf(stderr,
                       "berth-alloc: the client's lease ran out: SIGTERM to the alloc's command "
                       "(it writes a single-writer volume)\n");
          kill(-getpgrp(), SIGTERM);  // blocked here
          break;
        case berth::guard_signal::kill:
          if (auto f = berth::write_file_durably(exit_file, std::to_string(128 + SIGKILL)))
            std::fprintf(stderr, "berth-alloc: cannot record the exit code: %s\n",
                         f->message.c_str());
          kill(-getpgrp(), SIGKILL);  // what else the command started, and this process
          return 128 + SIGKILL;
      }
    }
    std::this_thread::sleep_for(poll_period);
  }
}
