// The client's own database (DATA/client.db): what this node published and
// which allocs it runs, written before the client reports success, so that
// a restart (SIGKILL included) loses nothing and re-mounts nothing.
//
// Secrets are never stored here: records keep the volume without them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "messages/api.pb.h"
#include "messages/berth.pb.h"
#include "messages/failure.hpp"

namespace berth {

namespace sql {
class database;
}

// One publication of a volume for an alloc on this node.
struct mount_record {
  std::string alloc_id;
  std::string ns;
  std::string volume_id;
  std::string plugin_id;
  std::string staging_path;  // empty when the plugin does not stage
  std::string target_path;
  // How it was published (access and attachment mode, read-only, the
  // volume without secrets).
  v1::NodeVolumeRequest request;
  int64_t published_at_ms = 0;
};

// An alloc this node runs.
struct alloc_record {
  v1::Alloc alloc;
  int64_t pid = 0;          // the alloc's process (group leader); 0 = no command
  std::string exit_file;    // where its wrapper writes the exit code
  bool exited = false;
  int32_t exit_code = 0;
};

class client_store {
 public:
  // Opens (creating) the database; a failure names the file when it
  // cannot.  Every function returns what failed as a value.
  static expected<std::unique_ptr<client_store>> open(const std::string& path);
  ~client_store();

  // One change of the mounts table: `put` a record, or else delete the
  // publication (alloc_id, ns, volume_id).
  struct mount_change {
    std::optional<mount_record> put;
    std::string alloc_id, ns, volume_id;
  };
  // Applies `changes` in order in one transaction: one fsync for all (the
  // node's group commit); nothing of them when it fails.
  std::optional<failure> write_mounts(const std::vector<mount_change>& changes);

  std::optional<failure> put_mount(const mount_record& m);
  std::optional<failure> delete_mount(const std::string& alloc_id, const std::string& ns,
                                      const std::string& volume_id);
  expected<std::vector<mount_record>> mounts();

  std::optional<failure> put_alloc(const alloc_record& a);
  std::optional<failure> delete_alloc(const std::string& id);
  expected<std::vector<alloc_record>> allocs();

  // The newest leader term this node has taken CSI requests from (0 when
  // none yet): kept across restarts, so the fence holds after one.
  expected<uint64_t> leader_term();
  std::optional<failure> set_leader_term(uint64_t term);

  // Small integers kept across restarts (the lease: control/lease.hpp);
  // 0 when never set.
  expected<int64_t> meta(const std::string& key);
  std::optional<failure> set_meta(const std::string& key, int64_t value);

  // Allocs this client stops on its own because its lease ran out (the
  // self-fence): kept until each is stopped, unmounted and its exit
  // reported, so a restart finishes the fence.  `at_ms`: wall clock.
  std::optional<failure> put_fenced(const std::string& alloc_id, int64_t at_ms);
  std::optional<failure> delete_fenced(const std::string& alloc_id);
  expected<std::map<std::string, int64_t>> fenced();

  const std::string& path() const { return path_; }

 private:
  explicit client_store(const std::string& path);  // raises store_error

  std::string path_;
  std::unique_ptr<sql::database> db_;
};

}  // namespace berth
