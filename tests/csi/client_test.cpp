// berth::csi::client against the real berth-hostpath: the plain structs make
// it through the wire, and outcomes are classified for the orchestrator.
#include "csi/client.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <set>

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

TEST_CASE("client: a group snapshot through berth-hostpath's GroupController, restored") {
  plugin_process p({"--mount-mode", "symlink"});
  p.start();
  client c(p.endpoint, std::chrono::seconds(5));
  CHECK(c.get_plugin_capabilities().response.group_controller_service);
  auto gcaps = c.group_controller_get_capabilities();
  REQUIRE(gcaps.ok());
  CHECK(gcaps.response.create_delete_get_volume_group_snapshot);

  volume_capability cap;
  std::vector<std::string> ids;
  for (const char* name : {"db-0", "db-1", "db-2"}) {
    create_volume_request create;
    create.name = name;
    create.required_bytes = 1 << 20;
    create.capabilities = {cap};
    auto vol = c.create_volume(create);
    REQUIRE(vol.ok());
    ids.push_back(vol.response.volume_id);
    std::ofstream(p.root / "volumes" / vol.response.volume_id / "data.txt") << name;
  }

  create_group_snapshot_request req;
  req.name = "nightly";
  req.source_volume_ids = ids;
  req.secrets = {{"token", "s3cret"}};
  auto g = c.create_volume_group_snapshot(req);
  REQUIRE(g.ok());
  CHECK(g.status.kind == outcome::done);
  CHECK_FALSE(g.response.group_snapshot_id.empty());
  CHECK(g.response.ready_to_use);
  CHECK(g.response.created_at_ms > 0);
  REQUIRE(g.response.snapshots.size() == 3);
  std::vector<std::string> members;
  std::set<std::string> sources;
  for (const auto& s : g.response.snapshots) {
    CHECK(s.group_snapshot_id == g.response.group_snapshot_id);
    CHECK(s.ready_to_use);
    members.push_back(s.snapshot_id);
    sources.insert(s.source_volume_id);
  }
  CHECK(sources == std::set<std::string>(ids.begin(), ids.end()));

  // Retried with the same name: the same group, no second one.
  auto again = c.create_volume_group_snapshot(req);
  REQUIRE(again.ok());
  CHECK(again.response.group_snapshot_id == g.response.group_snapshot_id);

  auto got = c.get_volume_group_snapshot(g.response.group_snapshot_id, members);
  REQUIRE(got.ok());
  CHECK(got.response.snapshots.size() == 3);
  auto listed = c.list_snapshots({0, {}, {}, members[0], {}});
  REQUIRE(listed.response.entries.size() == 1);
  CHECK(listed.response.entries[0].group_snapshot_id == g.response.group_snapshot_id);

  // A member restores into a new volume with its source's data.
  const auto& first = g.response.snapshots[0];
  auto src_index = std::find(ids.begin(), ids.end(), first.source_volume_id) - ids.begin();
  create_volume_request restore;
  restore.name = "db-restored";
  restore.capabilities = {cap};
  restore.source_snapshot_id = first.snapshot_id;
  auto restored = c.create_volume(restore);
  REQUIRE(restored.ok());
  std::ifstream in(p.root / "volumes" / restored.response.volume_id / "data.txt");
  std::string text;
  std::getline(in, text);
  CHECK(text == std::string("db-") + std::to_string(src_index));

  // A member is deleted only with its group; the group's delete is
  // idempotent, and NOT_FOUND from a plugin would count as already done.
  CHECK(c.delete_snapshot(first.snapshot_id).status.grpc_code == code::failed_precondition);
  auto del = c.delete_volume_group_snapshot(g.response.group_snapshot_id, members);
  CHECK(del.ok());
  auto del2 = c.delete_volume_group_snapshot(g.response.group_snapshot_id, members);
  CHECK(del2.ok());
  auto gone = c.get_volume_group_snapshot(g.response.group_snapshot_id, members);
  CHECK(gone.status.grpc_code == code::not_found);
  CHECK(gone.status.kind == outcome::final);

  // The member list must be the group's: a wrong one is refused, not half-deleted.
  auto g2 = c.create_volume_group_snapshot({"weekly", ids, {}, {}});
  REQUIRE(g2.ok());
  auto wrong = c.delete_volume_group_snapshot(g2.response.group_snapshot_id, {members[0]});
  CHECK(wrong.status.grpc_code == code::invalid_argument);
  CHECK(c.get_volume_group_snapshot(g2.response.group_snapshot_id, {}).ok());
}
