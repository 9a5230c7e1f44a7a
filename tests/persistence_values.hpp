// Tests' view of persistence/'s results: must() is the value (the test
// stops, naming the failure, when there is none); failure_of() is the
// failure's message ("" when there is none).
#pragma once

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <utility>

#include "messages/failure.hpp"

namespace berth::test {

template <class T>
T must(expected<T> e) {
  if (!e) FAIL(e.error().message);
  return std::move(*e);
}

inline void must(const std::optional<failure>& f) {
  if (f) FAIL(f->message);
}

template <class T>
std::string failure_of(const expected<T>& e) {
  return e ? std::string() : e.error().message;
}

inline std::string failure_of(const std::optional<failure>& f) {
  return f ? f->message : std::string();
}

}  // namespace berth::test
