// Nomad's CSI JSON shapes of berth's volumes and plugins (messages/nomad):
// the field names Nomad's clients read, the modes' spellings, no secret,
// and the list's filters and pages.
#include "messages/nomad.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace berth;

namespace {

v1::Plugin plugin_with(bool healthy) {
  v1::Plugin p;
  p.set_id("hostpath");
  p.set_provider("berth-hostpath");
  p.set_provider_version("1.2.3");
  p.set_controller_required(true);
  auto* c = p.add_controllers();
  c->set_node_id("n1");
  c->set_healthy(healthy);
  c->set_create_delete_snapshot(true);
  c->set_publish_unpublish(true);
  c->set_updated_at_ms(1700000000123);
  auto* n = p.add_nodes();
  n->set_node_id("n1");
  n->set_healthy(healthy);
  n->set_csi_node_id("csi-n1");
  n->set_max_volumes(7);
  n->set_stage_unstage(true);
  (*n->mutable_accessible_topology()->mutable_segments())["zone"] = "a";
  return p;
}

v1::Volume volume_with_claims() {
  v1::Volume v;
  v.set_id("db");
  v.set_namespace_("default");
  v.set_plugin_id("hostpath");
  v.set_external_id("hp-db");
  v.set_capacity_bytes(1 << 20);
  v.set_capacity_min(1 << 20);
  (*v.mutable_secrets())["token"] = "hunter2-nomad";
  v.mutable_mount_options()->set_fs_type("ext4");
  v.mutable_mount_options()->add_mount_flags("password=hunter3-flag");
  (*v.mutable_accessible_topology()->Add()->mutable_segments())["zone"] = "a";
  auto* cap = v.add_capabilities();
  cap->set_access_mode(v1::MULTI_NODE_SINGLE_WRITER);
  cap->set_attachment_mode(v1::FILE_SYSTEM);
  auto claim = [&](const std::string& alloc, const std::string& node, v1::ClaimMode mode,
                   v1::ClaimState state) {
    auto* c = v.add_claims();
    c->set_alloc_id(alloc);
    c->set_node_id(node);
    c->set_mode(mode);
    c->set_state(state);
    c->set_access_mode(v1::MULTI_NODE_SINGLE_WRITER);
    c->set_attachment_mode(v1::FILE_SYSTEM);
  };
  claim("w1", "n1", v1::CLAIM_WRITE, v1::CLAIM_TAKEN);
  claim("r1", "n2", v1::CLAIM_READ, v1::CLAIM_TAKEN);
  claim("r2", "n2", v1::CLAIM_READ, v1::CLAIM_TAKEN);
  v.set_create_index(5);
  v.set_modify_index(9);
  return v;
}

}  // namespace

TEST_CASE("nomad modes are Nomad's spellings, and none is the empty string") {
  CHECK(nomad_mode(v1::SINGLE_NODE_WRITER) == "single-node-writer");
  CHECK(nomad_mode(v1::MULTI_NODE_MULTI_WRITER) == "multi-node-multi-writer");
  CHECK(nomad_mode(v1::SINGLE_NODE_READER_ONLY) == "single-node-reader-only");
  CHECK(nomad_mode(v1::ACCESS_MODE_UNKNOWN) == "");
  CHECK(nomad_mode(v1::FILE_SYSTEM) == "file-system");
  CHECK(nomad_mode(v1::BLOCK_DEVICE) == "block-device");
  CHECK(nomad_mode(v1::ATTACHMENT_MODE_UNKNOWN) == "");
}

TEST_CASE("nomad times are RFC 3339 in UTC, zero is Go's zero time") {
  CHECK(nomad_time(0) == "0001-01-01T00:00:00Z");
  CHECK(nomad_time(-5) == "0001-01-01T00:00:00Z");
  CHECK(nomad_time(1700000000123) == "2023-11-14T22:13:20.123Z");
  CHECK(nomad_time(86400000) == "1970-01-02T00:00:00.000Z");
}

