// The fence against deposed leaders: leader_fence (actors/node_fence) on a
// real client.db, then through a real node actor and the real
// berth-hostpath: CreateVolume, DeleteVolume and ValidateVolumeCapabilities
// of an older leader's term are refused before they reach the plugin, and
// a server's heartbeat answer raises the fence on its own.
#include <doctest/doctest.h>
#include <prometheus/registry.h>

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "../csi/plugin_process.hpp"
#include "tests/test_bins.hpp"
#include "actors/node.hpp"
#include "actors/node_call.hpp"
#include "actors/node_csi.hpp"
#include "csi/client.hpp"
#include "helpers.hpp"

using namespace berth;
using test::must;
using test::plugin_process;
using test::temp_dir;

namespace {

// A server as the node sees it: answers heartbeats with `term` and takes
// every fingerprint.
struct fake_server_state {
  std::shared_ptr<std::atomic<uint64_t>> term;
  std::shared_ptr<std::atomic<int>> heartbeats;
  static inline const char* name = "fake_server";
};

api_actor::behavior_type fake_server(api_actor::stateful_pointer<fake_server_state> self,
                                     std::shared_ptr<std::atomic<uint64_t>> term,
                                     std::shared_ptr<std::atomic<int>> heartbeats) {
  self->state.term = std::move(term);
  self->state.heartbeats = std::move(heartbeats);
  return {
      [](api_atom, pb<v1::Request>&) { return wrap(v1::Response{}); },
      [self](node_atom, const std::string&, const std::string&, int64_t,
             node_actor) -> caf::result<uint64_t, int64_t, uint64_t> {
        ++*self->state.heartbeats;
        return {*self->state.term, int64_t{0}, uint64_t{0}};  // no lease: these tests fence by term only
      },
  };
}

struct fixture {
  temp_dir dir;
  plugin_process plugin;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::string db;
  std::shared_ptr<metrics> stats = make_metrics();

  explicit fixture(std::vector<std::string> plugin_flags = {}) : plugin(std::move(plugin_flags)) {
    plugin.start();
    cfg.set("logger.console-verbosity", caf::atom("quiet"));
    add_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    db = (dir.path / "client.db").string();
  }

  node_actor spawn_node(api_actor api,
                        std::chrono::milliseconds csi_timeout = std::chrono::seconds(10)) {
    node_config c;
    c.node_id = "n1";
    c.csi_root = (dir.path / "csi").string();
    c.alloc_dir = (dir.path / "allocs").string();
    c.alloc_supervisor = berth::test_bins::alloc;
    c.plugins.push_back({"hp", v1::PLUGIN_MONOLITH, plugin.endpoint});
    c.fingerprint_interval = std::chrono::milliseconds(50);
    c.csi_timeout = csi_timeout;
    return sys->spawn(node, c, api, stats,
                      std::shared_ptr<client_store>(must(client_store::open(db))));
  }

  // berth_csi_calls_in_flight{kind="controller"} as the node last set it.
  double controller_calls_in_flight() {
    for (const auto& family : stats->registry()->Collect()) {
      if (family.name != "berth_csi_calls_in_flight") continue;
      for (const auto& m : family.metric)
        for (const auto& l : m.label)
          if (l.name == "kind" && l.value == "controller") return m.gauge.value;
    }
    return 0;
  }

  // berth_csi_calls_total of every method that ended with `code`.
  double csi_calls_ended(const std::string& code) {
    double n = 0;
    for (const auto& family : stats->registry()->Collect()) {
      if (family.name != "berth_csi_calls_total") continue;
      for (const auto& m : family.metric)
        for (const auto& l : m.label)
          if (l.name == "code" && l.value == code) n += m.counter.value;
    }
    return n;
  }

  // What client.db says, through a connection of its own.
  uint64_t recorded_term() { return must(must(client_store::open(db))->leader_term()); }

