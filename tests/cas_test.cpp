// Compare-and-set on the commit path (issue 28: no serial writer): what an
// entry built on the catalog expects (control/catalog expectations_of), the
// catalog's apply refusing a stale entry whole, and the state tables
// judging every entry exactly as the catalog does (persistence/state_store),
// so that every server keeps the same state.
#include <doctest/doctest.h>

#include <map>
#include <random>

#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "persistence/state_store.hpp"
#include "tests/persistence_values.hpp"
#include "tests/temp_dir.hpp"

using namespace berth;
using berth::test::failure_of;
using berth::test::must;

namespace {

v1::Alloc make_alloc(const std::string& id, const std::string& node,
                     v1::AllocState state = v1::ALLOC_RUNNING) {
  v1::Alloc a;
  a.set_id(id);
  a.set_namespace_("default");
  a.set_node_id(node);
  a.set_state(state);
  return a;
}

v1::Node make_node(const std::string& id) {
  v1::Node n;
  n.set_id(id);
  n.set_status(v1::NODE_READY);
  return n;
}

uint64_t commit(catalog& c, std::vector<v1::Change> changes) {
  auto index = c.applied_index + 1;
  apply(c, index, make_entry(std::move(changes)));
  return index;
}

// An entry built on `c` the way the leader's write builds it.
v1::LogEntry built_on(const catalog& c, std::vector<v1::Change> changes, bool node_allocs = false) {
  auto expect = expectations_of(c, changes, node_allocs);
  return make_entry(std::move(changes), std::move(expect));
}

std::map<std::string, uint64_t> versions_of(const std::vector<v1::Expectation>& xs) {
  std::map<std::string, uint64_t> out;
  for (const auto& x : xs) out[expectation_key(x)] = x.modify_index();
  return out;
}

}  // namespace

TEST_CASE("an entry built on the catalog expects every object it writes at its version, once") {
  catalog c;
  auto at = commit(c, {upsert_change(make_node("n1")), upsert_change(make_alloc("a", "n1"))});
  commit(c, {upsert_change(make_alloc("b", "n2"))});
  auto changes = std::vector<v1::Change>{
      upsert_change(make_alloc("a", "n1", v1::ALLOC_COMPLETE)),  // exists: its version
      upsert_change(make_alloc("new", "n1")),                    // new: 0
      alloc_delete_change("a"),                                  // the same alloc: once
      alloc_volume_freed_change("b", "default", "v"),            // the freed alloc
      upsert_change(make_node("n1")),
  };
  auto x = versions_of(expectations_of(c, changes));
  CHECK(x == std::map<std::string, uint64_t>{
                 {"alloc/a", at}, {"alloc/new", 0}, {"alloc/b", at + 1}, {"node/n1", at}});
  // With node_allocs: the highest version among the node's allocs too.
  x = versions_of(expectations_of(c, {upsert_change(make_node("n1"))}, true));
  CHECK(x == std::map<std::string, uint64_t>{{"node/n1", at}, {"node_allocs/n1", at}});
  // A deleted node's allocs always (a node that gained one is not deleted).
  x = versions_of(expectations_of(c, {node_delete_change("n2")}));
  CHECK(x == std::map<std::string, uint64_t>{{"node/n2", 0}, {"node_allocs/n2", at + 1}});
  // An entry with expectations is format 2, one without stays format 1.
  CHECK(built_on(c, changes).format_version() == entry_format_expectations);
  CHECK(make_entry(changes).format_version() == entry_format_version);
  CHECK(built_on(c, {}).expect_size() == 0);
}

TEST_CASE("ACL writes expect their policy, token and the bootstrap") {
  catalog c;
  v1::AclToken t;
  t.set_accessor_id("acc");
  t.set_secret_hash("h1");
  v1::Change boot;
  *boot.mutable_acl_bootstrap() = t;
  auto first = built_on(c, {boot});
  auto second = built_on(c, {boot});  // sent twice, built on the same state
  CHECK(versions_of({first.expect().begin(), first.expect().end()}) ==
        std::map<std::string, uint64_t>{{"acl_bootstrap", 0}});
  apply(c, 1, first);
  CHECK(c.acl_bootstrap_index == 1);
  apply(c, 2, second);
  CHECK(take_refused(c, 2));  // one bootstrap, ever
  v1::AclPolicy p;
  p.set_name("ops");
  auto x = versions_of(expectations_of(c, {upsert_change(p)}));
  CHECK(x == std::map<std::string, uint64_t>{{"acl_policy/ops", 0}});
}

