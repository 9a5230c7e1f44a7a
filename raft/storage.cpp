#include "raft/storage.hpp"

#include "raft/invariant.hpp"

namespace berth::raft {

const char* to_string(storage_error e) {
  switch (e) {
    case storage_error::none:
      return "none";
    case storage_error::compacted:
      return "requested index is compacted";
    case storage_error::unavailable:
      return "requested index is unavailable";
    case storage_error::out_of_date:
      return "snapshot is out of date";
  }
  return "unknown";
}

memory_storage::memory_storage() : ents_(1) {}

storage_result<std::vector<pb::Entry>> memory_storage::entries(uint64_t lo, uint64_t hi,
                                                               uint64_t max_size) const {
  if (lo <= offset()) return {{}, storage_error::compacted};
  if (hi > last_index() + 1) return {{}, storage_error::unavailable};
  std::vector<pb::Entry> out;
  uint64_t size = 0;
  for (uint64_t i = lo; i < hi; ++i) {
    const auto& e = ents_[i - offset()];
    size += e.ByteSizeLong();
    if (!out.empty() && size > max_size) break;
    out.push_back(e);
  }
  return {std::move(out)};
}

storage_result<uint64_t> memory_storage::term(uint64_t i) const {
  if (i < offset()) return {0, storage_error::compacted};
  if (i > last_index()) return {0, storage_error::unavailable};
  return {ents_[i - offset()].term()};
}

storage_error memory_storage::apply_snapshot(const pb::Snapshot& snap) {
  if (snap.metadata().index() <= snapshot_.metadata().index()) return storage_error::out_of_date;
  snapshot_ = snap;
  ents_.assign(1, pb::Entry{});
  ents_[0].set_index(snap.metadata().index());
  ents_[0].set_term(snap.metadata().term());
  // The snapshot implies everything up to its index is committed.
  if (hard_state_.commit() < snap.metadata().index())
    hard_state_.set_commit(snap.metadata().index());
  return storage_error::none;
}

storage_error memory_storage::create_snapshot(uint64_t i, const pb::ConfState& cs,
                                              std::string data) {
  if (i <= snapshot_.metadata().index()) return storage_error::out_of_date;
  BERTH_RAFT_INVARIANT(i <= last_index(), "snapshot beyond the last entry");
  auto* md = snapshot_.mutable_metadata();
  md->set_index(i);
  md->set_term(ents_[i - offset()].term());
  *md->mutable_conf_state() = cs;
  snapshot_.set_data(std::move(data));
  return storage_error::none;
}

storage_error memory_storage::compact(uint64_t i) {
  if (i <= offset()) return storage_error::compacted;
  BERTH_RAFT_INVARIANT(i <= last_index(), "compact beyond the last entry");
  auto first_kept = ents_.begin() + static_cast<std::ptrdiff_t>(i - offset());
  ents_.erase(ents_.begin(), first_kept);
  ents_[0].clear_data();  // the dummy keeps only index and term
  ents_[0].set_type(pb::ENTRY_NORMAL);
  return storage_error::none;
}

void memory_storage::append(const std::vector<pb::Entry>& entries) {
  if (entries.empty()) return;
  uint64_t first = first_index();
  uint64_t last = entries.back().index();
  if (last < first) return;  // all already compacted
  auto begin = entries.begin();
  if (first > entries.front().index())
    begin += static_cast<std::ptrdiff_t>(first - entries.front().index());
  uint64_t at = begin->index() - offset();
  BERTH_RAFT_INVARIANT(at <= ents_.size(), "gap between stored and appended entries");
  ents_.resize(at);  // drop the conflicting suffix, if any
  ents_.insert(ents_.end(), begin, entries.end());
}

}  // namespace berth::raft
