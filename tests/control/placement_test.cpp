// control/placement: where alloc run places an alloc that names no node;
// controller choice (healthy, connected, in turn, within a required
// topology), the controllers' call limit, and a node's volume count.
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "control/allocs.hpp"
#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "control/placement.hpp"
#include "control/views.hpp"
#include "fixtures.hpp"

using namespace berth;
// The shared fixtures the cases from control_test.cpp use; commit() is the
// one below, the same.
using berth::test::add_claim;
using berth::test::controller_plugin;
using berth::test::make_volume;

namespace {

v1::Volume volume(const std::string& id, const std::string& plugin = "p",
                  v1::AccessMode mode = v1::SINGLE_NODE_WRITER) {
  v1::Volume v;
  v.set_id(id);
  v.set_namespace_("default");
  v.set_plugin_id(plugin);
  v.set_external_id("ext-" + id);
  auto* cap = v.add_capabilities();
  cap->set_access_mode(mode);
  cap->set_attachment_mode(v1::FILE_SYSTEM);
  return v;
}

void claimed_by(v1::Volume& v, const std::string& alloc, const std::string& node) {
  auto* c = v.add_claims();
  c->set_alloc_id(alloc);
  c->set_node_id(node);
  c->set_state(v1::CLAIM_TAKEN);
  c->set_mode(v1::CLAIM_WRITE);
  c->set_access_mode(v.capabilities(0).access_mode());
  c->set_attachment_mode(v1::FILE_SYSTEM);
}

v1::Node node(const std::string& id) {
  v1::Node n;
  n.set_id(id);
  n.set_status(v1::NODE_READY);
  n.set_has_client(true);
  return n;
}

v1::PluginInstance* instance(v1::Plugin& p, const std::string& node, bool healthy = true) {
  auto* i = p.add_nodes();
  i->set_node_id(node);
  i->set_healthy(healthy);
  i->set_csi_node_id("csi-" + node);
  return i;
}

v1::Plugin plugin(const std::string& id, const std::vector<std::string>& nodes) {
  v1::Plugin p;
  p.set_id(id);
  for (const auto& n : nodes) instance(p, n);
  return p;
}

v1::Alloc alloc_on(const std::string& id, const std::string& node, v1::AllocState state) {
  v1::Alloc a;
  a.set_id(id);
  a.set_namespace_("default");
  a.set_node_id(node);
  a.set_state(state);
  return a;
}

v1::Alloc to_place(const std::vector<std::string>& volumes, bool read_only = false) {
  v1::Alloc a;
  a.set_id("new");
  a.set_namespace_("default");
  a.set_state(v1::ALLOC_PENDING);
  for (const auto& v : volumes) {
    auto* av = a.add_volumes();
    av->set_name(v);
    av->set_volume_id(v);
    av->set_read_only(read_only);
  }
  return a;
}

void commit(catalog& c, std::vector<v1::Change> changes) {
  apply(c, c.applied_index + 1, make_entry(std::move(changes)));
}

placement_facts everyone_connected() {
  placement_facts f;
  f.connected = [](const std::string&) { return true; };
  f.marking_down = [](const std::string&) { return false; };
  f.now_ms = 1000;
  return f;
}

std::string reason_of(const placement& p, const std::string& node) {
  for (const auto& fit : p.nodes)
    if (fit.node_id == node) return fit.reason;
  return "(not listed)";
}

}  // namespace

TEST_CASE("placement: of the nodes that fit, the one with the fewest allocs, ties by name") {
  catalog c;
  commit(c, {upsert_change(node("n1")), upsert_change(node("n2")), upsert_change(node("n3")),
             upsert_change(plugin("p", {"n1", "n2", "n3"})), upsert_change(volume("db"))});
  auto p = place_alloc(c, to_place({"db"}), everyone_connected());
  REQUIRE(p.chosen);
  CHECK(*p.chosen == "n1");  // all empty: the first name
  REQUIRE(p.nodes.size() == 3);
  for (const auto& fit : p.nodes) CHECK(fit.reason.empty());
  commit(c, {upsert_change(alloc_on("x", "n1", v1::ALLOC_RUNNING)),
             upsert_change(alloc_on("y", "n2", v1::ALLOC_PENDING)),
             upsert_change(alloc_on("z", "n3", v1::ALLOC_COMPLETE)),
             upsert_change(alloc_on("w", "n3", v1::ALLOC_FAILED))});
  p = place_alloc(c, to_place({"db"}), everyone_connected());
  REQUIRE(p.chosen);
  CHECK(*p.chosen == "n3");  // its allocs are terminal: none counted
  CHECK(p.nodes[0].allocs == 1);
  CHECK(p.nodes[2].allocs == 0);
  commit(c, {upsert_change(alloc_on("v", "n3", v1::ALLOC_RUNNING))});
  p = place_alloc(c, to_place({"db"}), everyone_connected());
  REQUIRE(p.chosen);
  CHECK(*p.chosen == "n1");  // 1, 1, 1: by name again
}

