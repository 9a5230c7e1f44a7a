#pragma once
// An append-only, fsync'ed log of the RPCs berth-hostpath answered: one JSON
// object per line, e.g.
//   {"method":"NodeStageVolume","volume_id":"hp-1f..","staging_target_path":"/x","code":0,"code_name":"OK"}
// Tests read it to check the order in which a CO issued its calls. Only the
// fields passed to append() are written; callers pass ids and paths, never
// secrets, parameters, contexts or mount flags.

#include <cstdint>
#include <filesystem>
#include <map>
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

  // Appends one line and fsyncs it. Not thread-safe: the caller serializes.
  // A field whose value is "true" is written as JSON true; at_ns >= 0 (when
  // the call started, nanoseconds since the epoch) is written as "at_ns".
  void append(const std::string& method, const std::map<std::string, std::string>& fields,
              int code, const std::string& code_name, int64_t at_ns = -1);

 private:
  int fd_ = -1;
};

}  // namespace berth::hostpath
