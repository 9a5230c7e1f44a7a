// control/filter: the --filter expressions of the list commands, what they
// match and how a bad one is refused.
#include "control/filter.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <variant>

using namespace berth;

namespace {

bool matches(const std::string& expr, const nlohmann::json& obj) {
  auto f = parse_filter(expr);
  if (auto* e = std::get_if<failure>(&f)) FAIL(e->message);
  return std::get<filter>(f).matches(obj);
}

}  // namespace

TEST_CASE("filter_matches_fields_arrays_and_combinations") {
  auto vol = nlohmann::json::parse(R"({"id":"db","plugin_id":"hostpath","capacity_min":1048576,
      "claims":[{"alloc_id":"a1","node_id":"n1","state":"taken"},
                {"alloc_id":"a2","node_id":"n2","state":"unpublishing"}],
      "parameters":{"tier":"gold"},"command":[],"external_id":""})");
  CHECK(matches("", vol));
  CHECK(matches("   ", vol));
  CHECK(matches("plugin_id == \"hostpath\"", vol));
  CHECK(matches("plugin_id == hostpath", vol));
  CHECK_FALSE(matches("plugin_id != hostpath", vol));
  CHECK(matches("capacity_min == 1048576", vol));
  CHECK(matches("claims.node_id == \"n2\"", vol));        // any claim
  CHECK_FALSE(matches("claims.node_id == \"n3\"", vol));
  CHECK(matches("\"n1\" in claims.node_id", vol));
  CHECK(matches("\"n3\" not in claims.node_id", vol));
  CHECK(matches("id contains d", vol));
  CHECK(matches("id not contains x", vol));
  CHECK(matches("parameters contains tier", vol));       // a key of an object
  CHECK(matches("parameters.tier == gold", vol));
  CHECK(matches("command is empty", vol));
  CHECK(matches("external_id is empty", vol));
  CHECK(matches("missing is empty", vol));
  CHECK(matches("claims is not empty", vol));
  CHECK(matches("plugin_id == hostpath and (claims.state == taken or id == x)", vol));
  CHECK_FALSE(matches("plugin_id == hostpath and not claims is not empty", vol));
  CHECK(matches("id == x or id == y or id == db", vol));
  CHECK(matches("not (id == x)", vol));
  CHECK(matches("name == \"a \\\"quoted\\\" word\" or id == db", vol));
}

TEST_CASE("filter_refuses_bad_expressions_naming_where") {
  for (const auto& bad : {"plugin_id", "plugin_id ==", "== hostpath", "(id == x", "id == x)",
                          "id == x and", "id is full", "\"open", "id = x", "and == x",
                          "a..b == x"}) {
    CAPTURE(bad);
    auto f = parse_filter(bad);
    REQUIRE(std::holds_alternative<failure>(f));
    CHECK(std::get<failure>(f).code == errc::invalid);
    CHECK(std::get<failure>(f).message.find("--filter") != std::string::npos);
    CHECK(std::get<failure>(f).message.find("column") != std::string::npos);
  }
}