TEST_CASE("placement: a group spreads over the nodes before other allocs count") {
  catalog c;
  auto other = alloc_on("x", "n2", v1::ALLOC_RUNNING);
  auto web0 = alloc_on("web[0]", "n1", v1::ALLOC_RUNNING);
  web0.set_group("web");
  commit(c, {upsert_change(node("n1")), upsert_change(node("n2")), upsert_change(node("n3")),
             upsert_change(plugin("p", {"n1", "n2", "n3"})), upsert_change(other),
             upsert_change(web0)});
  auto a = to_place({});
  a.set_id("web[1]");
  a.set_group("web");
  auto p = place_alloc(c, a, everyone_connected());
  REQUIRE(p.chosen);
  CHECK(*p.chosen == "n3");  // n1 has web[0]; n2 none of web but another alloc
  other.set_state(v1::ALLOC_COMPLETE);
  commit(c, {upsert_change(other)});
  p = place_alloc(c, a, everyone_connected());
  REQUIRE(p.chosen);
  CHECK(*p.chosen == "n2");
  CHECK(p.nodes[0].group_allocs == 1);
  CHECK(p.nodes[1].group_allocs == 0);
}

TEST_CASE("placement: allocs being started count before they are committed") {
  catalog c;
  commit(c, {upsert_change(node("n1")), upsert_change(node("n2")),
             upsert_change(plugin("p", {"n1", "n2"}))});
  std::map<std::string, v1::Alloc> starting;
  starting["s1"] = alloc_on("s1", "n1", v1::ALLOC_PENDING);
  starting["s1"].set_group("web");
  auto facts = everyone_connected();
  facts.starting = &starting;
  auto a = to_place({});
  a.set_group("web");
  auto p = place_alloc(c, a, facts);
  REQUIRE(p.chosen);
  CHECK(*p.chosen == "n2");
  CHECK(p.nodes[0].allocs == 1);
  CHECK(p.nodes[0].group_allocs == 1);
  // Committed since (and ended): the committed record counts, not the start.
  commit(c, {upsert_change(alloc_on("s1", "n1", v1::ALLOC_COMPLETE))});
  p = place_alloc(c, a, facts);
  REQUIRE(p.chosen);
  CHECK(*p.chosen == "n1");
  CHECK(p.nodes[0].allocs == 0);
}

TEST_CASE("placement: each rule rejects a node with its reason") {
  catalog c;
  auto down = node("a-down");
  down.set_status(v1::NODE_DOWN);
  auto no_client = node("b-no-client");
  no_client.set_has_client(false);
  auto ineligible = node("c-ineligible");
  ineligible.set_ineligible(true);
  auto draining = node("d-draining");
  draining.set_ineligible(true);
  draining.mutable_drain()->set_deadline_ms(1);
  auto p = plugin("p", {"a-down", "b-no-client", "c-ineligible", "d-draining", "e-away",
                        "f-marking", "h-unhealthy", "i-zone", "j-full", "k-fits"});
  p.mutable_nodes(6)->set_healthy(false);
  p.mutable_nodes(6)->set_health_description("socket gone");
  (*p.mutable_nodes(7)->mutable_accessible_topology()->mutable_segments())["zone"] = "b";
  (*p.mutable_nodes(9)->mutable_accessible_topology()->mutable_segments())["zone"] = "a";
  p.mutable_nodes(8)->set_max_volumes(1);
  (*p.mutable_nodes(8)->mutable_accessible_topology()->mutable_segments())["zone"] = "a";
  auto db = volume("db");
  (*db.add_accessible_topology()->mutable_segments())["zone"] = "a";
  auto other = volume("other");
  claimed_by(other, "x", "j-full");
  std::vector<v1::Change> changes{upsert_change(p), upsert_change(db), upsert_change(other)};
  for (const auto& n : {down, no_client, ineligible, draining, node("e-away"), node("f-marking"),
                        node("g-no-plugin"), node("h-unhealthy"), node("i-zone"), node("j-full"),
                        node("k-fits")})
    changes.push_back(upsert_change(n));
  commit(c, changes);
  auto facts = everyone_connected();
  facts.connected = [](const std::string& n) { return n != "e-away"; };
  facts.marking_down = [](const std::string& n) { return n == "f-marking"; };
  auto placed = place_alloc(c, to_place({"db"}), facts);
  REQUIRE(placed.chosen);
  CHECK(*placed.chosen == "k-fits");
  CHECK(placed.nodes.size() == 11);
  CHECK(reason_of(placed, "a-down").find("is down") != std::string::npos);
  CHECK(reason_of(placed, "b-no-client").find("has no berth client") != std::string::npos);
  CHECK(reason_of(placed, "c-ineligible").find("is ineligible") != std::string::npos);
  CHECK(reason_of(placed, "d-draining").find("is draining") != std::string::npos);
  CHECK(reason_of(placed, "e-away").find("not connected") != std::string::npos);
  CHECK(reason_of(placed, "f-marking").find("being marked down") != std::string::npos);
  CHECK(reason_of(placed, "g-no-plugin").find("has no node instance on node 'g-no-plugin'") !=
        std::string::npos);
  CHECK(reason_of(placed, "h-unhealthy").find("is unhealthy (socket gone)") != std::string::npos);
  CHECK(reason_of(placed, "i-zone").find("outside the volume's accessible topology") !=
        std::string::npos);
  CHECK(reason_of(placed, "j-full").find("max_volumes_per_node 1") != std::string::npos);
  CHECK(reason_of(placed, "k-fits").empty());

  // The one that fits away too: none fits.
  facts.connected = [](const std::string& n) { return n != "e-away" && n != "k-fits"; };
  auto none = place_alloc(c, to_place({"db"}), facts);
  CHECK_FALSE(none.chosen);
  auto f = no_node_fits(to_place({"db"}), none);
  CHECK(f.code == errc::refused);
  for (const auto& fit : none.nodes) CHECK(f.message.find("\n  " + fit.node_id + ": ") != std::string::npos);
  CHECK(f.message.find("11 nodes considered") != std::string::npos);
  CHECK(f.message.find("--explain") != std::string::npos);
}

