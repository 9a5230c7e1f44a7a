// Conformance of berth-hostpath to the CSI spec, over its real socket and
// through the generated gRPC stubs: for each RPC, success, idempotency (a
// repeat answers OK with the same result) and the spec's error codes.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "csi/csi.grpc.pb.h"
#include "tests/test_bins.hpp"
#include "hostpath_client.hpp"
#include "hostpath_disk.hpp"
#include "plugin_process.hpp"

namespace fs = std::filesystem;
namespace v1 = csi::v1;
using berth::test::plugin_process;
using grpc::StatusCode;
using Mode = v1::VolumeCapability::AccessMode;

using namespace hostpath_test;

TEST_CASE("hostpath identity: plugin info, capabilities and probe, repeatable") {
  plugin_process p({"--topology", "zone=z1"});
  p.start();
  stubs c(p.endpoint);
  for (int i = 0; i < 2; ++i) {
    auto info = CALL(c, identity, GetPluginInfo, v1::GetPluginInfoRequest{});
    REQUIRE(info.code == StatusCode::OK);
    CHECK(info.resp.name() == "berth-hostpath");
    CHECK_FALSE(info.resp.vendor_version().empty());
    auto caps = CALL(c, identity, GetPluginCapabilities, v1::GetPluginCapabilitiesRequest{});
    REQUIRE(caps.code == StatusCode::OK);
    std::vector<int> types;
    std::vector<int> expansion;
    for (const auto& cap : caps.resp.capabilities()) {
      if (cap.has_service())
        types.push_back(cap.service().type());
      if (cap.has_volume_expansion())
        expansion.push_back(cap.volume_expansion().type());
    }
    CHECK(types == std::vector<int>{v1::PluginCapability::Service::CONTROLLER_SERVICE,
                                    v1::PluginCapability::Service::GROUP_CONTROLLER_SERVICE,
                                    v1::PluginCapability::Service::VOLUME_ACCESSIBILITY_CONSTRAINTS});
    CHECK(expansion == std::vector<int>{v1::PluginCapability::VolumeExpansion::ONLINE});
    auto probe = CALL(c, identity, Probe, v1::ProbeRequest{});
    REQUIRE(probe.code == StatusCode::OK);
    CHECK(probe.resp.ready().value());
  }
}

TEST_CASE("hostpath identity: no topology, no accessibility constraints") {
  plugin_process p;
  p.start();
  stubs c(p.endpoint);
  auto caps = CALL(c, identity, GetPluginCapabilities, v1::GetPluginCapabilitiesRequest{});
  REQUIRE(caps.resp.capabilities_size() == 3);  // the two services and online expansion
  CHECK(caps.resp.capabilities(0).service().type()
        == v1::PluginCapability::Service::CONTROLLER_SERVICE);
  CHECK(caps.resp.capabilities(1).service().type()
        == v1::PluginCapability::Service::GROUP_CONTROLLER_SERVICE);
  CHECK(caps.resp.capabilities(2).has_volume_expansion());
}

TEST_CASE("hostpath CreateVolume: idempotent by name, spec error codes") {
  plugin_process p;
  p.start();
  stubs c(p.endpoint);
  auto first = CALL(c, controller, CreateVolume, create_req("db", 4096));
  REQUIRE(first.code == StatusCode::OK);
  const auto id = first.resp.volume().volume_id();
  CHECK_FALSE(id.empty());
  CHECK(first.resp.volume().capacity_bytes() == 4096);
  CHECK(fs::is_directory(p.root / "volumes" / id));

  auto again = CALL(c, controller, CreateVolume, create_req("db", 4096));
  REQUIRE(again.code == StatusCode::OK);
  CHECK(again.resp.SerializeAsString() == first.resp.SerializeAsString());
  // A smaller requirement is still satisfied by the existing volume.
  CHECK(CALL(c, controller, CreateVolume, create_req("db", 1024)).code == StatusCode::OK);
  CHECK(CALL(c, controller, CreateVolume, create_req("db", 8192)).code
        == StatusCode::ALREADY_EXISTS);

  auto other = CALL(c, controller, CreateVolume, create_req("logs", 4096));
  CHECK(other.resp.volume().volume_id() != id);

  CHECK(CALL(c, controller, CreateVolume, create_req("")).code == StatusCode::INVALID_ARGUMENT);
  auto no_caps = create_req("x");
  no_caps.clear_volume_capabilities();
  CHECK(CALL(c, controller, CreateVolume, no_caps).code == StatusCode::INVALID_ARGUMENT);
  auto block = create_req("x");
  block.mutable_volume_capabilities(0)->mutable_block();
  CHECK(CALL(c, controller, CreateVolume, block).code == StatusCode::INVALID_ARGUMENT);
  auto range = create_req("x", 8192);
  range.mutable_capacity_range()->set_limit_bytes(4096);
  CHECK(CALL(c, controller, CreateVolume, range).code == StatusCode::OUT_OF_RANGE);
  CHECK_FALSE(fs::exists(p.root / "volumes" / "x"));
}

