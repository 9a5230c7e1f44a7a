// Unit tests of messages/codec: the volume spec parser and the JSON views.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "messages/codec.hpp"

using namespace berth;

namespace {

std::vector<problem> problems_of(std::string_view text) {
  auto r = parse_volume_spec(text);
  REQUIRE(std::holds_alternative<std::vector<problem>>(r));
  return std::get<std::vector<problem>>(r);
}

bool has_field(const std::vector<problem>& ps, const std::string& field) {
  for (const auto& p : ps)
    if (p.field == field) return true;
  return false;
}

const char* json_spec = R"({
  "id": "db", "plugin_id": "hostpath", "external_id": "vol-1",
  "capabilities": [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}],
  "mount_options": {"fs_type": "ext4", "mount_flags": ["noatime", "password=hunter2"]},
  "secrets": {"token": "hunter2"},
  "parameters": {"size": "1G"},
  "context": {"owner": "a"},
  "topology_request": {"required": [{"segments": {"zone": "a"}}]},
  "capacity_min": "1GiB", "capacity_max": 2147483648
})";

}  // namespace

TEST_CASE("a_json_spec_parses_with_defaults") {
  auto r = parse_volume_spec(json_spec);
  REQUIRE(std::holds_alternative<v1::Volume>(r));
  auto v = std::get<v1::Volume>(r);
  CHECK(v.id() == "db");
  CHECK(v.namespace_() == "default");
  CHECK(v.name() == "db");
  CHECK(v.capabilities(0).access_mode() == v1::SINGLE_NODE_WRITER);
  CHECK(v.mount_options().mount_flags_size() == 2);
  CHECK(v.secrets().at("token") == "hunter2");
  CHECK(v.capacity_min() == (1LL << 30));
  CHECK(v.capacity_max() == 2147483648LL);
  CHECK(v.topology_request().required(0).segments().at("zone") == "a");
}

TEST_CASE("a_yaml_spec_reads_like_the_json_one") {
  auto r = parse_volume_spec(R"(
id: db
namespace: prod
plugin_id: hostpath
external_id: vol-1
capabilities:
  - access_mode: multi-node-reader-only
    attachment_mode: file-system
capacity_min: 1024
parameters:
  replicas: 3
)");
  REQUIRE(std::holds_alternative<v1::Volume>(r));
  auto v = std::get<v1::Volume>(r);
  CHECK(v.namespace_() == "prod");
  CHECK(v.capabilities(0).access_mode() == v1::MULTI_NODE_READER_ONLY);
  CHECK(v.capacity_min() == 1024);
  CHECK(v.parameters().at("replicas") == "3");
}

TEST_CASE("a_create_spec_leaves_the_external_id_to_the_plugin") {
  const char* spec = R"({"id": "db", "plugin_id": "hostpath", "capacity_min": "1MiB",
    "capabilities": [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}]})";
  auto r = parse_volume_spec(spec, spec_use::create);
  REQUIRE(std::holds_alternative<v1::Volume>(r));
  CHECK(std::get<v1::Volume>(r).external_id().empty());
  CHECK(has_field(problems_of(spec), "external_id"));  // registration needs it
  auto given = parse_volume_spec(json_spec, spec_use::create);
  REQUIRE(std::holds_alternative<std::vector<problem>>(given));
  CHECK(has_field(std::get<std::vector<problem>>(given), "external_id"));
}

TEST_CASE("unknown_keys_are_errors_not_ignored") {
  auto ps = problems_of(R"({"id": "db", "plugin_id": "p", "external_id": "e",
    "capabilities": [{"access_mode": "single-node-writer", "attachment_mode": "file-system",
                      "extra": 1}],
    "plugin": "typo"})");
  CHECK(has_field(ps, "plugin"));
  CHECK(has_field(ps, "capabilities[0].extra"));
}

TEST_CASE("every_problem_is_reported_at_once") {
  auto ps = problems_of(R"({"capabilities": [{"access_mode": "rw", "attachment_mode": "disk"}],
    "capacity_min": "lots"})");
  CHECK(has_field(ps, "capabilities[0].access_mode"));
  CHECK(has_field(ps, "capabilities[0].attachment_mode"));
  CHECK(has_field(ps, "capacity_min"));
  // Malformed keys and missing fields are reported together.
  CHECK(has_field(ps, "id"));
  CHECK(has_field(ps, "external_id"));
  auto missing = problems_of(R"({"capabilities": []})");
  CHECK(has_field(missing, "id"));
  CHECK(has_field(missing, "plugin_id"));
  CHECK(has_field(missing, "external_id"));
  CHECK(has_field(missing, "capabilities"));
}

TEST_CASE("malformed_text_is_a_single_clear_problem") {
  auto ps = problems_of("{\"id\": ");
  REQUIRE(ps.size() == 1);
  CHECK(ps[0].message.find("not valid JSON") != std::string::npos);
  CHECK(problems_of("")[0].message == "is empty");
  CHECK(problems_of("- a\n- b\n")[0].message == "must be an object");
  CHECK(problems_of("id: [unclosed\n")[0].message.find("not valid YAML") != std::string::npos);
}

