// A fresh directory under the system's temporary directory for one test
// case, removed with everything in it when the case ends.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace berth::test {

struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& prefix = "berth-test-") {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  // The path of `name` in it.
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

}  // namespace berth::test