TEST_CASE("hostpath DeleteVolume: removes, repeat and unknown are OK, in use refused") {
  plugin_process p;
  p.start();
  stubs c(p.endpoint);
  auto id = create(c, "scratch");
  v1::DeleteVolumeRequest del;
  del.set_volume_id(id);

  REQUIRE(CALL(c, controller, ControllerPublishVolume, cpub_req(id, "n1")).code == StatusCode::OK);
  CHECK(CALL(c, controller, DeleteVolume, del).code == StatusCode::FAILED_PRECONDITION);
  v1::ControllerUnpublishVolumeRequest unpub;
  unpub.set_volume_id(id);
  unpub.set_node_id("n1");
  REQUIRE(CALL(c, controller, ControllerUnpublishVolume, unpub).code == StatusCode::OK);

  CHECK(CALL(c, controller, DeleteVolume, del).code == StatusCode::OK);
  CHECK_FALSE(fs::exists(p.root / "volumes" / id));
  CHECK(CALL(c, controller, DeleteVolume, del).code == StatusCode::OK);
  del.set_volume_id("hp-never-existed");
  CHECK(CALL(c, controller, DeleteVolume, del).code == StatusCode::OK);
  del.clear_volume_id();
  CHECK(CALL(c, controller, DeleteVolume, del).code == StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("hostpath ValidateVolumeCapabilities: confirms mounts, not blocks") {
  plugin_process p;
  p.start();
  stubs c(p.endpoint);
  auto id = create(c, "v");
  v1::ValidateVolumeCapabilitiesRequest req;
  req.set_volume_id(id);
  *req.add_volume_capabilities() = mount_cap(Mode::MULTI_NODE_READER_ONLY);
  for (int i = 0; i < 2; ++i) {
    auto r = CALL(c, controller, ValidateVolumeCapabilities, req);
    REQUIRE(r.code == StatusCode::OK);
    REQUIRE(r.resp.has_confirmed());
    CHECK(r.resp.confirmed().volume_capabilities_size() == 1);
  }
  auto block = req;
  block.mutable_volume_capabilities(0)->mutable_block();
  auto r = CALL(c, controller, ValidateVolumeCapabilities, block);
  CHECK(r.code == StatusCode::OK);
  CHECK_FALSE(r.resp.has_confirmed());
  CHECK_FALSE(r.resp.message().empty());

  auto unknown = req;
  unknown.set_volume_id("hp-unknown");
  CHECK(CALL(c, controller, ValidateVolumeCapabilities, unknown).code == StatusCode::NOT_FOUND);
  auto no_id = req;
  no_id.clear_volume_id();
  CHECK(CALL(c, controller, ValidateVolumeCapabilities, no_id).code
        == StatusCode::INVALID_ARGUMENT);
  auto no_caps = req;
  no_caps.clear_volume_capabilities();
  CHECK(CALL(c, controller, ValidateVolumeCapabilities, no_caps).code
        == StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("hostpath ListVolumes: pages with tokens, bad token is ABORTED") {
  plugin_process p;
  p.start();
  stubs c(p.endpoint);
  std::set<std::string> ids;
  for (auto name : {"a", "b", "c"})
    ids.insert(create(c, name));
  REQUIRE(CALL(c, controller, ControllerPublishVolume, cpub_req(*ids.begin(), "n1")).code
          == StatusCode::OK);

  v1::ListVolumesRequest req;
  req.set_max_entries(2);
  auto page1 = CALL(c, controller, ListVolumes, req);
  REQUIRE(page1.code == StatusCode::OK);
  REQUIRE(page1.resp.entries_size() == 2);
  REQUIRE_FALSE(page1.resp.next_token().empty());
  CHECK(CALL(c, controller, ListVolumes, req).resp.SerializeAsString()
        == page1.resp.SerializeAsString());
  req.set_starting_token(page1.resp.next_token());
  auto page2 = CALL(c, controller, ListVolumes, req);
  REQUIRE(page2.code == StatusCode::OK);
  REQUIRE(page2.resp.entries_size() == 1);
  CHECK(page2.resp.next_token().empty());

  std::set<std::string> seen;
  for (const auto* page : {&page1.resp, &page2.resp})
    for (const auto& e : page->entries())
      seen.insert(e.volume().volume_id());
  CHECK(seen == ids);
  CHECK(page1.resp.entries(0).status().published_node_ids_size() == 1);

  req.set_starting_token("not-a-token");
  CHECK(CALL(c, controller, ListVolumes, req).code == StatusCode::ABORTED);
}

TEST_CASE("hostpath GetCapacity and ControllerGetCapabilities") {
  plugin_process p;
  p.start();
  stubs c(p.endpoint);
  v1::GetCapacityRequest req;
  *req.add_volume_capabilities() = mount_cap();
  auto cap = CALL(c, controller, GetCapacity, req);
  REQUIRE(cap.code == StatusCode::OK);
  CHECK(cap.resp.available_capacity() > 0);
  req.mutable_volume_capabilities(0)->mutable_block();
  CHECK(CALL(c, controller, GetCapacity, req).resp.available_capacity() == 0);

  auto caps = CALL(c, controller, ControllerGetCapabilities, v1::ControllerGetCapabilitiesRequest{});
  REQUIRE(caps.code == StatusCode::OK);
  std::set<int> types;
  for (const auto& c2 : caps.resp.capabilities())
    types.insert(c2.rpc().type());
  using rpc = v1::ControllerServiceCapability::RPC;
  for (auto t : {rpc::CREATE_DELETE_VOLUME, rpc::PUBLISH_UNPUBLISH_VOLUME, rpc::LIST_VOLUMES,
                 rpc::GET_CAPACITY, rpc::PUBLISH_READONLY})
    CHECK(types.count(t) == 1);
  // Each advertised capability has its test (hostpath_capabilities_test.cpp).
  CHECK(types == std::set<int>{rpc::CREATE_DELETE_VOLUME, rpc::PUBLISH_UNPUBLISH_VOLUME,
                               rpc::LIST_VOLUMES, rpc::GET_CAPACITY, rpc::CREATE_DELETE_SNAPSHOT,
                               rpc::LIST_SNAPSHOTS, rpc::CLONE_VOLUME, rpc::PUBLISH_READONLY,
                               rpc::EXPAND_VOLUME, rpc::LIST_VOLUMES_PUBLISHED_NODES,
                               rpc::VOLUME_CONDITION, rpc::GET_VOLUME,
                               rpc::SINGLE_NODE_MULTI_WRITER, rpc::MODIFY_VOLUME,
                               rpc::GET_SNAPSHOT});
}

TEST_CASE("hostpath ControllerPublishVolume: per node, single-node rules, limits") {
  plugin_process p({"--peer-node", "n2", "--max-volumes", "2"});
  p.start();
  stubs c(p.endpoint);
  auto id = create(c, "single");

  auto first = CALL(c, controller, ControllerPublishVolume, cpub_req(id, "n1"));
  REQUIRE(first.code == StatusCode::OK);
  CHECK_FALSE(first.resp.publish_context().empty());
  auto again = CALL(c, controller, ControllerPublishVolume, cpub_req(id, "n1"));
  REQUIRE(again.code == StatusCode::OK);
  CHECK(again.resp.SerializeAsString() == first.resp.SerializeAsString());

  CHECK(CALL(c, controller, ControllerPublishVolume, cpub_req(id, "n1", Mode::SINGLE_NODE_WRITER, true)).code
        == StatusCode::ALREADY_EXISTS);
  auto second_node = CALL(c, controller, ControllerPublishVolume, cpub_req(id, "n2"));
  CHECK(second_node.code == StatusCode::FAILED_PRECONDITION);
  CHECK(second_node.message.find("n1") != std::string::npos);  // names the holder

  CHECK(CALL(c, controller, ControllerPublishVolume, cpub_req("hp-unknown", "n1")).code
        == StatusCode::NOT_FOUND);
  CHECK(CALL(c, controller, ControllerPublishVolume, cpub_req(id, "n9")).code
        == StatusCode::NOT_FOUND);
  CHECK(CALL(c, controller, ControllerPublishVolume, cpub_req("", "n1")).code
        == StatusCode::INVALID_ARGUMENT);
  CHECK(CALL(c, controller, ControllerPublishVolume, cpub_req(id, "")).code
        == StatusCode::INVALID_ARGUMENT);
  auto no_cap = cpub_req(id, "n1");
  no_cap.clear_volume_capability();
  CHECK(CALL(c, controller, ControllerPublishVolume, no_cap).code
        == StatusCode::INVALID_ARGUMENT);

  // Multi-node volumes go to both nodes.
  auto shared = create(c, "shared", Mode::MULTI_NODE_MULTI_WRITER);
  CHECK(CALL(c, controller, ControllerPublishVolume, cpub_req(shared, "n1", Mode::MULTI_NODE_MULTI_WRITER)).code
        == StatusCode::OK);
  CHECK(CALL(c, controller, ControllerPublishVolume, cpub_req(shared, "n2", Mode::MULTI_NODE_MULTI_WRITER)).code
        == StatusCode::OK);
  // n1 now holds two volumes: the third exceeds --max-volumes.
  auto third = create(c, "third");
  CHECK(CALL(c, controller, ControllerPublishVolume, cpub_req(third, "n1")).code
        == StatusCode::RESOURCE_EXHAUSTED);

  v1::ControllerUnpublishVolumeRequest unpub;
  unpub.set_volume_id(id);
  unpub.set_node_id("n1");
  CHECK(CALL(c, controller, ControllerUnpublishVolume, unpub).code == StatusCode::OK);
  CHECK(CALL(c, controller, ControllerUnpublishVolume, unpub).code == StatusCode::OK);
  CHECK(CALL(c, controller, ControllerPublishVolume, cpub_req(id, "n2")).code == StatusCode::OK);
  unpub.set_volume_id(third);  // never published
  CHECK(CALL(c, controller, ControllerUnpublishVolume, unpub).code == StatusCode::OK);
  unpub.set_volume_id(shared);
  unpub.clear_node_id();  // every node
  CHECK(CALL(c, controller, ControllerUnpublishVolume, unpub).code == StatusCode::OK);
  CHECK(CALL(c, controller, ControllerPublishVolume, cpub_req(third, "n1")).code == StatusCode::OK);
  unpub.clear_volume_id();
  CHECK(CALL(c, controller, ControllerUnpublishVolume, unpub).code
        == StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("hostpath NodeGetInfo and NodeGetCapabilities") {
  plugin_process p({"--max-volumes", "7", "--topology", "zone=z1", "--topology", "rack=r4"});
  p.start();
  stubs c(p.endpoint);
  auto info = CALL(c, node, NodeGetInfo, v1::NodeGetInfoRequest{});
  REQUIRE(info.code == StatusCode::OK);
  CHECK(info.resp.node_id() == "n1");
  CHECK(info.resp.max_volumes_per_node() == 7);
  CHECK(info.resp.accessible_topology().segments().at("zone") == "z1");
  CHECK(info.resp.accessible_topology().segments().at("rack") == "r4");
  auto caps = CALL(c, node, NodeGetCapabilities, v1::NodeGetCapabilitiesRequest{});
  std::set<int> types;
  for (const auto& cap : caps.resp.capabilities())
    types.insert(cap.rpc().type());
  using rpc = v1::NodeServiceCapability::RPC;
  CHECK(types == std::set<int>{rpc::STAGE_UNSTAGE_VOLUME, rpc::GET_VOLUME_STATS,
                               rpc::EXPAND_VOLUME, rpc::VOLUME_CONDITION,
                               rpc::SINGLE_NODE_MULTI_WRITER});
}

// The node lifecycle, run in each mount mode.
void node_lifecycle(bool bind) {
  plugin_process p(mode_args(bind));
  p.start();
  stubs c(p.endpoint);
  auto id = create(c, "data");
  auto staging = co_dir(p, "staging");
  auto target = co_dir(p, "pods") / "a1";

  // Publish before stage, and without a staging path: FAILED_PRECONDITION.
  CHECK(CALL(c, node, NodePublishVolume, pub_req(id, staging, target)).code
        == StatusCode::FAILED_PRECONDITION);
  CHECK(CALL(c, node, NodePublishVolume, pub_req(id, "", target)).code
        == StatusCode::FAILED_PRECONDITION);
  CHECK_FALSE(fs::exists(fs::symlink_status(target)));

  // Stage: errors, then success and its repeat.
  CHECK(CALL(c, node, NodeStageVolume, stage_req("", staging)).code == StatusCode::INVALID_ARGUMENT);
  CHECK(CALL(c, node, NodeStageVolume, stage_req(id, "")).code == StatusCode::INVALID_ARGUMENT);
  auto no_cap = stage_req(id, staging);
  no_cap.clear_volume_capability();
  CHECK(CALL(c, node, NodeStageVolume, no_cap).code == StatusCode::INVALID_ARGUMENT);
  CHECK(CALL(c, node, NodeStageVolume, stage_req("hp-unknown", staging)).code
        == StatusCode::NOT_FOUND);
  REQUIRE(CALL(c, node, NodeStageVolume, stage_req(id, staging)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeStageVolume, stage_req(id, staging)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeStageVolume, stage_req(id, staging, Mode::MULTI_NODE_MULTI_WRITER)).code
        == StatusCode::ALREADY_EXISTS);
  if (bind)
    CHECK(berth::test::mounts_under(p.dir).size() == 1);

  // Publish: success, repeat, incompatible repeat, second target.
  REQUIRE(CALL(c, node, NodePublishVolume, pub_req(id, staging, target)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodePublishVolume, pub_req(id, staging, target)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodePublishVolume, pub_req(id, staging, target, true)).code
        == StatusCode::ALREADY_EXISTS);
  CHECK(CALL(c, node, NodePublishVolume, pub_req(id, staging, co_dir(p, "pods") / "a2")).code
        == StatusCode::FAILED_PRECONDITION);
  CHECK(CALL(c, node, NodePublishVolume, pub_req("", staging, target)).code
        == StatusCode::INVALID_ARGUMENT);
  CHECK(CALL(c, node, NodePublishVolume, pub_req(id, staging, "")).code
        == StatusCode::INVALID_ARGUMENT);
  if (bind)
    CHECK(berth::test::mounts_under(p.dir).size() == 2);
  else
    CHECK(fs::is_symlink(target));

  // A write through the published path lands in the volume's directory.
  { std::ofstream(target / "hello.txt") << "written through the publication\n"; }
  CHECK(fs::exists(p.root / "volumes" / id / "hello.txt"));

  v1::NodeGetVolumeStatsRequest stats;
  stats.set_volume_id(id);
  stats.set_volume_path(target.string());
  auto st = CALL(c, node, NodeGetVolumeStats, stats);
  REQUIRE(st.code == StatusCode::OK);
  REQUIRE(st.resp.usage_size() == 2);
  CHECK(st.resp.usage(0).unit() == v1::VolumeUsage::BYTES);
  CHECK(st.resp.usage(0).used() == 32);
  CHECK(st.resp.usage(0).total() == 1 << 20);
  CHECK(st.resp.usage(0).available() == (1 << 20) - 32);
  CHECK(st.resp.usage(1).unit() == v1::VolumeUsage::INODES);
  CHECK(st.resp.usage(1).used() == 2);  // the volume's directory and hello.txt
  CHECK(st.resp.usage(1).total() > 0);
  CHECK(st.resp.usage(1).available() <= st.resp.usage(1).total());
  CHECK_FALSE(st.resp.volume_condition().abnormal());
  stats.set_volume_path((p.dir / "elsewhere").string());
  CHECK(CALL(c, node, NodeGetVolumeStats, stats).code == StatusCode::NOT_FOUND);
  stats.set_volume_id("hp-unknown");
  CHECK(CALL(c, node, NodeGetVolumeStats, stats).code == StatusCode::NOT_FOUND);
  stats.clear_volume_id();
  CHECK(CALL(c, node, NodeGetVolumeStats, stats).code == StatusCode::INVALID_ARGUMENT);

  // Unstage waits for unpublish.
  CHECK(CALL(c, node, NodeUnstageVolume, unstage_req(id, staging)).code
        == StatusCode::FAILED_PRECONDITION);
  CHECK(CALL(c, node, NodeUnpublishVolume, unpub_req(id, target)).code == StatusCode::OK);
  CHECK_FALSE(fs::exists(fs::symlink_status(target)));
  CHECK(CALL(c, node, NodeUnpublishVolume, unpub_req(id, target)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeUnpublishVolume, unpub_req("", target)).code
        == StatusCode::INVALID_ARGUMENT);
  CHECK(CALL(c, node, NodeUnstageVolume, unstage_req(id, staging)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeUnstageVolume, unstage_req(id, staging)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeUnstageVolume, unstage_req(id, "")).code
        == StatusCode::INVALID_ARGUMENT);
  CHECK(berth::test::mounts_under(p.dir).empty());
  // The data stays with the volume.
  CHECK(fs::exists(p.root / "volumes" / id / "hello.txt"));
}

TEST_CASE("hostpath node lifecycle, symlink mode") {
  node_lifecycle(false);
}

TEST_CASE("hostpath node lifecycle, bind mode (root only)") {
  if (berth::test::skipped_unless_root("bind mode")) return;
  node_lifecycle(true);
}

TEST_CASE("hostpath bind mode: a readonly publication refuses writes") {
  if (berth::test::skipped_unless_root("bind mode")) return;
  plugin_process p(mode_args(true));
  p.start();
  stubs c(p.endpoint);
  auto id = create(c, "shared", Mode::MULTI_NODE_MULTI_WRITER);
  auto staging = co_dir(p, "staging");
  auto rw = co_dir(p, "pods") / "rw";
  auto ro = co_dir(p, "pods") / "ro";
  REQUIRE(CALL(c, node, NodeStageVolume, stage_req(id, staging, Mode::MULTI_NODE_MULTI_WRITER)).code
          == StatusCode::OK);
  REQUIRE(CALL(c, node, NodePublishVolume, pub_req(id, staging, rw, false, Mode::MULTI_NODE_MULTI_WRITER)).code
          == StatusCode::OK);
  REQUIRE(CALL(c, node, NodePublishVolume, pub_req(id, staging, ro, true, Mode::MULTI_NODE_MULTI_WRITER)).code
          == StatusCode::OK);
  { std::ofstream(rw / "a") << "x"; }
  CHECK(fs::exists(ro / "a"));
  std::ofstream denied(ro / "b");
  CHECK_FALSE(denied.good());
  CHECK(CALL(c, node, NodeUnpublishVolume, unpub_req(id, ro)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeUnpublishVolume, unpub_req(id, rw)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeUnstageVolume, unstage_req(id, staging)).code == StatusCode::OK);
}

TEST_CASE("hostpath NodeStageVolume: more than --max-volumes is RESOURCE_EXHAUSTED") {
  plugin_process p({"--max-volumes", "1", "--mount-mode", "symlink"});
  p.start();
  stubs c(p.endpoint);
  auto a = create(c, "a");
  auto b = create(c, "b");
  REQUIRE(CALL(c, node, NodeStageVolume, stage_req(a, co_dir(p, "sa"))).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeStageVolume, stage_req(b, co_dir(p, "sb"))).code
        == StatusCode::RESOURCE_EXHAUSTED);
  CHECK(CALL(c, node, NodeStageVolume, stage_req(a, co_dir(p, "sa"))).code == StatusCode::OK);
  REQUIRE(CALL(c, node, NodeUnstageVolume, unstage_req(a, co_dir(p, "sa"))).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeStageVolume, stage_req(b, co_dir(p, "sb"))).code == StatusCode::OK);
}

void survives_kill9(bool bind) {
  plugin_process p(mode_args(bind));
  p.start();
  auto c = std::make_unique<stubs>(p.endpoint);
  auto id = create(*c, "durable");
  auto staging = co_dir(p, "staging");
  auto target = co_dir(p, "pods") / "a1";
  REQUIRE(CALL(*c, controller, ControllerPublishVolume, cpub_req(id, "n1")).code == StatusCode::OK);
  REQUIRE(CALL(*c, node, NodeStageVolume, stage_req(id, staging)).code == StatusCode::OK);
  REQUIRE(CALL(*c, node, NodePublishVolume, pub_req(id, staging, target)).code == StatusCode::OK);

  p.kill9();
  CHECK(fs::exists(p.socket));  // stale: the restart must remove it
  p.start();
  c = std::make_unique<stubs>(p.endpoint);

  auto list = CALL(*c, controller, ListVolumes, v1::ListVolumesRequest{});
  REQUIRE(list.resp.entries_size() == 1);
  CHECK(list.resp.entries(0).volume().volume_id() == id);
  CHECK(list.resp.entries(0).volume().capacity_bytes() == 1 << 20);
  REQUIRE(list.resp.entries(0).status().published_node_ids_size() == 1);
  // The restarted plugin remembers every step: repeats are OK, conflicts
  // and ordering violations are still refused.
  CHECK(CALL(*c, node, NodePublishVolume, pub_req(id, staging, target)).code == StatusCode::OK);
  CHECK(CALL(*c, node, NodePublishVolume, pub_req(id, staging, target, true)).code
        == StatusCode::ALREADY_EXISTS);
  CHECK(CALL(*c, node, NodeUnstageVolume, unstage_req(id, staging)).code
        == StatusCode::FAILED_PRECONDITION);
  CHECK(CALL(*c, controller, ControllerPublishVolume, cpub_req(id, "n1", Mode::SINGLE_NODE_WRITER, true)).code
        == StatusCode::ALREADY_EXISTS);
  { std::ofstream(target / "after-restart") << "ok"; }
  CHECK(fs::exists(p.root / "volumes" / id / "after-restart"));

  CHECK(CALL(*c, node, NodeUnpublishVolume, unpub_req(id, target)).code == StatusCode::OK);
  CHECK(CALL(*c, node, NodeUnstageVolume, unstage_req(id, staging)).code == StatusCode::OK);
  v1::ControllerUnpublishVolumeRequest unpub;
  unpub.set_volume_id(id);
  unpub.set_node_id("n1");
  CHECK(CALL(*c, controller, ControllerUnpublishVolume, unpub).code == StatusCode::OK);
  CHECK(berth::test::mounts_under(p.dir).empty());
}

TEST_CASE("hostpath state survives kill -9 and restart, symlink mode") {
  survives_kill9(false);
}

TEST_CASE("hostpath state survives kill -9 and restart, bind mode (root only)") {
  if (berth::test::skipped_unless_root("bind mode")) return;
  survives_kill9(true);
}

// The crash points of the state file's replacement (docs/testing.md#crash-points):
// with --journal-limit 0 every save is a compaction (state.json rewritten
// whole, the journal emptied). Stopped at each step of its second write, the
// plugin restarts with the volume it acknowledged, and with the one in
// flight exactly when the rename had happened.
TEST_CASE("hostpath state file: a crash at each step of its replacement loses nothing answered") {
  for (std::string step : {"state.after_temp_fsync", "state.after_rename",
                           "state.after_dir_fsync", "journal.after_truncate"}) {
    CAPTURE(step);
    plugin_process p({"--mount-mode", "symlink", "--journal-limit", "0"});
    start_with_crashpoint(p, "hostpath." + step + "@2");
    std::string kept;
    {
      stubs c(p.endpoint);
      kept = create(c, "kept");  // the first write of state.json
      CHECK(CALL(c, controller, CreateVolume, create_req("in-flight")).code != StatusCode::OK);
    }
    int status = p.wait_exit(std::chrono::seconds(10));
    REQUIRE(status != -1);  // the crash point was reached
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 137);
    p.start();
    stubs c(p.endpoint);
    auto list = CALL(c, controller, ListVolumes, v1::ListVolumesRequest{});
    REQUIRE(list.code == StatusCode::OK);
    std::set<std::string> ids;
    for (const auto& e : list.resp.entries()) ids.insert(e.volume().volume_id());
    CHECK(ids.count(kept) == 1);
    CHECK(ids.size() == (step == "state.after_temp_fsync" ? 1u : 2u));
    CHECK(create(c, "kept") == kept);  // and it is the same volume
  }
}

// The crash points of the journal's append (the default: saves append to
// state.journal). A process crash keeps what was written even before its
// fdatasync (the page cache outlives the process), so the volume in flight
// is there after the restart in both cases, next to the acknowledged one.
TEST_CASE("hostpath journal: a crash after an append's write or sync loses nothing answered") {
  for (std::string step : {"after_write", "after_sync"}) {
    CAPTURE(step);
    plugin_process p({"--mount-mode", "symlink"});
    start_with_crashpoint(p, "hostpath.journal." + step + "@2");
    std::string kept;
    {
      stubs c(p.endpoint);
      kept = create(c, "kept");
      CHECK(CALL(c, controller, CreateVolume, create_req("in-flight")).code != StatusCode::OK);
    }
    int status = p.wait_exit(std::chrono::seconds(10));
    REQUIRE(status != -1);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 137);
    CHECK_FALSE(fs::exists(p.root / "state.json"));  // never compacted: all in the journal
    p.start();
    stubs c(p.endpoint);
    auto list = CALL(c, controller, ListVolumes, v1::ListVolumesRequest{});
    REQUIRE(list.code == StatusCode::OK);
    CHECK(list.resp.entries_size() == 2);
    CHECK(create(c, "kept") == kept);
  }
}

// A journal that compacts often (--journal-limit 1: every second save) keeps
// everything across restarts; an old state.json without a journal (what
// earlier versions wrote) loads, and its volumes stay.
TEST_CASE("hostpath journal: compactions and an old state.json keep everything across restarts") {
  plugin_process p({"--mount-mode", "symlink", "--journal-limit", "1"});
  fs::create_directories(p.root);
  {
    std::ofstream old(p.root / "state.json");
    old << R"({"volumes": {"hp-old": {"name": "old", "capacity_bytes": 5,
               "parameters": {"a": "b"}}}, "controller_publications": {},
               "stagings": {}, "publications": {}})";
  }
  p.start();
  std::vector<std::string> ids;
  {
    stubs c(p.endpoint);
    for (int i = 0; i < 7; ++i)
      ids.push_back(create(c, "compacted-" + std::to_string(i)));
    v1::DeleteVolumeRequest del;
    del.set_volume_id(ids[3]);
    REQUIRE(CALL(c, controller, DeleteVolume, del).code == StatusCode::OK);
    REQUIRE(CALL(c, controller, ControllerPublishVolume, cpub_req(ids[0], "n1")).code
            == StatusCode::OK);
  }
  for (int restart = 0; restart < 2; ++restart) {
    p.kill9();
    p.start();
    stubs c(p.endpoint);
    auto list = CALL(c, controller, ListVolumes, v1::ListVolumesRequest{});
    REQUIRE(list.code == StatusCode::OK);
    std::map<std::string, int> published;
    for (const auto& e : list.resp.entries())
      published[e.volume().volume_id()] = e.status().published_node_ids_size();
    CHECK(published.size() == 7);  // hp-old and 6 of the 7
    CHECK(published.count("hp-old") == 1);
    CHECK(published.count(ids[3]) == 0);
    CHECK(published[ids[0]] == 1);
    // A change after the restart lands after what was loaded.
    v1::DeleteVolumeRequest del;
    del.set_volume_id(create(c, "after-restart-" + std::to_string(restart)));
    REQUIRE(CALL(c, controller, DeleteVolume, del).code == StatusCode::OK);
  }
}

