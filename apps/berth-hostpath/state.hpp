#pragma once
// berth-hostpath's durable state: everything it must remember across its own
// restarts (volumes, controller publications, stagings, publications). Mounts
// outlive the process, so the state is what lets a restarted plugin unpublish
// and unstage what an earlier run set up.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace berth::hostpath {

// Access mode and readonly flag of one attachment; compared for idempotency
// (same args: OK again; different args: ALREADY_EXISTS).
struct attachment {
  int access_mode = 0;  // csi.v1 VolumeCapability.AccessMode.Mode
  bool readonly = false;

  bool operator==(const attachment& o) const {
    return access_mode == o.access_mode && readonly == o.readonly;
  }
};

struct volume_record {
  std::string name;
  int64_t capacity_bytes = 0;
  std::map<std::string, std::string> parameters;
};

struct staging_record {
  std::string volume_id;
  attachment how;
};

struct publication_record {
  std::string volume_id;
  std::string staging_target_path;
  attachment how;
};

struct state {
  std::map<std::string, volume_record> volumes;  // by volume id
  // volume id -> node id -> how it was published to that node
  std::map<std::string, std::map<std::string, attachment>> controller_publications;
  std::map<std::string, staging_record> stagings;          // by staging path
  std::map<std::string, publication_record> publications;  // by target path
};

// Reads `file`; a missing file is an empty state. Throws std::runtime_error
// on a file that exists but cannot be parsed (never silently forget mounts).
state load_state(const std::filesystem::path& file);

// Replaces `file` atomically and durably: write a temporary file, fsync it,
// rename it over `file`, fsync the directory. Throws std::runtime_error.
void save_state(const std::filesystem::path& file, const state& s);

}  // namespace berth::hostpath
