#pragma once
// berth-hostpath's durable state: everything it must remember across its own
// restarts (volumes, controller publications, stagings, publications). Mounts
// outlive the process, so the state is what lets a restarted plugin unpublish
// and unstage what an earlier run set up.
//
// A change to the state is a list of records, each putting or deleting one
// key (a volume, a controller publication, a staging, a publication, a
// snapshot, a group snapshot). The
// plugin applies records to its state in memory and appends the same
// records to a journal (journal.hpp), so a save costs what changed, not
// what is stored. Everything here is pure: no I/O but load_state/save_state.

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <variant>
#include <vector>

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
  int64_t capacity_bytes = 0;  // grows with ControllerExpandVolume
  std::map<std::string, std::string> parameters;
  // Set at CreateVolume, changed by ControllerModifyVolume.
  std::map<std::string, std::string> mutable_parameters;
  // CreateVolume's volume_content_source (at most one is set): the volume
  // started as a copy of this snapshot or volume.
  std::string source_snapshot_id;
  std::string source_volume_id;

  bool operator==(const volume_record& o) const {
    return name == o.name && capacity_bytes == o.capacity_bytes && parameters == o.parameters
           && mutable_parameters == o.mutable_parameters
           && source_snapshot_id == o.source_snapshot_id && source_volume_id == o.source_volume_id;
  }
};

// A snapshot is a copy of its volume's directory (ROOT/snapshots/<id>),
// ready to use as soon as CreateSnapshot answers.
struct snapshot_record {
  std::string name;
  std::string source_volume_id;
  std::map<std::string, std::string> parameters;
  int64_t size_bytes = 0;
  int64_t creation_time_ns = 0;  // since the epoch
  // Set for a member of a group snapshot (CreateVolumeGroupSnapshot): the
  // group's id. Such a snapshot is deleted only with its group.
  std::string group_snapshot_id;

  bool operator==(const snapshot_record& o) const {
    return name == o.name && source_volume_id == o.source_volume_id
           && parameters == o.parameters && size_bytes == o.size_bytes
           && creation_time_ns == o.creation_time_ns
           && group_snapshot_id == o.group_snapshot_id;
  }
};

// A group snapshot (CreateVolumeGroupSnapshot): one member snapshot per
// source volume, all taken while none of them could change. The members
// are ordinary snapshot_records (their group_snapshot_id is this group's
// id); snapshot_ids[i] is the member of source_volume_ids[i]. The group
// and its members are put by one change (one journal line), so a crash
// leaves either the whole group or none of it.
struct group_snapshot_record {
  std::string name;
  std::vector<std::string> source_volume_ids;  // in the request's order
  std::vector<std::string> snapshot_ids;       // the members, same order
  std::map<std::string, std::string> parameters;
  int64_t creation_time_ns = 0;  // since the epoch

  bool operator==(const group_snapshot_record& o) const {
    return name == o.name && source_volume_ids == o.source_volume_ids
           && snapshot_ids == o.snapshot_ids && parameters == o.parameters
           && creation_time_ns == o.creation_time_ns;
  }
};

struct staging_record {
  std::string volume_id;
  attachment how;

  bool operator==(const staging_record& o) const {
    return volume_id == o.volume_id && how == o.how;
  }
};

struct publication_record {
  std::string volume_id;
  std::string staging_target_path;
  attachment how;

  bool operator==(const publication_record& o) const {
    return volume_id == o.volume_id && staging_target_path == o.staging_target_path
           && how == o.how;
  }
};

struct state {
  std::map<std::string, volume_record> volumes;  // by volume id
  // volume id -> node id -> how it was published to that node
  std::map<std::string, std::map<std::string, attachment>> controller_publications;
  std::map<std::string, staging_record> stagings;          // by staging path
  std::map<std::string, publication_record> publications;  // by target path
  std::map<std::string, snapshot_record> snapshots;        // by snapshot id
  std::map<std::string, group_snapshot_record> group_snapshots;  // by group id

  bool operator==(const state& o) const {
    return volumes == o.volumes && controller_publications == o.controller_publications
           && stagings == o.stagings && publications == o.publications
           && snapshots == o.snapshots && group_snapshots == o.group_snapshots;
  }
};

// One key of the state put (with its new value) or deleted.
struct put_volume {
  std::string id;
  volume_record value;
};
struct erase_volume {
  std::string id;
};
struct put_controller_publication {
  std::string volume_id;
  std::string node_id;
  attachment value;
};
struct erase_controller_publication {
  std::string volume_id;
  std::string node_id;
};
struct put_staging {
  std::string path;
  staging_record value;
};
struct erase_staging {
  std::string path;
};
struct put_publication {
  std::string target;
  publication_record value;
};
struct erase_publication {
  std::string target;
};
struct put_snapshot {
  std::string id;
  snapshot_record value;
};
struct erase_snapshot {
  std::string id;
};
struct put_group_snapshot {
  std::string id;
  group_snapshot_record value;
};
struct erase_group_snapshot {
  std::string id;
};

using record = std::variant<put_volume, erase_volume, put_controller_publication,
                            erase_controller_publication, put_staging, erase_staging,
                            put_publication, erase_publication, put_snapshot, erase_snapshot,
                            put_group_snapshot, erase_group_snapshot>;

// Applies `r` to `s`. Idempotent: applying a record twice, or a record whose
// effect `s` already has, leaves `s` as applying it once does (so replaying
// a journal over a snapshot that already holds it is harmless). Deleting
// the last controller publication of a volume removes its entry.
void apply_change(state& s, const record& r);
void apply_change(state& s, const std::vector<record>& rs);

// The records that turn `from` into `to`: apply_change(from, diff(from, to)) == to.
// Only keys whose value differs appear.
std::vector<record> diff(const state& from, const state& to);

// True for the records of one node (stagings, publications), which
// --shared-root keeps in the node's own files.
bool node_local(const record& r);

// The part of `s` that --shared-root shares (volumes, controller
// publications, snapshots, group snapshots), and the part that is the
// node's own.
state shared_part(const state& s);
state node_part(const state& s);

// JSON text of `s`, as state.json holds it (pretty, one key per line).
std::string encode_state(const state& s);

// `s` from the JSON text of state.json; throws std::runtime_error naming
// `what` (the file) when it cannot be parsed.
state decode_state(const std::string& text, const std::string& what);

// JSON text of `rs` (one line, no newline) and back; decode throws
// std::runtime_error on anything it does not recognise.
std::string encode_records(const std::vector<record>& rs);
std::vector<record> decode_records(const std::string& text);

// Reads `file`; a missing file is an empty state. Throws std::runtime_error
// on a file that exists but cannot be parsed (never silently forget mounts).
state load_state(const std::filesystem::path& file);

// Replaces `file` atomically and durably: write a temporary file, fsync it,
// rename it over `file`, fsync the directory. Throws std::runtime_error.
// Returns the number of bytes written.
int64_t save_state(const std::filesystem::path& file, const state& s);

}  // namespace berth::hostpath