TEST_CASE("hostpath call log: calls in order, with codes, without secrets") {
  plugin_process p({"--mount-mode", "symlink"});
  p.start();
  stubs c(p.endpoint);
  auto id = create(c, "logged");
  auto staging = co_dir(p, "staging");
  auto target = co_dir(p, "pods") / "a1";
  auto cpub = cpub_req(id, "n1");
  (*cpub.mutable_secrets())["password"] = "hunter2-controller";
  auto stage = stage_req(id, staging);
  (*stage.mutable_secrets())["password"] = "hunter2-stage";
  auto pub = pub_req(id, staging, target);
  (*pub.mutable_secrets())["password"] = "hunter2-publish";
  REQUIRE(CALL(c, controller, ControllerPublishVolume, cpub).code == StatusCode::OK);
  REQUIRE(CALL(c, node, NodeStageVolume, stage).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeUnstageVolume, unstage_req(id, "")).code == StatusCode::INVALID_ARGUMENT);
  REQUIRE(CALL(c, node, NodePublishVolume, pub).code == StatusCode::OK);
  REQUIRE(CALL(c, node, NodeUnpublishVolume, unpub_req(id, target)).code == StatusCode::OK);
  REQUIRE(CALL(c, node, NodeUnstageVolume, unstage_req(id, staging)).code == StatusCode::OK);

  auto lines = read_log(p.call_log);
  std::vector<std::string> methods;
  for (const auto& l : lines)
    if (l["method"] != "Probe")  // the harness probes until the plugin is up
      methods.push_back(l["method"]);
  CHECK(methods == std::vector<std::string>{"CreateVolume", "ControllerPublishVolume",
                                            "NodeStageVolume", "NodeUnstageVolume",
                                            "NodePublishVolume", "NodeUnpublishVolume",
                                            "NodeUnstageVolume"});
  auto find = [&](const std::string& m) {
    for (const auto& l : lines)
      if (l["method"] == m)
        return l;
    return nlohmann::json{};
  };
  CHECK(find("ControllerPublishVolume")["node_id"] == "n1");
  CHECK(find("NodePublishVolume")["target_path"] == target.string());
  CHECK(find("NodeStageVolume")["volume_id"] == id);
  CHECK(find("NodeUnstageVolume")["code_name"] == "INVALID_ARGUMENT");
  CHECK(find("NodeUnstageVolume")["code"] == 3);
  // Every line has the time its call started, in call order, and the time
  // its answer was ready; readonly only when the request was read-only.
  int64_t last = 0;
  for (const auto& l : lines) {
    REQUIRE(l.contains("at_ns"));
    REQUIRE(l.contains("end_ns"));
    CHECK(l["at_ns"].get<int64_t>() >= last);
    CHECK(l["end_ns"].get<int64_t>() >= l["at_ns"].get<int64_t>());
    last = l["at_ns"].get<int64_t>();
  }
  CHECK_FALSE(find("NodePublishVolume").contains("readonly"));
  CHECK_FALSE(find("ControllerPublishVolume").contains("readonly"));

  std::stringstream raw;
  raw << std::ifstream(p.call_log).rdbuf();
  CHECK(raw.str().find("hunter2") == std::string::npos);
  CHECK(raw.str().find("password") == std::string::npos);
}