TEST_CASE("wrong_types_name_the_field") {
  auto ps = problems_of(R"({"id": 5, "plugin_id": "p", "external_id": "e",
    "capabilities": "single-node-writer", "secrets": ["a"]})");
  CHECK(has_field(ps, "id"));
  CHECK(has_field(ps, "capabilities"));
  CHECK(has_field(ps, "secrets"));
}

TEST_CASE("volume_json_never_contains_secrets_or_mount_flags") {
  auto v = std::get<v1::Volume>(parse_volume_spec(json_spec));
  v1::Plugin p;
  p.set_id("hostpath");
  v1::PluginInstance i;
  i.set_node_id("n1");
  i.set_healthy(true);
  upsert_instance(p, v1::PLUGIN_MONOLITH, i);
  claim_request r;
  r.alloc_id = "a1";
  r.node_id = "n1";
  r.write = true;
  REQUIRE_FALSE(claim(v, r, &p));
  auto j = volume_json(v, &p);
  auto text = j.dump();
  CHECK(text.find("hunter2") == std::string::npos);
  CHECK(text.find("token") == std::string::npos);
  CHECK(text.find("noatime") == std::string::npos);
  CHECK(j["id"] == "db");
  CHECK(j["plugin_id"] == "hostpath");
  CHECK(j["healthy"] == true);
  CHECK(j["capabilities"][0]["access_mode"] == "single-node-writer");
  CHECK(j["claims"][0]["alloc_id"] == "a1");
  CHECK(j["claims"][0]["mode"] == "write");
  CHECK(j["claims"][0]["state"] == "taken");
  CHECK(j["write_claims"] == 1);
  CHECK(volume_json(v, nullptr)["healthy"] == false);
}

TEST_CASE("plugin_json_derives_counts") {
  v1::Plugin p;
  p.set_id("hostpath");
  v1::PluginInstance a, b;
  a.set_node_id("n1");
  a.set_healthy(true);
  b.set_node_id("n2");
  upsert_instance(p, v1::PLUGIN_MONOLITH, a);
  upsert_instance(p, v1::PLUGIN_NODE, b);
  auto j = plugin_json(p);
  CHECK(j["id"] == "hostpath");
  CHECK(j["controllers_healthy"] == 1);
  CHECK(j["controllers_expected"] == 1);
  CHECK(j["nodes_healthy"] == 1);
  CHECK(j["nodes_expected"] == 2);
}

// Found by tests/fuzz (spec): a YAML spec with a byte that is not UTF-8
// was accepted, and rendering the volume as JSON then threw
// (nlohmann type_error 316): protobuf strings and the JSON views are UTF-8.
TEST_CASE("a_spec_that_is_not_utf8_is_refused_naming_the_byte") {
  std::string yaml = "id: t1\nplugin_id: hostpath\nexternal_id: e\n"
                     "capabilities: [{access_mode: single-node-writer, attachment_mode: file-system}]\n"
                     "context: {zone: \xab}\n";
  auto ps = problems_of(yaml);
  REQUIRE(ps.size() == 1);
  CHECK(ps[0].field == "(spec)");
  CHECK(ps[0].message.find("byte " + std::to_string(yaml.find('\xab'))) != std::string::npos);
  for (const char* bad : {"\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"})
    CHECK(problems_of(std::string("id: \"") + bad + "\"\n")[0].field == "(spec)");
  // Valid multi-byte text is fine.
  auto ok = parse_volume_spec("id: t1\nname: \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"\n"
                              "plugin_id: hostpath\nexternal_id: e\n"
                              "capabilities: [{access_mode: single-node-writer, "
                              "attachment_mode: file-system}]\n");
  REQUIRE(std::holds_alternative<v1::Volume>(ok));
  CHECK(volume_json(std::get<v1::Volume>(ok), nullptr).dump().find("caf") != std::string::npos);
}

// Found by tests/fuzz (spec): a JSON number too large for a double threw
// out_of_range (not parse_error) out of the parser.
TEST_CASE("a_json_spec_with_a_number_out_of_range_is_refused") {
  auto ps = problems_of(R"({"id": "db", "capacity_min": 5555e5555555})");
  REQUIRE(ps.size() == 1);
  CHECK(ps[0].field == "(spec)");
  CHECK(ps[0].message.find("is not valid JSON") != std::string::npos);
}

// YAML aliases expand: a few lines can stand for 10^7 values (and one more
// line for 10^8, gigabytes).  The parser stops after 100000.
TEST_CASE("a_yaml_spec_whose_aliases_expand_without_bound_is_refused") {
  std::string yaml = "a: &a [x,x,x,x,x,x,x,x,x,x]\n";
  std::string prev = "a";
  for (const char* name : {"b", "c", "d", "e", "f", "g", "h", "i"}) {
    yaml += std::string(name) + ": &" + name + " [";
    for (int i = 0; i < 10; ++i) yaml += (i ? ",*" : "*") + prev;
    yaml += "]\n";
    prev = name;
  }
  auto ps = problems_of(yaml);
  REQUIRE(ps.size() == 1);
  CHECK(ps[0].message.find("too large") != std::string::npos);
}