  size_t plugin_calls(const std::string& method) {
    std::ifstream in(plugin.call_log);
    std::stringstream all;
    all << in.rdbuf();
    auto text = all.str();
    size_t n = 0;
    for (auto at = text.find("\"" + method + "\""); at != std::string::npos;
         at = text.find("\"" + method + "\"", at + 1))
      ++n;
    return n;
  }
};

v1::Volume spec() {
  v1::Volume v;
  v.set_id("db");
  v.set_namespace_("default");
  v.set_plugin_id("hp");
  v.set_capacity_min(1 << 20);
  auto* c = v.add_capabilities();
  c->set_access_mode(v1::SINGLE_NODE_WRITER);
  c->set_attachment_mode(v1::FILE_SYSTEM);
  return v;
}

// The node's answer to one request: the reply, or the error as a failure.
template <class T, class... Ts>
std::variant<T, failure> ask(caf::scoped_actor& me, const node_actor& n, Ts&&... xs) {
  std::variant<T, failure> out = failure{errc::internal, "no answer"};
  me->request(n, std::chrono::seconds(30), std::forward<Ts>(xs)...)
      .receive([&](T& x) { out = std::move(x); }, [&](caf::error& e) { out = to_failure(e); });
  return out;
}

// A step of alloc a1 on node n1 for `v`, as a leader of term 1 sends it.
v1::NodeVolumeRequest step_on(const v1::Volume& v) {
  v1::NodeVolumeRequest r;
  r.set_plugin_id("hp");
  r.set_alloc_id("a1");
  *r.mutable_volume() = v;
  r.set_access_mode(v1::SINGLE_NODE_WRITER);
  r.set_attachment_mode(v1::FILE_SYSTEM);
  r.set_csi_node_id("n1");
  r.set_leader_term(1);
  return r;
}

template <class T>
bool refused_as_deposed(const std::variant<T, failure>& x) {
  auto* f = std::get_if<failure>(&x);
  return f && f->code == errc::refused && f->message.find("deposed leader") != std::string::npos;
}

}  // namespace

TEST_CASE("node_fence: a newer leader's term is recorded before its request runs") {
  temp_dir d;
  auto file = (d.path / "client.db").string();
  auto store_db = must(client_store::open(file));
  auto& store = *store_db;
  leader_fence fence("n1");
  REQUIRE_FALSE(fence.load(store, false));
  CHECK(fence.term() == 0);
  CHECK_FALSE(fence.admit(store, 3));
  CHECK(fence.term() == 3);
  CHECK(must(must(client_store::open(file))->leader_term()) == 3);
  CHECK_FALSE(fence.admit(store, 3));  // the current leader
  CHECK_FALSE(fence.admit(store, 0));  // unfenced
  CHECK(fence.term() == 3);
}

TEST_CASE("node_fence: an older leader is refused, naming the node, both terms and the way out") {
  temp_dir d;
  auto store_db = must(client_store::open((d.path / "client.db").string()));
  auto& store = *store_db;
  leader_fence fence("n1");
  REQUIRE_FALSE(fence.admit(store, 7));
  auto f = fence.admit(store, 6);
  REQUIRE(f);
  CHECK(f->code == errc::refused);
  CHECK(f->message.find("node 'n1'") != std::string::npos);
  CHECK(f->message.find("term 6") != std::string::npos);
  CHECK(f->message.find("term 7") != std::string::npos);
  CHECK(f->message.find("--forget-leader-term") != std::string::npos);
  CHECK(fence.term() == 7);
}

TEST_CASE("node_fence: a heartbeat answer raises the fence, an older one never lowers it") {
  temp_dir d;
  auto file = (d.path / "client.db").string();
  auto store_db = must(client_store::open(file));
  auto& store = *store_db;
  leader_fence fence("n1");
  CHECK_FALSE(fence.heard(store, 5));
  CHECK(fence.term() == 5);
  CHECK_FALSE(fence.heard(store, 2));  // a server behind the others: no failure, no change
  CHECK_FALSE(fence.heard(store, 0));  // a server that knows no leader yet
  CHECK(fence.term() == 5);
  CHECK(must(must(client_store::open(file))->leader_term()) == 5);
  CHECK(fence.admit(store, 4));        // the deposed leader of term 4 is refused
  CHECK_FALSE(fence.admit(store, 5));  // the one of term 5 is not wedged
}

TEST_CASE("node_fence: the fence holds across a restart unless told to forget it") {
  temp_dir d;
  auto file = (d.path / "client.db").string();
  {
    auto store_db = must(client_store::open(file));
    auto& store = *store_db;
    leader_fence fence("n1");
    REQUIRE_FALSE(fence.admit(store, 9));
  }
  auto store_db = must(client_store::open(file));
  auto& store = *store_db;
  leader_fence again("n1");
  REQUIRE_FALSE(again.load(store, false));
  CHECK(again.term() == 9);
  CHECK(again.admit(store, 8));
  leader_fence forgot("n1");
  REQUIRE_FALSE(forgot.load(store, true));
  CHECK(forgot.term() == 0);
  CHECK_FALSE(forgot.admit(store, 1));  // a rebuilt cluster's first leader
}