TEST_CASE("nomad volume stub: Nomad's fields, claims counted, health from the plugin") {
  auto v = volume_with_claims();
  auto p = plugin_with(true);
  auto j = nomad_volume_stub(v, &p);
  std::vector<std::string> keys;
  for (const auto& [k, val] : j.items()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"ID",
                                         "Namespace",
                                         "Name",
                                         "ExternalID",
                                         "Topologies",
                                         "AccessMode",
                                         "AttachmentMode",
                                         "CurrentReaders",
                                         "CurrentWriters",
                                         "Schedulable",
                                         "PluginID",
                                         "Provider",
                                         "ControllerRequired",
                                         "ControllersHealthy",
                                         "ControllersExpected",
                                         "NodesHealthy",
                                         "NodesExpected",
                                         "ResourceExhausted",
                                         "CreateIndex",
                                         "ModifyIndex"});
  CHECK(j["ID"] == "db");
  CHECK(j["Name"] == "db");  // no name: the id, as Nomad's volume register does
  CHECK(j["ExternalID"] == "hp-db");
  CHECK(j["Topologies"][0]["Segments"]["zone"] == "a");
  CHECK(j["AccessMode"] == "multi-node-single-writer");
  CHECK(j["AttachmentMode"] == "file-system");
  CHECK(j["CurrentReaders"] == 2);
  CHECK(j["CurrentWriters"] == 1);
  CHECK(j["Schedulable"] == true);
  CHECK(j["Provider"] == "berth-hostpath");
  CHECK(j["ControllersHealthy"] == 1);
  CHECK(j["NodesExpected"] == 1);
  CHECK(j["ResourceExhausted"] == "0001-01-01T00:00:00Z");
  CHECK(j["ModifyIndex"] == 9);

  auto sick = plugin_with(false);
  CHECK(nomad_volume_stub(v, &sick)["Schedulable"] == false);
  CHECK(nomad_volume_stub(v, nullptr)["Schedulable"] == false);  // plugin not registered
  v.set_availability(v1::VOLUME_PAUSE);
  CHECK(nomad_volume_stub(v, &p)["Schedulable"] == false);  // takes no new claim
  v.clear_claims();
  auto idle = nomad_volume_stub(v, &p);
  CHECK(idle["AccessMode"] == "");
  CHECK(idle["AttachmentMode"] == "");
  CHECK(idle["CurrentWriters"] == 0);
}

TEST_CASE("nomad volume: allocs as Nomad maps them, capabilities spelled, never a secret") {
  auto v = volume_with_claims();
  // A claim being released holds no more alloc in ReadAllocs/WriteAllocs.
  auto* gone = v.add_claims();
  gone->set_alloc_id("old");
  gone->set_mode(v1::CLAIM_WRITE);
  gone->set_state(v1::CLAIM_NODE_DETACHED);
  auto p = plugin_with(true);
  auto j = nomad_volume(v, &p);
  CHECK(j["WriteAllocs"].size() == 1);
  CHECK(j["WriteAllocs"]["w1"].is_null());
  CHECK(j["ReadAllocs"].size() == 2);
  CHECK(j["ReadAllocs"].contains("r2"));
  CHECK_FALSE(j["WriteAllocs"].contains("old"));
  CHECK(j["RequestedCapabilities"][0]["AccessMode"] == "multi-node-single-writer");
  CHECK(j["RequestedCapabilities"][0]["AttachmentMode"] == "file-system");
  CHECK(j["Secrets"].is_null());
  CHECK(j["MountOptions"]["FSType"] == "ext4");
  CHECK(j["MountOptions"]["MountFlags"].is_null());
  CHECK(j["Capacity"] == (1 << 20));
  CHECK(j["ProviderVersion"] == "1.2.3");
  CHECK(j["RequestedTopologies"].is_null());
  auto text = j.dump();
  CHECK(text.find("hunter2-nomad") == std::string::npos);
  CHECK(text.find("hunter3-flag") == std::string::npos);
  (*v.mutable_topology_request()->add_required()->mutable_segments())["zone"] = "b";
  CHECK(nomad_volume(v, &p)["RequestedTopologies"]["Required"][0]["Segments"]["zone"] == "b");
}

