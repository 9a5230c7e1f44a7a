// berth-hostpath's optional CSI capabilities, one test each, over its real
// socket: snapshots (CREATE_DELETE_SNAPSHOT, LIST_SNAPSHOTS, GET_SNAPSHOT),
// volumes from a snapshot or a volume (CLONE_VOLUME), expansion
// (EXPAND_VOLUME, online), ControllerGetVolume and volume conditions
// (GET_VOLUME, VOLUME_CONDITION), volume stats in bytes and inodes,
// ControllerModifyVolume (MODIFY_VOLUME), published nodes in ListVolumes and
// SINGLE_NODE_MULTI_WRITER: success, idempotency, the spec's error codes,
// and what must survive a restart.
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "hostpath_client.hpp"
#include "hostpath_disk.hpp"
#include "hostpath.hpp"

using namespace hostpath_test;

namespace {

std::string read_file(const fs::path& f) {
  std::ifstream in(f);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

v1::CreateSnapshotRequest snap_req(const std::string& name, const std::string& source) {
  v1::CreateSnapshotRequest req;
  req.set_name(name);
  req.set_source_volume_id(source);
  return req;
}

std::string snapshot(stubs& c, const std::string& name, const std::string& source) {
  auto r = CALL(c, controller, CreateSnapshot, snap_req(name, source));
  REQUIRE(r.code == StatusCode::OK);
  return r.resp.snapshot().snapshot_id();
}

v1::CreateVolumeRequest from_snapshot(const std::string& name, const std::string& snap,
                                      int64_t required = 0) {
  auto req = create_req(name, required);
  req.mutable_volume_content_source()->mutable_snapshot()->set_snapshot_id(snap);
  return req;
}

v1::CreateVolumeRequest from_volume(const std::string& name, const std::string& vol,
                                    int64_t required = 0) {
  auto req = create_req(name, required);
  req.mutable_volume_content_source()->mutable_volume()->set_volume_id(vol);
  return req;
}

v1::ControllerExpandVolumeRequest cexpand_req(const std::string& vol, int64_t required,
                                              int64_t limit = 0) {
  v1::ControllerExpandVolumeRequest req;
  req.set_volume_id(vol);
  req.mutable_capacity_range()->set_required_bytes(required);
  req.mutable_capacity_range()->set_limit_bytes(limit);
  return req;
}

v1::NodeExpandVolumeRequest nexpand_req(const std::string& vol, const fs::path& path,
                                        int64_t required, int64_t limit = 0) {
  v1::NodeExpandVolumeRequest req;
  req.set_volume_id(vol);
  req.set_volume_path(path.string());
  req.mutable_capacity_range()->set_required_bytes(required);
  req.mutable_capacity_range()->set_limit_bytes(limit);
  return req;
}

v1::ControllerGetVolumeRequest get_req(const std::string& vol) {
  v1::ControllerGetVolumeRequest req;
  req.set_volume_id(vol);
  return req;
}

std::set<std::string> snapshot_ids(const v1::ListSnapshotsResponse& resp) {
  std::set<std::string> ids;
  for (const auto& e : resp.entries())
    ids.insert(e.snapshot().snapshot_id());
  return ids;
}

}  // namespace

TEST_CASE("hostpath CreateSnapshot, GetSnapshot, DeleteSnapshot: a copy, idempotent by name") {
  plugin_process p({"--mount-mode", "symlink"});
  p.start();
  stubs c(p.endpoint);
  auto src = create(c, "src");
  std::ofstream(p.root / "volumes" / src / "data.txt") << "before the snapshot\n";

  auto first = CALL(c, controller, CreateSnapshot, snap_req("s1", src));
  REQUIRE(first.code == StatusCode::OK);
  const auto& snap = first.resp.snapshot();
  const auto sid = snap.snapshot_id();
  CHECK_FALSE(sid.empty());
  CHECK(snap.source_volume_id() == src);
  CHECK(snap.ready_to_use());
  CHECK(snap.size_bytes() == 1 << 20);  // the source's capacity: what a restore needs
  CHECK(snap.creation_time().seconds() > 1700000000);
  CHECK(read_file(p.root / "snapshots" / sid / "data.txt") == "before the snapshot\n");
  // The copy does not follow the volume.
  std::ofstream(p.root / "volumes" / src / "data.txt") << "after\n";
  CHECK(read_file(p.root / "snapshots" / sid / "data.txt") == "before the snapshot\n");

  auto again = CALL(c, controller, CreateSnapshot, snap_req("s1", src));
  REQUIRE(again.code == StatusCode::OK);
  CHECK(again.resp.SerializeAsString() == first.resp.SerializeAsString());
  auto other = create(c, "other");
  CHECK(CALL(c, controller, CreateSnapshot, snap_req("s1", other)).code
        == StatusCode::ALREADY_EXISTS);
  auto with_params = snap_req("s1", src);
  (*with_params.mutable_parameters())["kind"] = "deep";
  CHECK(CALL(c, controller, CreateSnapshot, with_params).code == StatusCode::ALREADY_EXISTS);
  CHECK(CALL(c, controller, CreateSnapshot, snap_req("", src)).code
        == StatusCode::INVALID_ARGUMENT);
  CHECK(CALL(c, controller, CreateSnapshot, snap_req("s2", "")).code
        == StatusCode::INVALID_ARGUMENT);
  CHECK(CALL(c, controller, CreateSnapshot, snap_req("s2", "hp-unknown")).code
        == StatusCode::NOT_FOUND);

  v1::GetSnapshotRequest get;
  get.set_snapshot_id(sid);
  auto got = CALL(c, controller, GetSnapshot, get);
  REQUIRE(got.code == StatusCode::OK);
  CHECK(got.resp.snapshot().SerializeAsString() == snap.SerializeAsString());
  get.set_snapshot_id("snap-unknown");
  CHECK(CALL(c, controller, GetSnapshot, get).code == StatusCode::NOT_FOUND);
  get.clear_snapshot_id();
  CHECK(CALL(c, controller, GetSnapshot, get).code == StatusCode::INVALID_ARGUMENT);

  // Remembered across a crash, with the same creation time.
  p.kill9();
  p.start();
  stubs c2(p.endpoint);
  auto after = CALL(c2, controller, CreateSnapshot, snap_req("s1", src));
  REQUIRE(after.code == StatusCode::OK);
  CHECK(after.resp.SerializeAsString() == first.resp.SerializeAsString());

  // Deleting the volume leaves its snapshots.
  v1::DeleteVolumeRequest delvol;
  delvol.set_volume_id(src);
  REQUIRE(CALL(c2, controller, DeleteVolume, delvol).code == StatusCode::OK);
  get.set_snapshot_id(sid);
  CHECK(CALL(c2, controller, GetSnapshot, get).code == StatusCode::OK);

  v1::DeleteSnapshotRequest del;
  del.set_snapshot_id(sid);
  CHECK(CALL(c2, controller, DeleteSnapshot, del).code == StatusCode::OK);
  CHECK_FALSE(fs::exists(p.root / "snapshots" / sid));
  CHECK(CALL(c2, controller, GetSnapshot, get).code == StatusCode::NOT_FOUND);
  CHECK(CALL(c2, controller, DeleteSnapshot, del).code == StatusCode::OK);
  del.set_snapshot_id("snap-never-existed");
  CHECK(CALL(c2, controller, DeleteSnapshot, del).code == StatusCode::OK);
  del.clear_snapshot_id();
  CHECK(CALL(c2, controller, DeleteSnapshot, del).code == StatusCode::INVALID_ARGUMENT);
  p.kill9();
  CHECK(berth::test::hostpath_state_on_disk(p.root / "state").snapshots.empty());
}

TEST_CASE("hostpath ListSnapshots: pages with tokens, filters, bad token is ABORTED") {
  plugin_process p({"--mount-mode", "symlink"});
  p.start();
  stubs c(p.endpoint);
  auto a = create(c, "a"), b = create(c, "b");
  std::set<std::string> of_a = {snapshot(c, "a1", a), snapshot(c, "a2", a), snapshot(c, "a3", a)};
  auto b1 = snapshot(c, "b1", b);
  std::set<std::string> all = of_a;
  all.insert(b1);

  auto whole = CALL(c, controller, ListSnapshots, v1::ListSnapshotsRequest{});
  REQUIRE(whole.code == StatusCode::OK);
  CHECK(snapshot_ids(whole.resp) == all);
  CHECK(whole.resp.next_token().empty());
  for (const auto& e : whole.resp.entries())
    CHECK(e.snapshot().ready_to_use());

  // Pages of 3, then of 2 among a's snapshots only.
  v1::ListSnapshotsRequest req;
  req.set_max_entries(3);
  auto page1 = CALL(c, controller, ListSnapshots, req);
  REQUIRE(page1.code == StatusCode::OK);
  CHECK(page1.resp.entries_size() == 3);
  REQUIRE_FALSE(page1.resp.next_token().empty());
  req.set_starting_token(page1.resp.next_token());
  auto page2 = CALL(c, controller, ListSnapshots, req);
  REQUIRE(page2.code == StatusCode::OK);
  CHECK(page2.resp.entries_size() == 1);
  CHECK(page2.resp.next_token().empty());
  auto seen = snapshot_ids(page1.resp);
  for (const auto& id : snapshot_ids(page2.resp))
    seen.insert(id);
  CHECK(seen == all);

  v1::ListSnapshotsRequest by_source;
  by_source.set_source_volume_id(a);
  by_source.set_max_entries(2);
  auto s1 = CALL(c, controller, ListSnapshots, by_source);
  REQUIRE(s1.code == StatusCode::OK);
  CHECK(s1.resp.entries_size() == 2);
  REQUIRE_FALSE(s1.resp.next_token().empty());
  by_source.set_starting_token(s1.resp.next_token());
  auto s2 = CALL(c, controller, ListSnapshots, by_source);
  REQUIRE(s2.code == StatusCode::OK);
  CHECK(s2.resp.entries_size() == 1);
  CHECK(s2.resp.next_token().empty());
  auto from_a = snapshot_ids(s1.resp);
  for (const auto& id : snapshot_ids(s2.resp))
    from_a.insert(id);
  CHECK(from_a == of_a);

  v1::ListSnapshotsRequest by_id;
  by_id.set_snapshot_id(b1);
  auto one = CALL(c, controller, ListSnapshots, by_id);
  REQUIRE(one.code == StatusCode::OK);
  CHECK(snapshot_ids(one.resp) == std::set<std::string>{b1});
  CHECK(one.resp.entries(0).snapshot().source_volume_id() == b);
  by_id.set_source_volume_id(a);  // both filters, matching nothing together
  CHECK(CALL(c, controller, ListSnapshots, by_id).resp.entries_size() == 0);
  by_id.clear_source_volume_id();
  by_id.set_snapshot_id("snap-unknown");  // an unknown id is an empty list, not an error
  auto none = CALL(c, controller, ListSnapshots, by_id);
  CHECK(none.code == StatusCode::OK);
  CHECK(none.resp.entries_size() == 0);
  v1::ListSnapshotsRequest unknown_source;
  unknown_source.set_source_volume_id("hp-unknown");
  auto none2 = CALL(c, controller, ListSnapshots, unknown_source);
  CHECK(none2.code == StatusCode::OK);
  CHECK(none2.resp.entries_size() == 0);

  v1::ListSnapshotsRequest bad;
  bad.set_starting_token("not-a-token");
  CHECK(CALL(c, controller, ListSnapshots, bad).code == StatusCode::ABORTED);
  bad.clear_starting_token();
  bad.set_max_entries(-1);
  CHECK(CALL(c, controller, ListSnapshots, bad).code == StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("hostpath CreateVolume from a snapshot or a volume: copies, NOT_FOUND without source") {
  plugin_process p({"--mount-mode", "symlink"});
  p.start();
  stubs c(p.endpoint);
  auto src = create(c, "src");
  std::ofstream(p.root / "volumes" / src / "data.txt") << "source data\n";
  auto sid = snapshot(c, "snap", src);
  std::ofstream(p.root / "volumes" / src / "data.txt") << "changed since\n";

  // From the snapshot: its contents, at least its size.
  auto restored = CALL(c, controller, CreateVolume, from_snapshot("restored", sid));
  REQUIRE(restored.code == StatusCode::OK);
  const auto& rv = restored.resp.volume();
  CHECK(rv.capacity_bytes() == 1 << 20);
  CHECK(rv.content_source().snapshot().snapshot_id() == sid);
  CHECK(read_file(p.root / "volumes" / rv.volume_id() / "data.txt") == "source data\n");
  auto again = CALL(c, controller, CreateVolume, from_snapshot("restored", sid));
  REQUIRE(again.code == StatusCode::OK);
  CHECK(again.resp.SerializeAsString() == restored.resp.SerializeAsString());
  CHECK(CALL(c, controller, CreateVolume, create_req("restored", 0)).code
        == StatusCode::ALREADY_EXISTS);
  CHECK(CALL(c, controller, CreateVolume, from_volume("restored", src)).code
        == StatusCode::ALREADY_EXISTS);
  // Too small for the source: OUT_OF_RANGE, and nothing made.
  auto small = from_snapshot("small", sid, 4096);
  small.mutable_capacity_range()->set_limit_bytes(8192);
  CHECK(CALL(c, controller, CreateVolume, small).code == StatusCode::OUT_OF_RANGE);
  CHECK_FALSE(fs::exists(p.root / "volumes" / berth::hostpath::volume_id_for("small")));

  // A clone: the volume's contents now, at the requested size.
  auto clone = CALL(c, controller, CreateVolume, from_volume("clone", src, 2 << 20));
  REQUIRE(clone.code == StatusCode::OK);
  const auto clone_id = clone.resp.volume().volume_id();
  CHECK(clone.resp.volume().capacity_bytes() == 2 << 20);
  CHECK(clone.resp.volume().content_source().volume().volume_id() == src);
  CHECK(read_file(p.root / "volumes" / clone_id / "data.txt") == "changed since\n");
  std::ofstream(p.root / "volumes" / clone_id / "data.txt") << "the clone's own\n";
  CHECK(read_file(p.root / "volumes" / src / "data.txt") == "changed since\n");

  // Missing sources.
  CHECK(CALL(c, controller, CreateVolume, from_snapshot("x", "snap-unknown")).code
        == StatusCode::NOT_FOUND);
  CHECK(CALL(c, controller, CreateVolume, from_volume("y", "hp-unknown")).code
        == StatusCode::NOT_FOUND);
  auto empty_source = create_req("z");
  empty_source.mutable_volume_content_source();
  CHECK(CALL(c, controller, CreateVolume, empty_source).code == StatusCode::INVALID_ARGUMENT);
  v1::ListVolumesRequest list_all;
  CHECK(CALL(c, controller, ListVolumes, list_all).resp.entries_size() == 3);

  // The sources are remembered across a crash; a retry still answers once
  // the snapshot is gone.
  p.kill9();
  p.start();
  stubs c2(p.endpoint);
  v1::DeleteSnapshotRequest del;
  del.set_snapshot_id(sid);
  REQUIRE(CALL(c2, controller, DeleteSnapshot, del).code == StatusCode::OK);
  auto retry = CALL(c2, controller, CreateVolume, from_snapshot("restored", sid));
  REQUIRE(retry.code == StatusCode::OK);
  CHECK(retry.resp.SerializeAsString() == restored.resp.SerializeAsString());
  auto listed = CALL(c2, controller, ListVolumes, list_all);
  int with_source = 0;
  for (const auto& e : listed.resp.entries())
    with_source += e.volume().has_content_source() ? 1 : 0;
  CHECK(with_source == 2);
}

TEST_CASE("hostpath ControllerExpandVolume and NodeExpandVolume: online growth, no shrinking") {
  plugin_process p({"--mount-mode", "symlink"});
  p.start();
  stubs c(p.endpoint);
  auto id = create(c, "grows");
  auto staging = co_dir(p, "staging");
  auto target = co_dir(p, "pods") / "a1";
  REQUIRE(CALL(c, controller, ControllerPublishVolume, cpub_req(id, "n1")).code == StatusCode::OK);
  REQUIRE(CALL(c, node, NodeStageVolume, stage_req(id, staging)).code == StatusCode::OK);
  REQUIRE(CALL(c, node, NodePublishVolume, pub_req(id, staging, target)).code == StatusCode::OK);

  // Online: while published.
  auto grown = CALL(c, controller, ControllerExpandVolume, cexpand_req(id, 2 << 20));
  REQUIRE(grown.code == StatusCode::OK);
  CHECK(grown.resp.capacity_bytes() == 2 << 20);
  CHECK(grown.resp.node_expansion_required());
  auto again = CALL(c, controller, ControllerExpandVolume, cexpand_req(id, 2 << 20));
  CHECK(again.code == StatusCode::OK);
  CHECK(again.resp.capacity_bytes() == 2 << 20);
  auto smaller = CALL(c, controller, ControllerExpandVolume, cexpand_req(id, 1 << 20));
  CHECK(smaller.code == StatusCode::OK);  // already at least that large
  CHECK(smaller.resp.capacity_bytes() == 2 << 20);
  CHECK(CALL(c, controller, ControllerExpandVolume, cexpand_req(id, 0, 1 << 20)).code
        == StatusCode::OUT_OF_RANGE);  // a shrink
  CHECK(CALL(c, controller, ControllerExpandVolume, cexpand_req(id, 8 << 20, 4 << 20)).code
        == StatusCode::OUT_OF_RANGE);
  CHECK(CALL(c, controller, ControllerExpandVolume, cexpand_req("hp-unknown", 2 << 20)).code
        == StatusCode::NOT_FOUND);
  CHECK(CALL(c, controller, ControllerExpandVolume, cexpand_req("", 2 << 20)).code
        == StatusCode::INVALID_ARGUMENT);
  auto no_range = cexpand_req(id, 0);
  no_range.clear_capacity_range();
  CHECK(CALL(c, controller, ControllerExpandVolume, no_range).code
        == StatusCode::INVALID_ARGUMENT);
  auto block = cexpand_req(id, 4 << 20);
  block.mutable_volume_capability()->mutable_block();
  block.mutable_volume_capability()->mutable_access_mode()->set_mode(Mode::SINGLE_NODE_WRITER);
  CHECK(CALL(c, controller, ControllerExpandVolume, block).code == StatusCode::INVALID_ARGUMENT);

  // The node's part: checks the size it is asked for, at a path of the volume.
  auto node_grown = CALL(c, node, NodeExpandVolume, nexpand_req(id, target, 2 << 20));
  REQUIRE(node_grown.code == StatusCode::OK);
  CHECK(node_grown.resp.capacity_bytes() == 2 << 20);
  CHECK(CALL(c, node, NodeExpandVolume, nexpand_req(id, target, 2 << 20)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeExpandVolume, nexpand_req(id, staging, 0)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodeExpandVolume, nexpand_req(id, target, 4 << 20)).code
        == StatusCode::OUT_OF_RANGE);  // the controller has not grown it that far
  CHECK(CALL(c, node, NodeExpandVolume, nexpand_req(id, target, 0, 1 << 20)).code
        == StatusCode::OUT_OF_RANGE);
  CHECK(CALL(c, node, NodeExpandVolume, nexpand_req(id, p.dir / "elsewhere", 0)).code
        == StatusCode::NOT_FOUND);
  CHECK(CALL(c, node, NodeExpandVolume, nexpand_req("hp-unknown", target, 0)).code
        == StatusCode::NOT_FOUND);
  CHECK(CALL(c, node, NodeExpandVolume, nexpand_req(id, "", 0)).code
        == StatusCode::INVALID_ARGUMENT);
  CHECK(CALL(c, node, NodeExpandVolume, nexpand_req("", target, 0)).code
        == StatusCode::INVALID_ARGUMENT);

  v1::NodeGetVolumeStatsRequest stats;
  stats.set_volume_id(id);
  stats.set_volume_path(target.string());
  auto st = CALL(c, node, NodeGetVolumeStats, stats);
  REQUIRE(st.code == StatusCode::OK);
  CHECK(st.resp.usage(0).total() == 2 << 20);

  // The new size survives a crash.
  p.kill9();
  p.start();
  stubs c2(p.endpoint);
  auto got = CALL(c2, controller, ControllerGetVolume, get_req(id));
  REQUIRE(got.code == StatusCode::OK);
  CHECK(got.resp.volume().capacity_bytes() == 2 << 20);
}

TEST_CASE("hostpath ControllerGetVolume, ListVolumes, NodeGetVolumeStats: published nodes and condition") {
  plugin_process p({"--mount-mode", "symlink", "--peer-node", "n2"});
  p.start();
  stubs c(p.endpoint);
  auto id = create(c, "watched", Mode::MULTI_NODE_MULTI_WRITER);
  for (auto node : {"n1", "n2"})
    REQUIRE(CALL(c, controller, ControllerPublishVolume,
                 cpub_req(id, node, Mode::MULTI_NODE_MULTI_WRITER))
                .code
            == StatusCode::OK);
  auto got = CALL(c, controller, ControllerGetVolume, get_req(id));
  REQUIRE(got.code == StatusCode::OK);
  CHECK(got.resp.volume().volume_id() == id);
  CHECK(got.resp.volume().capacity_bytes() == 1 << 20);
  std::set<std::string> nodes(got.resp.status().published_node_ids().begin(),
                              got.resp.status().published_node_ids().end());
  CHECK(nodes == std::set<std::string>{"n1", "n2"});
  CHECK(got.resp.status().has_volume_condition());
  CHECK_FALSE(got.resp.status().volume_condition().abnormal());
  auto list = CALL(c, controller, ListVolumes, v1::ListVolumesRequest{});
  REQUIRE(list.resp.entries_size() == 1);
  CHECK(list.resp.entries(0).status().published_node_ids_size() == 2);
  CHECK_FALSE(list.resp.entries(0).status().volume_condition().abnormal());
  CHECK(CALL(c, controller, ControllerGetVolume, get_req("hp-unknown")).code
        == StatusCode::NOT_FOUND);
  CHECK(CALL(c, controller, ControllerGetVolume, get_req("")).code
        == StatusCode::INVALID_ARGUMENT);

  auto staging = co_dir(p, "staging");
  auto target = co_dir(p, "pods") / "a1";
  REQUIRE(CALL(c, node, NodeStageVolume, stage_req(id, staging, Mode::MULTI_NODE_MULTI_WRITER)).code
          == StatusCode::OK);
  REQUIRE(CALL(c, node, NodePublishVolume,
               pub_req(id, staging, target, false, Mode::MULTI_NODE_MULTI_WRITER))
              .code
          == StatusCode::OK);

  // The volume's directory vanishes under the plugin: abnormal, with why.
  fs::remove_all(p.root / "volumes" / id);
  auto sick = CALL(c, controller, ControllerGetVolume, get_req(id));
  REQUIRE(sick.code == StatusCode::OK);
  CHECK(sick.resp.status().volume_condition().abnormal());
  CHECK(sick.resp.status().volume_condition().message().find("missing") != std::string::npos);
  auto sick_list = CALL(c, controller, ListVolumes, v1::ListVolumesRequest{});
  CHECK(sick_list.resp.entries(0).status().volume_condition().abnormal());
  v1::NodeGetVolumeStatsRequest stats;
  stats.set_volume_id(id);
  stats.set_volume_path(target.string());
  auto st = CALL(c, node, NodeGetVolumeStats, stats);
  REQUIRE(st.code == StatusCode::OK);
  CHECK(st.resp.volume_condition().abnormal());
  CHECK_FALSE(st.resp.volume_condition().message().empty());
  CHECK(st.resp.usage_size() == 0);  // nothing left to measure
}

TEST_CASE("hostpath ControllerModifyVolume: mutable parameters, checked, kept across restarts") {
  plugin_process p({"--mount-mode", "symlink"});
  p.start();
  stubs c(p.endpoint);
  auto req = create_req("tuned");
  (*req.mutable_mutable_parameters())["iops"] = "100";
  auto created = CALL(c, controller, CreateVolume, req);
  REQUIRE(created.code == StatusCode::OK);
  const auto id = created.resp.volume().volume_id();
  CHECK(CALL(c, controller, CreateVolume, req).code == StatusCode::OK);
  auto other = req;
  (*other.mutable_mutable_parameters())["iops"] = "999";
  CHECK(CALL(c, controller, CreateVolume, other).code == StatusCode::ALREADY_EXISTS);
  auto bad_create = create_req("bad");
  (*bad_create.mutable_mutable_parameters())["no spaces!"] = "x";
  CHECK(CALL(c, controller, CreateVolume, bad_create).code == StatusCode::INVALID_ARGUMENT);

  v1::ControllerModifyVolumeRequest mod;
  mod.set_volume_id(id);
  (*mod.mutable_mutable_parameters())["iops"] = "200";
  (*mod.mutable_mutable_parameters())["tier"] = "gold";
  REQUIRE(CALL(c, controller, ControllerModifyVolume, mod).code == StatusCode::OK);
  CHECK(CALL(c, controller, ControllerModifyVolume, mod).code == StatusCode::OK);
  v1::ControllerModifyVolumeRequest partial;
  partial.set_volume_id(id);
  (*partial.mutable_mutable_parameters())["tier"] = "silver";
  REQUIRE(CALL(c, controller, ControllerModifyVolume, partial).code == StatusCode::OK);

  auto unknown = mod;
  unknown.set_volume_id("hp-unknown");
  CHECK(CALL(c, controller, ControllerModifyVolume, unknown).code == StatusCode::NOT_FOUND);
  auto no_id = mod;
  no_id.clear_volume_id();
  CHECK(CALL(c, controller, ControllerModifyVolume, no_id).code == StatusCode::INVALID_ARGUMENT);
  auto empty = mod;
  empty.clear_mutable_parameters();
  CHECK(CALL(c, controller, ControllerModifyVolume, empty).code == StatusCode::INVALID_ARGUMENT);
  auto bad = mod;
  (*bad.mutable_mutable_parameters())[""] = "x";
  CHECK(CALL(c, controller, ControllerModifyVolume, bad).code == StatusCode::INVALID_ARGUMENT);
  // A well-formed key the plugin does not support (the conformance suite's
  // "should fail if specified mutable parameters are not supported" and
  // "should not create volume with an invalid volume attribute class"):
  // refused at both calls, and nothing changes.
  auto fake = mod;
  fake.clear_mutable_parameters();
  (*fake.mutable_mutable_parameters())["XXX_FakeKey"] = "XXX_FakeValue";
  auto refused = CALL(c, controller, ControllerModifyVolume, fake);
  CHECK(refused.code == StatusCode::INVALID_ARGUMENT);
  CHECK(refused.message.find("'XXX_FakeKey' is not supported") != std::string::npos);
  CHECK(refused.message.find("iops, tier") != std::string::npos);
  auto fake_create = create_req("fake");
  (*fake_create.mutable_mutable_parameters())["XXX_FakeKey"] = "XXX_FakeValue";
  CHECK(CALL(c, controller, CreateVolume, fake_create).code == StatusCode::INVALID_ARGUMENT);

  p.kill9();
  auto saved = berth::test::hostpath_state_on_disk(p.root / "state");
  CHECK(saved.volumes.at(id).mutable_parameters
        == std::map<std::string, std::string>{{"iops", "200"}, {"tier", "silver"}});
  p.start();
  stubs c2(p.endpoint);
  CHECK(CALL(c2, controller, ControllerModifyVolume, partial).code == StatusCode::OK);
}

TEST_CASE("hostpath SINGLE_NODE_MULTI_WRITER: several publications on one node, one node only") {
  plugin_process p({"--mount-mode", "symlink", "--peer-node", "n2"});
  p.start();
  stubs c(p.endpoint);
  const auto mw = Mode::SINGLE_NODE_MULTI_WRITER, sw = Mode::SINGLE_NODE_SINGLE_WRITER;
  auto shared = create(c, "shared", mw);
  REQUIRE(CALL(c, controller, ControllerPublishVolume, cpub_req(shared, "n1", mw)).code
          == StatusCode::OK);
  CHECK(CALL(c, controller, ControllerPublishVolume, cpub_req(shared, "n2", mw)).code
        == StatusCode::FAILED_PRECONDITION);  // single node
  auto staging = co_dir(p, "staging-mw");
  REQUIRE(CALL(c, node, NodeStageVolume, stage_req(shared, staging, mw)).code == StatusCode::OK);
  for (auto pod : {"p1", "p2"})
    CHECK(CALL(c, node, NodePublishVolume,
               pub_req(shared, staging, co_dir(p, "pods") / pod, false, mw))
              .code
          == StatusCode::OK);

  auto single = create(c, "single", sw);
  auto staging2 = co_dir(p, "staging-sw");
  REQUIRE(CALL(c, node, NodeStageVolume, stage_req(single, staging2, sw)).code == StatusCode::OK);
  CHECK(CALL(c, node, NodePublishVolume,
             pub_req(single, staging2, co_dir(p, "pods") / "s1", false, sw))
            .code
        == StatusCode::OK);
  CHECK(CALL(c, node, NodePublishVolume,
             pub_req(single, staging2, co_dir(p, "pods") / "s2", false, sw))
            .code
        == StatusCode::FAILED_PRECONDITION);
}

TEST_CASE("hostpath --shared-root: a snapshot made through one node is seen through another") {
  plugin_process a({"--mount-mode", "symlink", "--shared-root"}, "n1");
  plugin_process b({"--mount-mode", "symlink", "--shared-root"}, "n2");
  b.root = a.root;
  a.start();
  b.start();
  stubs ca(a.endpoint), cb(b.endpoint);
  auto vol = create(ca, "shared-src");
  auto sid = snapshot(ca, "shared-snap", vol);
  auto listed = CALL(cb, controller, ListSnapshots, v1::ListSnapshotsRequest{});
  REQUIRE(listed.code == StatusCode::OK);
  CHECK(snapshot_ids(listed.resp) == std::set<std::string>{sid});
  auto restored = CALL(cb, controller, CreateVolume, from_snapshot("shared-restored", sid));
  CHECK(restored.code == StatusCode::OK);
  auto shared = berth::test::hostpath_state_on_disk(a.root / "state");
  CHECK(shared.snapshots.count(sid) == 1);
  CHECK(berth::test::hostpath_state_on_disk(a.root / "nodes" / "n1").snapshots.empty());
}

TEST_CASE("hostpath --mutable-parameter-key: the keys it accepts are the ones given") {
  plugin_process p({"--mount-mode", "symlink", "--mutable-parameter-key", "qos,replicas"});
  p.start();
  stubs c(p.endpoint);
  auto req = create_req("qos");
  (*req.mutable_mutable_parameters())["qos"] = "high";
  REQUIRE(CALL(c, controller, CreateVolume, req).code == StatusCode::OK);
  auto tier = create_req("tier");
  (*tier.mutable_mutable_parameters())["tier"] = "gold";  // a default key, not given here
  CHECK(CALL(c, controller, CreateVolume, tier).code == StatusCode::INVALID_ARGUMENT);
}