TEST_CASE("node_fence: a term that cannot be recorded is not taken (the request does not run)") {
  temp_dir d;
  auto file = (d.path / "client.db").string();
  auto store_db = must(client_store::open(file));
  auto& store = *store_db;
  leader_fence fence("n1");
  REQUIRE_FALSE(fence.admit(store, 2));
  test::drop_table(file, "meta");
  auto f = fence.admit(store, 3);
  REQUIRE(f);
  CHECK(f->code == errc::internal);
  CHECK(f->message.find(file) != std::string::npos);
  CHECK(fence.term() == 2);
  CHECK(fence.heard(store, 4));
  CHECK(fence.term() == 2);
  leader_fence fresh("n1");
  CHECK(fresh.load(store, false));
}

TEST_CASE("node_fence: create, validate and delete of a deposed leader never reach the plugin") {
  fixture f;
  auto n = f.spawn_node(api_actor{});
  caf::scoped_actor me{*f.sys};

  auto created = ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{5});
  REQUIRE(std::holds_alternative<pb<v1::Volume>>(created));
  auto vol = std::get<pb<v1::Volume>>(created).msg;
  CHECK_FALSE(vol.external_id().empty());
  CHECK(f.recorded_term() == 5);  // recorded before the call ran
  CHECK(f.plugin_calls("CreateVolume") == 1);

  CHECK(refused_as_deposed(
      ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{4})));
  CHECK(refused_as_deposed(ask<std::string>(me, n, validate_atom::value, wrap(vol), uint64_t{4})));
  CHECK(refused_as_deposed(ask<bool>(me, n, deregister_atom::value, wrap(vol), uint64_t{3})));
  CHECK(f.plugin_calls("CreateVolume") == 1);
  CHECK(f.plugin_calls("ValidateVolumeCapabilities") == 0);
  CHECK(f.plugin_calls("DeleteVolume") == 0);

  // The current leader (same term) and a newer one are served.
  auto valid = ask<std::string>(me, n, validate_atom::value, wrap(vol), uint64_t{5});
  REQUIRE(std::holds_alternative<std::string>(valid));
  CHECK(std::get<std::string>(valid) == "");
  auto deleted = ask<bool>(me, n, deregister_atom::value, wrap(vol), uint64_t{6});
  REQUIRE(std::holds_alternative<bool>(deleted));
  CHECK(f.plugin_calls("DeleteVolume") == 1);
  CHECK(f.recorded_term() == 6);
  // Term 0 is unfenced (a request of no leader term, as before terms).
  CHECK_FALSE(refused_as_deposed(ask<bool>(me, n, deregister_atom::value, wrap(vol), uint64_t{0})));
  me->send_exit(n, caf::exit_reason::user_shutdown);
}