TEST_CASE("nomad volume: Allocations are the claiming allocs' stubs, writers first") {
  auto v = volume_with_claims();
  auto p = plugin_with(true);
  CHECK(nomad_volume(v, &p)["Allocations"].size() == 3);  // from the claims alone
  v1::Alloc w1;
  w1.set_id("w1");
  w1.set_namespace_("default");
  w1.set_node_id("n1");
  w1.set_group("web");
  w1.set_state(v1::ALLOC_COMPLETE);
  w1.set_message("exited 0");
  w1.set_created_at_ms(1700000000123);
  w1.set_create_index(7);
  w1.set_modify_index(9);
  auto j = nomad_volume(v, &p, {w1});
  const auto& all = j["Allocations"];
  REQUIRE(all.size() == 3);
  CHECK(all[0]["ID"] == "w1");  // the writer first
  CHECK(all[0]["TaskGroup"] == "web");
  CHECK(all[0]["DesiredStatus"] == "stop");
  CHECK(all[0]["ClientStatus"] == "complete");
  CHECK(all[0]["ClientDescription"] == "exited 0");
  CHECK(all[0]["CreateTime"] == int64_t{1700000000123} * 1000000);
  CHECK(all[0]["CreateIndex"] == 7);
  CHECK(all[0]["TaskStates"].is_object());
  CHECK(all[0]["PreemptedAllocations"].is_null());
  CHECK(all[1]["DesiredStatus"] == "run");  // a reader without a record
  CHECK(all[1]["NodeID"] == all[1]["NodeName"]);
}

TEST_CASE("nomad external volume: the plugin's listing in Nomad's CSIVolumeExternalStub") {
  v1::ExternalVolume x;
  x.set_external_id("hp-1");
  x.set_capacity_bytes(1024);
  (*x.mutable_context())["path"] = "/x";
  x.set_source_snapshot_id("snap-1");
  x.add_published_node_ids("csi-n1");
  x.set_condition_reported(true);
  x.set_abnormal(true);
  x.set_condition_message("disk gone");
  auto j = nomad_external_volume(x);
  CHECK(j["ExternalID"] == "hp-1");
  CHECK(j["CapacityBytes"] == 1024);
  CHECK(j["VolumeContext"]["path"] == "/x");
  CHECK(j["SnapshotID"] == "snap-1");
  CHECK(j["CloneID"] == "");
  CHECK(j["PublishedExternalNodeIDs"][0] == "csi-n1");
  CHECK(j["IsAbnormal"] == true);
  CHECK(j["Status"] == "disk gone");
}

TEST_CASE("nomad plugin: stub counts, instances keyed by node with their capabilities") {
  auto p = plugin_with(true);
  p.set_modify_index(12);
  auto stub = nomad_plugin_stub(p);
  CHECK(stub["ID"] == "hostpath");
  CHECK(stub["ControllerRequired"] == true);
  CHECK(stub["ControllersExpected"] == 1);
  CHECK(stub["NodesHealthy"] == 1);
  CHECK(stub["ModifyIndex"] == 12);
  auto j = nomad_plugin(p);
  CHECK(j["Version"] == "1.2.3");
  CHECK(j["Allocations"].is_array());
  const auto& c = j["Controllers"]["n1"];
  CHECK(c["PluginID"] == "hostpath");
  CHECK(c["Healthy"] == true);
  CHECK(c["UpdateTime"] == "2023-11-14T22:13:20.123Z");
  CHECK(c["ControllerInfo"]["SupportsAttachDetach"] == true);
  CHECK(c["ControllerInfo"]["SupportsCreateDeleteSnapshot"] == true);
  CHECK(c["ControllerInfo"]["SupportsClone"] == false);
  CHECK_FALSE(c.contains("NodeInfo"));
  const auto& n = j["Nodes"]["n1"];
  CHECK(n["NodeInfo"]["ID"] == "csi-n1");
  CHECK(n["NodeInfo"]["MaxVolumes"] == 7);
  CHECK(n["NodeInfo"]["RequiresNodeStageVolume"] == true);
  CHECK(n["NodeInfo"]["AccessibleTopology"]["Segments"]["zone"] == "a");
  CHECK(n["RequiresTopologies"] == true);
  CHECK(c["RequiresTopologies"] == false);
}