TEST_CASE("durations_as_operators_write_them") {
  CHECK(parse_duration_ms("90s") == 90'000);
  CHECK(parse_duration_ms("30m") == 1'800'000);
  CHECK(parse_duration_ms("1h") == 3'600'000);
  CHECK(parse_duration_ms("1h30m") == 5'400'000);
  CHECK(parse_duration_ms("500ms") == 500);
  CHECK(parse_duration_ms("0s") == 0);
  CHECK(parse_duration_ms("2m5s250ms") == 125'250);
  for (const char* bad : {"", "10", "s", "1x", "-5s", "1.5h", "1h ", " 1h", "9999999h",
                          "99999999999999999999s", "1hh", "m1"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_duration_ms(bad).has_value());
  }
}

TEST_CASE("a_create_spec_names_a_snapshot_or_a_clone_not_both") {
  auto base = std::string(R"({"id": "db2", "plugin_id": "hostpath", "capabilities":
    [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}], )");
  auto snap = parse_volume_spec(base + R"("snapshot_id": "snap-1"})", spec_use::create);
  REQUIRE(std::holds_alternative<v1::Volume>(snap));
  CHECK(std::get<v1::Volume>(snap).snapshot_id() == "snap-1");
  auto clone = parse_volume_spec(base + R"("clone_id": "db"})", spec_use::create);
  REQUIRE(std::holds_alternative<v1::Volume>(clone));
  CHECK(std::get<v1::Volume>(clone).clone_id() == "db");
  auto both = parse_volume_spec(base + R"("snapshot_id": "s", "clone_id": "db"})",
                                spec_use::create);
  REQUIRE(std::holds_alternative<std::vector<problem>>(both));
  CHECK(has_field(std::get<std::vector<problem>>(both), "snapshot_id, clone_id"));
  // The server-only field is not a spec key.
  auto server = parse_volume_spec(base + R"("clone_external_id": "x"})", spec_use::create);
  REQUIRE(std::holds_alternative<std::vector<problem>>(server));
  CHECK(has_field(std::get<std::vector<problem>>(server), "clone_external_id"));
}

TEST_CASE("a_registration_spec_refuses_a_content_source") {
  auto base = std::string(R"({"id": "db2", "plugin_id": "hostpath", "external_id": "e",
    "capabilities": [{"access_mode": "single-node-writer", "attachment_mode": "file-system"}], )");
  CHECK(has_field(problems_of(base + R"("snapshot_id": "s"})"), "snapshot_id"));
  CHECK(has_field(problems_of(base + R"("clone_id": "db"})"), "clone_id"));
}

TEST_CASE("the_volume_view_shows_the_content_source_and_modified_parameters") {
  v1::Volume v;
  v.set_id("db");
  v.set_snapshot_id("snap-1");
  (*v.mutable_modified_parameters())["iops"] = "200";
  (*v.mutable_secrets())["token"] = "hunter2";
  auto j = volume_json(v, nullptr);
  CHECK(j["snapshot_id"] == "snap-1");
  CHECK(j["clone_id"] == "");
  CHECK(j["mutable_parameters"]["iops"] == "200");
  CHECK(j.dump().find("hunter2") == std::string::npos);
  v1::Snapshot s;
  s.set_id("snap-1");
  s.set_source_volume_id("db");
  s.set_size_bytes(10);
  s.set_ready_to_use(true);
  s.set_group_snapshot_id("group-1");
  auto sj = snapshot_json(s);
  CHECK(sj["id"] == "snap-1");
  CHECK(sj["group_snapshot_id"] == "group-1");
  CHECK(sj["source_volume_id"] == "db");
  CHECK(sj["ready_to_use"] == true);
}

TEST_CASE("parse_size_reads_bytes_and_units_and_refuses_the_rest") {
  CHECK(parse_size("1048576") == 1048576);
  CHECK(parse_size("1MiB") == 1048576);
  CHECK(parse_size("2 GiB") == (2LL << 30));
  CHECK(parse_size("5KB") == 5000);
  CHECK(parse_size("7B") == 7);
  CHECK_FALSE(parse_size(""));
  CHECK_FALSE(parse_size("GiB"));
  CHECK_FALSE(parse_size("1.5GiB"));
  CHECK_FALSE(parse_size("1gib"));
  CHECK_FALSE(parse_size("-1"));
  CHECK_FALSE(parse_size("9000000TiB"));  // more than int64 holds
}

TEST_CASE("base64 is RFC 4648's, with its test vectors and bytes above 127") {
  CHECK(base64("") == "");
  CHECK(base64("f") == "Zg==");
  CHECK(base64("fo") == "Zm8=");
  CHECK(base64("foo") == "Zm9v");
  CHECK(base64("foob") == "Zm9vYg==");
  CHECK(base64("fooba") == "Zm9vYmE=");
  CHECK(base64("foobar") == "Zm9vYmFy");
  CHECK(base64(std::string("\xff\xfe\x00", 3)) == "//4A");
}
