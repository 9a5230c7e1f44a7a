// Leases (control/lease): a client's lease runs from the heartbeat's send
// and never shortens; it outlives a restart only as far as the wall clock
// allows; the fence takes exactly the writers of single-writer volumes;
// the options leave a margin.  Property checks over random schedules: the
// client's lease always ends before the servers would release its claims.
#include "control/lease.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace berth;

TEST_CASE("lease_runs_from_the_send_and_never_shortens") {
  lease l;
  CHECK_FALSE(expired(l, 1'000'000));  // never granted: nothing to fence on
  l = renew(l, 1000, 15000);
  CHECK(l.length_ms == 15000);
  CHECK(l.until_ms == 16000);
  CHECK_FALSE(expired(l, 15999));
  CHECK(expired(l, 16000));
  // An answer to an older heartbeat arriving late does not shorten it.
  l = renew(l, 500, 15000);
  CHECK(l.until_ms == 16000);
  // No lease in the answer (no leader confirmed it) renews nothing.
  CHECK(renew(l, 5000, 0).until_ms == 16000);
  CHECK(renew(l, 5000, -1).until_ms == 16000);
  CHECK(renew(l, 5000, 15000).until_ms == 20000);
}

TEST_CASE("lease_at_start_keeps_only_what_the_wall_clock_leaves") {
  // Never recorded: no lease, no fence.
  CHECK(lease_at_start(0, 0, 50'000, 7).length_ms == 0);
  CHECK(lease_at_start(15000, 0, 50'000, 7).length_ms == 0);
  // Renewed 4 s before the restart: 11 s left.
  auto l = lease_at_start(15000, 46'000, 50'000, 100);
  CHECK(l.length_ms == 15000);
  CHECK(l.until_ms == 11'100);
  // Ran out while the client was down: expired at once.
  l = lease_at_start(15000, 10'000, 50'000, 100);
  CHECK(expired(l, 100));
  // A wall clock set back never yields more than one lease.
  l = lease_at_start(15000, 90'000, 50'000, 100);
  CHECK(l.until_ms == 15'100);
}

TEST_CASE("a_restart_within_the_boot_never_holds_more_than_its_lease_file_says") {
  const std::string boot = "3f0c2a6e-1d7b-4c55-9a7e-5b0d8e1f2a3c";
  // The wall clock set back 40 s while the agent was away: the record
  // alone gives a whole lease from now; the file, on the steady clock,
  // says the lease ends at 2'000.
  auto at_start = lease_at_start(15000, 90'000, 50'000, 100);
  REQUIRE(at_start.until_ms == 15'100);
  auto l = lease_at_start_in_boot(at_start, lease_file_text(boot, 2'000), boot);
  CHECK(l.length_ms == 15000);
  CHECK(l.until_ms == 2'000);
  // A file further than the record (renewals are recorded at most every
  // second): the record's end stays.
  CHECK(lease_at_start_in_boot(at_start, lease_file_text(boot, 20'000), boot).until_ms == 15'100);
  // Another boot's file, or none: the steady clock restarted, the record
  // alone tells.
  CHECK(lease_at_start_in_boot(at_start, lease_file_text("another-boot", 2'000), boot).until_ms ==
        15'100);
  CHECK(lease_at_start_in_boot(at_start, "", boot).until_ms == 15'100);
  // This boot's file, torn or without a lease: ran out.
  CHECK(expired(lease_at_start_in_boot(at_start, boot + " 20", boot), 100));
  CHECK(expired(lease_at_start_in_boot(at_start, lease_file_text(boot, 0), boot), 100));
  // No record: no lease, whatever the file says.
  CHECK(lease_at_start_in_boot(lease{}, lease_file_text(boot, 20'000), boot).length_ms == 0);
}

TEST_CASE("the_publish_floor_holds_nothing_before_the_first_lease_and_after_a_lapse") {
  // At the start: 0 only while a lease recorded before a restart holds.
  CHECK(floor_at_start(lease{}, 1000) == floor_lapsed);
  CHECK(floor_at_start(lease{15000, 5000}, 1000) == 0);
  CHECK(floor_at_start(lease{15000, 5000}, 5000) == floor_lapsed);
  // No lease held since the start: a publish waits for the first one.
  CHECK(publish_waits_for_lease(lease{}, floor_at_start(lease{}, 0)));
  CHECK_FALSE(publish_waits_for_lease(lease{15000, 5000}, floor_lapsed));  // lapsed: refused
  CHECK_FALSE(publish_waits_for_lease(lease{}, 0));
  // The first lease sets no floor; a renewal after a lapse sets the
  // leader's applied index; a renewal of a lease that held keeps the floor.
  CHECK(floor_after_renewal(floor_lapsed, 42, true) == 0);
  CHECK(floor_after_renewal(floor_lapsed, 42, false) == 42);
  CHECK(floor_after_renewal(17, 42, false) == 17);
  for (uint64_t claim : {0, 16, 17, 41, 42, 43}) {
    CHECK(publish_allowed(claim, floor_after_renewal(floor_lapsed, 42, true)));
    CHECK(publish_allowed(claim, floor_after_renewal(floor_lapsed, 42)) == (claim >= 42));
    CHECK_FALSE(publish_allowed(claim, floor_lapsed));
  }
}

// Claim simulation seed 9007: a ControllerPublishVolume held in a partition
// while the controller's node lost its lease, from a leader deposed
// meanwhile, attached a volume whose claim the new leader had released.
TEST_CASE("an_attach_is_judged_against_the_floor_once_the_node_held_a_lease") {
  // Lapsed (a lease was held): nothing is attached until a renewal, and
  // then only claims committed at or after the renewal's applied index.
  for (uint64_t claim : {0, 41, 42, 43, 1000}) {
    CAPTURE(claim);
    CHECK_FALSE(controller_publish_allowed(lease{15000, 5000}, floor_lapsed, claim));
    auto floor = floor_after_renewal(floor_lapsed, 42);
    CHECK(controller_publish_allowed(lease{15000, 50000}, floor, claim) == (claim >= 42));
    // A lease that held throughout: floor 0, everything.
    CHECK(controller_publish_allowed(lease{15000, 50000}, 0, claim));
  }
  // No lease held since the start: runs (the term fence guards it), as a
  // publish would wait for the first lease instead.
  CHECK(controller_publish_allowed(lease{}, floor_at_start(lease{}, 0), 0));
  CHECK(controller_publish_allowed(lease{}, floor_at_start(lease{}, 0), 7));
}

TEST_CASE("a_renewal_is_recorded_at_most_each_second_and_at_least_each_quarter_lease") {
  // A 15 s lease (renewed every 3.75 s): every renewal is recorded; two
  // within a second, only the first.
  CHECK(lease_record_due(0, 10'000, 15'000));
  CHECK(lease_record_due(10'000, 13'750, 15'000));
  CHECK_FALSE(lease_record_due(10'000, 10'999, 15'000));
  CHECK(lease_record_due(10'000, 11'000, 15'000));
  // A 1 s lease, renewed every 250 ms: each renewal is recorded.
  CHECK(lease_record_due(10'000, 10'250, 1000));
  CHECK_FALSE(lease_record_due(10'000, 10'249, 1000));
  // Property: the record is never more than max(a quarter lease, the
  // renewal gap) behind the newest renewal, and never updated twice within
  // a second.
  std::mt19937_64 rng(3);
  for (int run = 0; run < 300; ++run) {
    int64_t length = 400 + static_cast<int64_t>(rng() % 60'000);
    int64_t recorded = 0, wall = 1'000'000, last_write = -1'000'000;
    for (int i = 0; i < 100; ++i) {
      int64_t gap = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(length / 4 + 1));
      wall += gap;
      if (lease_record_due(recorded, wall, length)) {
        CHECK(wall - last_write >= std::min<int64_t>(1000, length / 4));
        recorded = last_write = wall;
      }
      CAPTURE(length);
      CHECK(wall - recorded < std::min<int64_t>(1000, length / 4) + gap);
    }
  }
}

TEST_CASE("heartbeat_period_is_a_quarter_lease_within_bounds") {
  CHECK(heartbeat_period_ms(0, 5000) == 5000);  // no lease yet: the fingerprint interval
  CHECK(heartbeat_period_ms(15000, 5000) == 3750);
  CHECK(heartbeat_period_ms(15000, 200) == 3750);  // not the tests' quick fingerprints
  CHECK(heartbeat_period_ms(60000, 5000) == 15000);
  CHECK(heartbeat_period_ms(200, 5000) == 100);
}

TEST_CASE("fence_takes_the_writers_of_single_writer_volumes_only") {
  struct row {
    v1::AccessMode mode;
    bool read_only;
    bool fenced;
  };
  for (auto r : std::vector<row>{{v1::SINGLE_NODE_WRITER, false, true},
                                 {v1::SINGLE_NODE_WRITER, true, false},
                                 {v1::MULTI_NODE_SINGLE_WRITER, false, true},
                                 {v1::MULTI_NODE_SINGLE_WRITER, true, false},
                                 {v1::MULTI_NODE_MULTI_WRITER, false, false},
                                 {v1::MULTI_NODE_READER_ONLY, true, false},
                                 {v1::SINGLE_NODE_READER_ONLY, true, false},
                                 {v1::ACCESS_MODE_UNKNOWN, false, false}}) {
    CAPTURE(r.mode);
    CAPTURE(r.read_only);
    CHECK(fenced_publication(r.mode, r.read_only) == r.fenced);
  }
  std::vector<publication_fact> pubs{
      {"web", v1::SINGLE_NODE_WRITER, false},        // running: stopped
      {"web", v1::MULTI_NODE_READER_ONLY, true},     // (the same alloc's reader)
      {"reader", v1::MULTI_NODE_SINGLE_WRITER, true},  // a reader: untouched
      {"shared", v1::MULTI_NODE_MULTI_WRITER, false},  // many writers allowed: untouched
      {"claimed", v1::MULTI_NODE_SINGLE_WRITER, false},  // no command: unmounted
  };
  auto plan = plan_fence(pubs, {"web", "reader", "shared"});
  CHECK(plan.stop == std::set<std::string>{"web"});
  CHECK(plan.unmount == std::set<std::string>{"claimed"});
  CHECK(plan_fence({{"r", v1::MULTI_NODE_READER_ONLY, true}}, {"r"}).empty());
}

TEST_CASE("no_writer_starts_while_the_lease_is_out") {
  auto alloc = [](std::vector<bool> read_only) {
    v1::Alloc a;
    a.set_id("a");
    for (bool ro : read_only) a.add_volumes()->set_read_only(ro);
    return a;
  };
  struct row {
    bool lease_out;
    std::vector<bool> read_only;
    bool allowed;
  };
  for (const auto& r : std::vector<row>{{false, {}, true},
                                        {false, {false}, true},
                                        {false, {true, false}, true},
                                        {true, {}, true},            // no volume: nothing fenced
                                        {true, {true}, true},        // a reader
                                        {true, {true, true}, true},  // readers only
                                        {true, {false}, false},      // a writer
                                        {true, {true, false}, false}}) {
    CAPTURE(r.lease_out);
    CAPTURE(r.read_only.size());
    CHECK(start_allowed(r.lease_out, alloc(r.read_only)) == r.allowed);
  }
}

TEST_CASE("guard_terms_at_expiry_then_kills_after_the_timeout_every_second") {
  int64_t term = 0, kill = 0;
  // No lease granted: never a signal, however late.
  CHECK(guard_step(1'000'000, 0, 5000, term, kill) == guard_signal::none);
  CHECK(term == 0);
  // The lease holds until 10,000: nothing before, SIGTERM at it, once.
  CHECK(guard_step(9'999, 10'000, 5000, term, kill) == guard_signal::none);
  CHECK(guard_step(10'000, 10'000, 5000, term, kill) == guard_signal::term);
  CHECK(term == 10'000);
  CHECK(guard_step(10'100, 10'000, 5000, term, kill) == guard_signal::none);
  CHECK(guard_step(14'999, 10'000, 5000, term, kill) == guard_signal::none);
  // SIGKILL from the kill timeout after the SIGTERM, again each second.
  CHECK(guard_step(15'000, 10'000, 5000, term, kill) == guard_signal::kill);
  CHECK(guard_step(15'500, 10'000, 5000, term, kill) == guard_signal::none);
  CHECK(guard_step(16'000, 10'000, 5000, term, kill) == guard_signal::kill);
  CHECK(kill == 16'000);
  // A renewal (the lease moved on) stops the signals at once.
  CHECK(guard_step(17'000, 20'000, 5000, term, kill) == guard_signal::none);
  // The kill timeout counts from the SIGTERM, not from the lease's end:
  // a guard that got to it late still gives the full grace.
  int64_t t2 = 0, k2 = 0;
  CHECK(guard_step(13'000, 10'000, 5000, t2, k2) == guard_signal::term);
  CHECK(guard_step(15'000, 10'000, 5000, t2, k2) == guard_signal::none);
  CHECK(guard_step(18'000, 10'000, 5000, t2, k2) == guard_signal::kill);
  // A zero kill timeout: SIGKILL on the step after the SIGTERM.
  int64_t t3 = 0, k3 = 0;
  CHECK(guard_step(10'000, 10'000, 0, t3, k3) == guard_signal::term);
  CHECK(guard_step(10'000, 10'000, 0, t3, k3) == guard_signal::kill);
}

TEST_CASE("the_lease_file_names_its_boot_and_anything_else_is_a_lapse") {
  const std::string boot = "6b1f0c2e-1d4a-4b8e-9a57-0c3d2e1f4a5b";
  CHECK(lease_file_text(boot, 123'456) == boot + " 123456\n");
  CHECK(lease_until_in_file(lease_file_text(boot, 123'456), boot) == 123'456);
  // Round trip over many values.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1000; ++i) {
    int64_t until = static_cast<int64_t>(rng() % 4'000'000'000'000ULL) + 1;
    CAPTURE(until);
    CHECK(lease_until_in_file(lease_file_text(boot, until), boot) == until);
  }
  // Everything else reads as a lease that ran out long ago (1).
  const std::vector<std::string> lapsed{
      "",                                   // no file, or empty
      boot + " 123456",                     // torn: no newline
      boot + " \n",                         // no number
      boot + " 12a4\n",                     // not a number
      boot + " -5\n",                       // negative
      boot + " 0\n",                        // no lease granted
      boot + " 1234567890123456789012\n",   // too long
      "another-boot 123456\n",              // an earlier boot's file
      boot + "x 123456\n",                  // a boot id that only starts the same
      boot + "  123456\n",                  // two spaces
      "123456\n",
  };
  for (const auto& text : lapsed) {
    CAPTURE(text);
    CHECK(lease_until_in_file(text, boot) == 1);
  }
  // Without a boot id of its own, the supervisor trusts no file.
  CHECK(lease_until_in_file(lease_file_text(boot, 5), "") == 1);
  // A lapsed file makes the guard signal at once.
  int64_t term = 0, kill = 0;
  CHECK(guard_step(50, lease_until_in_file("", boot), 5000, term, kill) == guard_signal::term);
}

TEST_CASE("a_supervisor_keeps_the_longest_lease_and_stops_reading_once_it_signalled") {
  // First read: what the file says.
  CHECK(supervisor_lease_until(0, 10'000, false) == 10'000);
  // A renewal found when the held lease ran out continues it (the agent
  // renewed before the end: this read comes after the end it held).
  CHECK(supervisor_lease_until(10'000, 12'000, false) == 12'000);
  // An older value read later never shortens it.
  CHECK(supervisor_lease_until(12'000, 11'000, false) == 12'000);
  CHECK(supervisor_lease_until(12'000, 1, false) == 12'000);
  // Once it signalled its command, a renewal changes nothing.
  CHECK(supervisor_lease_until(12'000, 30'000, true) == 12'000);
  CHECK(supervisor_lease_until(1, 30'000, true) == 1);
  // Property, over random schedules of renewals, reads and a supervisor
  // that steps guard_step on what it keeps: it never signals while the
  // newest lease written holds at the moment it reads (no spurious fence
  // of a renewed writer: integration.expand, fault.short), and it signals
  // within one poll of the end of a lease nobody renews.
  std::mt19937_64 rng(11);
  for (int run = 0; run < 2000; ++run) {
    int64_t now = 1000, length = 1000 + static_cast<int64_t>(rng() % 3000);
    int64_t written = now + length, held = 0, term = 0, kill = 0;
    bool renewing = true;
    int64_t stop_renewing_at = now + static_cast<int64_t>(rng() % 20'000);
    CAPTURE(run);
    for (int step = 0; step < 400 && term == 0; ++step) {
      now += 1 + static_cast<int64_t>(rng() % 60);
      if (now >= stop_renewing_at) renewing = false;
      // The agent renews every quarter lease, from a heartbeat sent now.
      if (renewing && written - now <= length * 3 / 4) written = now + length;
      if (held == 0 || now >= held)
        held = supervisor_lease_until(held, lease_until_in_file(lease_file_text("b", written), "b"),
                                      term != 0);
      auto sig = guard_step(now, held, 5000, term, kill);
      if (sig == guard_signal::term) CHECK(now >= written);  // the newest lease had run out
    }
    if (!renewing && now >= written + 60) CHECK(term != 0);
  }
}

TEST_CASE("a_publish_waits_for_a_first_lease_ten_seconds_at_most") {
  CHECK_FALSE(first_lease_wait_over(1000, 1000));
  CHECK_FALSE(first_lease_wait_over(1000, 1000 + first_lease_wait_ms - 1));
  CHECK(first_lease_wait_over(1000, 1000 + first_lease_wait_ms));
  CHECK(first_lease_wait_over(1000, 1'000'000));
}

TEST_CASE("lease_options_leave_a_margin") {
  fence_times fast{1000, 500};
  CHECK(default_lease_ms(45000) == 15000);
  CHECK_FALSE(check_lease(15000, 45000, {}));
  CHECK_FALSE(check_lease(default_lease_ms(6000), 6000, fast));
  auto f = check_lease(45000, 45000, {});
  REQUIRE(f);
  CHECK(f->code == errc::invalid);
  CHECK(f->message.find("--node-lease") != std::string::npos);
  CHECK(f->message.find("--node-down-timeout") != std::string::npos);
  CHECK(check_lease(50000, 45000, {}));
  CHECK(check_lease(0, 45000, {}));
  CHECK(check_lease(-1, 45000, {}));
}

TEST_CASE("fence_margin_is_the_kill_timeout_the_unmount_the_polls_and_the_clock_rates") {
  // The defaults: max(5 s, 15 s / 4) + 5 s + 250 ms + 45 s / 1000.
  CHECK(fence_margin_ms(15000, 45000, {}) == 5000 + 5000 + 250 + 45);
  // The node actor's lease tick (a quarter of the lease) when it is longer
  // than the kill timeout: the unmount starts only after it.
  CHECK(fence_margin_ms(40000, 120000, {1000, 2000}) == 10000 + 2000 + 250 + 120);
  // At least 100 ms between ticks.
  CHECK(fence_margin_ms(200, 1000, {0, 0}) == 100 + 0 + 250 + 1);
  // The clock rates: D/1000 rounded up.
  CHECK(fence_margin_ms(2000, 6001, {1000, 500}) == 1000 + 500 + 250 + 7);
  CHECK(fence_margin_ms(2000, 6000, {1000, 500}) == 1000 + 500 + 250 + 6);
  // A longer kill timeout or unmount needs as much more margin.
  CHECK(fence_margin_ms(15000, 45000, {6000, 5000}) == fence_margin_ms(15000, 45000, {}) + 1000);
  CHECK(fence_margin_ms(15000, 45000, {5000, 7000}) == fence_margin_ms(15000, 45000, {}) + 2000);
}

TEST_CASE("margin_covers_the_fence_exactly_at_the_inequality") {
  fence_times f{1000, 500};
  // D - L >= max(1 s, 0.5 s) + 0.5 s + 0.25 s + D/1000: with L 2 s, D 3.754 s
  // (margin 1.754 s = 1.75 s + 4 ms) is the least.
  CHECK(fence_margin_ms(2000, 3754, f) == 1754);
  CHECK(margin_covers_fence(2000, 3754, f));
  CHECK_FALSE(margin_covers_fence(2000, 3753, f));
  CHECK(least_node_down_ms(2000, f) == 3754);
  // No lease never covers anything (check_lease refuses it by itself).
  CHECK_FALSE(margin_covers_fence(0, 1'000'000, f));
  // The defaults hold with a margin to spare: they stand up to a kill
  // timeout of almost 25 s (30 s - 5 s - 0.25 s - 45 ms).
  CHECK(margin_covers_fence(15000, 45000, {}));
  CHECK(margin_covers_fence(15000, 45000, {24705, 5000}));
  CHECK_FALSE(margin_covers_fence(15000, 45000, {24706, 5000}));
}

TEST_CASE("the_short_timeouts_of_the_tests_hold_with_a_one_second_kill_timeout") {
  fence_times tests{1000, 500};  // --kill-timeout 1 --fence-unmount-time 0.5
  // integration.partition, gc, placement, fault.short: D 6 s, L 2 s.
  CHECK(margin_covers_fence(default_lease_ms(6000), 6000, tests));
  // integration.lifecycle: D 3 s, L 1 s.
  CHECK(margin_covers_fence(default_lease_ms(3000), 3000, tests));
  // With the defaults (5 s, 5 s) both are refused: the 1 s margin.
  CHECK_FALSE(margin_covers_fence(default_lease_ms(6000), 6000, {}));
  CHECK_FALSE(margin_covers_fence(default_lease_ms(3000), 3000, {}));
  CHECK_FALSE(margin_covers_fence(1000, 2000, {}));
}

TEST_CASE("least_node_down_timeout_with_the_default_lease") {
  // L = D/3: 2D/3 >= max(5 s, D/12) + 5 s + 0.25 s + D/1000: D of about 15.4 s.
  auto least = least_node_down_ms(0, {});
  CHECK(margin_covers_fence(default_lease_ms(least), least, {}));
  CHECK_FALSE(margin_covers_fence(default_lease_ms(least - 1), least - 1, {}));
  CHECK(least > 15000);
  CHECK(least < 17000);
  // The least D for a given lease is the lease plus what the margin needs.
  for (int64_t lease_ms : {100, 1000, 2000, 15000, 60000}) {
    for (fence_times f :
         {fence_times{}, fence_times{0, 0}, fence_times{1000, 500}, fence_times{30000, 10000}}) {
      auto d = least_node_down_ms(lease_ms, f);
      CAPTURE(lease_ms);
      CAPTURE(d);
      CHECK(margin_covers_fence(lease_ms, d, f));
      CHECK_FALSE(margin_covers_fence(lease_ms, d - 1, f));
      CHECK(d - lease_ms >= std::max(f.kill_timeout_ms, heartbeat_period_ms(lease_ms, 0)) +
                                f.unmount_ms + fence_poll_ms);
    }
  }
}

TEST_CASE("margin_grows_with_the_node_down_timeout_so_a_larger_one_never_breaks_it") {
  // Property: a D that covers the fence stays covering when raised, for a
  // fixed lease and for the default lease.
  std::mt19937_64 rng(59);
  for (int run = 0; run < 2000; ++run) {
    fence_times f{static_cast<int64_t>(rng() % 30'000), static_cast<int64_t>(rng() % 30'000)};
    int64_t lease_ms = 100 + static_cast<int64_t>(rng() % 60'000);
    int64_t down = least_node_down_ms(lease_ms, f);
    int64_t more = down + static_cast<int64_t>(rng() % 1'000'000);
    CAPTURE(run);
    CHECK(margin_covers_fence(lease_ms, more, f));
    int64_t down_default = least_node_down_ms(0, f);
    CHECK(margin_covers_fence(default_lease_ms(more + down_default), more + down_default, f));
  }
}

TEST_CASE("check_lease_names_the_inequality_the_values_and_the_fix") {
  // The case: D 6 s, L 2 s and the default 5 s kill timeout.
  auto f = check_lease(2000, 6000, {}, false);
  REQUIRE(f);
  CHECK(f->code == errc::invalid);
  const auto& m = f->message;
  CAPTURE(m);
  CHECK(m.find("--node-down-timeout - --node-lease must be at least max(--kill-timeout, "
               "--node-lease/4) + --fence-unmount-time + 0.25 s + --node-down-timeout/1000") !=
        std::string::npos);
  CHECK(m.find("6 s - 2 s = 4 s < max(5 s, 0.5 s) + 5 s + 0.25 s + 0.006 s = 10.256 s") !=
        std::string::npos);
  CHECK(m.find("--kill-timeout 5 s") != std::string::npos);
  CHECK(m.find("--fence-unmount-time 5 s") != std::string::npos);
  CHECK(m.find("a third of --node-down-timeout") != std::string::npos);
  auto least = least_node_down_ms(0, {});
  CHECK(m.find("raise --node-down-timeout to at least " + std::to_string(least / 1000)) !=
        std::string::npos);
  CHECK(m.find("lower --node-lease, --kill-timeout or --fence-unmount-time") != std::string::npos);
  // A lease given: the fix keeps it.
  auto g = check_lease(14000, 20000, {}, true);
  REQUIRE(g);
  CHECK(
      g->message.find("raise --node-down-timeout to at least 24.275 s (with --node-lease 14 s)") !=
      std::string::npos);
  CHECK(g->message.find("a third of") == std::string::npos);
  // Nothing to say when it holds.
  CHECK_FALSE(check_lease(14000, 24275, {}, true));
  CHECK(check_lease(14000, 24274, {}, true));
  // Negative times are refused (berthd's ranges already keep them out).
  CHECK(check_lease(15000, 45000, {-1, 0}));
  CHECK(check_lease(15000, 45000, {0, -1}));
}

// The safety argument of control/lease.hpp on random schedules: a client's
// heartbeats are sent, delayed, lost, answered with a lease or not; the
// servers count silence from each receipt.  At every moment when the
// servers would release (silence >= D), the client's lease has run out by
// at least the margin, even with the client's steady clock running slow by
// up to 500 ppm against the servers'.
TEST_CASE("lease_always_ends_a_margin_before_the_release") {
  std::mt19937_64 rng(20261127);
  for (int run = 0; run < 2000; ++run) {
    // The fence's times, and a node-down timeout from the least the rule
    // allows with them (the default lease) to a minute more.
    fence_times fence{static_cast<int64_t>(rng() % 6000), static_cast<int64_t>(rng() % 6000)};
    int64_t down = least_node_down_ms(0, fence) + static_cast<int64_t>(rng() % 60000);
    int64_t len = default_lease_ms(down);
    REQUIRE_FALSE(check_lease(len, down, fence, false));
    double drift = 1.0 - static_cast<double>(rng() % 501) / 1e6;  // the client's clock is slow
    lease l;
    int64_t last_receipt = 0;  // servers' clock (= real time)
    int64_t t = 0;
    for (int step = 0; step < 200; ++step) {
      t += static_cast<int64_t>(rng() % (len / 2 + 1));
      auto client_now = static_cast<int64_t>(static_cast<double>(t) * drift);
      // A heartbeat sent now; reaches the leader after a delay, or not.
      int64_t delay = static_cast<int64_t>(rng() % 2000);
      bool arrives = rng() % 4 != 0;
      bool answered = arrives && rng() % 3 != 0;
      if (arrives) last_receipt = std::max(last_receipt, t + delay);
      if (answered) l = renew(l, client_now, len);
      // Whenever the servers may release, the client's lease is out, with
      // the margin to spare (less the drift over one lease).
      int64_t release_at = last_receipt + down;
      auto client_at_release = static_cast<int64_t>(static_cast<double>(release_at) * drift);
      if (l.length_ms > 0) {
        CHECK(client_at_release - l.until_ms >= down - len - down / 1000 - 1);
        // ... which leaves the whole fence before the release.
        CHECK(client_at_release - l.until_ms >=
              fence_margin_ms(len, down, fence) - (down + 999) / 1000 - 1);
      }
    }
  }
}

TEST_CASE("the_way_back_is_lost_when_a_ping_goes_unanswered_and_found_with_one_answer") {
  node_reach r;
  // A new client: served at once, pinged at once.
  CHECK(reachable(r));
  CHECK(reach_ping_due(r, 1000, 5000));
  r.asked_ms = 1000;
  CHECK_FALSE(reach_ping_due(r, 20000, 5000));  // one in flight at a time
  r = reach_after_ping(r, 1000, true, 1200);
  CHECK(reachable(r));
  CHECK(r.asked_ms == 0);
  CHECK(r.answered_ms == 1200);
  CHECK_FALSE(reach_ping_due(r, 6199, 5000));  // answered within the interval
  CHECK(reach_ping_due(r, 6200, 5000));
  // Unanswered: lost, and pinged again on the next heartbeat.
  r.asked_ms = 6200;
  CHECK(reachable(r));  // until its timeout says otherwise
  r = reach_after_ping(r, 6200, false, 16200);
  CHECK_FALSE(reachable(r));
  CHECK(reach_ping_due(r, 16201, 5000));
  // A late answer of an older ping changes nothing.
  r.asked_ms = 16300;
  auto late = reach_after_ping(r, 6200, true, 16400);
  CHECK_FALSE(reachable(late));
  CHECK(late.asked_ms == 16300);
  // One answer brings it back.
  r = reach_after_ping(r, 16300, true, 16500);
  CHECK(reachable(r));
  CHECK(r.answered_ms == 16500);
}

TEST_CASE("the_way_back_follows_any_schedule_of_answers") {
  // Property: whatever the answers, the way back is lost exactly when the
  // last ping that finished went unanswered, and at most one is in flight.
  std::mt19937_64 rng(26);
  for (int run = 0; run < 200; ++run) {
    node_reach r;
    int64_t now = 1;
    std::optional<bool> last;
    for (int step = 0; step < 50; ++step) {
      now += static_cast<int64_t>(rng() % 4000);
      if (reach_ping_due(r, now, 5000)) {
        REQUIRE(r.asked_ms == 0);
        r.asked_ms = now;
      }
      if (r.asked_ms != 0 && rng() % 2 == 0) {
        bool answered = rng() % 3 != 0;
        r = reach_after_ping(r, r.asked_ms, answered, now);
        last = answered;
      }
      CHECK(reachable(r) == (!last || *last));
    }
  }
}

TEST_CASE("a_lease_is_granted_only_to_a_node_committed_ready_and_not_being_marked_down") {
  // Unknown to the committed state: a newer leader would release its
  // claims without it at once.
  CHECK_FALSE(lease_grantable(nullptr, false));
  v1::Node n;
  n.set_id("n1");
  n.set_has_client(true);
  n.set_status(v1::NODE_READY);
  CHECK(lease_grantable(&n, false));
  // A mark-down in flight: the lease would outlive it (claim simulation
  // seed 73245).
  CHECK_FALSE(lease_grantable(&n, true));
  // Committed down: its return commits first, then the heartbeat gets it.
  n.set_status(v1::NODE_DOWN);
  CHECK_FALSE(lease_grantable(&n, false));
  // Registered by an operator without a client (nothing heartbeats for it).
  n.set_status(v1::NODE_READY);
  n.set_has_client(false);
  CHECK_FALSE(lease_grantable(&n, false));
  // Every other status the proto knows is not ready either.
  for (int s = v1::NodeStatus_MIN; s <= v1::NodeStatus_MAX; ++s) {
    if (!v1::NodeStatus_IsValid(s)) continue;
    n.set_has_client(true);
    n.set_status(static_cast<v1::NodeStatus>(s));
    CHECK(lease_grantable(&n, false) == (s == v1::NODE_READY));
  }
}

TEST_CASE("a_step_failure_is_held_until_a_call_it_confirmed_can_no_longer_start") {
  // Never confirmed: the node sends nothing without a confirmation, so the
  // failure goes out at once, whenever it is found.
  CHECK(step_failure_hold_ms(0, 10'000, 5) == 0);
  CHECK(step_failure_hold_ms(0, 10'000, 1'000'000) == 0);
  // Confirmed at 100 s: the node's question came before, so its wait for the
  // answer ends before 110 s; a second more for the clocks' rates.
  CHECK(step_failure_hold_ms(100'000, 10'000, 100'000) == 11'000);
  CHECK(step_failure_hold_ms(100'000, 10'000, 105'000) == 6'000);
  CHECK(step_failure_hold_ms(100'000, 10'000, 111'000) == 0);
  CHECK(step_failure_hold_ms(100'000, 10'000, 200'000) == 0);
  // Property: a failure held from any moment ends at the same point, never
  // before confirmed + timeout + 1 s, and is never negative.
  std::mt19937_64 rng(11);
  for (int run = 0; run < 1000; ++run) {
    int64_t confirmed = 1 + static_cast<int64_t>(rng() % 1'000'000);
    int64_t timeout = static_cast<int64_t>(rng() % 60'000);
    int64_t now = confirmed + static_cast<int64_t>(rng() % 100'000);
    auto hold = step_failure_hold_ms(confirmed, timeout, now);
    CHECK(hold >= 0);
    CHECK(now + hold >= confirmed + timeout + 1000);
    if (hold > 0) CHECK(now + hold == confirmed + timeout + 1000);
  }
}

TEST_CASE("a_step_is_lost_after_two_answers_in_a_row_saying_it_never_arrived") {
  step_watch w;
  CHECK_FALSE(step_lost(w));
  w = watch_after_ping(w, false);
  CHECK_FALSE(step_lost(w));  // one answer is not enough
  w = watch_after_ping(w, true);
  CHECK_FALSE(step_lost(w));
  CHECK(w.unseen == 0);  // an answer saying it arrived starts over
  w = watch_after_ping(w, false);
  w = watch_after_ping(w, false);
  CHECK(step_lost(w));
  // Property: lost exactly when the last two answers said no.
  std::mt19937_64 rng(3);
  for (int run = 0; run < 100; ++run) {
    step_watch x;
    std::vector<bool> answers;
    for (int i = 0; i < 20; ++i) {
      bool a = rng() % 3 != 0;
      answers.push_back(a);
      x = watch_after_ping(x, a);
      bool expect = answers.size() >= 2 && !answers[answers.size() - 1] &&
                    !answers[answers.size() - 2];
      CHECK(step_lost(x) == expect);
    }
  }
}

TEST_CASE("check_client_fence_takes_a_kill_timeout_the_margin_covers_and_refuses_a_longer_one") {
  // The defaults (D 45 s, L 15 s, U 5 s): a client may take up to 24.705 s
  // (30 s - 5 s - 0.25 s - 45 ms), the servers' own 5 s and anything less.
  fence_times servers{};
  CHECK(most_client_kill_ms(15000, 45000, servers) == 24705);
  CHECK_FALSE(check_client_fence("c1", 5000, 15000, 45000, servers));
  CHECK_FALSE(check_client_fence("c1", 0, 15000, 45000, servers));
  CHECK_FALSE(check_client_fence("c1", 24705, 15000, 45000, servers));
  auto f = check_client_fence("c1", 24706, 15000, 45000, servers);
  REQUIRE(f);
  CHECK(f->code == errc::invalid);
  const auto& m = f->message;
  CAPTURE(m);
  CHECK(m.find("node 'c1'") == 0);
  CHECK(m.find("--kill-timeout 24.706 s") != std::string::npos);
  CHECK(m.find("at most 24.705 s") != std::string::npos);
  CHECK(m.find("the servers' own --kill-timeout is 5 s") != std::string::npos);
  CHECK(m.find("Start it with --kill-timeout 24.705 s or less") != std::string::npos);
  CHECK(m.find("raise the servers' --node-down-timeout") != std::string::npos);
  // The tests' short timeouts (D 6 s, L 2 s, U 0.5 s): the servers' 1 s
  // passes, the default 5 s of a client started without the option not.
  fence_times tests{1000, 500};
  CHECK_FALSE(check_client_fence("c1", 1000, 2000, 6000, tests));
  CHECK(check_client_fence("c1", 5000, 2000, 6000, tests));
  CHECK(most_client_kill_ms(2000, 6000, tests) == 4000 - 500 - 250 - 6);
  // A negative value is never taken.
  CHECK(check_client_fence("c1", -1, 15000, 45000, servers));
  // No room at all: nothing is taken, and the most is 0.
  CHECK(most_client_kill_ms(1000, 1500, servers) == 0);
  CHECK(check_client_fence("c1", 0, 1000, 1500, servers));
}

TEST_CASE("check_client_fence_agrees_with_the_servers_inequality_for_random_values") {
  // Property: a client's K is taken exactly when the servers' own check
  // would pass with that K, and the most it may take is the largest such K.
  std::mt19937_64 rng(5959);
  for (int run = 0; run < 3000; ++run) {
    fence_times servers{static_cast<int64_t>(rng() % 20'000), static_cast<int64_t>(rng() % 20'000)};
    int64_t lease_ms = 100 + static_cast<int64_t>(rng() % 60'000);
    int64_t down = lease_ms + static_cast<int64_t>(rng() % 80'000);
    int64_t k = static_cast<int64_t>(rng() % 40'000);
    CAPTURE(run);
    bool taken = !check_client_fence("n", k, lease_ms, down, servers);
    CHECK(taken == margin_covers_fence(lease_ms, down, {k, servers.unmount_ms}));
    auto most = most_client_kill_ms(lease_ms, down, servers);
    if (most > 0) {
      CHECK_FALSE(check_client_fence("n", most, lease_ms, down, servers));
      CHECK(check_client_fence("n", most + 1, lease_ms, down, servers));
    }
    // The servers' own K passes whenever their own check passed.
    if (margin_covers_fence(lease_ms, down, servers))
      CHECK_FALSE(check_client_fence("n", servers.kill_timeout_ms, lease_ms, down, servers));
  }
}