TEST_CASE("nomad volume query: the parameters read, bad ones named") {
  auto q = parse_nomad_volume_query(
      {{"plugin_id", "host"}, {"per_page", "2"}, {"next_token", "default.b"}});
  REQUIRE(q.query);
  CHECK(q.query->plugin_id == "host");
  CHECK(q.query->per_page == 2);
  CHECK(q.query->next_token == "default.b");
  auto bad = parse_nomad_volume_query({{"per_page", "two"}});
  CHECK_FALSE(bad.query);
  CHECK(bad.error.find("per_page") != std::string::npos);
  CHECK_FALSE(parse_nomad_volume_query({{"per_page", "-1"}}).query);
  CHECK_FALSE(parse_nomad_volume_query({{"per_page", "99999999999"}}).query);
  auto filter = parse_nomad_volume_query({{"filter", "PluginID == \"x\""}});
  REQUIRE(filter.query);
  CHECK(filter.query->filter == "PluginID == \"x\"");
}

TEST_CASE("nomad volume pages: filters, NAMESPACE.ID order, every volume once over the pages") {
  std::vector<v1::Volume> store;
  auto add = [&](const std::string& ns, const std::string& id, const std::string& plugin,
                 const std::string& node) {
    v1::Volume v;
    v.set_namespace_(ns);
    v.set_id(id);
    v.set_plugin_id(plugin);
    if (!node.empty()) {
      auto* c = v.add_claims();
      c->set_node_id(node);
      c->set_state(v1::CLAIM_TAKEN);
    }
    store.push_back(v);
  };
  add("default", "c", "hostpath", "");
  add("default", "a", "hostpath", "node-1");
  add("team", "a", "ebs", "node-2");
  add("default", "b", "ebs", "");
  add("default", "ab", "hostpath", "node-12");
  std::vector<const v1::Volume*> all;
  for (const auto& v : store) all.push_back(&v);
  auto ids = [](const nomad_volume_page& p) {
    std::vector<std::string> out;
    for (const auto* v : p.volumes) out.push_back(v->namespace_() + "." + v->id());
    return out;
  };
  nomad_volume_query q;
  auto everything = nomad_volumes_page(all, q);
  CHECK(ids(everything) ==
        std::vector<std::string>{"default.a", "default.ab", "default.b", "default.c", "team.a"});
  CHECK(everything.next_token.empty());
  q.plugin_id = "host";
  CHECK(ids(nomad_volumes_page(all, q)) ==
        std::vector<std::string>{"default.a", "default.ab", "default.c"});
  q.plugin_id = "";
  q.node_id = "node-1";  // a prefix: node-1 and node-12
  CHECK(ids(nomad_volumes_page(all, q)) == std::vector<std::string>{"default.a", "default.ab"});
  q.node_id = "";
  q.prefix = "a";
  CHECK(ids(nomad_volumes_page(all, q)) ==
        std::vector<std::string>{"default.a", "default.ab", "team.a"});
  q.prefix = "";
  // Every page size walks every volume exactly once, in order.
  for (int per_page = 1; per_page <= 6; ++per_page) {
    nomad_volume_query pq;
    pq.per_page = per_page;
    std::vector<std::string> walked;
    for (int pages = 0; pages < 10; ++pages) {
      auto page = nomad_volumes_page(all, pq);
      CHECK(static_cast<int>(page.volumes.size()) <= per_page);
      for (auto& id : ids(page)) walked.push_back(id);
      if (page.next_token.empty()) break;
      pq.next_token = page.next_token;
    }
    CHECK(walked == ids(everything));
  }
}

