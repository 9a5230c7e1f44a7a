#pragma once
// An append-only, fsync'ed log of the RPCs berth-hostpath answered: one JSON
// object per line, e.g.
//   {"method":"NodeStageVolume","volume_id":"hp-1f..","staging_target_path":"/x",
//    "code":0,"code_name":"OK","at_ns":...,"end_ns":...}
// Tests read it to check the order in which a CO issued its calls, and (from
// at_ns and end_ns) which calls overlapped. Only the fields passed to
// append() are written; callers pass ids and paths, never secrets,
// parameters, contexts or mount flags. Thread-safe: lines are written and
// fsynced one at a time under the log's own mutex.

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>

namespace berth::hostpath {

class call_log {
 public:
  // An empty path disables the log. Throws std::runtime_error if the file
  // cannot be opened for appending.
  explicit call_log(const std::filesystem::path& file);
  ~call_log();
  call_log(const call_log&) = delete;
  call_log& operator=(const call_log&) = delete;

  // Appends one line and fsyncs it. A field whose value is "true" is written
  // as JSON true; at_ns >= 0 (when the call started) and end_ns >= 0 (when
  // its answer was ready), nanoseconds since the epoch, are written as
  // "at_ns" and "end_ns".
  void append(const std::string& method, const std::map<std::string, std::string>& fields,
              int code, const std::string& code_name, int64_t at_ns = -1, int64_t end_ns = -1);

 private:
  std::mutex mu_;  // one line at a time, each fsynced before the next
  int fd_ = -1;
};

}  // namespace berth::hostpath