TEST_CASE(
    "node_fence: snapshot create and delete and volume modify of a deposed leader never reach the "
    "plugin") {
  fixture f;
  auto n = f.spawn_node(api_actor{});
  caf::scoped_actor me{*f.sys};
  auto created = ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{5});
  REQUIRE(std::holds_alternative<pb<v1::Volume>>(created));
  auto vol = std::get<pb<v1::Volume>>(created).msg;
  v1::SnapshotRequest snap;
  snap.set_plugin_id(vol.plugin_id());
  snap.set_source_external_id(vol.external_id());
  snap.set_name("snap-a");
  auto modify = vol;
  (*modify.mutable_modified_parameters())["iops"] = "100";

  CHECK(refused_as_deposed(
      ask<pb<v1::Snapshot>>(me, n, snapshot_atom::value, wrap(snap), uint64_t{4})));
  CHECK(refused_as_deposed(ask<bool>(me, n, modify_atom::value, wrap(modify), uint64_t{4})));
  CHECK(f.plugin_calls("CreateSnapshot") == 0);
  CHECK(f.plugin_calls("ControllerModifyVolume") == 0);

  auto taken = ask<pb<v1::Snapshot>>(me, n, snapshot_atom::value, wrap(snap), uint64_t{5});
  REQUIRE(std::holds_alternative<pb<v1::Snapshot>>(taken));
  auto s = std::get<pb<v1::Snapshot>>(taken).msg;
  CHECK_FALSE(s.id().empty());
  CHECK(s.source_external_id() == vol.external_id());
  CHECK(s.name() == "snap-a");
  CHECK(f.plugin_calls("CreateSnapshot") == 1);
  auto modified = ask<bool>(me, n, modify_atom::value, wrap(modify), uint64_t{5});
  REQUIRE(std::holds_alternative<bool>(modified));
  CHECK(f.plugin_calls("ControllerModifyVolume") == 1);

  v1::SnapshotRequest del;
  del.set_plugin_id(vol.plugin_id());
  del.set_snapshot_id(s.id());
  del.set_can_list(true);
  CHECK(refused_as_deposed(ask<bool>(me, n, snapshot_delete_atom::value, wrap(del), uint64_t{4})));
  CHECK(f.plugin_calls("DeleteSnapshot") == 0);
  auto deleted = ask<bool>(me, n, snapshot_delete_atom::value, wrap(del), uint64_t{5});
  REQUIRE(std::holds_alternative<bool>(deleted));
  CHECK(std::get<bool>(deleted));  // it was there
  auto again = ask<bool>(me, n, snapshot_delete_atom::value, wrap(del), uint64_t{5});
  REQUIRE(std::holds_alternative<bool>(again));
  CHECK_FALSE(std::get<bool>(again));  // gone already: told apart by ListSnapshots
  CHECK(f.plugin_calls("DeleteSnapshot") == 2);

  v1::SnapshotRequest list;
  list.set_plugin_id(vol.plugin_id());
  auto listed =
      ask<pb<v1::SnapshotList>>(me, n, snapshot_list_atom::value, wrap(list), uint64_t{5});
  REQUIRE(std::holds_alternative<pb<v1::SnapshotList>>(listed));
  CHECK(std::get<pb<v1::SnapshotList>>(listed).msg.snapshots().empty());
  me->send_exit(n, caf::exit_reason::user_shutdown);
}

TEST_CASE("node_fence: a volume health check of a deposed leader never reaches the plugin") {
  fixture f;
  auto n = f.spawn_node(api_actor{});
  caf::scoped_actor me{*f.sys};
  auto created = ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{5});
  REQUIRE(std::holds_alternative<pb<v1::Volume>>(created));
  auto vol = std::get<pb<v1::Volume>>(created).msg;
  v1::VolumeHealthRequest list;
  list.set_plugin_id("hp");
  list.set_use_list(true);
  v1::VolumeHealthRequest get;
  get.set_plugin_id("hp");
  get.add_external_ids(vol.external_id());
  get.add_external_ids("no-such-volume");
  using result = pb<v1::VolumeHealthResult>;
  CHECK(refused_as_deposed(ask<result>(me, n, health_atom::value, wrap(list), uint64_t{4})));
  CHECK(refused_as_deposed(ask<result>(me, n, health_atom::value, wrap(get), uint64_t{4})));
  CHECK(f.plugin_calls("ListVolumes") == 0);
  CHECK(f.plugin_calls("ControllerGetVolume") == 0);

  auto listed = ask<result>(me, n, health_atom::value, wrap(list), uint64_t{5});
  REQUIRE(std::holds_alternative<result>(listed));
  const auto& by_list = std::get<result>(listed).msg.conditions();
  REQUIRE(by_list.count(vol.external_id()) == 1);
  CHECK_FALSE(by_list.at(vol.external_id()).abnormal());
  CHECK(f.plugin_calls("ListVolumes") == 1);
  // ControllerGetVolume per volume; one the plugin does not know is left out.
  auto got = ask<result>(me, n, health_atom::value, wrap(get), uint64_t{5});
  REQUIRE(std::holds_alternative<result>(got));
  const auto& by_get = std::get<result>(got).msg.conditions();
  CHECK(by_get.size() == 1);
  CHECK(by_get.count(vol.external_id()) == 1);
  CHECK(f.plugin_calls("ControllerGetVolume") == 2);
  me->send_exit(n, caf::exit_reason::user_shutdown);
}

