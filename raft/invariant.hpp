// Broken invariants abort even in release builds, as etcd's raft panics:
// carrying on would risk replicas silently diverging. They signal a bug in
// the core or a shell that broke the contract in docs/raft.md.
#pragma once

#include <cstdio>
#include <cstdlib>

#define BERTH_RAFT_INVARIANT(cond, what)                                    \
  do {                                                                      \
    if (!(cond)) ::berth::raft::invariant_failed(what, __FILE__, __LINE__); \
  } while (0)

namespace berth::raft {

[[noreturn]] inline void invariant_failed(const char* what, const char* file, int line) {
  std::fprintf(stderr, "raft invariant violated: %s (%s:%d)\n", what, file, line);
  std::abort();
}

}  // namespace berth::raft
