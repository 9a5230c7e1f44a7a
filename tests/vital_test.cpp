// Vital actors (actors/vital.hpp): berthd learns when an actor it cannot
// serve without ends, however it ends, once.
#include <doctest/doctest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "actors/actors.hpp"
#include "actors/vital.hpp"

using namespace berth;

namespace {

// An actor that quits with `code` on a tick (spawned with an argument:
// CAF 0.17 spawning a function without one trips UBSan, issue 32).
caf::behavior quitter(caf::event_based_actor* self, int code) {
  return {[self, code](tick_atom) {
    if (code == 0)
      self->quit();
    else
      self->quit(make_error(errc::internal, "disk gone"));
  }};
}

struct ends {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> seen;
  std::promise<void> first;
  vital_ended callback() {
    return [this](const std::string& name, const caf::error& reason) {
      std::lock_guard<std::mutex> lock(mu);
      seen.emplace_back(name, reason ? caf::to_string(reason) : std::string());
      if (seen.size() == 1) first.set_value();
    };
  }
};

}  // namespace

// Spawns a quitter (with `code`), watches it as `name`, ticks it, and
// returns what was reported once it ended.
std::vector<std::pair<std::string, std::string>> watched_end(int code, const std::string& name) {
  caf::actor_system_config cfg;
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  ends e;
  auto done = e.first.get_future();
  auto a = sys.spawn(quitter, code);
  watch_vital(a, name, e.callback());
  caf::anon_send(a, tick_atom::value);
  REQUIRE(done.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  sys.await_all_actors_done();
  std::lock_guard<std::mutex> lock(e.mu);
  return e.seen;
}

TEST_CASE("vital: an actor that fails is reported once, with its name and reason") {
  auto seen = watched_end(1, "state machine");
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].first == "state machine");
  CHECK(seen[0].second.find("disk gone") != std::string::npos);
}

TEST_CASE("vital: an actor that ends normally is reported too") {
  auto seen = watched_end(0, "server");
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].first == "server");
  CHECK(seen[0].second.empty());
}

TEST_CASE("vital: an actor that ended before it was watched is reported at once") {
  caf::actor_system_config cfg;
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  auto a = sys.spawn(quitter, 1);
  caf::anon_send(a, tick_atom::value);
  {
    caf::scoped_actor me{sys};
    me->wait_for(a);
  }
  ends e;
  auto done = e.first.get_future();
  watch_vital(a, "replicated log", e.callback());
  REQUIRE(done.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  std::lock_guard<std::mutex> lock(e.mu);
  CHECK(e.seen.size() == 1);
}