TEST_CASE("nomad blocking queries: index and wait read, Nomad's defaults and bounds") {
  auto none = parse_nomad_blocking({});
  REQUIRE(none.blocking);
  CHECK(none.blocking->index == 0);
  CHECK(none.blocking->wait_ms == 0);  // no index: no wait
  auto dflt = parse_nomad_blocking({{"index", "42"}});
  REQUIRE(dflt.blocking);
  CHECK(dflt.blocking->index == 42);
  CHECK(dflt.blocking->wait_ms == 5 * 60'000);
  CHECK(parse_nomad_blocking({{"index", "7"}, {"wait", "30s"}}).blocking->wait_ms == 30'000);
  CHECK(parse_nomad_blocking({{"index", "7"}, {"wait", "1h"}}).blocking->wait_ms == 10 * 60'000);
  CHECK(parse_nomad_blocking({{"wait", "30s"}}).blocking->wait_ms == 0);
  auto bad_index = parse_nomad_blocking({{"index", "-1"}});
  CHECK_FALSE(bad_index.blocking);
  CHECK(bad_index.error.rfind("Invalid index", 0) == 0);
  auto bad_wait = parse_nomad_blocking({{"index", "1"}, {"wait", "soon"}});
  CHECK_FALSE(bad_wait.blocking);
  CHECK(bad_wait.error.rfind("Invalid wait time", 0) == 0);
  CHECK_FALSE(parse_nomad_blocking({{"index", "99999999999999999999"}}).blocking);
}

TEST_CASE("volume_of_nomad reads Nomad's register body, any case, and names Nomad's fields") {
  auto doc = nlohmann::json::parse(R"({
    "ID": "volume-id1", "Name": "volume one", "Namespace": "default",
    "ExternalID": "vol-abcdef", "PluginID": "plugin-id1",
    "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"},
                              {"accessmode": "multi-node-reader-only", "attachmentMode": "file-system"}],
    "MountOptions": {"FsType": "ext4", "MountFlags": ["noatime"]},
    "Secrets": {"password": "xyzzy"}, "Parameters": {"tier": "gold"},
    "RequestedTopologies": {"Required": [{"Segments": {"zone": "a"}}], "Preferred": null},
    "RequestedCapacityMin": 1048576,
    "Topologies": [{"foo": "bar"}], "Schedulable": true, "CreateIndex": 4
  })");
  auto v = volume_of_nomad(doc, false);
  if (auto* ps = std::get_if<std::vector<problem>>(&v))
    for (const auto& p : *ps) MESSAGE(std::string(p.field + ": " + p.message));
  REQUIRE(std::holds_alternative<v1::Volume>(v));
  const auto& vol = std::get<v1::Volume>(v);
  CHECK(vol.id() == "volume-id1");
  CHECK(vol.name() == "volume one");
  CHECK(vol.external_id() == "vol-abcdef");
  CHECK(vol.plugin_id() == "plugin-id1");
  REQUIRE(vol.capabilities_size() == 2);
  CHECK(vol.capabilities(1).access_mode() == v1::MULTI_NODE_READER_ONLY);
  CHECK(vol.mount_options().fs_type() == "ext4");
  CHECK(vol.mount_options().mount_flags(0) == "noatime");
  CHECK(vol.secrets().at("password") == "xyzzy");
  CHECK(vol.parameters().at("tier") == "gold");
  CHECK(vol.topology_request().required(0).segments().at("zone") == "a");
  CHECK(vol.capacity_min() == 1048576);

  // Nomad's single capability of before 1.1.
  auto legacy = nlohmann::json::parse(R"({"ID": "v", "ExternalID": "e", "PluginID": "p",
      "AccessMode": "multi-node-reader-only", "AttachmentMode": "file-system"})");
  auto lv = volume_of_nomad(legacy, false);
  REQUIRE(std::holds_alternative<v1::Volume>(lv));
  CHECK(std::get<v1::Volume>(lv).capabilities(0).access_mode() == v1::MULTI_NODE_READER_ONLY);

  // Problems name Nomad's fields.
  auto bad = nlohmann::json::parse(R"({"ID": "v", "PluginID": "p", "ExternalID": "e",
      "RequestedCapabilities": [{"AccessMode": "rw", "AttachmentMode": "file-system"}],
      "Bogus": 1})");
  auto bv = volume_of_nomad(bad, false);
  REQUIRE(std::holds_alternative<std::vector<problem>>(bv));
  auto problems = std::get<std::vector<problem>>(bv);
  REQUIRE(problems.size() == 1);  // the unknown field first, before the spec is read
  CHECK(problems[0].field == "Bogus");
  bad.erase("Bogus");
  problems = std::get<std::vector<problem>>(volume_of_nomad(bad, false));
  REQUIRE_FALSE(problems.empty());
  CHECK(problems[0].field == "RequestedCapabilities[0].AccessMode");
  CHECK(problems[0].message.find("'rw'") != std::string::npos);

  // Create: no ExternalID (the plugin chooses it); register: required.
  auto create = nlohmann::json::parse(R"({"ID": "v", "PluginID": "p",
      "RequestedCapabilities": [{"AccessMode": "single-node-writer", "AttachmentMode": "file-system"}]})");
  CHECK(std::holds_alternative<v1::Volume>(volume_of_nomad(create, true)));
  CHECK(std::holds_alternative<std::vector<problem>>(volume_of_nomad(create, false)));
  create["ExternalID"] = "e";
  auto made = std::get<std::vector<problem>>(volume_of_nomad(create, true));
  CHECK(made[0].field == "ExternalID");
  // Two spellings of one field, and a body that is not an object.
  auto twice = nlohmann::json::parse(R"({"ID": "v", "id": "w"})");
  CHECK(std::get<std::vector<problem>>(volume_of_nomad(twice, false))[0].message.find("twice") !=
        std::string::npos);
  CHECK(std::holds_alternative<std::vector<problem>>(volume_of_nomad(nlohmann::json(3), false)));
}

