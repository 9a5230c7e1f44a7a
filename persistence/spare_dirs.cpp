#include "persistence/spare_dirs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>

namespace berth {

namespace fs = std::filesystem;

namespace {

// Whether `dir` is a directory without entries (not a symlink to one).
bool empty_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return false;
  }
  bool empty = true;
  while (auto* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

// rename(2) that fails with EEXIST instead of replacing an empty directory.
int move_noreplace(const fs::path& from, const fs::path& to) {
  return ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE);
}

}  // namespace

spare_dirs::spare_dirs(fs::path pool, size_t limit) : pool_(std::move(pool)), limit_(limit) {}

spare_dirs& spare_dirs::at(const fs::path& pool, size_t limit) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<spare_dirs>> pools;
  std::lock_guard<std::mutex> lock(mu);
  auto& p = pools[pool.lexically_normal().string()];
  if (!p) p = std::make_unique<spare_dirs>(pool, limit);
  return *p;
}

void spare_dirs::load() {
  if (loaded_) return;
  loaded_ = true;
  std::error_code ec;
  for (fs::directory_iterator it(pool_, ec), end; !ec && it != end; it.increment(ec)) {
    auto name = it->path().filename().string();
    char* rest = nullptr;
    auto n = std::strtoull(name.c_str(), &rest, 10);
    if (rest == nullptr || *rest != '\0' || n == 0) continue;  // not one of ours
    if (n >= next_) next_ = n + 1;
    if (spares_.size() < limit_ && empty_dir(it->path())) spares_.push_back(name);
  }
}

bool spare_dirs::take(const fs::path& dir) {
  while (!spares_.empty()) {
    auto from = pool_ / spares_.back();
    if (move_noreplace(from, dir) == 0) {
      spares_.pop_back();
      return true;
    }
    int err = errno;
    if (err == ENOENT) {
      std::error_code ec;
      if (!fs::exists(dir.parent_path(), ec)) return false;  // mkdir names it
      spares_.pop_back();  // the spare went (someone cleaned the pool)
      continue;
    }
    return err == EEXIST;  // there now; otherwise (EXDEV, ...) mkdir
  }
  return false;
}

bool spare_dirs::give(const fs::path& dir) {
  if (!empty_dir(dir)) return false;
  if (spares_.size() < limit_) {
    std::error_code ec;
    fs::create_directories(pool_, ec);
    // A name taken already (a spare another process put there) moves on.
    for (int attempt = 0; attempt < 8; ++attempt) {
      auto name = std::to_string(next_++);
      auto to = pool_ / name;
      if (move_noreplace(dir, to) == 0) {
        if (empty_dir(to)) {
          spares_.push_back(name);
          return true;
        }
        // Something was made in it between the two looks: put it back.
        move_noreplace(to, dir);
        return false;
      }
      if (errno == EBUSY) return false;  // a mount point stays
      if (errno != EEXIST) break;        // EXDEV, a pool that cannot be made: rmdir
    }
  }
  return ::rmdir(dir.c_str()) == 0;
}

std::error_code spare_dirs::make(const fs::path& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  load();
  std::vector<fs::path> missing;
  std::error_code ec;
  for (auto p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (take(*it)) {
      ++made_.reused;
      continue;
    }
    if (::mkdir(it->c_str(), 0777) != 0 && errno != EEXIST)
      return std::error_code(errno, std::generic_category());
    ++made_.created;
  }
  if (!fs::is_directory(dir, ec)) return std::make_error_code(std::errc::not_a_directory);
  return {};
}

size_t spare_dirs::remove_empty(const fs::path& dir, const fs::path& stop) {
  std::lock_guard<std::mutex> lock(mu_);
  load();
  size_t removed = 0;
  for (auto p = dir; !p.empty() && p != stop && p != p.parent_path(); p = p.parent_path()) {
    if (!give(p)) break;
    ++removed;
  }
  return removed;
}

size_t spare_dirs::kept() {
  std::lock_guard<std::mutex> lock(mu_);
  load();
  return spares_.size();
}

spare_dirs::counts spare_dirs::made() {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

}  // namespace berth