TEST_CASE("placement: a volume written elsewhere fits nowhere, and no nodes at all is said so") {
  catalog c;
  CHECK(no_node_fits(to_place({"db"}), place_alloc(c, to_place({"db"}), everyone_connected()))
            .message.find("no node is known") != std::string::npos);
  auto db = volume("db");
  claimed_by(db, "x", "n1");
  commit(c, {upsert_change(node("n1")), upsert_change(node("n2")),
             upsert_change(plugin("p", {"n1", "n2"})), upsert_change(db)});
  auto p = place_alloc(c, to_place({"db"}), everyone_connected());
  CHECK_FALSE(p.chosen);
  CHECK(reason_of(p, "n1").find("already claimed by") != std::string::npos);
  CHECK(reason_of(p, "n2").find("already claimed by") != std::string::npos);
  // Another volume of the alloc not registered: named for every node.
  auto q = place_alloc(c, to_place({"nope"}), everyone_connected());
  CHECK_FALSE(q.chosen);
  CHECK(reason_of(q, "n1").find("'nope' is not registered") != std::string::npos);
}

TEST_CASE("placement: the alloc's own volumes and the claims in flight count against max volumes") {
  catalog c;
  auto p = plugin("p", {"n1", "n2"});
  p.mutable_nodes(0)->set_max_volumes(1);
  p.mutable_nodes(1)->set_max_volumes(2);
  commit(c, {upsert_change(node("n1")), upsert_change(node("n2")), upsert_change(p),
             upsert_change(volume("a")), upsert_change(volume("b")), upsert_change(volume("c"))});
  auto facts = everyone_connected();
  auto two = place_alloc(c, to_place({"a", "b"}), facts);
  REQUIRE(two.chosen);
  CHECK(*two.chosen == "n2");
  CHECK(reason_of(two, "n1").find("volume 'b'") != std::string::npos);
  // A claim of c on n2 in flight: n2 holds one more, so two do not fit.
  std::map<std::pair<std::string, std::string>, std::set<volume_key>> claiming;
  claiming[{"n2", "p"}] = {{"default", "c"}};
  facts.claiming = &claiming;
  CHECK_FALSE(place_alloc(c, to_place({"a", "b"}), facts).chosen);
  auto one = place_alloc(c, to_place({"a"}), facts);
  REQUIRE(one.chosen);
  CHECK(*one.chosen == "n1");
}