TEST_CASE("volume health: ListVolumes is read page by page through next_token") {
  plugin_process plugin;
  plugin.start();
  csi::client c(plugin.endpoint, std::chrono::seconds(5));
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    csi::create_volume_request r;
    r.name = "v" + std::to_string(i);
    r.required_bytes = 1 << 20;
    r.capabilities = {csi::volume_capability{}};
    auto v = c.create_volume(r);
    REQUIRE(v.ok());
    ids.push_back(v.response.volume_id);
  }
  // One volume's directory vanishes: its condition says so, the others' not.
  std::filesystem::rename(plugin.root / "volumes" / ids[3], plugin.dir / "moved");
  v1::VolumeHealthRequest r;
  r.set_plugin_id("hp");
  r.set_use_list(true);
  auto out = check_volume_health(c, r, "plugin 'hp' on node 'n1'", 2);
  REQUIRE_FALSE(out.error);
  CHECK(out.health.conditions().size() == 5);
  for (const auto& id : ids) {
    REQUIRE(out.health.conditions().count(id) == 1);
    CHECK(out.health.conditions().at(id).abnormal() == (id == ids[3]));
  }
  CHECK(out.health.conditions().at(ids[3]).message().find("missing") != std::string::npos);
  // Three pages of at most two: three calls, each after the last one's token.
  std::ifstream in(plugin.call_log);
  std::string line;
  int calls = 0;
  while (std::getline(in, line)) calls += line.find("\"ListVolumes\"") != std::string::npos;
  CHECK(calls == 3);
}

TEST_CASE("node_fence: a heartbeat answer raises the fence before the new leader calls") {
  fixture f;
  auto term = std::make_shared<std::atomic<uint64_t>>(9);
  auto beats = std::make_shared<std::atomic<int>>(0);
  auto server = f.sys->spawn(fake_server, term, beats);
  auto n = f.spawn_node(server);
  caf::scoped_actor me{*f.sys};

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (f.recorded_term() != 9 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(f.recorded_term() == 9);
  // A leader of term 8 never called this node, yet it is refused.
  CHECK(refused_as_deposed(
      ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{8})));
  CHECK(f.plugin_calls("CreateVolume") == 0);

  // A server behind the others answers an older term: the fence stays.
  *term = 4;
  int seen = *beats;
  while (*beats < seen + 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(*beats >= seen + 2);
  // Queued behind the answers to those heartbeats, so it sees their effect.
  CHECK(refused_as_deposed(
      ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{8})));
  CHECK(f.recorded_term() == 9);
  auto created = ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{9});
  CHECK(std::holds_alternative<pb<v1::Volume>>(created));
  me->send_exit(n, caf::exit_reason::user_shutdown);
  me->send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("node_fence: a deposed leader's call that waited for its turn is not sent") {
  // CreateSnapshot holds the volume's turn on the plugin connection for a
  // while; a ControllerModifyVolume of the same leader (term 5) waits
  // behind it; meanwhile a leader of term 6 calls this node.  When the
  // modify's turn comes, the node follows term 6: it is answered refused
  // and never reaches the plugin.
  fixture f({"--delay", "CreateSnapshot=1500"});
  auto n = f.spawn_node(api_actor{});
  caf::scoped_actor me{*f.sys};
  auto created = ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{5});
  REQUIRE(std::holds_alternative<pb<v1::Volume>>(created));
  auto vol = std::get<pb<v1::Volume>>(created).msg;
  v1::SnapshotRequest snap;
  snap.set_plugin_id(vol.plugin_id());
  snap.set_source_external_id(vol.external_id());
  snap.set_name("slow");
  auto modify = vol;
  (*modify.mutable_modified_parameters())["iops"] = "100";
  auto other = spec();
  other.set_id("web");

  auto slow =
      me->request(n, std::chrono::seconds(30), snapshot_atom::value, wrap(snap), uint64_t{5});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (f.controller_calls_in_flight() < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (f.controller_calls_in_flight() != 1) {
    me->send_exit(n, caf::exit_reason::user_shutdown);
    FAIL("CreateSnapshot did not start within 10 s");
  }
  // Sent in this order from one actor, so the node takes them in order.
  auto waiting =
      me->request(n, std::chrono::seconds(30), modify_atom::value, wrap(modify), uint64_t{5});
  auto newer =
      me->request(n, std::chrono::seconds(30), create_atom::value, wrap(other), uint64_t{6});
  std::optional<failure> modify_error;
  bool snapshot_taken = false, newer_created = false;
  slow.receive([&](pb<v1::Snapshot>&) { snapshot_taken = true; },
               [&](caf::error& e) { MESSAGE(to_failure(e).message); });
  waiting.receive([&](bool) {}, [&](caf::error& e) { modify_error = to_failure(e); });
  newer.receive([&](pb<v1::Volume>&) { newer_created = true; }, [&](caf::error&) {});
  auto term = f.recorded_term();
  // Stopped before any check, so a failed one cannot leave it running.
  me->send_exit(n, caf::exit_reason::user_shutdown);
  CHECK(snapshot_taken);  // admitted and started before term 6 was heard of
  CHECK(newer_created);
  CHECK(modify_error.has_value());
  if (modify_error) {
    CHECK(modify_error->code == errc::refused);
    CHECK(modify_error->message.find("deposed leader of term 5") != std::string::npos);
    CHECK(modify_error->message.find("term 6") != std::string::npos);
  }
  CHECK(f.plugin_calls("ControllerModifyVolume") == 0);
  CHECK(term == 6);
}