TEST_CASE("nomad snapshots and the CSI secrets header") {
  v1::Snapshot s;
  s.set_id("snap-1");
  s.set_source_external_id("hp-db");
  s.set_source_volume_id("db");
  s.set_plugin_id("hostpath");
  s.set_size_bytes(10);
  s.set_created_at_ms(1617909982123);
  s.set_ready_to_use(true);
  s.set_name("nightly");
  auto j = nomad_snapshot(s);
  CHECK(j["ID"] == "snap-1");
  CHECK(j["ExternalSourceVolumeID"] == "hp-db");
  CHECK(j["SourceVolumeID"] == "db");
  CHECK(j["CreateTime"] == 1617909982);  // seconds, as Nomad's
  CHECK(j["IsReady"] == true);
  CHECK(j["Secrets"].is_null());

  auto two = parse_csi_secrets("token=abc,user=me=you");
  REQUIRE(std::holds_alternative<std::map<std::string, std::string>>(two));
  auto m = std::get<std::map<std::string, std::string>>(two);
  CHECK(m.at("token") == "abc");
  CHECK(m.at("user") == "me=you");  // split at the first '='
  CHECK(std::get<std::map<std::string, std::string>>(parse_csi_secrets("")).empty());
  auto bad = parse_csi_secrets("token=abc,hunter2");
  REQUIRE(std::holds_alternative<std::string>(bad));
  CHECK(std::get<std::string>(bad).find("pair 2") != std::string::npos);
  CHECK(std::get<std::string>(bad).find("hunter2") == std::string::npos);
  CHECK(std::holds_alternative<std::string>(parse_csi_secrets("=x")));
}

TEST_CASE(
    "nomad writes: the WriteRequest from the query and the body, as Nomad's clients send it") {
  using nlohmann::json;
  // Go's api client: the embedded WriteRequest flattened, zero values.
  auto go = json::parse(R"({"Volumes": [], "Region": "", "Namespace": "", "SecretID": ""})");
  auto w = parse_nomad_write({}, go);
  REQUIRE(w.write);
  CHECK(w.write->namespace_.empty());
  CHECK(w.write->secret_id.empty());
  CHECK(w.write->idempotency_token.empty());
  // WriteOptions in the query; the body's fields in any case.
  w = parse_nomad_write({{"namespace", "prod"}, {"region", "global"}, {"idempotency_token", "k1"}},
                        json::parse(R"({"namespace": "prod", "secretid": "s3", "REGION": null})"));
  REQUIRE(w.write);
  CHECK(w.write->namespace_ == "prod");
  CHECK(w.write->secret_id == "s3");
  CHECK(w.write->idempotency_token == "k1");
  w = parse_nomad_write({}, json::parse(R"({"IdempotencyToken": "k2", "Namespace": "dev"})"));
  REQUIRE(w.write);
  CHECK(w.write->idempotency_token == "k2");
  CHECK(w.write->namespace_ == "dev");
  // No body (a DELETE).
  CHECK(parse_nomad_write({{"namespace", "x"}}, json()).write->namespace_ == "x");
  // Disagreements, another region and a non-string are named; a token never repeated.
  auto bad = parse_nomad_write({{"namespace", "a"}}, json::parse(R"({"Namespace": "b"})"));
  CHECK_FALSE(bad.write);
  CHECK(bad.error.find("'Namespace' ('b') differs from the query's namespace ('a')") !=
        std::string::npos);
  bad = parse_nomad_write({{"idempotency_token", "k-secret"}},
                          json::parse(R"({"IdempotencyToken": "other"})"));
  CHECK_FALSE(bad.write);
  CHECK(bad.error.find("k-secret") == std::string::npos);
  CHECK(bad.error.find("other") == std::string::npos);
  bad = parse_nomad_write({{"region", "eu"}}, json());
  CHECK_FALSE(bad.write);
  CHECK(bad.error.find("region 'eu'") != std::string::npos);
  CHECK_FALSE(parse_nomad_write({}, json::parse(R"({"Region": "eu"})")).write);
  CHECK_FALSE(parse_nomad_write({}, json::parse(R"({"SecretID": 7})")).write);
  CHECK(is_nomad_write_field("secretid"));
  CHECK(is_nomad_write_field("idempotencytoken"));
  CHECK_FALSE(is_nomad_write_field("volumes"));
}