// Properties over random catalogs, against a direct reading of the rules
// (not the claim function placement calls): a chosen node breaks no rule;
// when some node fits, one is chosen, and it is the first with the fewest
// allocs; every node is listed, with a reason exactly when it does not fit.
TEST_CASE("placement: random catalogs, checked against the rules read directly") {
  int placed = 0;
  int refused = 0;
  for (uint32_t seed = 1; seed <= 2000; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    catalog c;
    std::vector<v1::Change> changes;
    const int nodes = 1 + pick(5);
    std::map<std::string, v1::Node> node_of;
    std::set<std::string> away, marking;
    for (int i = 0; i < nodes; ++i) {
      auto n = node("n" + std::to_string(i));
      if (pick(8) == 0) n.set_status(v1::NODE_DOWN);
      if (pick(10) == 0) n.set_has_client(false);
      if (pick(8) == 0) n.set_ineligible(true);
      if (pick(10) == 0) away.insert(n.id());
      if (pick(12) == 0) marking.insert(n.id());
      node_of[n.id()] = n;
      changes.push_back(upsert_change(n));
    }
    std::map<std::string, v1::Plugin> plugins;
    for (const std::string id : {"p", "q"}) {
      v1::Plugin p;
      p.set_id(id);
      for (const auto& [nid, n] : node_of) {
        if (pick(4) == 0) continue;
        auto* inst = instance(p, nid, pick(6) != 0);
        inst->set_max_volumes(pick(3));
        if (pick(2)) (*inst->mutable_accessible_topology()->mutable_segments())["zone"] = pick(2) ? "a" : "b";
      }
      plugins[id] = p;
      changes.push_back(upsert_change(p));
    }
    std::map<std::string, v1::Volume> volumes;
    for (int i = 0; i < 6; ++i) {
      auto v = volume("v" + std::to_string(i), pick(2) ? "p" : "q",
                      pick(2) ? v1::SINGLE_NODE_WRITER : v1::MULTI_NODE_MULTI_WRITER);
      if (pick(3) == 0) (*v.add_accessible_topology()->mutable_segments())["zone"] = pick(2) ? "a" : "b";
      if (pick(3) == 0) v.set_group(pick(2) ? "g" : "h");
      for (int k = pick(3); k > 0; --k)
        claimed_by(v, "x" + std::to_string(pick(20)), "n" + std::to_string(pick(nodes)));
      volumes[v.id()] = v;
      changes.push_back(upsert_change(v));
    }
    for (int k = pick(8); k > 0; --k) {
      auto o = alloc_on("o" + std::to_string(k), "n" + std::to_string(pick(nodes)),
                        pick(2) ? v1::ALLOC_RUNNING : v1::ALLOC_COMPLETE);
      if (pick(2)) o.set_group(pick(2) ? "web" : "db");
      changes.push_back(upsert_change(o));
    }
    commit(c, changes);
    std::set<std::string> wanted;
    for (int k = 1 + pick(2); k > 0; --k) wanted.insert("v" + std::to_string(pick(6)));
    auto a = to_place({wanted.begin(), wanted.end()});
    if (pick(2)) a.set_group("web");
    auto facts = everyone_connected();
    facts.connected = [&](const std::string& n) { return away.count(n) == 0; };
    facts.marking_down = [&](const std::string& n) { return marking.count(n) > 0; };
    auto p = place_alloc(c, a, facts);

    // The rules, read directly.
    auto reachable = [&](const v1::Volume& v, const std::string& nid) {
      const auto& pl = plugins[v.plugin_id()];
      int healthy = 0;
      const v1::PluginInstance* inst = nullptr;
      for (const auto& i : pl.nodes()) {
        healthy += i.healthy() ? 1 : 0;
        if (i.node_id() == nid) inst = &i;
      }
      if (healthy == 0 || inst == nullptr || !inst->healthy()) return false;
      for (const auto& t : v.accessible_topology())
        for (const auto& [k, val] : t.segments()) {
          auto it = inst->accessible_topology().segments().find(k);
          if (it == inst->accessible_topology().segments().end() || it->second != val) return false;
        }
      return true;
    };
    auto fits = [&](const std::string& nid) {
      const auto& n = node_of[nid];
      if (!n.has_client() || n.status() != v1::NODE_READY || n.ineligible() || away.count(nid) ||
          marking.count(nid))
        return false;
      std::map<std::string, std::set<std::string>> planned;  // plugin -> volumes
      for (const auto& vid : wanted) {
        const auto& v = volumes[vid];
        if (!reachable(v, nid)) return false;
        const v1::PluginInstance* inst = nullptr;
        for (const auto& i : plugins[v.plugin_id()].nodes())
          if (i.node_id() == nid) inst = &i;
        if (!v.claims().empty() && v.capabilities(0).access_mode() == v1::SINGLE_NODE_WRITER)
          return false;
        bool here = false;
        for (const auto& cl : v.claims()) here |= cl.node_id() == nid;
        std::set<std::string> held = planned[v.plugin_id()];
        for (const auto& [oid, ov] : volumes)
          if (ov.plugin_id() == v.plugin_id())
            for (const auto& cl : ov.claims())
              if (cl.node_id() == nid) held.insert(oid);
        held.erase(vid);
        if (!here && inst->max_volumes() > 0 &&
            static_cast<int64_t>(held.size()) >= inst->max_volumes())
          return false;
        planned[v.plugin_id()].insert(vid);
      }
      // Every volume of a wanted volume's group reachable from the node too.
      for (const auto& vid : wanted)
        for (const auto& [oid, ov] : volumes)
          if (!volumes[vid].group().empty() && ov.group() == volumes[vid].group() &&
              !wanted.count(oid) && !reachable(ov, nid))
            return false;
      return true;
    };
    auto live_on = [&](const std::string& nid, bool of_group) {
      int64_t n = 0;
      for (const auto& [id, x] : c.allocs)
        n += x.node_id() == nid && x.state() == v1::ALLOC_RUNNING &&
                     (!of_group || (!a.group().empty() && x.group() == a.group()))
                 ? 1
                 : 0;
      return n;
    };
    REQUIRE(p.nodes.size() == node_of.size());
    std::optional<std::string> expected;
    std::pair<int64_t, int64_t> fewest{0, 0};
    for (const auto& fit : p.nodes) {
      CAPTURE(fit.node_id);
      CAPTURE(fit.reason);
      CHECK(fit.reason.empty() == fits(fit.node_id));
      CHECK(fit.allocs == live_on(fit.node_id, false));
      CHECK(fit.group_allocs == live_on(fit.node_id, true));
      std::pair<int64_t, int64_t> key{live_on(fit.node_id, true), live_on(fit.node_id, false)};
      if (fits(fit.node_id) && (!expected || key < fewest)) {
        expected = fit.node_id;
        fewest = key;
      }
    }
    CHECK(p.chosen == expected);
    (p.chosen ? placed : refused)++;
  }
  // Both outcomes are exercised.
  CHECK(placed > 300);
  CHECK(refused > 300);
}