TEST_CASE("apply refuses a stale entry whole and records it for its proposer once") {
  catalog c;
  commit(c, {upsert_change(make_node("n1")), upsert_change(make_alloc("a", "n1")),
             upsert_change(make_alloc("b", "n1"))});
  // Two writes built on the same state: a's stop and a's exit.
  auto stop = built_on(c, {upsert_change(make_alloc("a", "n1", v1::ALLOC_COMPLETE)),
                           upsert_change(make_alloc("b", "n1", v1::ALLOC_COMPLETE))});
  auto exit = built_on(c, {upsert_change(make_alloc("a", "n1", v1::ALLOC_FAILED))});
  CHECK(apply(c, 2, stop).size() == 2);
  CHECK_FALSE(take_refused(c, 2));
  auto before_a = find_alloc(c, "a")->SerializeAsString();
  CHECK(apply(c, 3, exit).empty());  // refused: a changed since it was built
  CHECK(c.applied_index == 3);       // the index is applied all the same
  CHECK(find_alloc(c, "a")->SerializeAsString() == before_a);
  CHECK(take_refused(c, 3));
  CHECK_FALSE(take_refused(c, 3));  // once
  // Built again on the state that refused it: it applies, on top of the stop.
  auto again = built_on(c, {upsert_change(make_alloc("a", "n1", v1::ALLOC_FAILED))});
  CHECK(apply(c, 4, again).size() == 1);
  CHECK(find_alloc(c, "a")->state() == v1::ALLOC_FAILED);
  CHECK(find_alloc(c, "a")->modify_index() == 4);
  // A refusal is all or nothing: one stale object keeps the others as they are.
  auto both = built_on(
      c, {upsert_change(make_alloc("b", "n1", v1::ALLOC_FAILED)), upsert_change(make_node("n1"))});
  commit(c, {upsert_change(make_node("n1"))});  // the node changes meanwhile
  CHECK(apply(c, 6, both).empty());
  CHECK(find_alloc(c, "b")->state() == v1::ALLOC_COMPLETE);
  CHECK(take_refused(c, 6));
}

TEST_CASE("a change built from every alloc on a node is refused when one on it changed") {
  catalog c;
  commit(c, {upsert_change(make_node("n1")), upsert_change(make_alloc("a", "n1"))});
  // mark_down's shape: the node and the allocs it found on it.
  auto down = make_node("n1");
  down.set_status(v1::NODE_DOWN);
  auto built = [&] {
    return built_on(c, {upsert_change(down), upsert_change(make_alloc("a", "n1", v1::ALLOC_LOST))},
                    true);
  };
  SUBCASE("an alloc placed on another node meanwhile does not refuse it") {
    auto e = built();
    commit(c, {upsert_change(make_alloc("elsewhere", "n2"))});
    CHECK(apply(c, 3, e).size() == 2);
  }
  SUBCASE("an alloc placed on the node meanwhile refuses it: it would not be marked lost") {
    auto e = built();
    commit(c, {upsert_change(make_alloc("new", "n1"))});
    CHECK(apply(c, 3, e).empty());
    CHECK(find_node(c, "n1")->status() == v1::NODE_READY);
  }
  SUBCASE("an alloc on the node deleted meanwhile refuses it") {
    commit(c, {upsert_change(make_alloc("b", "n1", v1::ALLOC_COMPLETE))});
    auto e = built();
    commit(c, {alloc_delete_change("b")});
    CHECK(apply(c, 4, e).empty());
  }
}

