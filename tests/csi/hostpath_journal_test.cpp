// berth-hostpath's state records and its store (state.json + state.journal):
// the pure parts (apply, diff, encoding) and the files, in a temporary
// directory, without the plugin process.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "journal.hpp"
#include "state.hpp"

namespace fs = std::filesystem;
using namespace berth::hostpath;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path()
           / ("berth-journal-test-" + std::to_string(::getpid()) + "-"
              + std::to_string(counter()++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() { fs::remove_all(path); }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

volume_record vol(std::string name, int64_t capacity,
                  std::map<std::string, std::string> params = {}) {
  volume_record v;
  v.name = std::move(name);
  v.capacity_bytes = capacity;
  v.parameters = std::move(params);
  return v;
}

std::string read(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const fs::path& f, const std::string& bytes) {
  std::ofstream out(f, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A random state over a few keys of each kind, so that two of them share
// some keys, differ in others.
state random_state(std::mt19937& rng) {
  state s;
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  for (int i = 0; i < 6; ++i) {
    if (pick(2))
      s.volumes["v" + std::to_string(i)] =
          vol("name" + std::to_string(i), pick(3) * 1024, {{"k", std::to_string(pick(2))}});
    for (int n = 0; n < 3; ++n)
      if (pick(3) == 0)
        s.controller_publications["v" + std::to_string(i)]["n" + std::to_string(n)] = {
            pick(5), pick(2) == 1};
    if (pick(2))
      s.stagings["/st/" + std::to_string(i)] = {"v" + std::to_string(pick(6)), {pick(5), false}};
    if (pick(2))
      s.publications["/pods/" + std::to_string(i)] = {"v" + std::to_string(pick(6)),
                                                      "/st/" + std::to_string(pick(6)),
                                                      {pick(5), pick(2) == 1}};
    if (pick(3) == 0)
      s.snapshots["snap-" + std::to_string(i)] = {"s" + std::to_string(i),
                                                 "v" + std::to_string(pick(6)),
                                                 {},
                                                 pick(3) * 100,
                                                 pick(2) * 1000000007LL,
                                                 pick(2) ? "group-" + std::to_string(pick(2)) : ""};
    if (pick(4) == 0)
      s.group_snapshots["group-" + std::to_string(i)] = {
          "g" + std::to_string(i),
          {"v" + std::to_string(pick(6)), "v" + std::to_string(pick(6))},
          {"gsnap-" + std::to_string(pick(6)), "gsnap-" + std::to_string(pick(6))},
          {{"k", std::to_string(pick(2))}},
          pick(2) * 1000000007LL};
    if (pick(4) == 0 && s.volumes.count("v" + std::to_string(i)))
      s.volumes["v" + std::to_string(i)].mutable_parameters["iops"] = std::to_string(pick(3));
  }
  return s;
}

std::vector<record> every_kind() {
  return {put_volume{"v1", vol("one", 10, {{"a", "b"}})},
          put_controller_publication{"v1", "n1", {1, true}},
          put_staging{"/st/1", {"v1", {1, false}}},
          put_publication{"/pods/1", {"v1", "/st/1", {1, true}}},
          erase_publication{"/pods/1"},
          erase_staging{"/st/1"},
          erase_controller_publication{"v1", "n1"},
          erase_volume{"v1"},
          put_volume{"v2", vol("two \"quoted\"\n", 0)},
          put_snapshot{"snap-1", {"s1", "v2", {{"p", "q"}}, 4096, 1700000000123456789LL, ""}},
          put_volume{"v3", {"three", 8, {}, {{"iops", "5"}}, "snap-1", ""}},
          put_volume{"v4", {"four", 8, {}, {}, "", "v3"}},
          erase_snapshot{"snap-1"},
          put_snapshot{"snap-2", {"s2", "v3", {}, 8, 1, ""}},
          put_snapshot{"gsnap-a", {"g/v3", "v3", {}, 8, 2, "group-1"}},
          put_snapshot{"gsnap-b", {"g/v4", "v4", {}, 8, 2, "group-1"}},
          put_group_snapshot{"group-1", {"g", {"v3", "v4"}, {"gsnap-a", "gsnap-b"}, {{"x", "y"}}, 2}},
          put_group_snapshot{"group-2", {"h", {"v3"}, {"gsnap-c"}, {}, 3}},
          erase_group_snapshot{"group-2"}};
}

}  // namespace

TEST_CASE("hostpath state: every record kind survives encoding, and applies as it says") {
  auto rs = every_kind();
  auto back = decode_records(encode_records(rs));
  REQUIRE(back.size() == rs.size());
  state a, b;
  for (size_t i = 0; i < rs.size(); ++i) {
    apply_change(a, rs[i]);
    apply_change(b, back[i]);
    CHECK(a == b);
    if (i == 3) {  // after the four puts
      CHECK(a.volumes.at("v1").capacity_bytes == 10);
      CHECK(a.controller_publications.at("v1").at("n1").readonly);
      CHECK(a.stagings.at("/st/1").volume_id == "v1");
      CHECK(a.publications.at("/pods/1").staging_target_path == "/st/1");
    }
  }
  CHECK(a.volumes.size() == 3);
  CHECK(a.volumes.at("v2").name == "two \"quoted\"\n");
  CHECK(a.volumes.at("v3").source_snapshot_id == "snap-1");
  CHECK(a.volumes.at("v3").mutable_parameters.at("iops") == "5");
  CHECK(a.volumes.at("v4").source_volume_id == "v3");
  CHECK(a.snapshots.size() == 3);
  CHECK(a.snapshots.at("snap-2").source_volume_id == "v3");
  CHECK(a.snapshots.at("snap-2").group_snapshot_id.empty());
  CHECK(a.snapshots.at("gsnap-b").group_snapshot_id == "group-1");
  REQUIRE(a.group_snapshots.size() == 1);
  CHECK(a.group_snapshots.at("group-1").source_volume_ids == std::vector<std::string>{"v3", "v4"});
  CHECK(a.group_snapshots.at("group-1").snapshot_ids
        == std::vector<std::string>{"gsnap-a", "gsnap-b"});
  CHECK(a.group_snapshots.at("group-1").parameters.at("x") == "y");
  CHECK(a.group_snapshots.at("group-1").creation_time_ns == 2);
  // The whole state round trips through state.json's text too.
  CHECK(decode_state(encode_state(a), "test") == a);
  // A state without group snapshots is written as before them (no key),
  // and a snapshot of no group has no group_snapshot_id.
  state plain;
  apply_change(plain, put_snapshot{"snap-9", {"s9", "v1", {}, 1, 1, ""}});
  CHECK(encode_state(plain).find("group_snapshot") == std::string::npos);
  CHECK(a.controller_publications.empty());  // the last node's erase removes the volume's entry
  CHECK(a.stagings.empty());
  CHECK(a.publications.empty());
  CHECK_THROWS(decode_records(R"([{"op":"format_disk"}])"));
  CHECK_THROWS(decode_records(R"({"op":"put_volume"})"));
  CHECK_THROWS(decode_records(R"([{"op":"put_volume","id":"x"}])"));
}

TEST_CASE("hostpath state: records are idempotent, so a replay over what holds them is harmless") {
  auto rs = every_kind();
  state once;
  apply_change(once, rs);
  state twice = once;
  apply_change(twice, rs);
  CHECK(twice == once);
}

TEST_CASE("hostpath state: diff turns one state into another, only by the keys that differ") {
  std::mt19937 rng(20261123);
  for (int i = 0; i < 500; ++i) {
    CAPTURE(i);
    auto a = random_state(rng), b = random_state(rng);
    auto d = diff(a, b);
    state c = a;
    apply_change(c, d);
    CHECK(c == b);
    CHECK(diff(a, a).empty());
    CHECK(diff(b, c).empty());
  }
  state a;
  a.volumes["v1"] = vol("one", 1);
  a.volumes["v2"] = vol("two", 2);
  state b = a;
  b.volumes["v2"].capacity_bytes = 3;
  auto d = diff(a, b);
  REQUIRE(d.size() == 1);
  CHECK(std::get<put_volume>(d[0]).id == "v2");
}

TEST_CASE("hostpath state: node_local splits what --shared-root keeps per node") {
  state s;
  apply_change(s, every_kind());
  apply_change(s, {put_staging{"/st/9", {"v2", {1, false}}}, put_controller_publication{"v2", "n", {}}});
  CHECK(node_local(put_staging{}));
  CHECK(node_local(erase_publication{}));
  CHECK_FALSE(node_local(put_volume{}));
  CHECK_FALSE(node_local(erase_controller_publication{}));
  CHECK_FALSE(node_local(put_snapshot{}));
  CHECK_FALSE(node_local(put_group_snapshot{}));
  CHECK_FALSE(node_local(erase_group_snapshot{}));
  auto shared = shared_part(s), mine = node_part(s);
  CHECK(shared.stagings.empty());
  CHECK(shared.volumes.size() == 3);
  CHECK(shared.snapshots.size() == 3);
  CHECK(shared.group_snapshots.size() == 1);
  CHECK(mine.volumes.empty());
  CHECK(mine.snapshots.empty());
  CHECK(mine.group_snapshots.empty());
  CHECK(mine.stagings.size() == 1);
}

TEST_CASE("hostpath journal: lines round trip through the store, across reopenings") {
  temp_dir d;
  auto snap = d.path / "state.json", journal = d.path / "state.journal";
  state expected;
  {
    store st(snap, journal);
    CHECK(st.load() == state{});
    std::vector<record> first = {put_volume{"v1", vol("one", 1)},
                                 put_controller_publication{"v1", "n1", {1, false}}};
    std::vector<record> second = {put_staging{"/st", {"v1", {1, false}}}, erase_volume{"v0"}};
    st.append(first);
    st.append(second);
    st.append({});  // nothing to say: no line
    apply_change(expected, first);
    apply_change(expected, second);
    CHECK(st.journal_bytes() == static_cast<int64_t>(fs::file_size(journal)));
  }
  CHECK_FALSE(fs::exists(snap));  // no compaction yet: the journal alone holds it
  auto text = read(journal);
  CHECK(std::count(text.begin(), text.end(), '\n') == 2);
  store again(snap, journal);
  CHECK(again.load() == expected);
  again.append({put_publication{"/p", {"v1", "/st", {1, false}}}});
  apply_change(expected, put_publication{"/p", {"v1", "/st", {1, false}}});
  store third(snap, journal);
  CHECK(third.load() == expected);
}

TEST_CASE("hostpath journal: a torn last line is ignored and cut off, then appends go on") {
  temp_dir d;
  auto snap = d.path / "state.json", journal = d.path / "state.journal";
  state expected;
  {
    store st(snap, journal);
    st.load();
    st.append({put_volume{"v1", vol("one", 1)}});
    apply_change(expected, put_volume{"v1", vol("one", 1)});
  }
  const auto good = read(journal);
  auto torn_line = encode_journal_line({put_volume{"v2", vol("two", 2)}});
  std::vector<std::pair<const char*, std::string>> tails = {
      {"half a line, no LF", torn_line.substr(0, torn_line.size() / 2)},
      {"all but the LF", torn_line.substr(0, torn_line.size() - 1)},
      {"a whole line with a wrong checksum", "00000000" + torn_line.substr(8)},
      {"zeros where the line should be", std::string(300, '\0')},
      {"zeros and then the end of the line", std::string(20, '\0') + torn_line.substr(20)},
  };
  for (const auto& [what, tail] : tails) {
    CAPTURE(what);
    write(journal, good + tail);
    {
      store st(snap, journal);
      CHECK(st.load() == expected);
      CHECK(read(journal) == good);  // cut off before anything is appended after it
      st.append({put_volume{"v3", vol("three", 3)}});
    }
    state with_v3 = expected;
    apply_change(with_v3, put_volume{"v3", vol("three", 3)});
    store st(snap, journal);
    CHECK(st.load() == with_v3);
  }
}

TEST_CASE("hostpath journal: a damaged line with intact lines after it refuses to load") {
  temp_dir d;
  auto snap = d.path / "state.json", journal = d.path / "state.journal";
  {
    store st(snap, journal);
    st.load();
    st.append({put_volume{"v1", vol("one", 1)}});
    st.append({put_staging{"/st", {"v1", {1, false}}}});
  }
  const auto good = read(journal);
  auto first_lf = good.find('\n');
  SUBCASE("a flipped byte in the first line") {
    auto bad = good;
    bad[first_lf / 2] ^= 0x20;
    write(journal, bad);
  }
  SUBCASE("a missing byte in the first line") {
    write(journal, good.substr(0, 3) + good.substr(4));
  }
  SUBCASE("a line that is not a journal line at all") {
    write(journal, "hello\n" + good);
  }
  SUBCASE("an intact checksum over records this version does not know") {
    std::string body = R"([{"op":"format_disk"}])";
    char crc[9];
    std::snprintf(crc, sizeof(crc), "%08x", crc32_of(body));
    write(journal, std::string(crc) + " " + body + "\n" + good);
  }
  store st(snap, journal);
  CHECK_THROWS_WITH_AS(st.load(), doctest::Contains("is damaged at byte"), std::runtime_error);
  CHECK(read(journal).size() > 0);  // left as it was, for the operator
}

TEST_CASE("hostpath journal: a corrupt snapshot refuses to load") {
  temp_dir d;
  write(d.path / "state.json", "{\"volumes\": {");
  store st(d.path / "state.json", d.path / "state.journal");
  CHECK_THROWS_WITH_AS(st.load(), doctest::Contains("corrupt state file"), std::runtime_error);
}

TEST_CASE("hostpath journal: compaction keeps the state, empties the journal, survives restarts") {
  temp_dir d;
  auto snap = d.path / "state.json", journal = d.path / "state.journal";
  std::mt19937 rng(7);
  state expected;
  int compactions = 0;
  {
    store st(snap, journal, 600);
    expected = st.load();
    for (int i = 0; i < 60; ++i) {
      auto next = random_state(rng);
      auto change = diff(expected, next);
      if (st.must_compact()) {
        apply_change(expected, change);  // the plugin applies first, then saves
        st.compact(expected);
        ++compactions;
        CHECK(st.journal_bytes() == 0);
        CHECK(fs::file_size(journal) == 0);
      } else {
        st.append(change);
        apply_change(expected, change);
      }
      CHECK(expected == next);
      if (i % 10 == 9) {
        store reader(snap, journal, 600);
        CHECK(reader.load() == expected);
      }
    }
  }
  CHECK(compactions > 2);
  store st(snap, journal, 600);
  CHECK(st.load() == expected);
  st.append({put_volume{"only-in-the-journal", {}}});
  apply_change(expected, put_volume{"only-in-the-journal", {}});
  CHECK_FALSE(load_state(snap) == expected);
  CHECK(store(snap, journal, 600).load() == expected);

  // A crash between the new snapshot's rename and the journal's truncation:
  // the old journal replays over the snapshot that already holds it.
  auto before = read(journal);
  st.compact(expected);
  write(journal, before);
  store after_crash(snap, journal, 600);
  CHECK(after_crash.load() == expected);
}

TEST_CASE("hostpath journal: when a save compacts") {
  temp_dir d;
  auto snap = d.path / "state.json", journal = d.path / "state.journal";
  state big;
  for (int i = 0; i < 50; ++i)
    big.volumes["v" + std::to_string(i)] = vol(std::string(100, 'x'), i);
  save_state(snap, big);
  const auto snap_bytes = static_cast<int64_t>(fs::file_size(snap));
  {
    store st(snap, journal, -1, 1000);  // auto: max(1000, 2x the snapshot)
    st.load();
    CHECK(st.snapshot_bytes() == snap_bytes);
    while (st.journal_bytes() < 2 * snap_bytes) {
      CHECK_FALSE(st.must_compact());
      st.append({put_staging{"/st", {"v1", {1, false}}}});
    }
    CHECK(st.must_compact());
  }
  {
    store every(snap, journal, 0);  // 0: every save compacts
    every.load();
    CHECK(every.must_compact());
    every.compact(big);
    CHECK(every.must_compact());
  }
  store st(snap, journal, 1 << 20);
  st.load();
  CHECK_FALSE(st.must_compact());
  st.mark_broken();
  CHECK(st.must_compact());  // another part of the save failed
}

TEST_CASE("hostpath journal: an old state.json without a journal loads as it is") {
  temp_dir d;
  write(d.path / "state.json", R"({
  "volumes": {"hp-1": {"name": "db", "capacity_bytes": 1048576, "parameters": {}}},
  "controller_publications": {"hp-1": {"n1": {"access_mode": 1, "readonly": false}}},
  "stagings": {"/st": {"volume_id": "hp-1", "how": {"access_mode": 1, "readonly": false}}},
  "publications": {"/p": {"volume_id": "hp-1", "staging_target_path": "/st",
                          "how": {"access_mode": 1, "readonly": true}}}
})");
  store st(d.path / "state.json", d.path / "state.journal");
  auto s = st.load();
  CHECK(s.volumes.at("hp-1").name == "db");
  CHECK(s.controller_publications.at("hp-1").count("n1") == 1);
  CHECK(s.stagings.at("/st").volume_id == "hp-1");
  CHECK(s.publications.at("/p").how.readonly);
}
