// berth::csi::client against the real berth-hostpath: the plain structs make
// it through the wire, and outcomes are classified for the orchestrator.
#include "csi/client.hpp"

#include <doctest/doctest.h>

#include <fstream>

#include "plugin_process.hpp"

namespace fs = std::filesystem;
using namespace berth::csi;
using berth::test::plugin_process;

TEST_CASE("client: full claim and release of a volume through berth-hostpath") {
  plugin_process p({"--mount-mode", berth::test::can_bind_mount() ? "bind" : "symlink",
                    "--topology", "zone=z1", "--max-volumes", "3"});
  p.start();
  client c(p.endpoint, std::chrono::seconds(5));

  auto info = c.get_plugin_info();
  REQUIRE(info.ok());
  CHECK(info.response.name == "berth-hostpath");
  auto pcaps = c.get_plugin_capabilities();
  CHECK(pcaps.response.controller_service);
  CHECK(pcaps.response.accessibility_constraints);
  CHECK(c.probe().response);
  auto ccaps = c.controller_get_capabilities();
  CHECK(ccaps.response.publish_unpublish_volume);
  CHECK(ccaps.response.create_delete_volume);
  CHECK(ccaps.response.list_volumes);
  CHECK(ccaps.response.get_capacity);
  auto ncaps = c.node_get_capabilities();
  CHECK(ncaps.response.stage_unstage_volume);
  CHECK(ncaps.response.get_volume_stats);
  auto node = c.node_get_info();
  CHECK(node.response.node_id == "n1");
  CHECK(node.response.max_volumes_per_node == 3);
  CHECK(node.response.accessible_topology == string_map{{"zone", "z1"}});
  CHECK(c.get_capacity().response > 0);

  volume_capability cap;  // single-node writer, mount
  create_volume_request create;
  create.name = "web";
  create.required_bytes = 1 << 20;
  create.capabilities = {cap};
  create.secrets = {{"token", "s3cret"}};
  auto vol = c.create_volume(create);
  REQUIRE(vol.ok());
  CHECK(vol.status.kind == outcome::done);
  CHECK(vol.response.capacity_bytes == 1 << 20);
  CHECK(vol.response.accessible_topology.size() == 1);
  const auto id = vol.response.volume_id;

  auto valid = c.validate_volume_capabilities({id, {cap}, {}, {}, {}});
  CHECK(valid.response.confirmed);
  volume_capability block = cap;
  block.block = true;
  auto invalid = c.validate_volume_capabilities({id, {block}, {}, {}, {}});
  CHECK(invalid.ok());
  CHECK_FALSE(invalid.response.confirmed);
  CHECK_FALSE(invalid.response.message.empty());

  auto ctx = c.controller_publish_volume({id, "n1", cap, false, {}, {}});
  REQUIRE(ctx.ok());
  auto staging = p.dir / "staging";
  fs::create_directories(staging);
  auto target = p.dir / "target";
  REQUIRE(c.node_stage_volume({id, ctx.response, staging.string(), cap, {}, {}}).ok());
  REQUIRE(c.node_publish_volume({id, ctx.response, staging.string(), target.string(), cap,
                                 false, {}, {}})
              .ok());
  { std::ofstream(target / "f") << "1234"; }
  auto stats = c.node_get_volume_stats(id, target.string(), staging.string());
  REQUIRE(stats.ok());
  CHECK(stats.response.bytes_used == 4);
  CHECK(stats.response.bytes_total == 1 << 20);

  auto list = c.list_volumes();
  REQUIRE(list.response.entries.size() == 1);
  CHECK(list.response.entries[0].published_node_ids == std::vector<std::string>{"n1"});

  CHECK(c.node_unpublish_volume(id, target.string()).status.kind == outcome::done);
  CHECK(c.node_unstage_volume(id, staging.string()).status.kind == outcome::done);
  CHECK(c.controller_unpublish_volume(id, "n1").status.kind == outcome::done);
  CHECK(c.delete_volume(id).status.kind == outcome::done);
  CHECK(berth::test::mounts_under(p.dir).empty());
}

