// The catalog: volumes (with their claims), plugins, nodes and allocs as of
// an applied log index.  It changes only in `apply`, with committed entries
// in index order, so whoever reads it (the leader's answers, the volume
// watcher, the metrics) sees exactly what the log committed, never a change
// still in flight.  Plain data, no I/O: the state tables (persistence/
// state_store) apply the same entries with the same `stamp`.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "messages/berth.pb.h"

namespace berth {

using volume_key = std::pair<std::string, std::string>;  // namespace, id

// What applying one change did: the change as stamped, and the object it
// replaced or deleted (an empty change when there was none).  The leader
// tells the watcher and the metrics from these.
struct applied_change {
  v1::Change change;
  v1::Change before;
};

// A volume as the catalog keeps it: the encoded v1::Volume in one
// immutable, reference-counted block.  Copying a row (and so a catalog)
// copies a pointer, never the volume, and the block is shared between the
// threads of the actors that hold a copy.  An idle volume costs its bytes
// (67 for a benchmark volume, 8 more for the block) and a map node, not a
// decoded message (~1.3 KiB).
class volume_row {
 public:
  volume_row() = default;
  explicit volume_row(const v1::Volume& v);
  // A row of bytes encoded already (as the state tables store them).
  static volume_row encoded(const std::string& bytes);
  volume_row(const volume_row& other) noexcept;
  volume_row(volume_row&& other) noexcept;
  volume_row& operator=(volume_row other) noexcept;
  ~volume_row();
  // The volume, decoded (a copy: the row never changes).
  v1::Volume get() const;
  // Its plugin_id and external_id alone, read from the bytes without
  // decoding the rest (the health check and the snapshot listing scan
  // every volume for these two).
  std::pair<std::string, std::string> plugin_and_external_id() const;
  size_t size() const;  // bytes
  bool empty() const { return block_ == nullptr; }
  // The same block (a row handed from one catalog to the other).
  bool same(const volume_row& other) const { return block_ == other.block_; }

 private:
  struct block {
    std::atomic<uint32_t> refs;
    uint32_t size;
    char data[1];
  };
  block* block_ = nullptr;
};

// The rows one server's two catalogs (its state machine's and, while the
// server leads, its leader's) build for the same committed entries: the
// first to apply an entry leaves its rows here and the second takes them,
// so the two catalogs share one block per volume instead of each building
// its own.  What a catalog holds never depends on it: a row taken is the
// row the taker would have built (the same change, stamped the same way).
class row_exchange {
 public:
  enum party : uint8_t { machine = 0, leader = 1 };
  // A catalog of this party applies entries from now on (a leader may
  // briefly overlap the one it replaces: counted).
  void attach(party p);
  // It stopped: with no one left to take them, the rows left go.
  void detach(party p);
  // The row of the volume upserted by change `position` of entry `index`,
  // as `p` applies it: the other party's, or built and left for it.
  volume_row row(party p, uint64_t index, uint32_t position, const v1::Volume& stamped);
  // Rows left and not taken yet (a test's and a metric's view).
  size_t waiting() const;

