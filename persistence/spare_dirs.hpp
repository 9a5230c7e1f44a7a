// Empty directories kept for reuse instead of being created and removed for
// every publication (issue 28).  A claim's paths are directories the CO (the
// node actor) and the plugin create per publication and remove at its end:
// about four mkdir/rmdir pairs per claim.  Creating a directory allocates an
// inode and a block; on ext4 without a journal (this project's machines) the
// inode allocator also skips every inode deleted in the last seconds, reading
// each one, so under many claims a second it is most of the node's kernel
// time.  A spare is an empty directory moved aside (rename) when its
// publication ends and moved into place (rename) when the next one needs a
// directory: no inode is allocated or freed.
//
// Safety: a directory becomes a spare only when it is empty, is checked
// empty again once moved (and moved back if it is not), and is never a
// mount point (rename refuses one: EBUSY).  So nothing a volume holds or a
// mount is ever hidden in the pool; what cannot be moved stays where it is,
// as rmdir would leave it.  A spare is moved into place only where no entry
// of that name exists (RENAME_NOREPLACE).  The pool must be on the
// directories' filesystem: where it is not (EXDEV), mkdir and rmdir are used.
// One pool serves every thread of the process; its operations hold one mutex.
// A crash leaves at worst an extra empty directory in the pool, which the
// next start takes as a spare.  Spares are only directories the process
// created itself, so they have its default mode.
//
// POSIX only (berth-hostpath links it too).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace berth {

class spare_dirs {
 public:
  // Keeps at most `limit` spares in `pool` (created when the first one is
  // kept; spares a previous process left there are taken on first use).
  spare_dirs(std::filesystem::path pool, size_t limit);

  // Creates `dir` and its missing parents, each from a spare when there is
  // one, else by mkdir; an existing directory is fine.  The error is the
  // first one mkdir gave.
  std::error_code make(const std::filesystem::path& dir);

  // Removes `dir` when it is an empty directory, then each parent left
  // empty, up to and not including `stop` (the first that is not empty, or
  // missing, ends it).  Each removed directory becomes a spare while fewer
  // than the limit are kept.  Returns how many were removed.
  size_t remove_empty(const std::filesystem::path& dir, const std::filesystem::path& stop);

  // Spares kept now.
  size_t kept();

  // Directories made from a spare and by mkdir since the start.
  struct counts {
    uint64_t reused = 0;
    uint64_t created = 0;
  };
  counts made();

  // The process's pool at `pool` (one object per path, never destroyed).
  static spare_dirs& at(const std::filesystem::path& pool, size_t limit = default_limit);

  static constexpr size_t default_limit = 1024;

 private:
  void load();
  bool take(const std::filesystem::path& dir);
  bool give(const std::filesystem::path& dir);

  std::mutex mu_;
  std::filesystem::path pool_;
  size_t limit_;
  bool loaded_ = false;
  std::vector<std::string> spares_;
  uint64_t next_ = 1;
  counts made_;
};

}  // namespace berth