TEST_CASE("hostpath exits cleanly on SIGTERM and removes its socket") {
  plugin_process p;
  p.start();
  int status = p.terminate();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(fs::exists(p.socket));
}

// Many callers at once, each driving its own volumes through the attach
// steps: every call succeeds, and after kill -9 (no chance to flush
// anything late) the state file and the restarted plugin hold every step
// that was answered, so the group commit never answered before its save.
void concurrent_attach(bool bind) {
  plugin_process p(mode_args(bind));
  p.start();
  constexpr int callers = 6, per_caller = 5, n = callers * per_caller;
  auto staging = [&](int i) { return p.dir / "co" / ("staging-" + std::to_string(i)); };
  auto target = [&](int i) { return p.dir / "co" / "pods" / ("pod-" + std::to_string(i)); };
  for (int i = 0; i < n; ++i)  // the CO's directories, made before the race
    fs::create_directories(staging(i));
  fs::create_directories(p.dir / "co" / "pods");

  std::vector<std::string> ids(n);
  std::mutex mu;
  std::vector<std::string> errors;  // doctest's checks are not thread-safe
  auto expect_ok = [&](int i, const char* what, StatusCode code, const std::string& msg) {
    if (code == StatusCode::OK)
      return true;
    std::lock_guard<std::mutex> lock(mu);
    errors.push_back("volume " + std::to_string(i) + " " + what + ": " + std::to_string(code)
                     + " " + msg);
    return false;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < callers; ++t)
    threads.emplace_back([&, t] {
      stubs c(p.endpoint);
      for (int i = t * per_caller; i < (t + 1) * per_caller; ++i) {
        auto cr = CALL(c, controller, CreateVolume, create_req("many-" + std::to_string(i)));
        if (!expect_ok(i, "CreateVolume", cr.code, cr.message))
          continue;
        ids[i] = cr.resp.volume().volume_id();
        auto cp = CALL(c, controller, ControllerPublishVolume, cpub_req(ids[i], "n1"));
        auto st = CALL(c, node, NodeStageVolume, stage_req(ids[i], staging(i)));
        auto pb = CALL(c, node, NodePublishVolume, pub_req(ids[i], staging(i), target(i)));
        expect_ok(i, "ControllerPublishVolume", cp.code, cp.message);
        expect_ok(i, "NodeStageVolume", st.code, st.message);
        expect_ok(i, "NodePublishVolume", pb.code, pb.message);
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(errors.empty());
  for (const auto& e : errors)
    MESSAGE(e);

  p.kill9();
  auto saved = berth::test::hostpath_state_on_disk(p.root / "state");
  CHECK(saved.volumes.size() == n);
  CHECK(saved.controller_publications.size() == n);
  CHECK(saved.stagings.size() == n);
  CHECK(saved.publications.size() == n);

  p.start();
  stubs c(p.endpoint);
  auto list = CALL(c, controller, ListVolumes, v1::ListVolumesRequest{});
  REQUIRE(list.code == StatusCode::OK);
  std::set<std::string> listed;
  for (const auto& e : list.resp.entries()) {
    listed.insert(e.volume().volume_id());
    CHECK(e.status().published_node_ids_size() == 1);
  }
  CHECK(listed == std::set<std::string>(ids.begin(), ids.end()));
  for (int i = 0; i < n; ++i) {
    CAPTURE(i);
    // Remembered: the same publication is OK, a different one is refused,
    // and unstaging under a publication is refused.
    CHECK(CALL(c, node, NodePublishVolume, pub_req(ids[i], staging(i), target(i))).code
          == StatusCode::OK);
    CHECK(CALL(c, node, NodePublishVolume, pub_req(ids[i], staging(i), target(i), true)).code
          == StatusCode::ALREADY_EXISTS);
    CHECK(CALL(c, node, NodeUnstageVolume, unstage_req(ids[i], staging(i))).code
          == StatusCode::FAILED_PRECONDITION);
  }
  if (bind)
    CHECK(berth::test::mounts_under(p.dir).size() == 2 * n);
}

TEST_CASE("hostpath concurrent calls on different volumes all succeed and survive kill -9, symlink mode") {
  concurrent_attach(false);
}

TEST_CASE("hostpath concurrent calls on different volumes all succeed and survive kill -9, bind mode (root only)") {
  if (berth::test::skipped_unless_root("bind mode")) return;
  concurrent_attach(true);
}

// --shared-root keeps whole calls serialized across the processes sharing
// ROOT (each saves its own change under ROOT's lock): concurrent callers on
// two nodes all succeed, everything is recorded, and the merged call logs
// show no two calls in progress at once.
TEST_CASE("hostpath --shared-root: concurrent calls through two processes stay serialized") {
  plugin_process a({"--mount-mode", "symlink", "--shared-root"}, "n1");
  plugin_process b({"--mount-mode", "symlink", "--shared-root"}, "n2");
  b.root = a.root;
  a.start();
  b.start();
  constexpr int callers = 4, per_caller = 3, n = callers * per_caller;
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < callers; ++t)
    threads.emplace_back([&, t] {
      plugin_process& on = t % 2 == 0 ? a : b;  // the node that stages
      stubs ctrl(a.endpoint), node(on.endpoint);
      for (int i = t * per_caller; i < (t + 1) * per_caller; ++i) {
        auto staging = on.dir / "co" / ("staging-" + std::to_string(i));
        auto cr = CALL(ctrl, controller, CreateVolume, create_req("shared-" + std::to_string(i)));
        auto id = cr.resp.volume().volume_id();
        auto cp = CALL(ctrl, controller, ControllerPublishVolume, cpub_req(id, on.node_id));
        auto st = CALL(node, node, NodeStageVolume, stage_req(id, staging));
        std::lock_guard<std::mutex> lock(mu);
        for (auto [what, code] : {std::pair{"CreateVolume", cr.code},
                                  std::pair{"ControllerPublishVolume", cp.code},
                                  std::pair{"NodeStageVolume", st.code}})
          if (code != StatusCode::OK)
            errors.push_back(std::to_string(i) + " " + what + ": " + std::to_string(code));
      }
    });
  for (auto& t : threads)
    t.join();
  CHECK(errors.empty());
  for (const auto& e : errors)
    MESSAGE(e);

  using berth::test::hostpath_state_on_disk;
  auto shared = hostpath_state_on_disk(a.root / "state");
  CHECK(shared.volumes.size() == n);
  CHECK(shared.controller_publications.size() == n);
  CHECK(shared.stagings.empty());
  auto n1 = hostpath_state_on_disk(a.root / "nodes" / "n1"),
       n2 = hostpath_state_on_disk(a.root / "nodes" / "n2");
  CHECK(n1.stagings.size() + n2.stagings.size() == n);
  CHECK(n1.stagings.size() > 0);
  CHECK(n2.stagings.size() > 0);
  CHECK(n1.volumes.empty());

  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto* p : {&a, &b})
    for (const auto& l : read_log(p->call_log))
      spans.emplace_back(l.at("at_ns").get<int64_t>(), l.at("end_ns").get<int64_t>());
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    CHECK(spans[i - 1].second <= spans[i].first);
}

// --delay makes a call slow without holding any lock: 8 slow publishes of 8
// volumes, issued together, run side by side. Only the delay's lower bound
// is asserted, never an upper bound on time.
TEST_CASE("hostpath --delay: parallel ControllerPublishVolume calls overlap, each takes the delay") {
  plugin_process p({"--mount-mode", "symlink", "--delay", "ControllerPublishVolume=300"});
  p.start();
  constexpr int n = 8;
  std::vector<std::string> ids;
  {
    stubs c(p.endpoint);
    for (int i = 0; i < n; ++i)
      ids.push_back(create(c, "slow-" + std::to_string(i)));
  }
  // One connected channel per caller before the start, so the calls leave together.
  std::vector<std::unique_ptr<stubs>> conns;
  for (int i = 0; i < n; ++i) {
    conns.push_back(std::make_unique<stubs>(p.endpoint));
    REQUIRE(CALL(*conns.back(), identity, Probe, v1::ProbeRequest{}).code == StatusCode::OK);
  }
  std::vector<StatusCode> codes(n, StatusCode::UNKNOWN);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      while (!go.load())
        std::this_thread::yield();
      codes[i] = CALL(*conns[i], controller, ControllerPublishVolume, cpub_req(ids[i], "n1")).code;
    });
  go = true;
  for (auto& t : threads)
    t.join();
  for (int i = 0; i < n; ++i)
    CHECK(codes[i] == StatusCode::OK);

  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& l : read_log(p.call_log))
    if (l["method"] == "ControllerPublishVolume")
      spans.emplace_back(l.at("at_ns").get<int64_t>(), l.at("end_ns").get<int64_t>());
  REQUIRE(spans.size() == n);
  for (const auto& [at, end] : spans)
    CHECK(end - at >= int64_t{300'000'000});
  // The most calls in progress at one instant (a call is in progress on
  // [at_ns, end_ns)): serialized calls would never exceed 1.
  std::vector<std::pair<int64_t, int>> edges;
  for (const auto& [at, end] : spans) {
    edges.emplace_back(at, +1);
    edges.emplace_back(end, -1);
  }
  std::sort(edges.begin(), edges.end());  // at equal times, ends (-1) first
  int open = 0, most = 0;
  for (const auto& [t, d] : edges)
    most = std::max(most, open += d);
  MESSAGE("ControllerPublishVolume calls in progress at once: " << most);
  CHECK(most >= 2);
}

