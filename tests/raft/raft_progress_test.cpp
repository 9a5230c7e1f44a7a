// progress: how fast the leader may send to one follower.
#include <doctest/doctest.h>

#include "raft/progress.hpp"

using namespace berth::raft;

TEST_CASE("progress_probe_sends_one_append_until_answered") {
  progress pr(5, 4);
  CHECK_FALSE(pr.paused());
  pr.sent_append(7);
  CHECK(pr.paused());
  CHECK(pr.next() == 5);  // probing is not optimistic
  pr.resume();
  CHECK_FALSE(pr.paused());
}

TEST_CASE("progress_replicate_streams_until_inflight_window_is_full") {
  progress pr(1, 2);
  pr.maybe_update(3);
  pr.become_replicate();
  pr.sent_append(5);
  CHECK(pr.next() == 6);
  CHECK_FALSE(pr.paused());
  pr.sent_append(8);
  CHECK(pr.paused());
  pr.free_inflight_to(5);
  CHECK_FALSE(pr.paused());
  CHECK(pr.inflight() == 1);
}

TEST_CASE("progress_ignores_stale_rejections") {
  progress pr(10, 4);
  pr.sent_append(12);
  CHECK_FALSE(pr.maybe_decrease_to(5, 3));  // not the probe we sent
  CHECK(pr.maybe_decrease_to(9, 3));
  CHECK(pr.next() == 4);

  progress rep(1, 4);
  rep.maybe_update(8);
  rep.become_replicate();
  CHECK_FALSE(rep.maybe_decrease_to(7, 0));  // already acknowledged beyond 7
  CHECK(rep.maybe_decrease_to(12, 0));
  CHECK(rep.next() == 9);
}

TEST_CASE("progress_after_snapshot_resumes_probing_past_it_and_waits") {
  progress pr(1, 4);
  pr.become_snapshot(20);
  CHECK(pr.paused());
  pr.snapshot_reported(true);
  CHECK(pr.state() == progress_state::probe);
  CHECK(pr.next() == 21);
  CHECK(pr.paused());  // until the follower answers

  progress failed(1, 4);
  failed.become_snapshot(20);
  failed.snapshot_reported(false);
  CHECK(failed.next() == 1);
}
