// The one place that builds replicated log entries.  Every actor that
// changes the catalog proposes the changes it built with these functions
// through `propose` (actors/propose.hpp), and an operation that changes
// several objects puts all of them into one entry, so they commit (or
// fail) together.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "messages/berth.pb.h"

namespace berth {

// The entry format this berth writes: 1, or 2 for an entry with
// expectations or an alloc_volume_claimed (a berthd that does not know them
// must not apply it).
constexpr uint32_t entry_format_version = 1;
constexpr uint32_t entry_format_expectations = 2;
// The newest entry format this berth applies.
constexpr uint32_t entry_format_newest = entry_format_expectations;

// One log entry holding `changes` in order, applied only while every one
// of `expect` holds (compare-and-set: the versions they were built from).
v1::LogEntry make_entry(std::vector<v1::Change> changes, std::vector<v1::Expectation> expect = {});

// The object an expectation names, as a key that tells objects apart
// ("alloc/ID", "node/ID", "volume/NS/ID", ...).
std::string expectation_key(const v1::Expectation& e);
v1::Expectation expect_node(const std::string& id, uint64_t version);
v1::Expectation expect_node_allocs(const std::string& node_id, uint64_t version);

// Whether every expectation of `entry` holds, `version` giving the version
// of the object each names as the state to apply it to holds it (the
// catalog's and the state tables' versions, so both judge alike).
bool expectations_hold(const v1::LogEntry& entry,
                       const std::function<uint64_t(const v1::Expectation&)>& version);

v1::Change upsert_change(v1::Volume v);
v1::Change upsert_change(v1::Plugin p);
v1::Change upsert_change(v1::Node n);
v1::Change upsert_change(v1::Alloc a);
v1::Change upsert_change(v1::AclPolicy p);
v1::Change volume_delete_change(const std::string& ns, const std::string& id);
v1::Change plugin_delete_change(const std::string& id);
v1::Change alloc_delete_change(const std::string& id);
v1::Change node_delete_change(const std::string& id);
// A claim's free: the alloc record `volume claim` made loses the volume
// (resolved at apply: control/catalog's alloc_after_release).
v1::Change alloc_volume_freed_change(const std::string& alloc_id, const std::string& ns,
                                     const std::string& volume_id);
// A claim's alloc record: `alloc` as the claim was routed (with the
// volume), merged at apply into the record as it is then (control/catalog's
// alloc_after_claim).
v1::Change alloc_volume_claimed_change(v1::Alloc alloc, const std::string& volume_id);
// operator snapshot restore: the whole state database replaces the catalog.
v1::Change restore_change(std::string state_db);

// Stamps the indexes an entry at `index` gives to what it writes: the
// modify index always, the create index when the object is new (0).  The
// state tables and the leader's catalog both call it, so they agree.
void stamp(v1::Change& change, uint64_t index);

}  // namespace berth