TEST_CASE("nomad reads: region and stale checked as Nomad parses them; an index is at least 1") {
  CHECK(nomad_read_problem({}).empty());
  CHECK(nomad_read_problem({{"region", "global"}, {"stale", ""}}).empty());
  CHECK(nomad_read_problem({{"stale", "true"}}).empty());
  CHECK(nomad_read_problem({{"stale", "false"}}).empty());
  CHECK(nomad_read_problem({{"stale", "maybe"}}).find("`stale`") != std::string::npos);
  CHECK(nomad_read_problem({{"region", "eu"}}).find("region 'eu'") != std::string::npos);
  CHECK(nomad_index(0) == 1);
  CHECK(nomad_index(1) == 1);
  CHECK(nomad_index(42) == 42);
}

TEST_CASE("nomad event topics: Nomad's spellings, berth's topics asked, unknown ones named") {
  CHECK(nomad_event_topic_spelling("CSIVolume"));
  CHECK(nomad_event_topic_spelling("Node:n1"));
  CHECK(nomad_event_topic_spelling("*"));
  CHECK(nomad_event_topic_spelling("Job:web"));
  CHECK_FALSE(nomad_event_topic_spelling("volume"));
  CHECK_FALSE(nomad_event_topic_spelling("claim"));

  auto every = parse_nomad_event_topics("");
  REQUIRE(every.query);
  CHECK(every.query->berth_topics.empty());
  CHECK_FALSE(every.query->nothing);
  REQUIRE(every.query->topics.size() == 1);
  CHECK(every.query->topics[0].topic == "*");

  auto some = parse_nomad_event_topics("CSIVolume:db,Node");
  REQUIRE(some.query);
  CHECK(some.query->berth_topics ==
        std::vector<v1::EventTopic>{v1::EVENT_VOLUME, v1::EVENT_CLAIM, v1::EVENT_NODE});
  CHECK(some.query->topics[0].key == "db");
  CHECK(some.query->topics[1].key == "*");

  auto star = parse_nomad_event_topics("Node:*,*");
  REQUIRE(star.query);
  CHECK(star.query->berth_topics.empty());  // every topic

  auto jobs = parse_nomad_event_topics("Job:web,Evaluation");
  REQUIRE(jobs.query);
  CHECK(jobs.query->nothing);

  auto bad = parse_nomad_event_topics("CSIVolume,volume");
  CHECK_FALSE(bad.query);
  CHECK(bad.error.find("'volume'") != std::string::npos);
  CHECK(bad.error.find("CSIVolume") != std::string::npos);
}

