// The volume actor (actors/volume.cpp) decides claims on the committed
// plugin the leader gives it (issue 27): a plugin actor that is slow or
// missing no longer turns a claim into "not registered by any node", and a
// repeated claim without a known plugin is answered "retry" while the actor
// keeps serving.  The replicated log is a fake that commits every proposal.
#include <doctest/doctest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <variant>

#include "actors/actors.hpp"
#include "actors/types.hpp"
#include "actors/volume.hpp"
#include "messages/model.hpp"

using namespace berth;

namespace {

// A replicated log that commits every proposal at once (the next index) and
// counts them; everything else is refused.
struct fake_log_state {
  std::shared_ptr<std::atomic<int>> proposals;
  uint64_t index = 10;
  static inline const char* name = "fake_log";
};

replicated_log_actor::behavior_type fake_log(
    replicated_log_actor::stateful_pointer<fake_log_state> self,
    std::shared_ptr<std::atomic<int>> proposals) {
  self->state.proposals = std::move(proposals);
  auto no = [] { return make_error(errc::unavailable, "fake log"); };
  return {
      [self](propose_atom, pb<v1::LogEntry>&, uint64_t) -> uint64_t {
        ++*self->state.proposals;
        return ++self->state.index;
      },
      [no](read_atom) -> caf::result<uint64_t> { return no(); },
      [](raft_atom, pb<raft::v1::Message>&) {},
      [no](snapshot_atom, uint64_t, uint64_t, uint64_t, uint64_t, std::string&,
           bool) -> caf::result<uint64_t> { return no(); },
      [no](prove_atom) -> caf::result<std::string> { return no(); },
      [no](prove_atom, pb<v1::ServerProof>&) -> caf::result<bool> { return no(); },
      [no](hello_atom, pb<v1::ServerList>&) -> caf::result<pb<v1::ServerList>> { return no(); },
      [no](status_atom) -> caf::result<pb<v1::RaftStatus>> { return no(); },
      [no](status_atom, uint64_t) -> caf::result<pb<v1::RaftStatus>> { return no(); },
      [no](api_atom) -> caf::result<api_actor> { return no(); },
      [no](api_atom, uint64_t) -> caf::result<api_actor> { return no(); },
      [no](remove_atom, std::string&) -> caf::result<std::string> { return no(); },
      [no](transfer_atom, std::string&) -> caf::result<std::string> { return no(); },
      [](tick_atom) {},
      [](flush_atom) {},
  };
}

v1::Plugin healthy_on(const std::string& node) {
  v1::Plugin p;
  p.set_id("hp");
  v1::PluginInstance i;
  i.set_node_id(node);
  i.set_healthy(true);
  i.set_provider("hostpath.berth");
  i.set_provider_version("1.0");
  upsert_instance(p, v1::PLUGIN_MONOLITH, i);
  return p;
}

v1::Volume registered_volume() {
  v1::Volume v;
  v.set_id("db");
  v.set_namespace_("default");
  v.set_plugin_id("hp");
  v.set_external_id("vol-1");
  v.set_modify_index(3);
  auto* c = v.add_capabilities();
  c->set_access_mode(v1::SINGLE_NODE_WRITER);
  c->set_attachment_mode(v1::FILE_SYSTEM);
  return v;
}

v1::ClaimRequest claim_of(const std::string& alloc, const std::string& node) {
  v1::ClaimRequest r;
  r.set_volume_id("db");
  r.set_alloc_id(alloc);
  r.set_node_id(node);
  r.set_access_mode(v1::SINGLE_NODE_WRITER);
  r.set_attachment_mode(v1::FILE_SYSTEM);
  return r;
}

struct fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<std::atomic<int>> proposals = std::make_shared<std::atomic<int>>(0);
  replicated_log_actor log;
  volume_actor vol;

  fixture() {
    cfg.set("logger.console-verbosity", caf::atom("quiet"));
    add_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    log = sys->spawn(fake_log, proposals);
    vol = sys->spawn(volume, log, registered_volume(), true, uint64_t{1}, retired_nodes_ptr{});
  }
  ~fixture() {
    caf::anon_send_exit(vol, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(log, caf::exit_reason::user_shutdown);
  }

  // The volume actor's answer to a claim given `plugin` as committed, with
  // no plugin actor, no client on the node and no controller.
  std::variant<v1::ClaimResult, failure> claim(const v1::ClaimRequest& r,
                                              const v1::Plugin& plugin) {
    caf::scoped_actor me{*sys};
    std::variant<v1::ClaimResult, failure> out = failure{errc::internal, "no answer"};
    me->request(vol, std::chrono::seconds(30), claim_atom::value, wrap(r), wrap(plugin),
                plugin_actor{}, node_actor{}, node_actor{})
        .receive([&](pb<v1::ClaimResult>& x) { out = std::move(x.msg); },
                 [&](caf::error& e) { out = to_failure(e); });
    return out;
  }

  // The volume actor's answer to the release of `alloc`'s claim, its node
  // detached (down, or no client), with no plugin actor and no controller.
  std::variant<v1::Volume, failure> release_detached(const std::string& alloc,
                                                     const v1::Plugin& plugin) {
    caf::scoped_actor me{*sys};
    v1::ReleaseRequest r;
    r.set_volume_id("db");
    r.set_alloc_id(alloc);
    r.set_node_detached(true);
    std::variant<v1::Volume, failure> out = failure{errc::internal, "no answer"};
    me->request(vol, std::chrono::seconds(30), release_atom::value, wrap(r), wrap(plugin),
                plugin_actor{}, node_actor{}, node_actor{})
        .receive([&](pb<v1::Volume>& x) { out = std::move(x.msg); },
                 [&](caf::error& e) { out = to_failure(e); });
    return out;
  }

  std::optional<v1::Volume> status() {
    caf::scoped_actor me{*sys};
    std::optional<v1::Volume> out;
    me->request(vol, std::chrono::seconds(30), status_atom::value)
        .receive([&](pb<v1::Volume>& v) { out = std::move(v.msg); }, [](caf::error&) {});
    return out;
  }
};

}  // namespace

