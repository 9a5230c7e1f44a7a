// The one place that builds replicated log entries.  Every actor that
// changes the catalog proposes the changes it built with these functions
// through `propose` (actors/propose.hpp), and an operation that changes
// several objects puts all of them into one entry, so they commit (or
// fail) together.
#pragma once

#include <string>
#include <vector>

#include "messages/berth.pb.h"

namespace berth {

// The entry format this berth writes.
constexpr uint32_t entry_format_version = 1;

// One log entry holding `changes` in order.
v1::LogEntry make_entry(std::vector<v1::Change> changes);

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
// operator snapshot restore: the whole state database replaces the catalog.
v1::Change restore_change(std::string state_db);

// Stamps the indexes an entry at `index` gives to what it writes: the
// modify index always, the create index when the object is new (0).  The
// state tables and the leader's catalog both call it, so they agree.
void stamp(v1::Change& change, uint64_t index);

}  // namespace berth