namespace {

// Runs berth-hostpath with `args` until it exits by itself (it must, within
// 10 s); returns the waitpid status and its stderr.
int run_to_exit(const plugin_process& p, std::vector<std::string> args, std::string& err) {
  std::vector<std::string> all = {berth::test_bins::hostpath, "--endpoint", p.endpoint, "--root",
                                  p.root.string(),    "--node-id",  "n1"};
  all.insert(all.end(), args.begin(), args.end());
  auto err_file = p.dir / "refused.stderr";
  fs::remove(err_file);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0)
      ::dup2(fd, 2);
    std::vector<char*> argv;
    for (auto& a : all)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = -1;
  for (int i = 0; i < 1000; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      std::stringstream text;
      text << std::ifstream(err_file).rdbuf();
      err = text.str();
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

}  // namespace

TEST_CASE("hostpath --delay: an unknown RPC or a bad number is refused with exit 2") {
  plugin_process p;
  for (std::string bad : {"Bogus=5", "ControllerPublishVolume=abc", "ControllerPublishVolume",
                          "ControllerPublishVolume=-1", "ControllerPublishVolume=",
                          "=300", "controllerpublishvolume=300"}) {
    CAPTURE(bad);
    std::string err;
    int status = run_to_exit(p, {"--delay", bad}, err);
    REQUIRE(status != -1);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 2);
    CHECK(err.find("--delay") != std::string::npos);
    CHECK_FALSE(fs::exists(p.socket));  // it never served
  }
}

