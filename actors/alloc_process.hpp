// An alloc's command as a process on the client's host.  The command runs
// under /bin/sh as a wrapper in its own process group; the wrapper writes
// the command's exit code to a file, so a client restarted while the
// command ran (it is then no longer the parent) still learns how it ended.
#pragma once

#include <cstdint>
#include <string>

#include "messages/berth.pb.h"

namespace berth {

struct alloc_spawn {
  int64_t pid = 0;        // also the process group id
  std::string exit_file;  // DIR/exit
  std::string error;      // set when it could not start
};

// Starts the alloc's command in `dir` (created; stdout and stderr go to
// DIR/stdout and DIR/stderr) with BERTH_ALLOC_ID and BERTH_VOLUME_<NAME>
// set from the alloc's published volumes.
alloc_spawn start_alloc_process(const v1::Alloc& alloc, const std::string& dir);

struct alloc_exit {
  bool exited = false;
  int32_t exit_code = 0;  // 128+N when killed by signal N; -1 when it vanished
  std::string how;        // "exited with 0", "killed by signal 15", ...
};

// Whether the process ended (reaps it when it is this process's child).
alloc_exit check_alloc_process(int64_t pid, const std::string& exit_file);

// Sends a signal to the alloc's process group.
void signal_alloc_process(int64_t pid, int sig);

}  // namespace berth