TEST_CASE("nomad events: Nomad's frame and fields, keys filtered, one frame per index") {
  std::vector<v1::Event> events;
  events.reserve(4);  // the references below stay valid
  auto& reg = events.emplace_back();
  reg.set_index(7);
  reg.set_topic(v1::EVENT_VOLUME);
  reg.set_type("VolumeRegistered");
  reg.set_namespace_("default");
  reg.set_key("db");
  reg.mutable_volume()->set_id("db");
  reg.mutable_volume()->set_namespace_("default");
  reg.mutable_volume()->set_plugin_id("hostpath");
  (*reg.mutable_volume()->mutable_secrets())["password"] = "hunter2";
  auto& claim = events.emplace_back();
  claim.set_index(7);
  claim.set_seq(1);
  claim.set_topic(v1::EVENT_CLAIM);
  claim.set_type("ClaimTaken");
  claim.set_namespace_("default");
  claim.set_key("db/a1");
  claim.set_volume_id("db");
  claim.mutable_claim()->set_alloc_id("a1");
  claim.mutable_claim()->set_node_id("n1");
  claim.mutable_claim()->set_mode(v1::CLAIM_WRITE);
  claim.mutable_claim()->set_state(v1::CLAIM_TAKEN);
  claim.mutable_claim()->set_access_mode(v1::SINGLE_NODE_WRITER);
  auto& node = events.emplace_back();
  node.set_index(9);
  node.set_topic(v1::EVENT_NODE);
  node.set_type("NodeRegistered");
  node.set_key("n1");
  node.mutable_node()->set_id("n1");
  node.mutable_node()->set_status(v1::NODE_READY);
  node.mutable_node()->set_ineligible(true);
  auto& alloc = events.emplace_back();
  alloc.set_index(10);
  alloc.set_topic(v1::EVENT_ALLOC);
  alloc.set_type("AllocUpdated");
  alloc.set_namespace_("default");
  alloc.set_key("a1");
  alloc.mutable_alloc()->set_id("a1");
  alloc.mutable_alloc()->set_node_id("n1");
  alloc.mutable_alloc()->set_state(v1::ALLOC_COMPLETE);

  auto v = nomad_event(reg);
  CHECK(v["Topic"] == "CSIVolume");
  CHECK(v["Type"] == "CSIVolumeRegistered");
  CHECK(v["Key"] == "db");
  CHECK(v["Namespace"] == "default");
  CHECK(v["Index"] == 7);
  CHECK(v["FilterKeys"] == nlohmann::ordered_json::array({"hostpath"}));
  CHECK(v["Payload"]["Volume"]["ID"] == "db");
  CHECK(v["Payload"]["Volume"]["Secrets"].is_null());
  CHECK_FALSE(v["Payload"]["Volume"].contains("Schedulable"));  // the plugin's, not here
  CHECK(v.dump().find("hunter2") == std::string::npos);

  auto c = nomad_event(claim);
  CHECK(c["Type"] == "CSIVolumeClaim");
  CHECK(c["Key"] == "db");
  CHECK(c["Payload"]["Claim"]["AllocationID"] == "a1");
  CHECK(c["Payload"]["Claim"]["Mode"] == "write");
  CHECK(c["Payload"]["Claim"]["AccessMode"] == "single-node-writer");
  CHECK(c["Payload"]["Claim"]["State"] == "taken");
  claim.set_type("ClaimFreed");
  CHECK(nomad_event(claim)["Payload"]["Claim"]["State"] == "freed");
  claim.set_type("ClaimTaken");

  auto n = nomad_event(node);
  CHECK(n["Topic"] == "Node");
  CHECK(n["Type"] == "NodeRegistration");
  CHECK(n["Payload"]["Node"]["Status"] == "ready");
  CHECK(n["Payload"]["Node"]["SchedulingEligibility"] == "ineligible");
  auto a = nomad_event(alloc);
  CHECK(a["Topic"] == "Allocation");
  CHECK(a["Type"] == "AllocationUpdated");
  CHECK(a["Payload"]["Allocation"]["ClientStatus"] == "complete");

  // Every topic: three frames, the volume's two events in one.
  auto all = parse_nomad_event_topics("*").query.value();
  auto frames = nomad_event_frames(events, all);
  REQUIRE(frames.size() == 3);
  CHECK(frames[0]["Index"] == 7);
  CHECK(frames[0]["Events"].size() == 2);
  CHECK(frames[1]["Index"] == 9);
  CHECK(frames[2]["Events"][0]["Topic"] == "Allocation");

  // A key: the claim's alloc is one of its FilterKeys; another volume's
  // key matches nothing; the node's frame drops out.
  auto by_alloc =
      nomad_event_frames(events, parse_nomad_event_topics("CSIVolume:a1").query.value());
  REQUIRE(by_alloc.size() == 1);
  REQUIRE(by_alloc[0]["Events"].size() == 1);
  CHECK(by_alloc[0]["Events"][0]["Type"] == "CSIVolumeClaim");
  CHECK(
      nomad_event_frames(events, parse_nomad_event_topics("CSIVolume:web").query.value()).empty());
  auto nodes =
      nomad_event_frames(events, parse_nomad_event_topics("Node:n1,Allocation:n1").query.value());
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0]["Events"][0]["Topic"] == "Node");
  CHECK(nodes[1]["Events"][0]["Topic"] == "Allocation");
}
