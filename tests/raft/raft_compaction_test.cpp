// snapshot_due: every threshold entries while the state is small, and only
// after the log grew by half the state once it is large.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "raft/compaction.hpp"

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

// --- a snapshot file in pieces ------------------------------------------------

TEST_CASE("a piece at offset 0 starts a transfer again, whatever came before") {
  incoming_pieces none;
  CHECK(judge_piece(none, 1, 100, 3, 0) == piece_verdict::start);
  incoming_pieces midway{1, 100, 3, 4096, false};
  CHECK(judge_piece(midway, 2, 200, 4, 0) == piece_verdict::start);  // another leader's
  CHECK(judge_piece(midway, 1, 100, 3, 0) == piece_verdict::start);  // the same, restarted
  incoming_pieces done{1, 100, 3, 9000, true};
  CHECK(judge_piece(done, 1, 100, 3, 0) == piece_verdict::start);
}

TEST_CASE("only the next piece of the same transfer follows") {
  incoming_pieces in{1, 100, 3, 4096, false};
  CHECK(judge_piece(in, 1, 100, 3, 4096) == piece_verdict::next);
  CHECK(judge_piece(in, 1, 100, 3, 8192) == piece_verdict::refuse);  // one lost in between
  CHECK(judge_piece(in, 1, 100, 3, 2048) == piece_verdict::refuse);  // one again
  CHECK(judge_piece(in, 2, 100, 3, 4096) == piece_verdict::refuse);  // another sender
  CHECK(judge_piece(in, 1, 101, 3, 4096) == piece_verdict::refuse);  // another snapshot
  CHECK(judge_piece(in, 1, 100, 4, 4096) == piece_verdict::refuse);
  in.complete = true;  // after the last piece nothing follows
  CHECK(judge_piece(in, 1, 100, 3, 4096) == piece_verdict::refuse);
  CHECK(judge_piece(incoming_pieces{}, 1, 100, 3, 4096) == piece_verdict::refuse);
}

TEST_CASE("a snapshot message reaches the core only after its whole file from its sender") {
  incoming_pieces in{1, 100, 3, 9000, false};
  CHECK_FALSE(pieces_arrived(in, 1, 100, 3));  // not whole yet
  in.complete = true;
  CHECK(pieces_arrived(in, 1, 100, 3));
  CHECK_FALSE(pieces_arrived(in, 2, 100, 3));
  CHECK_FALSE(pieces_arrived(in, 1, 99, 3));
  CHECK_FALSE(pieces_arrived(in, 1, 100, 2));
  CHECK_FALSE(pieces_arrived(incoming_pieces{}, 0, 0, 0));
}

TEST_CASE("random piece sequences: the file is complete only when sent in order from 0") {
  // A model of the receiver: it keeps what judge_piece accepts; the file is
  // whole exactly when every byte arrived in order since the last start.
  uint64_t seed = 12345;
  auto next = [&] { return seed = seed * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (int run = 0; run < 2000; ++run) {
    incoming_pieces in;
    std::vector<bool> have(8, false);  // pieces of one byte, file of 8
    for (int step = 0; step < 20; ++step) {
      uint64_t off = next() % 8, from = 1 + next() % 2;
      auto v = judge_piece(in, from, 7, 1, off);
      if (v == piece_verdict::start) {
        in = {from, 7, 1, 0, false};
        have.assign(8, false);
      }
      if (v == piece_verdict::refuse) continue;
      REQUIRE(in.offset == off);
      have[off] = true;
      in.offset += 1;
      if (in.offset == 8) in.complete = true;
      if (in.complete) {
        for (bool h : have) CHECK(h);
        CHECK(pieces_arrived(in, in.from, 7, 1));
      }
    }
  }
}
