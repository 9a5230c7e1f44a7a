// An alloc's command as a process on the client's host.  The command runs
// under its supervisor, berth-alloc (apps/berth-alloc), which leads the
// alloc's process group, writes the command's exit code to a file (so a
// client restarted while the command ran, no longer its parent, still
// learns how it ended) and, for an alloc that writes a single-writer
// volume, stops the command when the client's lease runs out even when the
// agent is dead or frozen (control/lease.hpp: the guard that outlives the
// agent).
#pragma once

#include <cstdint>
#include <string>

#include "messages/berth.pb.h"

namespace berth {

struct alloc_spawn {
  int64_t pid = 0;        // also the process group id
  std::string exit_file;  // DIR/exit
  std::string error;      // set when it could not start
  // The pipe the supervisor waits on before it starts the command
  // (berth-alloc --start-fd): give it the go with release_alloc_process
  // once the alloc's record is durable.  Closed without the go (this
  // process died), the command never starts.
  int start_fd = -1;
};

// Lets the supervisor start the command (once its record is durable), or,
// with go false, closes the pipe so that it never does.  Idempotent.
void release_alloc_process(alloc_spawn& s, bool go = true);

// How the supervisor guards the command.
struct alloc_supervision {
  std::string binary = "berth-alloc";  // the supervisor (a path, or found in PATH)
  // The client's lease file (control/lease: lease_file_text); empty: the
  // alloc writes no single-writer volume and is not fenced.
  std::string lease_file;
  int64_t kill_timeout_ms = 5000;  // SIGTERM, then SIGKILL after this
};

// Starts the alloc's command under its supervisor in `dir` (created;
// stdout and stderr go to DIR/stdout and DIR/stderr) with BERTH_ALLOC_ID
// and BERTH_VOLUME_<NAME> set from the alloc's published volumes.
alloc_spawn start_alloc_process(const v1::Alloc& alloc, const std::string& dir,
                                const alloc_supervision& supervision);

// The supervisor binary berthd uses: berth-alloc next to the running
// executable (an installation), in ../berth-alloc/ (the build tree), or
// from PATH.
std::string default_alloc_supervisor();

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
