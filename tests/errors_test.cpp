// One error type between actors (actors/types.hpp): a failure keeps its
// class, message and flags across caf::error, and a Response built from it
// carries them to the shell (exit 7 for maybe-applied, apps/berth/send.cpp).
#include <doctest/doctest.h>

#include "actors/types.hpp"
#include "control/views.hpp"

using namespace berth;

TEST_CASE("errors: a failure's flags survive the hop between actors") {
  for (bool retry : {false, true})
    for (bool maybe : {false, true}) {
      failure f{errc::unavailable, "this server lost the leadership", retry, maybe};
      auto back = to_failure(to_error(f));
      CHECK(back.code == errc::unavailable);
      CHECK(back.message == f.message);
      CHECK(back.retry == retry);
      CHECK(back.maybe_applied == maybe);
    }
  auto plain = to_failure(make_error(errc::refused, "volume 'db' is claimed"));
  CHECK(plain.code == errc::refused);
  CHECK(plain.message == "volume 'db' is claimed");
  CHECK_FALSE(plain.retry);
  CHECK_FALSE(plain.maybe_applied);
}

TEST_CASE("errors: a response built from a maybe-applied failure says so") {
  auto r = error_response(failure{errc::unavailable, "the leader changed", false, true});
  CHECK(r.error().code() == v1::UNAVAILABLE);
  CHECK(r.error().maybe_applied());
  CHECK_FALSE(r.error().retry());
  auto s = error_response(failure{errc::unavailable, "no leader", true, false});
  CHECK(s.error().retry());
  CHECK_FALSE(s.error().maybe_applied());
}

TEST_CASE("errors: CAF's own errors become failures that say what to do") {
  auto t = to_failure(caf::make_error(caf::sec::request_timeout));
  CHECK(t.code == errc::unavailable);
  CHECK(t.message.find("timed out") != std::string::npos);
  auto d = to_failure(caf::make_error(caf::sec::request_receiver_down));
  CHECK(d.code == errc::unavailable);
}