TEST_CASE("volume_actor: a claim is decided on the plugin the leader gives, without its plugin actor") {
  fixture f;
  auto r = f.claim(claim_of("a1", "n1"), healthy_on("n1"));
  REQUIRE_MESSAGE(std::holds_alternative<v1::ClaimResult>(r),
                  std::get<failure>(r).message);  // before: "plugin ... not registered"
  const auto& v = std::get<v1::ClaimResult>(r).volume();
  REQUIRE(v.claims_size() == 1);
  CHECK(v.claims(0).alloc_id() == "a1");
  CHECK(v.claims(0).node_id() == "n1");
  CHECK(v.modify_index() == 11);  // committed through the log
  CHECK(*f.proposals == 1);
}

TEST_CASE("volume_actor: the plugin given decides: unhealthy on the node is refused, nothing committed") {
  fixture f;
  auto p = healthy_on("n1");
  p.mutable_nodes(0)->set_healthy(false);
  auto r = f.claim(claim_of("a1", "n1"), p);
  REQUIRE(std::holds_alternative<failure>(r));
  CHECK(std::get<failure>(r).code == errc::refused);
  INFO(std::get<failure>(r).message);
  CHECK(std::get<failure>(r).message.find("no healthy node instance") != std::string::npos);
  auto other = f.claim(claim_of("a1", "n2"), healthy_on("n1"));
  REQUIRE(std::holds_alternative<failure>(other));
  CHECK(std::get<failure>(other).message.find("no node instance on node 'n2'") !=
        std::string::npos);
  CHECK(*f.proposals == 0);
}

TEST_CASE("volume_actor: a repeated claim is answered again; without a known plugin it is 'retry' and the actor serves on") {
  fixture f;
  REQUIRE(std::holds_alternative<v1::ClaimResult>(f.claim(claim_of("a1", "n1"), healthy_on("n1"))));
  auto again = f.claim(claim_of("a1", "n1"), healthy_on("n1"));
  REQUIRE(std::holds_alternative<v1::ClaimResult>(again));
  CHECK(std::get<v1::ClaimResult>(again).volume().claims_size() == 1);
  CHECK(*f.proposals == 1);  // a repeat commits nothing new
  auto unknown = f.claim(claim_of("a1", "n1"), v1::Plugin{});
  REQUIRE(std::holds_alternative<failure>(unknown));
  const auto& why = std::get<failure>(unknown);
  CHECK(why.code == errc::unavailable);
  CHECK(why.retry);
  CHECK(why.message.find("retry") != std::string::npos);
  auto v = f.status();  // issue 27: the volume actor crashed here
  REQUIRE(v);
  CHECK(v->claims_size() == 1);
  CHECK(*f.proposals == 1);
}

TEST_CASE("volume_actor: a new claim without a known plugin is refused and commits nothing") {
  fixture f;
  auto r = f.claim(claim_of("a1", "n1"), v1::Plugin{});
  REQUIRE(std::holds_alternative<failure>(r));
  CHECK(std::get<failure>(r).message.find("'hp'") != std::string::npos);
  CHECK(*f.proposals == 0);
  auto v = f.status();
  REQUIRE(v);
  CHECK(v->claims_size() == 0);
}

TEST_CASE("volume_actor: a release commits two entries: unpublishing, then the free with the steps between") {
  // Issue 28: node-detached and controller-detached were an entry each (a
  // release took 4, a claim cycle 5).
  fixture f;
  REQUIRE(std::holds_alternative<v1::ClaimResult>(f.claim(claim_of("a1", "n1"), healthy_on("n1"))));
  REQUIRE(*f.proposals == 1);
  auto r = f.release_detached("a1", healthy_on("n1"));
  REQUIRE_MESSAGE(std::holds_alternative<v1::Volume>(r), std::get<failure>(r).message);
  CHECK(std::get<v1::Volume>(r).claims_size() == 0);
  CHECK(*f.proposals == 3);
  auto v = f.status();
  REQUIRE(v);
  CHECK(v->claims_size() == 0);
}

TEST_CASE("volume_actor: a release that stops short of the free commits the steps it took") {
  // The plugin requires ControllerUnpublishVolume and no controller runs:
  // the release stops at node-detached, and commits it, so the retry starts
  // there (the node is not asked again).
  fixture f;
  auto p = healthy_on("n1");
  p.set_controller_required(true);
  REQUIRE(std::holds_alternative<v1::ClaimResult>(f.claim(claim_of("a1", "n1"), p)));
  auto r = f.release_detached("a1", p);
  REQUIRE(std::holds_alternative<failure>(r));
  INFO(std::get<failure>(r).message);
  CHECK(std::get<failure>(r).code == errc::unavailable);
  CHECK(std::get<failure>(r).message.find("no healthy controller") != std::string::npos);
  CHECK(*f.proposals == 3);  // claim, unpublishing, node-detached
  auto v = f.status();
  REQUIRE(v);
  REQUIRE(v->claims_size() == 1);
  CHECK(v->claims(0).state() == v1::CLAIM_NODE_DETACHED);
  // Again: nothing new to commit until a controller is back.
  auto again = f.release_detached("a1", p);
  REQUIRE(std::holds_alternative<failure>(again));
  CHECK(*f.proposals == 3);
}