TEST_CASE("node steps: a step in flight is known to its sender's pings, however long it runs") {
  // The helper of every CSI step (actors/node_call.hpp) pings the node
  // actor every 5 s; two answers in a row saying the step never arrived
  // fail it as lost.  The node noted nobody (its handlers make their
  // response promise first, which takes the sender out of the message), so
  // every step over 10 s failed: a 12 s NodePublishVolume or
  // NodeUnpublishVolume was answered "the step sent to it never arrived".
  fixture f({"--delay", "CreateVolume=3000"});
  auto n = f.spawn_node(api_actor{});
  caf::scoped_actor me{*f.sys};
  caf::scoped_actor other{*f.sys};
  auto ping = [&](caf::scoped_actor& from) {
    std::optional<bool> arrived;
    from->request(n, std::chrono::seconds(30), ping_atom::value)
        .receive([&](bool b) { arrived = b; }, [&](caf::error&) {});
    return arrived;
  };
  CHECK(ping(me) == false);  // nothing sent yet
  auto slow = me->request(n, std::chrono::seconds(30), create_atom::value, wrap(spec()),
                          uint64_t{1});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (f.controller_calls_in_flight() < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto in_flight = f.controller_calls_in_flight();
  auto mine = ping(me);
  auto theirs = ping(other);
  bool created = false;
  slow.receive([&](pb<v1::Volume>&) { created = true; },
               [&](caf::error& e) { MESSAGE(to_failure(e).message); });
  me->send_exit(n, caf::exit_reason::user_shutdown);
  REQUIRE(in_flight == 1);  // the pings were asked while CreateVolume ran
  CHECK(mine == true);      // the step reached the node: its sender's pings say so
  CHECK(theirs == false);   // another actor sent it nothing
  CHECK(created);
}

TEST_CASE("node steps: a step that arrives after its helper gave up is never sent to the plugin") {
  // fault.short, seed 1801572624: a ControllerUnpublishVolume sent to a
  // client's controller just before a partition reached it after the heal,
  // 25 s later, long after its helper had given up and the release had been
  // done through another controller and the volume published to the node
  // again; run then, it detached the volume under its new writer.  The
  // node now asks the step's helper right before the call is sent, and a
  // helper that gave up has quit.
  fixture f;
  auto n = f.spawn_node(api_actor{});
  caf::scoped_actor me{*f.sys};
  auto created = ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{1});
  REQUIRE(std::holds_alternative<pb<v1::Volume>>(created));
  auto vol = std::get<pb<v1::Volume>>(created).msg;
  auto r = step_on(vol);
  r.set_confirm_start(true);
  // The late step: its sender (a helper that gave up) is gone by the time
  // the node takes it up.
  auto gone = f.sys->spawn([n, r](caf::event_based_actor* self) {
    self->request(n, std::chrono::seconds(30), ctrl_unpublish_atom::value, wrap(r));
    self->quit();
  });
  me->wait_for(gone);
  // The same step through a real helper (actors/node_call.hpp), which
  // confirms it.  The volume's calls run one at a time in arrival order, so
  // it runs after the node dealt with the late one.
  std::optional<failure> error;
  bool done = false;
  call_node<pb<v1::NodeVolumeResult>>(me.ptr(), n, std::chrono::seconds(30),
                                      ctrl_unpublish_atom::value, wrap(r), nullptr)
      .receive([&](pb<v1::NodeVolumeResult>&) { done = true; },
               [&](caf::error& e) { error = to_failure(e); });
  auto calls = f.plugin_calls("ControllerUnpublishVolume");
  me->send_exit(n, caf::exit_reason::user_shutdown);
  if (error) MESSAGE(error->message);
  CHECK(done);        // confirmed by its helper: sent
  CHECK(calls == 1);  // the late step was not
}

