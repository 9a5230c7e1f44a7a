#include "persistence/file_modes.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace berth {

namespace {

failure io_failure(const std::string& what, const std::string& path, int err) {
  return failure{errc::internal, "cannot " + what + " " + path + ": " + std::strerror(err) +
                                     " (check the permissions of the data directory)"};
}

// Drops group and other bits of an existing `path`; nothing when it is absent.
std::optional<failure> tighten(const std::string& path, bool* changed = nullptr) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::nullopt;
    return io_failure("read the mode of", path, errno);
  }
  auto mode = st.st_mode & 07777;
  if (mode == without_group_other(mode)) return std::nullopt;
  if (::chmod(path.c_str(), without_group_other(mode)) != 0)
    return io_failure("change the mode of", path, errno);
  if (changed) *changed = true;
  return std::nullopt;
}

}  // namespace

std::optional<failure> private_dir(const std::string& dir, dir_outcome* outcome) {
  if (outcome) *outcome = dir_outcome::kept;
  namespace fs = std::filesystem;
  std::error_code ec;
  auto parent = fs::path(dir).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) return io_failure("create", dir + " (its parent " + parent.string() + ")", ec.value());
  if (::mkdir(dir.c_str(), private_dir_mode) == 0) {
    // mkdir's mode passes through the umask, which only removes bits.
    if (outcome) *outcome = dir_outcome::created;
    return std::nullopt;
  }
  if (errno != EEXIST) return io_failure("create", dir, errno);
  bool changed = false;
  if (auto f = tighten(dir, &changed)) return f;
  if (changed && outcome) *outcome = dir_outcome::tightened;
  return std::nullopt;
}

std::optional<failure> private_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, private_file_mode);
  if (fd >= 0) {
    ::close(fd);
  } else if (errno != EEXIST) {
    return io_failure("create", path, errno);
  }
  for (const char* suffix : {"", "-wal", "-shm", "-journal"})
    if (auto f = tighten(path + suffix)) return f;
  return std::nullopt;
}

std::optional<failure> fresh_private_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return io_failure("remove", path, errno);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, private_file_mode);
  if (fd < 0) return io_failure("create", path, errno);
  ::close(fd);
  return std::nullopt;
}

}  // namespace berth