TEST_CASE("groups: member ids, the members' runs, and the refusals before anything runs") {
  CHECK(valid_member_id("db"));
  CHECK(valid_member_id("db[0]"));
  CHECK(valid_member_id("web-1[99999]"));
  CHECK_FALSE(valid_member_id("db[01]"));   // no leading zero: one spelling per member
  CHECK_FALSE(valid_member_id("db[100000]"));
  CHECK_FALSE(valid_member_id("db[]"));
  CHECK_FALSE(valid_member_id("db[x]"));
  CHECK_FALSE(valid_member_id("[0]"));
  CHECK_FALSE(valid_member_id("db[0][1]"));
  CHECK_FALSE(valid_member_id("-db[0]"));
  CHECK(member_id("db", 2) == "db[2]");

  catalog c;
  commit(c, {upsert_change(volume("db[0]")), upsert_change(volume("db[1]")),
             upsert_change(volume("logs[0]"))});
  v1::AllocRunRequest req;
  req.set_group("web");
  req.set_count(2);
  req.set_per_alloc(true);
  auto* v = req.add_volumes();
  v->set_name("data");
  v->set_volume_id("db");
  CHECK(is_group_run(req));
  CHECK_FALSE(admit_group_run(c, req));
  auto m1 = group_member(req, 1);
  CHECK(m1.id() == "web[1]");
  CHECK(m1.group() == "web");
  CHECK(m1.count() == 0);
  CHECK_FALSE(m1.per_alloc());
  CHECK(m1.volumes(0).volume_id() == "db[1]");
  CHECK(m1.volumes(0).name() == "data");
  // Every missing member volume named at once.
  auto* w = req.add_volumes();
  w->set_name("logs");
  w->set_volume_id("logs");
  req.set_count(3);
  auto f = admit_group_run(c, req);
  REQUIRE(f);
  CHECK(f->code == errc::not_found);
  CHECK(f->message.find("'logs[1]', 'db[2]', 'logs[2]'") != std::string::npos);
  CHECK(f->message.find("nothing was run") != std::string::npos);
  // Without --per-alloc the members share the volumes as named.
  req.set_per_alloc(false);
  CHECK_FALSE(admit_group_run(c, req));
  CHECK(group_member(req, 2).volumes(0).volume_id() == "db");
  req.set_count(0);
  CHECK(admit_group_run(c, req)->code == errc::invalid);
  req.set_count(max_group_count + 1);
  CHECK(admit_group_run(c, req)->code == errc::invalid);
  req.set_count(2);
  req.set_id("x");
  CHECK(admit_group_run(c, req)->message.find("--id is not taken") != std::string::npos);
  req.clear_id();
  req.set_group("bad name");
  CHECK(admit_group_run(c, req)->code == errc::invalid);
  req.clear_group();
  CHECK(admit_group_run(c, req)->message.find("need --group") != std::string::npos);
}

TEST_CASE("replacement ids: a lost member's replacement, and its replacement in turn") {
  CHECK(replacement_id("web[0]") == "web[0].1");
  CHECK(replacement_id("web[0].1") == "web[0].2");
  CHECK(replacement_id("web[3].9") == "web[3].10");
  CHECK(valid_alloc_id("web[0].1"));
  CHECK(valid_alloc_id("web[0].99999"));
  CHECK(valid_alloc_id("web[0]"));
  CHECK(valid_alloc_id("plain.id-1"));
  CHECK_FALSE(valid_alloc_id("web[0].0"));
  CHECK_FALSE(valid_alloc_id("web[0].01"));   // one spelling per replacement
  CHECK_FALSE(valid_alloc_id("web[0].100000"));
  CHECK_FALSE(valid_alloc_id("web[0]."));
  CHECK_FALSE(valid_alloc_id("web[0].1.1"));
  CHECK_FALSE(valid_alloc_id("web[01].1"));
  CHECK_FALSE(valid_alloc_id("web].1"));
  // A volume id is never a replacement's.
  CHECK_FALSE(valid_member_id("db[0].1"));
}

namespace {

// A group member lost on node n1 (down), placed there, holding volume db[0].
catalog with_lost_member(bool placed, bool claim_held) {
  catalog c;
  auto n1 = node("n1");
  n1.set_status(v1::NODE_DOWN);
  auto v = volume("db[0]");
  if (claim_held) claimed_by(v, "web[0]", "n1");
  auto a = alloc_on("web[0]", "n1", v1::ALLOC_LOST);
  a.set_group("web");
  a.set_placed(placed);
  a.set_message("node 'n1' is down");
  auto* av = a.add_volumes();
  av->set_name("data");
  av->set_volume_id("db[0]");
  av->set_published_path("/old/path");
  a.add_command("sleep");
  a.add_command("600");
  commit(c, {upsert_change(n1), upsert_change(node("n2")), upsert_change(v),
             upsert_change(plugin("p", {"n1", "n2"})), upsert_change(a)});
  return c;
}

}  // namespace

