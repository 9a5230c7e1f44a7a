#pragma once
// How berth-hostpath makes a volume directory appear at the paths the CO
// chooses. Two modes:
//   bind:    real bind mounts (mount(2) with MS_BIND), as a production node
//            plugin does; readonly publications are remounted read-only.
//            Needs CAP_SYS_ADMIN.
//   symlink: stage only checks the staging directory; publish makes the
//            target path a symlink to the volume directory. For unprivileged
//            runs; readonly cannot be enforced.
// Every operation is idempotent: doing it again when it is already done
// succeeds, so a retried or replayed RPC converges.

#include <filesystem>
#include <string>

namespace berth::hostpath {

enum class mount_mode { bind, symlink };

// "bind" / "symlink".
std::string to_string(mount_mode m);

class mounter {
 public:
  // `spares`: where emptied target directories are kept for the next
  // publish (persistence/spare_dirs; used where it is on the targets'
  // filesystem); empty: every target is made and removed.
  explicit mounter(mount_mode mode, std::filesystem::path spares = {})
      : mode_(mode), spares_(std::move(spares)) {}

  mount_mode mode() const { return mode_; }

  // Make `volume_dir` available at `staging` (a directory the CO created;
  // created here if missing). Throws std::runtime_error.
  void stage(const std::filesystem::path& volume_dir, const std::filesystem::path& staging);

  // Undo stage(); a path that is not staged is fine. Throws on failure.
  void unstage(const std::filesystem::path& staging);

  // Make the volume appear at `target` (created here, as the spec says the
  // plugin creates target_path). Throws std::runtime_error.
  void publish(const std::filesystem::path& volume_dir, const std::filesystem::path& staging,
               const std::filesystem::path& target, bool readonly);

  // Undo publish() and remove `target` (an empty directory: given to the
  // spares); a missing target is fine.
  void unpublish(const std::filesystem::path& target);

 private:
  void make_target(const std::filesystem::path& target);
  void remove_target(const std::filesystem::path& target);

  mount_mode mode_;
  std::filesystem::path spares_;
};

// True when both paths name the same directory inode; a bind mount makes the
// mount point report its source's inode, so this detects "already mounted".
bool same_inode(const std::filesystem::path& a, const std::filesystem::path& b);

// Bytes of regular files under `dir` (what the volume's users wrote).
int64_t directory_bytes(const std::filesystem::path& dir);

// Bytes of regular files and count of inodes (files, directories, links:
// every entry, and `dir` itself) under `dir`.
struct usage {
  int64_t bytes = 0;
  int64_t inodes = 0;
};
usage directory_usage(const std::filesystem::path& dir);

}  // namespace berth::hostpath