TEST_CASE("a claim's alloc record never undoes what changed in the alloc since it was routed") {
  // The record `volume claim` builds when it routes the claim, committed
  // later by the volume actor with the claim (it may wait behind a release).
  catalog c;
  commit(c, {upsert_change(make_node("n1"))});
  auto routed = [](std::vector<std::string> volumes) {
    auto a = make_alloc("a", "n1");
    for (const auto& v : volumes) {
      auto* av = a.add_volumes();
      av->set_name(v);
      av->set_volume_id(v);
    }
    return a;
  };
  SUBCASE("none yet: the record as routed is created") {
    auto applied = apply(c, 2, make_entry({alloc_volume_claimed_change(routed({"v1"}), "v1")}));
    REQUIRE(applied.size() == 1);
    CHECK(applied[0].change.alloc_upsert().volumes_size() == 1);
    CHECK(find_alloc(c, "a")->create_index() == 2);
  }
  SUBCASE("two volumes claimed at once by one alloc: both stay in its record") {
    // Both routed on the catalog without the alloc, each with its volume.
    apply(c, 2, make_entry({alloc_volume_claimed_change(routed({"v1"}), "v1")}));
    apply(c, 3, make_entry({alloc_volume_claimed_change(routed({"v2"}), "v2")}));
    const auto* a = find_alloc(c, "a");
    REQUIRE(a->volumes_size() == 2);
    CHECK(a->volumes(0).volume_id() == "v1");
    CHECK(a->volumes(1).volume_id() == "v2");
    CHECK(a->create_index() == 2);
    CHECK(a->modify_index() == 3);
  }
  SUBCASE("stopped after it was routed: the stop stays, the volume joins its history") {
    commit(c, {upsert_change(routed({"v1"}))});
    auto claim = alloc_volume_claimed_change(routed({"v1", "v2"}), "v2");
    commit(c, {upsert_change(make_alloc("a", "n1", v1::ALLOC_COMPLETE))});  // the stop
    auto at = c.applied_index + 1;
    apply(c, at, make_entry({claim}));
    const auto* a = find_alloc(c, "a");
    CHECK(a->state() == v1::ALLOC_COMPLETE);
    REQUIRE(a->volumes_size() == 1);  // the stop's record had no volume left
    CHECK(a->volumes(0).volume_id() == "v2");
  }
  SUBCASE("the record has the volume already: nothing changes") {
    commit(c, {upsert_change(routed({"v1"}))});
    auto before = find_alloc(c, "a")->modify_index();
    CHECK(apply(c, c.applied_index + 1,
                make_entry({alloc_volume_claimed_change(routed({"v1"}), "v1")}))
              .empty());
    CHECK(find_alloc(c, "a")->modify_index() == before);
  }
  CHECK(make_entry({alloc_volume_claimed_change(routed({"v1"}), "v1")}).format_version() ==
        entry_format_expectations);
}