TEST_CASE("replacement: a lost member waits for its claims' release, then runs placed anew") {
  auto held = with_lost_member(true, true);
  auto r = replace_lost_member(held, "web[0]");
  CHECK(r.what == replacement::wait);
  CHECK(r.why.find("'db[0]'") != std::string::npos);

  auto c = with_lost_member(true, false);
  r = replace_lost_member(c, "web[0]");
  REQUIRE(r.what == replacement::run);
  CHECK(r.request.id() == "web[0].1");
  CHECK(r.request.replaces() == "web[0]");
  CHECK(r.request.group() == "web");
  CHECK(r.request.node_id().empty());  // placed: placed anew
  REQUIRE(r.request.volumes_size() == 1);
  CHECK(r.request.volumes(0).volume_id() == "db[0]");
  CHECK(r.request.volumes(0).name() == "data");
  CHECK(r.request.volumes(0).published_path().empty());
  CHECK(r.request.command_size() == 2);
  // Its pending alloc names what it replaces, and placement takes it to n2.
  auto pending = pending_alloc(r.request, r.request.id(), 5);
  CHECK(pending.replaces() == "web[0]");
  CHECK_FALSE(admit_alloc_request(c, pending));
  auto p = place_alloc(c, pending, everyone_connected());
  REQUIRE(p.chosen);
  CHECK(*p.chosen == "n2");
  CHECK(reason_of(p, "n1").find("down") != std::string::npos);

  // A pinned member stays pinned.
  auto pinned = with_lost_member(false, false);
  r = replace_lost_member(pinned, "web[0]");
  REQUIRE(r.what == replacement::run);
  CHECK(r.request.node_id() == "n1");

  // Replaced already (a leader that asks again finds it): dropped.
  commit(c, {upsert_change(pending)});
  CHECK(replace_lost_member(c, "web[0]").what == replacement::drop);
  // The replacement lost in turn is replaced by web[0].2.
  auto lost_again = alloc_in_state(pending, v1::ALLOC_LOST, "node 'n2' is down", 9);
  lost_again.set_node_id("n2");
  lost_again.set_placed(true);
  commit(c, {upsert_change(lost_again)});
  r = replace_lost_member(c, "web[0].1");
  REQUIRE(r.what == replacement::run);
  CHECK(r.request.id() == "web[0].2");
  CHECK(r.request.replaces() == "web[0].1");
}

TEST_CASE("replacement: only a lost member of a group the operator did not stop") {
  auto c = with_lost_member(true, false);
  CHECK(replace_lost_member(c, "nobody").what == replacement::drop);
  // Not lost: failed, complete, running members are not replaced.
  for (auto s : {v1::ALLOC_FAILED, v1::ALLOC_COMPLETE, v1::ALLOC_RUNNING, v1::ALLOC_PENDING}) {
    auto other = c;
    auto a = other.allocs.at("web[0]");
    a.set_state(s);
    commit(other, {upsert_change(a)});
    CHECK(replace_lost_member(other, "web[0]").what == replacement::drop);
  }
  // Lost but run alone: not replaced.
  {
    auto other = c;
    auto a = other.allocs.at("web[0]");
    a.clear_group();
    commit(other, {upsert_change(a)});
    CHECK(replace_lost_member(other, "web[0]").what == replacement::drop);
    CHECK_FALSE(alloc_kept_lost(other, "web[0]", 7));
  }
  // alloc stop on it: kept lost, never replaced; a second stop changes nothing.
  auto kept = alloc_kept_lost(c, "web[0]", 7);
  REQUIRE(kept);
  CHECK(kept->no_replace());
  CHECK(kept->state() == v1::ALLOC_LOST);
  CHECK(kept->message().find("not replaced") != std::string::npos);
  CHECK(kept->modified_at_ms() == 7);
  commit(c, {upsert_change(*kept)});
  CHECK(replace_lost_member(c, "web[0]").what == replacement::drop);
  CHECK_FALSE(alloc_kept_lost(c, "web[0]", 8));
  // The last replacement an id can have: given up, saying why.
  auto last = with_lost_member(true, false);
  auto a = last.allocs.at("web[0]");
  a.set_id("web[0].99999");
  commit(last, {upsert_change(a)});
  auto r = replace_lost_member(last, "web[0].99999");
  CHECK(r.what == replacement::drop);
  CHECK(r.why.find("not a valid alloc id") != std::string::npos);
}

TEST_CASE("volume groups: an alloc is placed where every volume of its volume's group is reachable") {
  catalog c;
  v1::Plugin p;
  p.set_id("p");
  for (const auto& [n, zone] : std::vector<std::pair<std::string, std::string>>{
           {"n1", "a"}, {"n2", "b"}, {"n3", "a"}}) {
    auto* i = instance(p, n);
    (*i->mutable_accessible_topology()->mutable_segments())["zone"] = zone;
  }
  auto data = volume("data");
  data.set_group("shard");
  auto logs = volume("logs");
  logs.set_group("shard");
  (*logs.add_accessible_topology()->mutable_segments())["zone"] = "b";
  auto other = volume("other");
  other.set_group("elsewhere");
  (*other.add_accessible_topology()->mutable_segments())["zone"] = "a";
  commit(c, {upsert_change(node("n1")), upsert_change(node("n2")), upsert_change(node("n3")),
             upsert_change(p), upsert_change(data), upsert_change(logs), upsert_change(other)});
  REQUIRE(c.volume_groups.count({"default", "shard"}));
  CHECK(c.volume_groups.at({"default", "shard"}) == std::set<std::string>{"data", "logs"});
  // data alone is reachable everywhere; its group's logs only in zone b.
  auto placed = place_alloc(c, to_place({"data"}), everyone_connected());
  REQUIRE(placed.chosen);
  CHECK(*placed.chosen == "n2");
  CHECK(reason_of(placed, "n1") ==
        "volume 'data' is in volume group 'shard', and volume 'logs' is not accessible from node "
        "'n1' (outside the volume's accessible topology)");
  // Another group's volumes do not count.
  CHECK(place_alloc(c, to_place({"other"}), everyone_connected()).chosen == "n1");
  // Re-registered out of the group: placed by its own topology again.
  logs.clear_group();
  commit(c, {upsert_change(logs)});
  CHECK(c.volume_groups.at({"default", "shard"}) == std::set<std::string>{"data"});
  CHECK(place_alloc(c, to_place({"data"}), everyone_connected()).chosen == "n1");
  // A deleted volume leaves its group; the last one leaves no group behind.
  commit(c, {volume_delete_change("default", "data")});
  CHECK_FALSE(c.volume_groups.count({"default", "shard"}));
  // A bad group name is refused at registration.
  auto bad = volume("bad");
  bad.set_group("no spaces");
  auto problems = validate_volume(bad);
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].field == "group");
}