TEST_CASE("node steps: a step whose caller stopped before its turn is not sent") {
  // A volume or plugin actor of a leader that stepped down is stopped; its
  // step's helper goes with it (linked), so the step, when its turn comes on
  // the node, finds nobody to confirm it.  The volume's calls run one at a
  // time: a slow ControllerPublish keeps the step waiting meanwhile.
  fixture f({"--delay", "ControllerPublishVolume=1500"});
  auto n = f.spawn_node(api_actor{});
  caf::scoped_actor me{*f.sys};
  auto created = ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{1});
  REQUIRE(std::holds_alternative<pb<v1::Volume>>(created));
  auto r = step_on(std::get<pb<v1::Volume>>(created).msg);
  auto slow = me->request(n, std::chrono::seconds(30), ctrl_publish_atom::value, wrap(r));
  auto caller = f.sys->spawn(
      [](caf::event_based_actor* self, node_actor n, v1::NodeVolumeRequest r) {
        call_node<pb<v1::NodeVolumeResult>>(self, n, std::chrono::seconds(30),
                                            ctrl_unpublish_atom::value, wrap(r), nullptr)
            .then([](pb<v1::NodeVolumeResult>&) {}, [](caf::error&) {});
      },
      n, r);
  me->send_exit(caller, caf::exit_reason::user_shutdown);
  me->wait_for(caller);
  bool published = false;
  slow.receive([&](pb<v1::NodeVolumeResult>&) { published = true; }, [](caf::error&) {});
  // Behind both on the volume: once answered, the node dealt with the step.
  auto again = ask<pb<v1::NodeVolumeResult>>(me, n, ctrl_publish_atom::value, wrap(r));
  auto calls = f.plugin_calls("ControllerUnpublishVolume");
  me->send_exit(n, caf::exit_reason::user_shutdown);
  CHECK(published);
  CHECK(std::holds_alternative<pb<v1::NodeVolumeResult>>(again));
  CHECK(calls == 0);
}

TEST_CASE("node steps: a confirmed step the plugin fails is answered at once, not held") {
  // The helper holds a failure of its own (pings, timeout) for 11 s after
  // it confirmed a call; an answer of the node is no such failure.  Held,
  // every fast plugin error cost 11 s and integration.ui's watcher retries
  // (a killed plugin) did not show within its 20 s.
  fixture f;
  auto n = f.spawn_node(api_actor{});
  caf::scoped_actor me{*f.sys};
  auto vol = spec();
  vol.set_external_id("no-such-volume");
  auto r = step_on(vol);
  std::optional<failure> error;
  auto asked = std::chrono::steady_clock::now();
  call_node<pb<v1::NodeVolumeResult>>(me.ptr(), n, std::chrono::seconds(30),
                                      ctrl_publish_atom::value, wrap(r), nullptr)
      .receive([&](pb<v1::NodeVolumeResult>&) {}, [&](caf::error& e) { error = to_failure(e); });
  auto took = std::chrono::steady_clock::now() - asked;
  auto calls = f.plugin_calls("ControllerPublishVolume");
  me->send_exit(n, caf::exit_reason::user_shutdown);
  REQUIRE(error.has_value());
  CHECK(error->message.find("NOT_FOUND") != std::string::npos);
  CHECK(calls == 1);  // confirmed and sent
  CHECK(took < std::chrono::seconds(10));  // not held (the hold is 11 s)
}

