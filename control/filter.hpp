// --filter EXPR of the list commands: a boolean expression over an
// object's JSON fields (what `--json` shows), in the shape of Nomad's
// -filter (go-bexpr), a subset:
//
//   expr     := or
//   or       := and ("or" and)*
//   and      := unary ("and" unary)*
//   unary    := "not" unary | "(" expr ")" | match
//   match    := SELECTOR ("==" | "!=") VALUE
//             | SELECTOR ("contains" | "not contains") VALUE
//             | VALUE ("in" | "not in") SELECTOR
//             | SELECTOR "is" ["not"] "empty"
//   SELECTOR := name ("." name)*        e.g. plugin_id, claims.node_id
//   VALUE    := "quoted" | bare word or number or true/false
//
// A selector that crosses an array matches when any element does (so
// `claims.node_id == "n1"`: some claim is on n1).  Values compare as
// their text (numbers and booleans as JSON writes them).
//
// Pure: parse once, then test each object.
#pragma once

#include <memory>
#include <string>
#include <variant>

#include <nlohmann/json_fwd.hpp>

#include "messages/failure.hpp"

namespace berth {

struct filter_node;

class filter {
 public:
  // True for every object.
  filter() = default;
  bool matches(const nlohmann::json& object) const;
  bool empty() const { return root_ == nullptr; }

 private:
  friend std::variant<filter, failure> parse_filter(const std::string& expr);
  std::shared_ptr<const filter_node> root_;
};

// An empty expression is a filter that matches everything.  A bad one is
// errc::invalid, naming where it stopped and what was expected.
std::variant<filter, failure> parse_filter(const std::string& expr);

}  // namespace berth