// A save that fails (ROOT's filesystem full: a 1 MiB tmpfs, root only)
// answers INTERNAL; the change stays in memory and the next save, once
// there is room, writes the whole state (the journal's end is unknown
// after a failed append), so a retry answers OK and both survive kill -9.
TEST_CASE("hostpath journal: a failed save answers INTERNAL, the next one compacts") {
  if (berth::test::skipped_unless_root("a small tmpfs to fill")) return;
  plugin_process p({"--mount-mode", "symlink"});
  fs::create_directories(p.root);
  REQUIRE(::mount("tmpfs", p.root.c_str(), "tmpfs", 0, "size=1m") == 0);
  p.start();
  stubs c(p.endpoint);
  auto first = create(c, "before-full");
  // Fill the filesystem to the last byte.
  {
    int fd = ::open((p.root / "filler").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    std::string block(4096, 'x');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    while (::write(fd, block.data(), 1) > 0) {
    }
    ::close(fd);
  }
  // The journal's last page still has room for a few lines: create until
  // an append needs a new page.
  int made = 0;
  reply<v1::CreateVolumeResponse> full;
  for (; made < 200; ++made) {
    full = CALL(c, controller, CreateVolume, create_req("while-full-" + std::to_string(made)));
    if (full.code != StatusCode::OK)
      break;
  }
  CAPTURE(full.message);
  REQUIRE(full.code == StatusCode::INTERNAL);
  CHECK(full.message.find("state.journal") != std::string::npos);
  fs::remove(p.root / "filler");
  auto after = CALL(c, controller, CreateVolume, create_req("after-full"));
  CHECK(after.code == StatusCode::OK);
  auto retry = CALL(c, controller, CreateVolume,
                    create_req("while-full-" + std::to_string(made)));
  CHECK(retry.code == StatusCode::OK);
  CHECK(fs::exists(p.root / "state.json"));  // written whole by the compaction
  const size_t expected = static_cast<size_t>(made) + 3;
  p.kill9();
  auto saved = berth::test::hostpath_state_on_disk(p.root / "state");
  CHECK(saved.volumes.size() == expected);
  p.start();
  stubs c2(p.endpoint);
  CHECK(static_cast<size_t>(
            CALL(c2, controller, ListVolumes, v1::ListVolumesRequest{}).resp.entries_size())
        == expected);
  CHECK(create(c2, "before-full") == first);
}