 private:
  using slot = std::pair<uint64_t, uint32_t>;
  mutable std::mutex mtx_;
  int attached_[2] = {0, 0};
  std::map<slot, volume_row> left_[2];  // by the party that left them
};

struct catalog {
  uint64_t applied_index = 0;
  // The last index that changed a volume (its claims included) and a
  // plugin: a list's index, also when it is empty (Nomad's table index).
  // The state tables do not keep them: a catalog loaded from them takes
  // the applied index, never earlier than the true one.
  uint64_t volumes_index = 0;
  uint64_t plugins_index = 0;
  // Shared with the server's other catalog, and which of the two this is
  // (none in a test's catalog: every row built here).
  std::shared_ptr<row_exchange> rows;
  row_exchange::party party = row_exchange::machine;
  std::map<volume_key, volume_row> volumes;  // with secrets: never shown as is
  std::map<std::string, v1::Plugin> plugins;
  std::map<std::string, v1::Node> nodes;
  std::map<std::string, v1::Alloc> allocs;
  // (node, plugin) -> the volumes of the plugin with a claim (any state) on
  // the node: kept by apply and add_volume, so that a claim's max-volumes
  // check does not scan every volume.
  std::map<std::pair<std::string, std::string>, std::set<volume_key>> claimed_on;
  // The volumes whose availability is drain (berth volume availability):
  // kept by apply and add_volume, so the leader's tick does not scan every
  // volume for them.
  std::set<volume_key> draining;
  // The volumes with an expansion in progress (control/expansion): kept by
  // apply and add_volume, so a new leader finds the expansions to resume
  // without scanning every volume.
  std::set<volume_key> expanding;
  // The volumes whose controller condition is abnormal (control/health):
  // kept by apply and add_volume, so a new leader announces their health
  // series without decoding every volume.
  std::set<volume_key> abnormal;
  // (namespace, volume group) -> the ids of the group's volumes: kept by
  // apply and add_volume, so that placement finds a group's volumes without
  // scanning every volume.
  std::map<std::pair<std::string, std::string>, std::set<std::string>> volume_groups;
  // ACLs (control/acl): policies by name, tokens by accessor id, the
  // accessor id of each token's secret hash, and the index of the committed
  // bootstrap (0: none yet).
  std::map<std::string, v1::AclPolicy> acl_policies;
  std::map<std::string, v1::AclToken> acl_tokens;
  std::map<std::string, std::string> acl_by_hash;
  uint64_t acl_bootstrap_index = 0;
  // A committed operator restore replaced the state wholesale: this copy is
  // stale until it is loaded again from the state tables.
  bool restored = false;
  // The entries refused at apply (an expectation no longer held), by
  // index, for their proposer to find (take_refused); one more than 65,536
  // entries older than the last applied is forgotten.
  std::set<uint64_t> refused;
};

// Applies one committed entry at `index` (entries at or below the applied
// index are skipped: applying is idempotent).  Returns what changed, with
// each alloc_volume_freed resolved into what it did (alloc_after_free on
// the state the entry's earlier changes left), or left out when it did
// nothing; the state tables resolve it the same way from their rows.
std::vector<applied_change> apply(catalog& c, uint64_t index, const v1::LogEntry& entry);

// Compare-and-set (the leader's writes): the version of the object `e`
// names in `c` (its modify index; 0: none; for node_allocs, the highest
// modify index of the node's allocs).
uint64_t version_in(const catalog& c, const v1::Expectation& e);
// Whether every expectation of `entry` holds in `c` (apply refuses the
// whole entry when one does not).
bool expectations_hold(const catalog& c, const v1::LogEntry& entry);
// What changes built on `c` expect: the version in `c` of every object
// they write (an alloc_volume_freed's alloc; a deleted node's allocs too),
// once each, and, with `node_allocs`, the version of the allocs of every
// node they write (a change built from everything on a node: mark-down,
// a forced drain).
std::vector<v1::Expectation> expectations_of(const catalog& c,
                                             const std::vector<v1::Change>& changes,
                                             bool node_allocs = false);
// Whether the entry at `index` was refused by apply; forgets it.
bool take_refused(catalog& c, uint64_t index);

// After an alloc's claim on `volume` was freed: the volume leaves an alloc
// without a command (a record `volume claim` made); such an alloc without
// volumes left is deleted, unless its node is down or back from down
// without having confirmed its unmounts (control/nodes: the node must still
// be told to unmount it).  nullopt when nothing changes (the alloc has a
// command, is gone, or the claim is not free).
std::optional<v1::Change> alloc_after_release(const catalog& c, const std::string& alloc_id,
                                              const volume_key& volume);
// What a free's alloc_volume_freed does (apply, and the state tables'
// replay at start-up): alloc_after_release for a live alloc; an ended one
// (complete, failed, lost: its claims are released by the watcher) keeps
// its record as it is, its history, which a node back from down is also
// told to unmount from.
std::optional<v1::Change> alloc_after_free(const catalog& c, const v1::AllocVolumeFreed& freed);

// What a claim's alloc_volume_claimed does (apply, and the state tables'
// replay): the claimed volume joins the alloc's record as it is now (kept
// whatever its state: an alloc that ended meanwhile keeps it as history,
// and the watcher releases the claim), or the record as routed is created
// when there is none; nullopt when the record has the volume already.
std::optional<v1::Change> alloc_after_claim(const catalog& c,
                                            const v1::AllocVolumeClaimed& claimed);

// The order in which one entry's changes are told to the watcher: alloc
// upserts first, the rest as they came.  A claim committed together with
// its alloc (volume claim, alloc run) must never reach the watcher before
// the alloc does: between the two messages its timer could find the claim's
// alloc missing and release a claim just acknowledged.
void alloc_upserts_first(std::vector<applied_change>& changes);

// Adds a volume loaded from the state tables (no entry, no stamp), with
// its claims indexed.
void add_volume(catalog& c, const v1::Volume& v);
// The same, with the row made of `bytes`, `v` encoded (what the state
// tables hold): not encoded again.
void add_volume(catalog& c, const v1::Volume& v, const std::string& bytes);

// Adds the ACL objects loaded from the state tables (no entry, no stamp).
void add_acl(catalog& c, std::vector<v1::AclPolicy> policies, std::vector<v1::AclToken> tokens,
             uint64_t bootstrap_index);

// The volumes with a claim (any state) on the node, from claimed_on.
std::set<volume_key> volumes_claimed_on(const catalog& c, const std::string& node_id);
// Every volume with a claim (any state), from claimed_on.
std::set<volume_key> claimed_volumes(const catalog& c);

// The volume, decoded from its row (a copy), or none.
std::optional<v1::Volume> find_volume(const catalog& c, const volume_key& key);
bool has_volume(const catalog& c, const volume_key& key);
// The volume, which must exist (throws std::out_of_range otherwise).
v1::Volume volume_at(const catalog& c, const volume_key& key);
const v1::Alloc* find_alloc(const catalog& c, const std::string& id);
const v1::Node* find_node(const catalog& c, const std::string& id);
const v1::Plugin* find_plugin(const catalog& c, const std::string& id);

// "default" for an empty namespace.
std::string ns_or_default(const std::string& ns);

}  // namespace berth
