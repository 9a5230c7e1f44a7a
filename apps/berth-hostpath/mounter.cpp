#include "mounter.hpp"

#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "persistence/spare_dirs.hpp"

namespace berth::hostpath {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string& what, const fs::path& p) {
  throw std::runtime_error(what + " " + p.string() + ": " + std::strerror(errno));
}

void ensure_dir(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec)
    throw std::runtime_error("cannot create " + p.string() + ": " + ec.message());
}

void bind(const fs::path& source, const fs::path& target) {
  if (same_inode(source, target))
    return;  // already mounted by an earlier (retried) call
  if (::mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) != 0)
    fail("cannot bind-mount onto", target);
}

// Detaches a mount at `p`; "not a mount point" (EINVAL) and a missing path
// (ENOENT) mean there is nothing to undo.
void unmount(const fs::path& p) {
  if (::umount2(p.c_str(), 0) == 0 || errno == EINVAL || errno == ENOENT)
    return;
  if (errno == EBUSY && ::umount2(p.c_str(), MNT_DETACH) == 0)
    return;  // still in use: detach lazily so the CO can proceed
  fail("cannot unmount", p);
}

}  // namespace

std::string to_string(mount_mode m) {
  return m == mount_mode::bind ? "bind" : "symlink";
}

bool same_inode(const fs::path& a, const fs::path& b) {
  struct stat sa {};
  struct stat sb {};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0)
    return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int64_t directory_bytes(const fs::path& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec))
      total += static_cast<int64_t>(it->file_size(size_ec));
  }
  return total;
}

usage directory_usage(const fs::path& dir) {
  usage u;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return u;
  u.inodes = 1;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    ++u.inodes;
    std::error_code size_ec;
    if (it->is_regular_file(size_ec) && !it->is_symlink(size_ec))
      u.bytes += static_cast<int64_t>(it->file_size(size_ec));
  }
  return u;
}

void mounter::stage(const fs::path& volume_dir, const fs::path& staging) {
  ensure_dir(staging);
  if (mode_ == mount_mode::bind)
    bind(volume_dir, staging);
}

void mounter::unstage(const fs::path& staging) {
  if (mode_ == mount_mode::bind)
    unmount(staging);
}

void mounter::publish(const fs::path& volume_dir, const fs::path& staging,
                      const fs::path& target, bool readonly) {
  if (mode_ == mount_mode::symlink) {
    std::error_code ec;
    if (fs::is_symlink(target, ec) && fs::read_symlink(target, ec) == volume_dir)
      return;
    fs::create_symlink(volume_dir, target, ec);
    if (ec)
      throw std::runtime_error("cannot create symlink " + target.string() + ": " + ec.message());
    return;
  }
  make_target(target);
  bind(staging, target);
  // MS_RDONLY on the first bind is ignored by the kernel: a bind mount
  // becomes read-only only through a remount of that mount.
  if (readonly
      && ::mount(nullptr, target.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)
    fail("cannot remount read-only", target);
}

void mounter::unpublish(const fs::path& target) {
  std::error_code ec;
  if (fs::is_symlink(target, ec)) {
    fs::remove(target, ec);
  } else if (fs::exists(target, ec)) {
    if (mode_ == mount_mode::bind)
      unmount(target);
    remove_target(target);
  }
  if (ec)
    throw std::runtime_error("cannot remove " + target.string() + ": " + ec.message());
}

void mounter::make_target(const fs::path& target) {
  if (spares_.empty())
    return ensure_dir(target);
  if (auto ec = berth::spare_dirs::at(spares_).make(target))
    throw std::runtime_error("cannot create " + target.string() + ": " + ec.message());
}

// Only an empty directory goes (to the spares, or rmdir): never data.
void mounter::remove_target(const fs::path& target) {
  if (spares_.empty()) {
    std::error_code ec;
    fs::remove(target, ec);
    if (ec)
      throw std::runtime_error("cannot remove " + target.string() + ": " + ec.message());
    return;
  }
  std::error_code ec;
  if (berth::spare_dirs::at(spares_).remove_empty(target, target.parent_path()) == 0
      && fs::exists(target, ec))
    throw std::runtime_error("cannot remove " + target.string() + ": " +
                             std::strerror(ENOTEMPTY));
}

}  // namespace berth::hostpath