TEST_CASE("refused entries are forgotten once 65,536 entries old") {
  catalog c;
  commit(c, {upsert_change(make_node("n1"))});
  auto stale = make_entry({upsert_change(make_node("n1"))}, {expect_node("n1", 99)});
  apply(c, 2, stale);
  apply(c, 3, stale);
  CHECK(c.refused.size() == 2);
  apply(c, 2 + 65'536, make_entry({}));
  CHECK(c.refused.size() == 2);
  apply(c, 3 + 65'537, make_entry({}));
  CHECK(c.refused.empty());
}

TEST_CASE("the state tables refuse exactly the entries the catalog refuses") {
  // Random writes of allocs, nodes, plugins, volumes and ACL tokens, each
  // built on the catalog as of some recent index (so many are stale), go
  // through the catalog and the state tables; after every batch both hold
  // the same objects.
  berth::test::temp_dir dir("berth-cas-");
  auto store = must(state_store::open(dir / "state.db"));
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    catalog c;
    c.applied_index = must(store->applied_index());
    // Start each seed from the tables' contents.
    auto loaded = must(store->load());
    for (auto& a : loaded.allocs) c.allocs.emplace(a.id(), a);
    for (auto& n : loaded.nodes) c.nodes.emplace(n.id(), n);
    for (auto& p : loaded.plugins) c.plugins.emplace(p.id(), p);
    for (auto& v : loaded.volumes) add_volume(c, v);
    add_acl(c, loaded.acl_policies, loaded.acl_tokens, loaded.acl_bootstrap_index);
    std::vector<catalog> history{c};  // the states an entry may be built on
    size_t refused = 0, applied = 0;
    for (int batch = 0; batch < 30; ++batch) {
      std::vector<std::pair<uint64_t, std::string>> entries;
      for (int k = 0, n = 1 + pick(4); k < n; ++k) {
        const auto& base = history[history.size() - 1 - pick(std::min<int>(3, history.size()))];
        std::vector<v1::Change> changes;
        for (int j = 0, m = 1 + pick(3); j < m; ++j) {
          auto id = std::to_string(pick(4));
          auto node = "n" + std::to_string(pick(3));
          switch (pick(9)) {
            case 0:
              changes.push_back(upsert_change(make_alloc("a" + id, node)));
              break;
            case 1:
              changes.push_back(alloc_delete_change("a" + id));
              break;
            case 2:
              changes.push_back(upsert_change(make_node(node)));
              break;
            case 3:
              changes.push_back(node_delete_change(node));
              break;
            case 4: {
              v1::Plugin p;
              p.set_id("p" + id);
              changes.push_back(upsert_change(p));
              break;
            }
            case 5: {
              v1::Volume v;
              v.set_namespace_("default");
              v.set_id("v" + id);
              v.set_plugin_id("p0");
              changes.push_back(upsert_change(v));
              break;
            }
            case 6: {
              v1::Change t;
              t.mutable_acl_token_upsert()->set_accessor_id("t" + id);
              t.mutable_acl_token_upsert()->set_secret_hash("h" + id);
              changes.push_back(t);
              break;
            }
            case 7: {
              auto a = make_alloc("a" + id, node);
              auto* av = a.add_volumes();
              av->set_volume_id("v" + id);
              changes.push_back(alloc_volume_claimed_change(a, "v" + id));
              break;
            }
            default:
              changes.push_back(alloc_volume_freed_change("a" + id, "default", "v" + id));
          }
        }
        auto entry = built_on(base, changes, pick(2) == 0);
        auto index = c.applied_index + 1;
        apply(c, index, entry);
        if (take_refused(c, index))
          ++refused;
        else
          ++applied;
        entries.emplace_back(index, entry.SerializeAsString());
      }
      REQUIRE(failure_of(store->apply(entries)) == "");
      history.push_back(c);
      auto in_tables = must(store->load());
      REQUIRE(in_tables.applied_index == c.applied_index);
      auto same = [](const auto& rows, const auto& map) {
        if (rows.size() != map.size()) return false;
        for (const auto& r : rows) {
          auto it = map.find(r.id());
          if (it == map.end() || it->second.SerializeAsString() != r.SerializeAsString())
            return false;
        }
        return true;
      };
      CHECK(same(in_tables.allocs, c.allocs));
      CHECK(same(in_tables.nodes, c.nodes));
      CHECK(same(in_tables.plugins, c.plugins));
      REQUIRE(in_tables.volumes.size() == c.volumes.size());
      for (const auto& v : in_tables.volumes)
        CHECK(find_volume(c, {v.namespace_(), v.id()})->SerializeAsString() ==
              v.SerializeAsString());
      CHECK(in_tables.acl_tokens.size() == c.acl_tokens.size());
    }
    // Both outcomes happened, so the comparison above judged both.
    CHECK(refused > 0);
    CHECK(applied > 0);
  }
}

TEST_CASE("the state tables refuse an entry of a newer format, naming the fix") {
  berth::test::temp_dir dir("berth-cas-");
  auto store = must(state_store::open(dir / "state.db"));
  auto e = make_entry({upsert_change(make_node("n1"))});
  e.set_format_version(entry_format_newest + 1);
  auto f = store->apply({{1, e.SerializeAsString()}});
  CHECK(failure_of(f).find("newer than this berthd applies") != std::string::npos);
  CHECK(failure_of(f).find("upgrade berthd") != std::string::npos);
  CHECK(must(store->applied_index()) == 0);
}