TEST_CASE("groups: the answer of a group run counts its members by state and names the failed") {
  v1::AllocRunRequest req;
  req.set_group("web");
  req.set_count(3);
  auto member = [](const std::string& id, v1::AllocState s) {
    v1::Response r;
    *r.add_allocs() = alloc_on(id, "n1", s);
    return r;
  };
  auto ok = group_outcome(req, {member("web[0]", v1::ALLOC_RUNNING),
                                member("web[1]", v1::ALLOC_RUNNING),
                                member("web[2]", v1::ALLOC_RUNNING)});
  CHECK_FALSE(ok.has_error());
  CHECK(ok.message() == "alloc group 'web': 3 of 3 allocs running");
  CHECK(ok.allocs_size() == 3);
  // Sent again after members ended: counted by state, with what to do.
  auto ended = group_outcome(req, {member("web[0]", v1::ALLOC_RUNNING),
                                   member("web[1]", v1::ALLOC_COMPLETE),
                                   member("web[2]", v1::ALLOC_COMPLETE)});
  CHECK(ended.message() ==
        "alloc group 'web': 1 of 3 allocs running, 2 complete (members that ended are not run "
        "again: give the group another name to run it anew)");
  // A member failed: an error naming it, every member's alloc still listed.
  v1::Response refused = error_response(failure{errc::refused, "no node can run alloc 'web[1]'"});
  *refused.add_allocs() = alloc_on("web[1]", "n1", v1::ALLOC_FAILED);
  auto failed = group_outcome(req, {member("web[0]", v1::ALLOC_RUNNING), refused,
                                    member("web[2]", v1::ALLOC_RUNNING)});
  REQUIRE(failed.has_error());
  CHECK(failed.error().message() ==
        "alloc group 'web': 1 of 3 allocs failed (2 of 3 allocs running):\n"
        "  web[1]: no node can run alloc 'web[1]'");
  CHECK(failed.allocs_size() == 3);
}

// Issue 59, item 7: a placement that finds no node waits for the claims on
// its volumes that the watcher is releasing (their allocs ended, vanished,
// or a release runs), and for nothing else.
TEST_CASE("placement: the claims in its way that are being released are the ones it waits for") {
  catalog c;
  auto db = volume("db");
  claimed_by(db, "done", "n1");
  auto logs = volume("logs", "p", v1::MULTI_NODE_MULTI_WRITER);
  claimed_by(logs, "live", "n1");
  claimed_by(logs, "vanished", "n2");
  claimed_by(logs, "releasing", "n2");
  logs.mutable_claims(2)->set_state(v1::CLAIM_UNPUBLISHING);
  auto held = volume("held");
  claimed_by(held, "live", "n1");
  commit(c, {upsert_change(node("n1")), upsert_change(node("n2")),
             upsert_change(plugin("p", {"n1", "n2"})), upsert_change(db), upsert_change(logs),
             upsert_change(held), upsert_change(alloc_on("done", "n1", v1::ALLOC_COMPLETE)),
             upsert_change(alloc_on("live", "n1", v1::ALLOC_RUNNING)),
             upsert_change(alloc_on("releasing", "n2", v1::ALLOC_RUNNING))});
  using found = std::vector<std::pair<volume_key, std::string>>;
  // The completed holder is in the way of a placement of db, until freed.
  auto p = place_alloc(c, to_place({"db"}), everyone_connected());
  CHECK_FALSE(p.chosen);
  CHECK(releases_in_placements_way(c, to_place({"db"})) ==
        found{{{"default", "db"}, "done"}});
  CHECK(releases_in_placements_way(c, to_place({"logs"})) ==
        found{{{"default", "logs"}, "vanished"}, {{"default", "logs"}, "releasing"}});
  // A live holder's claim is not being released: nothing to wait for.
  CHECK(releases_in_placements_way(c, to_place({"held"})).empty());
  CHECK(releases_in_placements_way(c, to_place({"nope"})).empty());
  // Once freed, it places.
  auto freed = volume("db");
  commit(c, {upsert_change(freed)});
  CHECK(releases_in_placements_way(c, to_place({"db"})).empty());
  CHECK(place_alloc(c, to_place({"db"}), everyone_connected()).chosen);
  // The alloc's own claim is never one it waits for.
  auto mine = volume("mine");
  claimed_by(mine, "new", "n1");
  commit(c, {upsert_change(mine)});
  CHECK(releases_in_placements_way(c, to_place({"mine"})).empty());
}

