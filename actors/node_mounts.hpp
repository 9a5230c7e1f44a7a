// The node's mounts: where a claim is staged and published on this host,
// the record of every publication in client.db, and what to unstage.
//
// The decisions are pure functions on plain types (a mount_table), tested
// without a plugin or a database.  The functions in the last section do the
// client.db I/O and never throw: a SQLite error comes back as a failure
// naming the publication, the file and what to do.
//
// Paths are the CO's own:
//   <csi_root>/<plugin>/staging/<namespace>/<volume>/<mode>
//   <csi_root>/<plugin>/per-alloc/<alloc>/<namespace>/<volume>/<mode>
#pragma once

#include <functional>

#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "messages/api.pb.h"
#include "messages/model.hpp"
#include "persistence/client_store.hpp"

namespace berth {

using mount_key = std::tuple<std::string, std::string, std::string>;  // alloc, ns, volume
using mount_table = std::map<mount_key, mount_record>;

// Where this node stages and publishes one claim.
struct claim_paths {
  std::string staging;
  std::string target;
};

claim_paths paths_of(const std::string& csi_root, const v1::NodeVolumeRequest& r);

mount_key key_of(const v1::NodeVolumeRequest& r);
mount_key key_of(const mount_record& m);

// Whether a publication other than `except` uses the staging path.
bool staging_in_use(const mount_table& mounts, const std::string& staging, const mount_key& except);

// Whether a publish request is published already: recorded as published
// (not only asked) at the same target, and the target exists (`target_exists`, the caller's look at the
// disk).  A repeat after a restart then re-mounts nothing.
bool published_already(const mount_table& mounts, const v1::NodeVolumeRequest& r,
                       const claim_paths& paths, bool target_exists);

// The volumes of alloc `a` it was published for (a published path) that
// are not published here for it now: no record, a record of a publish not
// yet done, or one being unmounted (the node's lease ran out between the
// publish and the run).  Its command must not start: it would write where
// its volume is not.
std::vector<std::string> unpublished_volumes(const mount_table& mounts,
                                             const std::set<mount_key>& unmounting,
                                             const v1::Alloc& a);

// The record of a publication, without the volume's secrets (client.db
// holds none); `staged`: the plugin staged it at paths.staging.
mount_record record_of(const v1::NodeVolumeRequest& r, const claim_paths& paths, bool staged,
                       int64_t now_ms);

// The record of a publication about to be asked of the plugin
// (published_at_ms 0): kept, with its staging path, until the claim is
// unpublished, whether the call succeeds or not, so that what a failed or
// interrupted NodeStage/NodePublish left is undone from it.
mount_record intent_of(const v1::NodeVolumeRequest& r, const claim_paths& paths);

// Whether NodeUnpublishVolume is followed by NodeUnstageVolume: the plugin
// stages and no other record of this client uses the staging.  The
// servers' `unstage` (the node's last claim on the volume) does not hold it
// back: a claim the servers count there that this client has no record of
// never staged here (every publication is recorded before its call), and
// kept staged for it, the staging would be left to nobody once that claim
// is released without the node (claim simulation seed 2751).  A later
// publication stages again.
bool unstage_after_unpublish(bool plugin_stages, bool others_use_staging);

// Whether a publication undone without its unstage (other publications used
// the staging when it was asked, or were planned to go after it) must be
// unstaged now: the last one out unstages when no publication uses the
// staging any more.  Two unpublishes of one staging asked together each
// saw the other and left it; the later one's answer unstages it.
bool unstage_last_out(bool unstaged_with_unpublish, bool others_use_staging_now);

// Whether this client still has a publication for the alloc.
bool has_mounts(const mount_table& mounts, const std::string& alloc_id);

// One publication to undo from this client's own records (an alloc the
// servers declared lost while the node was away).
struct unmount {
  mount_key key;
  mount_record record;
  bool unstage = false;  // no other publication uses its staging
};
std::vector<unmount> unmounts_of(const mount_table& mounts, const std::string& alloc_id);

// The publications `pick` selects, to undo together: the last of them on a
// staging path unstages it unless a publication not picked still uses it.
std::vector<unmount> unmounts_where(const mount_table& mounts,
                                    const std::function<bool(const mount_record&)>& pick);

// --- client.db -------------------------------------------------------------

// Reads every recorded publication into `mounts`.
std::optional<failure> load_mounts(client_store& store, mount_table& mounts);

// Records a publication (client.db first, then the table).
std::optional<failure> save_mount(client_store& store, mount_table& mounts, mount_record m);

// Forgets an undone publication (client.db first, then the table).
std::optional<failure> forget_mount(client_store& store, mount_table& mounts, const mount_key& k);

// A write of client.db waiting for the node's group commit (node.cpp,
// write_mount): a record to put, or without one the publication `key` to
// forget.
struct mount_write {
  mount_key key;
  std::optional<mount_record> put;
  std::optional<mount_record> before;  // the table's record until then (set by apply)
};

// The table once `w` is written: the node applies a write to its table
// when it queues it, so that the decisions of the messages that follow see
// it (a staging another claim is about to use, a publication being undone).
// Keeps the record it replaces in `w.before`.
void apply_mount_write(mount_table& mounts, mount_write& w);

// Writes `writes`, applied to `mounts` in this order, in one transaction
// (one fsync).  On a failure none of them is on disk: `mounts` is put back
// as it was before them, and the failure names the publications and the
// fix ("published, but ..." when the first is a record, "unpublished, but
// ..." when it forgets one, as save_mount and forget_mount).
std::optional<failure> commit_mount_writes(client_store& store, mount_table& mounts,
                                           const std::vector<mount_write>& writes);

// A client.db failure as berth's error: the file, what was being done and
// the fix (used by the node's mount and alloc records alike).
failure store_failure(const client_store& store, const std::string& what, const failure& f);

}  // namespace berth