TEST_CASE("client: volume condition through ListVolumes, ControllerGetVolume, NodeGetVolumeStats") {
  plugin_process p({"--mount-mode", "symlink"});
  p.start();
  client c(p.endpoint, std::chrono::seconds(5));
  auto ccaps = c.controller_get_capabilities();
  CHECK(ccaps.response.get_volume);
  CHECK(ccaps.response.volume_condition);
  CHECK(c.node_get_capabilities().response.volume_condition);

  volume_capability cap;
  create_volume_request create;
  create.name = "health";
  create.required_bytes = 1 << 20;
  create.capabilities = {cap};
  auto vol = c.create_volume(create);
  REQUIRE(vol.ok());
  const auto id = vol.response.volume_id;

  auto got = c.controller_get_volume(id);
  REQUIRE(got.ok());
  CHECK(got.response.vol.volume_id == id);
  CHECK(got.response.condition.reported);
  CHECK_FALSE(got.response.condition.abnormal);
  auto listed = c.list_volumes();
  REQUIRE(listed.response.entries.size() == 1);
  CHECK(listed.response.entries[0].condition.reported);
  CHECK_FALSE(listed.response.entries[0].condition.abnormal);
  auto missing = c.controller_get_volume("no-such-volume");
  CHECK(missing.status.grpc_code == code::not_found);

  // The volume's directory vanishes: every view says abnormal, with why.
  auto dir = p.root / "volumes" / id;
  REQUIRE(fs::is_directory(dir));
  fs::rename(dir, p.dir / "moved");
  got = c.controller_get_volume(id);
  REQUIRE(got.ok());
  CHECK(got.response.condition.abnormal);
  CHECK(got.response.condition.message.find("missing") != std::string::npos);
  listed = c.list_volumes();
  REQUIRE(listed.response.entries.size() == 1);
  CHECK(listed.response.entries[0].condition.abnormal);
  CHECK(listed.response.entries[0].condition.message == got.response.condition.message);

  fs::rename(p.dir / "moved", dir);
  CHECK_FALSE(c.controller_get_volume(id).response.condition.abnormal);
  CHECK(c.delete_volume(id).status.kind == outcome::done);
}

TEST_CASE("client: plugin errors are classified with the plugin's message") {
  plugin_process p({"--mount-mode", "symlink"});
  p.start();
  client c(p.endpoint, std::chrono::seconds(5));
  volume_capability cap;
  auto missing = c.controller_publish_volume({"hp-nope", "n1", cap, false, {}, {}});
  CHECK(missing.status.grpc_code == code::not_found);
  CHECK(missing.status.kind == outcome::final);
  CHECK(missing.status.message.find("hp-nope") != std::string::npos);

  auto bad = c.delete_volume("");
  CHECK(bad.status.grpc_code == code::invalid_argument);
  CHECK(bad.status.kind == outcome::final);

  auto token = c.list_volumes(1, "bogus");
  CHECK(token.status.grpc_code == code::aborted);
  CHECK(token.status.kind == outcome::retryable);
}

TEST_CASE("client: a plugin that is not there is UNAVAILABLE, retryable") {
  client c("unix:///nonexistent/berth/csi.sock", std::chrono::milliseconds(300));
  auto r = c.probe();
  CHECK_FALSE(r.ok());
  CHECK(r.status.kind == outcome::retryable);
  CHECK((r.status.grpc_code == code::unavailable
         || r.status.grpc_code == code::deadline_exceeded));
}

TEST_CASE("client: a call past its deadline is DEADLINE_EXCEEDED, retryable") {
  plugin_process p({"--mount-mode", "symlink"});
  p.start();
  p.pause();
  client c(p.endpoint, std::chrono::milliseconds(200));
  auto r = c.get_plugin_info();
  CHECK(r.status.grpc_code == code::deadline_exceeded);
  CHECK(r.status.kind == outcome::retryable);
  p.resume();
}