TEST_CASE("controller_choice_is_healthy_connected_and_round_robin") {
  auto p = controller_plugin({{"n1", true}, {"n2", false}, {"n3", true}, {"n4", true}});
  auto connected = [](const std::string& n) { return n != "n4"; };
  auto cands = controller_candidates(p, connected);
  CHECK(cands == std::vector<std::string>{"n1", "n3"});
  size_t turn = 0;
  CHECK(*next_in_turn(cands, turn) == "n1");
  CHECK(*next_in_turn(cands, turn) == "n3");
  CHECK(*next_in_turn(cands, turn) == "n1");
  CHECK_FALSE(next_in_turn({}, turn));
}

TEST_CASE("controller_call_limit_sums_the_healthy_controllers_limits") {
  CHECK(controller_call_limit(v1::Plugin{}) == 1);  // none: still one call may wait for one
  auto p = controller_plugin({{"n1", true}, {"n2", false}, {"n3", true}});
  CHECK(controller_call_limit(p) == 32);  // unreported: 16 each, the unhealthy one not counted
  p.mutable_controllers(0)->set_max_calls(1);
  CHECK(controller_call_limit(p) == 17);
  p.mutable_controllers(2)->set_max_calls(4);
  CHECK(controller_call_limit(p) == 5);
  p.mutable_controllers(1)->set_max_calls(100);
  CHECK(controller_call_limit(p) == 5);
}

TEST_CASE("controller_choice_respects_a_required_topology") {
  auto p = controller_plugin({{"n1", true}, {"n2", true}});
  for (auto [node, zone] : {std::pair{"n1", "a"}, std::pair{"n2", "b"}}) {
    auto* inst = p.add_nodes();
    inst->set_node_id(node);
    (*inst->mutable_accessible_topology()->mutable_segments())["zone"] = zone;
  }
  v1::TopologyRequest t;
  (*t.add_required()->mutable_segments())["zone"] = "b";
  auto all = [](const std::string&) { return true; };
  CHECK(controller_candidates(p, all, &t) == std::vector<std::string>{"n2"});
  v1::TopologyRequest none;
  CHECK(controller_candidates(p, all, &none).size() == 2);
  CHECK(in_required_topology(p, "n1", nullptr));
  CHECK_FALSE(in_required_topology(p, "n3", &t));
}

TEST_CASE("node_volume_count_counts_claimed_and_in_flight_once") {
  catalog c;
  auto a = make_volume("a");
  add_claim(a, "x", "n1");
  add_claim(a, "y", "n1", v1::CLAIM_NODE_DETACHED);
  auto b = make_volume("b");
  add_claim(b, "z", "n2");
  auto other = make_volume("o", "q");
  add_claim(other, "w", "n1");
  commit(c, {upsert_change(a), upsert_change(b), upsert_change(other)});
  CHECK(node_volume_count(c, "n1", "p", {"default", "new"}, {}) == 1);
  CHECK(node_volume_count(c, "n1", "p", {"default", "a"}, {}) == 0);
  CHECK(node_volume_count(c, "n1", "p", {"default", "new"}, {{"default", "c"}, {"default", "a"}}) ==
        2);
}

TEST_CASE("node_volume_count_equals_the_union_it_counts_over_random_sets") {
  // What it computed before by building the union (one set copy and k
  // inserts per claim).
  auto brute = [](const catalog& c, const std::string& node, const std::string& plugin,
                  const volume_key& except, const std::set<volume_key>& in_flight) {
    std::set<volume_key> seen;
    auto it = c.claimed_on.find({node, plugin});
    if (it != c.claimed_on.end()) seen = it->second;
    seen.insert(in_flight.begin(), in_flight.end());
    seen.erase(except);
    return static_cast<int64_t>(seen.size());
  };
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
    catalog c;
    int volumes = 1 + pick(40);
    std::vector<v1::Change> changes;
    for (int i = 0; i < volumes; ++i) {
      auto v = make_volume("v" + std::to_string(i), pick(2) ? "p" : "q");
      for (int k = pick(3); k > 0; --k)
        add_claim(v, "a" + std::to_string(pick(9)), "n" + std::to_string(pick(3)));
      changes.push_back(upsert_change(v));
    }
    commit(c, changes);
    for (int q = 0; q < 20; ++q) {
      std::set<volume_key> in_flight;
      for (int k = pick(volumes + 1); k > 0; --k)
        in_flight.insert({"default", "v" + std::to_string(pick(volumes + 5))});
      volume_key except{"default", "v" + std::to_string(pick(volumes + 5))};
      auto node = "n" + std::to_string(pick(4));
      auto plugin = pick(2) ? "p" : "q";
      CHECK(node_volume_count(c, node, plugin, except, in_flight) ==
            brute(c, node, plugin, except, in_flight));
    }
  }
}
