// The volumes' health series on /metrics (actors/metrics.cpp): replaced and
// removed per volume, rendered as the three gauge families.
#include <doctest/doctest.h>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <map>
#include <string>
#include <tuple>

#include "actors/metrics.hpp"

using namespace berth;

namespace {

// family -> (namespace, volume, node) -> value
std::map<std::string, std::map<std::tuple<std::string, std::string, std::string>, double>> health(
    metrics& m) {
  std::map<std::string, std::map<std::tuple<std::string, std::string, std::string>, double>> out;
  for (const auto& f : m.registry()->Collect()) {
    if (f.name != "berth_volume_abnormal" && f.name != "berth_volume_capacity_bytes" &&
        f.name != "berth_volume_used_bytes")
      continue;
    auto& series = out[f.name];
    for (const auto& s : f.metric) {
      std::string ns, vol, node;
      for (const auto& l : s.label)
        (l.name == "namespace" ? ns : l.name == "volume" ? vol : node) = l.value;
      CHECK(series.emplace(std::make_tuple(ns, vol, node), s.gauge.value).second);
    }
  }
  return out;
}

health_series row(const std::string& node, bool abnormal, int64_t capacity = -1) {
  health_series r;
  r.node = node;
  r.abnormal = abnormal;
  if (capacity >= 0) {
    r.has_usage = true;
    r.capacity_bytes = capacity;
    r.used_bytes = capacity / 2;
  }
  return r;
}

}  // namespace

TEST_CASE("a volume's health series are replaced as a whole and removed with the volume") {
  auto m = make_metrics();
  m->volume_health("default", "db", {row("", false), row("c1", false, 1000)});
  auto h = health(*m);
  CHECK(h["berth_volume_abnormal"].size() == 2);
  CHECK(h["berth_volume_abnormal"][{"default", "db", ""}] == 0);
  CHECK(h["berth_volume_capacity_bytes"][{"default", "db", "c1"}] == 1000);
  CHECK(h["berth_volume_used_bytes"][{"default", "db", "c1"}] == 500);
  // Replaced: the node's series go, the controller's becomes abnormal.
  m->volume_health("default", "db", {row("", true)});
  h = health(*m);
  CHECK(h["berth_volume_abnormal"].size() == 1);
  CHECK(h["berth_volume_abnormal"][{"default", "db", ""}] == 1);
  CHECK(h["berth_volume_capacity_bytes"].empty());
  CHECK(h["berth_volume_used_bytes"].empty());
  // Removed (a deleted volume): nothing left.
  m->volume_health("default", "db", {});
  h = health(*m);
  CHECK(h["berth_volume_abnormal"].empty());
}

TEST_CASE("many volumes' health series: each replaced, half removed, the rest kept") {
  auto m = make_metrics();
  const int n = 20000;
  for (int i = 0; i < n; ++i) m->volume_health("ns", "v" + std::to_string(i), {row("", false)});
  for (int i = 0; i < n; ++i)
    m->volume_health("ns", "v" + std::to_string(i), {row("", i % 3 == 0), row("c1", false, i)});
  for (int i = 0; i < n; i += 2) m->volume_health("ns", "v" + std::to_string(i), {});
  auto h = health(*m);
  CHECK(h["berth_volume_abnormal"].size() == n);  // two rows for each of n/2 volumes
  CHECK(h["berth_volume_capacity_bytes"].size() == n / 2);
  for (int i = 1; i < n; i += 2) {
    auto v = "v" + std::to_string(i);
    REQUIRE(h["berth_volume_abnormal"].count({"ns", v, ""}) == 1);
    CHECK(h["berth_volume_abnormal"][{"ns", v, ""}] == (i % 3 == 0 ? 1 : 0));
    CHECK(h["berth_volume_capacity_bytes"][{"ns", v, "c1"}] == i);
  }
  CHECK(h["berth_volume_abnormal"].count({"ns", "v0", ""}) == 0);
  // A server that stops leading drops them all.
  m->clear_state();
  CHECK(health(*m)["berth_volume_abnormal"].empty());
}
