#include "raft/log.hpp"

#include <algorithm>

#include "raft/invariant.hpp"

namespace berth::raft {

// ---- unstable ----

std::optional<uint64_t> unstable::maybe_first_index() const {
  if (snapshot) return snapshot->metadata().index() + 1;
  return std::nullopt;
}

std::optional<uint64_t> unstable::maybe_last_index() const {
  if (!entries.empty()) return offset + entries.size() - 1;
  if (snapshot) return snapshot->metadata().index();
  return std::nullopt;
}

std::optional<uint64_t> unstable::maybe_term(uint64_t i) const {
  if (i < offset) {
    if (snapshot && snapshot->metadata().index() == i) return snapshot->metadata().term();
    return std::nullopt;
  }
  auto last = maybe_last_index();
  if (!last || i > *last) return std::nullopt;
  return entries[i - offset].term();
}

void unstable::stable_to(uint64_t i, uint64_t t) {
  auto gt = maybe_term(i);
  // Only if the entry was not replaced since the Ready that carried it.
  if (!gt || *gt != t || i < offset) return;
  entries.erase(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(i + 1 - offset));
  offset = i + 1;
}

void unstable::stable_snap_to(uint64_t i) {
  if (snapshot && snapshot->metadata().index() == i) snapshot.reset();
}

void unstable::restore(const pb::Snapshot& snap) {
  offset = snap.metadata().index() + 1;
  entries.clear();
  snapshot = snap;
}

void unstable::truncate_and_append(const std::vector<pb::Entry>& ents) {
  uint64_t after = ents.front().index();
  if (after == offset + entries.size()) {
    // directly after what we hold
  } else if (after <= offset) {
    // replaces everything unstable; the shell's append truncates storage too
    offset = after;
    entries.clear();
  } else {
    entries.resize(after - offset);
  }
  entries.insert(entries.end(), ents.begin(), ents.end());
}

// ---- raft_log ----

raft_log::raft_log(const memory_storage& storage) : storage_(storage) {
  unstable_.offset = storage.last_index() + 1;
  committed_ = storage.first_index() - 1;
  applied_ = committed_;
}

uint64_t raft_log::first_index() const {
  if (auto i = unstable_.maybe_first_index()) return *i;
  return storage_.first_index();
}

uint64_t raft_log::last_index() const {
  if (auto i = unstable_.maybe_last_index()) return *i;
  return storage_.last_index();
}

storage_result<uint64_t> raft_log::term(uint64_t i) const {
  uint64_t dummy = first_index() - 1;
  if (i < dummy) return {0, storage_error::compacted};
  if (i > last_index()) return {0, storage_error::unavailable};
  if (auto t = unstable_.maybe_term(i)) return {*t};
  return storage_.term(i);
}

bool raft_log::is_up_to_date(uint64_t lasti, uint64_t t) const {
  return t > last_term() || (t == last_term() && lasti >= last_index());
}

std::optional<uint64_t> raft_log::maybe_append(uint64_t index, uint64_t log_term,
                                               uint64_t committed,
                                               const std::vector<pb::Entry>& ents) {
  if (!match_term(index, log_term)) return std::nullopt;
  uint64_t last_new = index + ents.size();
  uint64_t ci = find_conflict(ents);
  if (ci != 0) {
    BERTH_RAFT_INVARIANT(ci > committed_, "conflict with a committed entry");
    std::vector<pb::Entry> tail(ents.begin() + static_cast<std::ptrdiff_t>(ci - index - 1),
                                ents.end());
    append(tail);
  }
  commit_to(std::min(committed, last_new));
  return last_new;
}

uint64_t raft_log::append(const std::vector<pb::Entry>& ents) {
  if (ents.empty()) return last_index();
  BERTH_RAFT_INVARIANT(ents.front().index() > committed_, "appending below the commit index");
  unstable_.truncate_and_append(ents);
  return last_index();
}

uint64_t raft_log::find_conflict(const std::vector<pb::Entry>& ents) const {
  // The first entry that is new or disagrees with ours; 0 if all match.
  for (const auto& e : ents)
    if (!match_term(e.index(), e.term())) return e.index();
  return 0;
}

uint64_t raft_log::find_conflict_by_term(uint64_t index, uint64_t t) const {
  for (; index > 0; --index) {
    auto our = term(index);
    if (!our.ok() || our.value <= t) break;
  }
  return index;
}

storage_result<std::vector<pb::Entry>> raft_log::entries(uint64_t i, uint64_t max_size) const {
  if (i > last_index()) return {};
  return slice(i, last_index() + 1, max_size);
}

storage_result<std::vector<pb::Entry>> raft_log::slice(uint64_t lo, uint64_t hi,
                                                       uint64_t max_size) const {
  BERTH_RAFT_INVARIANT(lo <= hi && hi <= last_index() + 1, "slice out of the log's bounds");
  if (lo < first_index()) return {{}, storage_error::compacted};
  std::vector<pb::Entry> out;
  if (lo < unstable_.offset) {
    auto stored = storage_.entries(lo, std::min(hi, unstable_.offset), max_size);
    if (!stored.ok()) return stored;
    out = std::move(stored.value);
    // Storage stopped short because of the size limit: don't add more.
    if (out.size() < std::min(hi, unstable_.offset) - lo) return {std::move(out)};
  }
  if (hi > unstable_.offset) {
    uint64_t size = 0;
    for (const auto& e : out) size += e.ByteSizeLong();
    for (uint64_t i = std::max(lo, unstable_.offset); i < hi; ++i) {
      const auto& e = unstable_.entries[i - unstable_.offset];
      size += e.ByteSizeLong();
      if (!out.empty() && size > max_size) break;
      out.push_back(e);
    }
  }
  return {std::move(out)};
}

const pb::Snapshot& raft_log::snapshot() const {
  if (unstable_.snapshot) return *unstable_.snapshot;
  return storage_.snapshot();
}

std::vector<pb::Entry> raft_log::next_committed_entries() const {
  if (!has_next_committed_entries()) return {};
  uint64_t lo = std::max(applied_ + 1, first_index());
  auto r = slice(lo, committed_ + 1, no_limit);
  BERTH_RAFT_INVARIANT(r.ok(), "committed entries must be available");
  return std::move(r.value);
}

bool raft_log::has_next_committed_entries() const {
  if (unstable_.snapshot) return false;
  return committed_ + 1 > std::max(applied_ + 1, first_index());
}

bool raft_log::maybe_commit(uint64_t max_index, uint64_t t) {
  if (max_index > committed_ && zero_on_error(term(max_index)) == t) {
    commit_to(max_index);
    return true;
  }
  return false;
}

void raft_log::commit_to(uint64_t index) {
  if (index <= committed_) return;  // never decrease
  BERTH_RAFT_INVARIANT(index <= last_index(), "commit beyond the log");
  committed_ = index;
}

void raft_log::applied_to(uint64_t index) {
  if (index == 0) return;
  BERTH_RAFT_INVARIANT(index <= committed_ && index >= applied_,
                       "applied must only move forward, up to the commit index");
  applied_ = index;
}

void raft_log::restore(const pb::Snapshot& snap) {
  committed_ = snap.metadata().index();
  unstable_.restore(snap);
}

}  // namespace berth::raft