TEST_CASE("node steps: a step to a node actor the leader retired is refused at once, never sent") {
  // Issue 59, fault suite seed 13: a client restarted; the old node actor,
  // reached through another server, never answers and its proxy never goes
  // down, so every queued step of a volume waited 15 s for its ping.  A
  // retired handle (a newer node actor heartbeats for the node) is refused
  // before anything is sent; restored (it heartbeats again), it is served.
  fixture f;
  auto n = f.spawn_node(api_actor{});
  caf::scoped_actor me{*f.sys};
  auto created = ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{1});
  REQUIRE(std::holds_alternative<pb<v1::Volume>>(created));
  auto r = step_on(std::get<pb<v1::Volume>>(created).msg);
  auto retired = std::make_shared<retired_nodes>();
  retired->retire(n.address());
  std::optional<failure> error;
  auto asked = std::chrono::steady_clock::now();
  call_node<pb<v1::NodeVolumeResult>>(me.ptr(), n, std::chrono::seconds(30),
                                      ctrl_publish_atom::value, wrap(r), retired)
      .receive([&](pb<v1::NodeVolumeResult>&) {}, [&](caf::error& e) { error = to_failure(e); });
  auto took = std::chrono::steady_clock::now() - asked;
  auto calls = f.plugin_calls("ControllerPublishVolume");
  REQUIRE(error.has_value());
  CHECK(error->code == errc::unavailable);
  CHECK(error->message.find("replaced by a newer process") != std::string::npos);
  CHECK(calls == 0);
  CHECK(took < std::chrono::seconds(5));  // not the ping's 15 s
  retired->restore(n.address());
  bool done = false;
  call_node<pb<v1::NodeVolumeResult>>(me.ptr(), n, std::chrono::seconds(30),
                                      ctrl_publish_atom::value, wrap(r), retired)
      .receive([&](pb<v1::NodeVolumeResult>&) { done = true; },
               [&](caf::error& e) { MESSAGE(to_failure(e).message); });
  auto after = f.plugin_calls("ControllerPublishVolume");
  me->send_exit(n, caf::exit_reason::user_shutdown);
  CHECK(done);
  CHECK(after == 1);
}

TEST_CASE("node steps: a step of a sender that does not confirm it is not sent") {
  // A sender that asks for the confirmation (confirm_start) and never
  // answers it: the node waits step_confirm_timeout (10 s) and sends
  // nothing; the step is answered unavailable, naming why.
  fixture f;
  auto n = f.spawn_node(api_actor{});
  caf::scoped_actor me{*f.sys};
  auto created = ask<pb<v1::Volume>>(me, n, create_atom::value, wrap(spec()), uint64_t{1});
  REQUIRE(std::holds_alternative<pb<v1::Volume>>(created));
  auto r = step_on(std::get<pb<v1::Volume>>(created).msg);
  r.set_confirm_start(true);
  auto out = ask<pb<v1::NodeVolumeResult>>(me, n, ctrl_unpublish_atom::value, wrap(r));
  // The scoped actor left the confirmation in its mailbox unanswered.
  auto calls = f.plugin_calls("ControllerUnpublishVolume");
  me->send_exit(n, caf::exit_reason::user_shutdown);
  REQUIRE(std::holds_alternative<failure>(out));
  auto& e = std::get<failure>(out);
  CHECK(e.code == errc::unavailable);
  CHECK(e.message.find("after the server gave up on it") != std::string::npos);
  CHECK(calls == 0);
}

TEST_CASE("node probes: a plugin that does not answer holds one probe, not one per tick") {
  // Fingerprints every 50 ms, CSI deadline 1 s.  While the plugin is
  // stopped, each probe waits out its deadline; a tick that came meanwhile
  // must not start another (each would hold a thread of its own until its
  // deadline: under load that is the storm that starves every other call).
  // Probes in sequence end at most one per deadline, plus the one that was
  // running when the plugin stopped.
  fixture f;
  auto heartbeats = std::make_shared<std::atomic<int>>(0);
  auto api = f.sys->spawn(fake_server, std::make_shared<std::atomic<uint64_t>>(1), heartbeats);
  auto n = f.spawn_node(api, std::chrono::seconds(1));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (f.plugin_calls("NodeGetInfo") < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(f.plugin_calls("NodeGetInfo") >= 1);  // probed once
  f.plugin.pause();
  auto stopped = std::chrono::steady_clock::now();
  double ended = 0;
  deadline = stopped + std::chrono::seconds(60);
  while ((ended = f.csi_calls_ended("DEADLINE_EXCEEDED")) < 3 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  caf::scoped_actor me{*f.sys};
  me->send_exit(n, caf::exit_reason::user_shutdown);
  f.plugin.resume();
  REQUIRE(ended >= 3);
  INFO(ended << " probes timed out within " << seconds << " s of the plugin stopping");
  CHECK(ended <= std::floor(seconds / 1.0) + 1);
}
