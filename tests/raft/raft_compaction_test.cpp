// snapshot_due: every threshold entries while the state is small, and only
// after the log grew by half the state once it is large.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <random>

#include "persistence/raft/compaction.hpp"

using namespace berth::raft;

TEST_CASE("a_small_state_is_snapshotted_every_threshold_entries") {
  compaction_input in{100, 70, 30, 0, 50 * 1024};
  CHECK(snapshot_due(in));
  in.applied = 99;
  CHECK_FALSE(snapshot_due(in));
  in.snapshot_bytes = 0;  // none yet
  in.applied = 30;
  in.snapshot_index = 0;
  CHECK(snapshot_due(in));
  in.snapshot_bytes = small_snapshot_bytes;  // the limit still counts as small
  CHECK(snapshot_due(in));
}

TEST_CASE("a_large_state_waits_until_the_log_grew_by_half_of_it") {
  const uint64_t mib = 1 << 20;
  compaction_input in{1'000'000, 900'000, 8192, 100 * mib, 289 * mib};
  CHECK_FALSE(snapshot_due(in));
  in.bytes_since = 289 * mib / 2 - 1;
  CHECK_FALSE(snapshot_due(in));
  in.bytes_since = 289 * mib / 2;
  CHECK(snapshot_due(in));
  // ... and never before the threshold, however many bytes.
  in.applied = in.snapshot_index + 8191;
  in.bytes_since = 1000 * mib;
  CHECK_FALSE(snapshot_due(in));
}

TEST_CASE("an_applied_index_behind_the_snapshot_is_never_due") {
  // After installing a leader's snapshot the applied index jumps with it.
  CHECK_FALSE(snapshot_due({10, 20, 1, 0, 0}));
}

TEST_CASE("the_bytes_written_per_snapshot_byte_stay_bounded_as_the_state_grows") {
  // A registration workload: each entry adds one volume row (~300 bytes of
  // state, ~350 bytes of entry); snapshots cost their size.  Over a million
  // entries the bytes spent on snapshots stay within a small multiple of
  // the bytes the log wrote; a fixed threshold alone spends several times
  // more (at least 4x here).
  for (uint64_t entry_bytes : {200u, 350u, 1000u}) {
    CAPTURE(entry_bytes);
    uint64_t state = 64 * 1024, snap_bytes = 0, snap_index = 0, since = 0;
    uint64_t snapshot_cost = 0, log_bytes = 0, fixed_cost = 0;
    for (uint64_t i = 1; i <= 1'000'000; ++i) {
      state += 300;
      since += entry_bytes;
      log_bytes += entry_bytes;
      if (i % 8192 == 0) fixed_cost += state;
      if (snapshot_due({i, snap_index, 8192, since, snap_bytes})) {
        snapshot_cost += state;
        snap_bytes = state;
        snap_index = i;
        since = 0;
      }
    }
    CHECK(snapshot_cost <= 4 * log_bytes + 64 * small_snapshot_bytes);
    CHECK(fixed_cost > 4 * snapshot_cost);
  }
}
