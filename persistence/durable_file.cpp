#include "persistence/durable_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "persistence/crashpoint.hpp"

namespace berth {

namespace {

failure io_failure(const char* what, const std::string& path, int err) {
  return {errc::internal, std::string("cannot ") + what + " " + path + ": " + std::strerror(err)};
}

std::string dir_of(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

std::optional<failure> write_and_fsync(const std::string& path, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return io_failure("create", path, errno);
  // A file that existed keeps its mode through O_TRUNC: 0600 before any byte.
  if (::fchmod(fd, 0600) != 0) {
    int err = errno;
    ::close(fd);
    return io_failure("change the mode of", path, err);
  }
  while (!bytes.empty()) {
    auto n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::close(fd);
      return io_failure("write", path, err);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return io_failure("fsync", path, err);
  }
  // After a successful fsync a failing close loses nothing, but report it
  // anyway: it would mean something is badly wrong with this file system.
  if (::close(fd) != 0) return io_failure("close", path, errno);
  return std::nullopt;
}

std::optional<failure> fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_failure("open the directory", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return io_failure("fsync the directory", dir, err);
  return std::nullopt;
}

std::optional<failure> fsync_dir_of(const std::string& path) { return fsync_dir(dir_of(path)); }

std::optional<failure> rename_durably(const std::string& from, const std::string& to,
                                      std::string_view crash_prefix) {
  if (std::rename(from.c_str(), to.c_str()) != 0) return io_failure("rename over", to, errno);
  crashpoint(crash_prefix, "after_rename");
  if (auto f = fsync_dir_of(to)) return f;
  crashpoint(crash_prefix, "after_dir_fsync");
  return std::nullopt;
}

std::optional<failure> write_file_durably(const std::string& path, std::string_view bytes,
                                          std::string_view crash_prefix) {
  auto tmp = path + ".tmp";
  if (auto f = write_and_fsync(tmp, bytes)) return f;
  crashpoint(crash_prefix, "after_temp_fsync");
  return rename_durably(tmp, path, crash_prefix);
}

}  // namespace berth
