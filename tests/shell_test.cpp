// The shell's parts that need no server: line splitting, completion, and
// the request each command line builds.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/berth/client.hpp"
#include "apps/berth/commands.hpp"
#include "apps/berth/line.hpp"
#include "apps/berth/render.hpp"
#include "apps/berth/volume_init.hpp"
#include "messages/codec.hpp"

using namespace berth;

namespace {

using words = std::vector<std::string>;

words split_ok(const std::string& line) {
  auto r = split_line(line);
  REQUIRE_MESSAGE(std::holds_alternative<words>(r), line);
  return std::get<words>(r);
}

std::string split_error(const std::string& line) {
  auto r = split_line(line);
  REQUIRE_MESSAGE(std::holds_alternative<failure>(r), line);
  CHECK(std::get<failure>(r).code == errc::invalid);
  return std::get<failure>(r).message;
}

// A small tree shaped like the CLI's.
command_info sample_tree() {
  command_info claim{"claim", "Claim a volume", {{"--alloc", true}, {"--node", true}, {"--read-only", false}}, {"id"}, {}};
  command_info vstatus{"status", "Show volumes", {}, {"id"}, {}};
  command_info reg{"register", "Register a volume", {}, {"file"}, {}};
  command_info volume{"volume", "Volumes", {}, {}, {claim, vstatus, reg}};
  command_info pstatus{"status", "Show plugins", {}, {"id"}, {}};
  command_info plugin{"plugin", "Plugins", {}, {}, {pstatus}};
  command_info nstatus{"status", "Show nodes", {}, {"id"}, {}};
  command_info node{"node", "Nodes", {}, {}, {nstatus}};
  command_info status{"status", "Show the server", {}, {}, {}};
  return command_info{"berth", "", {{"--json", false}, {"--namespace", true}, {"-n", true}}, {},
                      {volume, plugin, node, status}};
}

known_ids sample_ids() {
  known_ids ids;
  ids.volumes = {"db", "data", "logs"};
  ids.nodes = {"n1", "n2"};
  ids.plugins = {"hostpath"};
  ids.allocs = {"web-1", "web-2"};
  return ids;
}

words candidates(const std::string& before, const std::string& prefix) {
  return complete(sample_tree(), before, prefix, sample_ids()).candidates;
}

}  // namespace

TEST_CASE("split: blanks separate words, runs of blanks count once") {
  CHECK(split_ok("volume  status\tdb ") == words{"volume", "status", "db"});
  CHECK(split_ok("") == words{});
  CHECK(split_ok("   ") == words{});
}

TEST_CASE("split: quotes keep blanks, and an empty quoted word is a word") {
  CHECK(split_ok("volume register '/tmp/my spec.yaml'") ==
        words{"volume", "register", "/tmp/my spec.yaml"});
  CHECK(split_ok("a \"b c\" d") == words{"a", "b c", "d"});
  CHECK(split_ok("a '' b") == words{"a", "", "b"});
  CHECK(split_ok("pre'fix 'and\" more\"") == words{"prefix and more"});
}

TEST_CASE("split: backslashes") {
  CHECK(split_ok("volume register /path/with\\ space") ==
        words{"volume", "register", "/path/with space"});
  CHECK(split_ok("a\\'b") == words{"a'b"});
  // Single quotes keep a backslash; double quotes only before " \ $ `.
  CHECK(split_ok("'a\\b'") == words{"a\\b"});
  CHECK(split_ok("\"a\\\"b\\\\c\\d\"") == words{"a\"b\\c\\d"});
}

TEST_CASE("split: unterminated quotes and a trailing backslash are errors") {
  CHECK(split_error("volume status 'db").find("unterminated ' quote") != std::string::npos);
  CHECK(split_error("volume status \"db").find("unterminated \" quote") != std::string::npos);
  CHECK(split_error("volume status db\\").find("backslash") != std::string::npos);
}

TEST_CASE("complete: command words, with the shell's own words at the start") {
  CHECK(candidates("", "") == words{"exit", "help", "node", "plugin", "quit", "status", "volume"});
  CHECK(candidates("", "vo") == words{"volume"});
  CHECK(candidates("volume ", "") == words{"claim", "register", "status"});
  CHECK(candidates("volume ", "cl") == words{"claim"});
  CHECK(candidates("volume ", "x") == words{});
  // The shell's words are commands only at the start of a line.
  CHECK(candidates("--json ", "") == words{"node", "plugin", "status", "volume"});
}

TEST_CASE("complete: ids by command and option") {
  CHECK(candidates("volume status ", "d") == words{"data", "db"});
  CHECK(candidates("volume status ", "") == words{"data", "db", "logs"});
  CHECK(candidates("plugin status ", "") == words{"hostpath"});
  CHECK(candidates("node status ", "n") == words{"n1", "n2"});
  CHECK(candidates("volume claim db --node ", "") == words{"n1", "n2"});
  CHECK(candidates("volume claim db --alloc ", "web") == words{"web-1", "web-2"});
  // Options with a value and flags are skipped when counting positionals.
  CHECK(candidates("volume claim --alloc web-1 --read-only ", "l") == words{"logs"});
  // The only positional is given: nothing more to offer.
  CHECK(candidates("volume status db ", "") == words{});
  // A global option's value is not the command.
  CHECK(candidates("--namespace prod volume status ", "l") == words{"logs"});
  CHECK(candidates("-n prod ", "pl") == words{"plugin"});
}

TEST_CASE("complete: option names of the command and its parents") {
  CHECK(candidates("volume claim db ", "--") == words{"--alloc", "--json", "--namespace", "--node", "--read-only"});
  CHECK(candidates("volume claim db ", "--a") == words{"--alloc"});
}

TEST_CASE("complete: file names for a file positional, command words after help") {
  auto c = complete(sample_tree(), "volume register ", "", sample_ids());
  CHECK(c.filenames);
  CHECK(c.candidates.empty());
  CHECK_FALSE(complete(sample_tree(), "volume status ", "", sample_ids()).filenames);
  CHECK(candidates("help ", "") == words{"node", "plugin", "status", "volume"});
  CHECK(candidates("help volume ", "c") == words{"claim"});
  CHECK(candidates("help volume status ", "") == words{});
}

TEST_CASE("complete: nothing inside an unterminated quote") {
  CHECK(candidates("volume status 'a b ", "") == words{});
}

TEST_CASE("complete: on the CLI's real commands") {
  auto tree = command_tree();
  auto ids = sample_ids();
  auto real = [&](const std::string& before, const std::string& prefix) {
    return complete(tree, before, prefix, ids).candidates;
  };
  CHECK(real("", "vo") == words{"volume"});
  CHECK(real("volume ", "") == words{"availability", "claim", "create", "delete", "deregister",
                                     "detach", "expand", "init", "modify", "register", "release",
                                     "snapshot", "status"});
  CHECK(real("volume snapshot ", "") == words{"create", "delete", "list"});
  CHECK(real("volume snapshot create ", "") == words{"data", "db", "logs"});
  CHECK(real("volume modify ", "") == words{"data", "db", "logs"});
  CHECK(real("volume snapshot delete ", "") == words{"hostpath"});
  CHECK(real("volume snapshot delete hostpath ", "").empty());  // a snapshot id: the plugin's
  CHECK(real("volume snapshot list --plugin ", "") == words{"hostpath"});
  CHECK(real("alloc ", "") == words{"run", "status", "stop"});
  CHECK(real("alloc stop ", "") == words{"web-1", "web-2"});
  CHECK(real("alloc run --node ", "") == words{"n1", "n2"});
  CHECK(real("volume detach db ", "") == words{"n1", "n2"});
  CHECK(real("volume release ", "") == words{"data", "db", "logs"});
  CHECK(real("volume release db --alloc ", "") == words{"web-1", "web-2"});
  CHECK(real("volume claim db ", "--a") == words{"--access-mode", "--address", "--alloc",
                                                  "--allow-abnormal", "--attachment-mode"});
  CHECK(real("plugin fingerprint hostpath --node ", "") == words{"n1", "n2"});
  CHECK(real("plugin fingerprint ", "") == words{"hostpath"});
  CHECK(real("node status ", "") == words{"n1", "n2"});
  CHECK(complete(tree, "volume create ", "", ids).filenames);
  auto init = real("volume init ", "--");
  for (const char* o : {"--force", "--json", "--output", "--type"})
    CHECK_MESSAGE(std::find(init.begin(), init.end(), o) != init.end(), o);
  CHECK(complete(tree, "volume init --output ", "", ids).filenames);
}

TEST_CASE("summary: the first clause of a description") {
  CHECK(summary("Register a volume from a spec file (JSON or YAML; - reads stdin), or update") ==
        "Register a volume from a spec file");
  CHECK(summary("Show one volume, or list every volume") == "Show one volume");
  CHECK(summary("Release an alloc's claim on a volume") == "Release an alloc's claim on a volume");
  CHECK(summary("Remove a volume. The storage stays.") == "Remove a volume");
}

// --- the request each command builds (request_of: parsed, not sent) ---------

namespace {

v1::Request request_ok(const words& args) {
  auto r = request_of(args);
  if (auto* f = std::get_if<failure>(&r)) FAIL_CHECK(f->message);
  REQUIRE(std::holds_alternative<v1::Request>(r));
  return std::get<v1::Request>(r);
}

failure request_error(const words& args) {
  auto r = request_of(args);
  REQUIRE(std::holds_alternative<failure>(r));
  return std::get<failure>(r);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A file for the commands that read one; removed at the end of the test.
struct temp_file {
  std::string path;
  explicit temp_file(const std::string& text) {
    char name[] = "/tmp/berth_shell_test_XXXXXX";
    int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    path = name;
    REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    close(fd);
  }
  ~temp_file() { std::remove(path.c_str()); }
};

// A volume to create; registering one needs the storage's own id too.
const std::string create_spec =
    R"({"id": "db", "namespace": "team", "plugin_id": "hostpath",
        "capabilities": [{"access_mode": "single-node-writer",
                          "attachment_mode": "file-system"}]})";
const std::string register_spec = R"({"external_id": "vol-7", )" + create_spec.substr(1);

}  // namespace

TEST_CASE("request: status asks the server about itself") {
  CHECK(request_ok({"status"}).command_case() == v1::Request::kAgentStatus);
}

TEST_CASE("request: volume register sends the spec, in the spec's namespace unless -n is given") {
  temp_file spec(register_spec);
  auto r = request_ok({"volume", "register", spec.path});
  REQUIRE(r.command_case() == v1::Request::kVolumeRegister);
  CHECK(r.volume_register().id() == "db");
  CHECK(r.volume_register().external_id() == "vol-7");
  CHECK(r.volume_register().plugin_id() == "hostpath");
  CHECK(r.volume_register().namespace_() == "team");
  CHECK(request_ok({"-n", "prod", "volume", "register", spec.path}).volume_register().namespace_() ==
        "prod");
  // After the command too: the global options fall through.
  CHECK(request_ok({"volume", "register", spec.path, "--namespace", "prod"})
            .volume_register()
            .namespace_() == "prod");
}

TEST_CASE("request: volume create sends the spec as a create") {
  temp_file spec(create_spec);
  auto r = request_ok({"volume", "create", spec.path});
  REQUIRE(r.command_case() == v1::Request::kVolumeCreate);
  CHECK(r.volume_create().id() == "db");
}

TEST_CASE("request: a spec that cannot be read or parsed is invalid input, before sending") {
  auto missing = request_error({"volume", "register", "/nonexistent/spec.json"});
  CHECK(missing.code == errc::invalid);
  CHECK(contains(missing.message, "cannot read /nonexistent/spec.json"));
  temp_file broken(R"({"id": "db")");
  auto bad = request_error({"volume", "create", broken.path});
  CHECK(bad.code == errc::invalid);
  CHECK(contains(bad.message, "volume spec " + broken.path));
}

TEST_CASE("request: volume status lists without an id, in the namespace given") {
  auto list = request_ok({"volume", "status"});
  REQUIRE(list.command_case() == v1::Request::kVolumeList);
  CHECK(list.volume_list().namespace_() == "default");
  CHECK_FALSE(list.stale());
  auto one = request_ok({"-n", "prod", "volume", "status", "db", "--stale"});
  REQUIRE(one.command_case() == v1::Request::kVolumeStatus);
  CHECK(one.volume_status().namespace_() == "prod");
  CHECK(one.volume_status().id() == "db");
  CHECK(one.stale());
}

TEST_CASE("request: volume deregister, with and without --force") {
  auto r = request_ok({"volume", "deregister", "db"});
  REQUIRE(r.command_case() == v1::Request::kVolumeDeregister);
  CHECK(r.volume_deregister().volume_id() == "db");
  CHECK(r.volume_deregister().namespace_() == "default");
  CHECK_FALSE(r.volume_deregister().force());
  CHECK(request_ok({"volume", "deregister", "db", "--force"}).volume_deregister().force());
}

TEST_CASE("request: volume claim carries the alloc, node, read-only and the modes named") {
  auto r = request_ok({"volume", "claim", "db", "--alloc", "a1", "--node", "n1"});
  REQUIRE(r.command_case() == v1::Request::kVolumeClaim);
  const auto& c = r.volume_claim();
  CHECK(c.volume_id() == "db");
  CHECK(c.alloc_id() == "a1");
  CHECK(c.node_id() == "n1");
  CHECK_FALSE(c.read_only());
  CHECK(c.access_mode() == v1::ACCESS_MODE_UNKNOWN);  // the server picks one that fits
  CHECK(c.attachment_mode() == v1::ATTACHMENT_MODE_UNKNOWN);
  auto ro = request_ok({"volume", "claim", "db", "--alloc", "a1", "--node", "n1", "--read-only",
                        "--access-mode", "single-node-reader-only", "--attachment-mode",
                        "block-device"})
                .volume_claim();
  CHECK(ro.read_only());
  CHECK(ro.access_mode() == v1::SINGLE_NODE_READER_ONLY);
  CHECK(ro.attachment_mode() == v1::BLOCK_DEVICE);
}

TEST_CASE("request: volume claim refuses an unknown mode, naming the ones there are") {
  auto access = request_error({"volume", "claim", "db", "--alloc", "a", "--node", "n",
                               "--access-mode", "sometimes"});
  CHECK(access.code == errc::invalid);
  CHECK(contains(access.message, "--access-mode 'sometimes' is not one of"));
  CHECK(contains(access.message, "single-node-writer"));
  auto attach = request_error({"volume", "claim", "db", "--alloc", "a", "--node", "n",
                               "--attachment-mode", "tape"});
  CHECK(contains(attach.message, "--attachment-mode 'tape' is not one of"));
  CHECK(contains(attach.message, "file-system"));
}

TEST_CASE("request: volume release, detach and delete name the volume in the namespace") {
  auto release = request_ok({"-n", "prod", "volume", "release", "db", "--alloc", "a1"});
  REQUIRE(release.command_case() == v1::Request::kVolumeRelease);
  CHECK(release.volume_release().namespace_() == "prod");
  CHECK(release.volume_release().volume_id() == "db");
  CHECK(release.volume_release().alloc_id() == "a1");
  auto detach = request_ok({"volume", "detach", "db", "n2"});
  REQUIRE(detach.command_case() == v1::Request::kVolumeDetach);
  CHECK(detach.volume_detach().volume_id() == "db");
  CHECK(detach.volume_detach().node_id() == "n2");
  CHECK(detach.volume_detach().namespace_() == "default");
  auto del = request_ok({"volume", "delete", "db", "-n", "prod"});
  REQUIRE(del.command_case() == v1::Request::kVolumeDelete);
  CHECK(del.volume_delete().volume_id() == "db");
  CHECK(del.volume_delete().namespace_() == "prod");
}

TEST_CASE("request: volume availability takes active, pause or drain and nothing else") {
  const std::pair<const char*, v1::VolumeAvailability> words[] = {
      {"active", v1::VOLUME_ACTIVE}, {"pause", v1::VOLUME_PAUSE}, {"drain", v1::VOLUME_DRAIN}};
  for (const auto& [word, a] : words) {
    auto r = request_ok({"-n", "prod", "volume", "availability", "db", word});
    REQUIRE(r.command_case() == v1::Request::kVolumeAvailability);
    CHECK(r.volume_availability().namespace_() == "prod");
    CHECK(r.volume_availability().volume_id() == "db");
    CHECK(r.volume_availability().availability() == a);
  }
  auto bad = request_error({"volume", "availability", "db", "paused"});
  CHECK(bad.code == errc::invalid);
  CHECK(contains(bad.message, "availability 'paused' is not one of active, pause, drain"));
}

TEST_CASE("request: volume claim and alloc run say --allow-abnormal only when given") {
  auto plain = request_ok({"volume", "claim", "db", "--alloc", "a1", "--node", "n1"});
  REQUIRE(plain.command_case() == v1::Request::kVolumeClaim);
  CHECK_FALSE(plain.volume_claim().allow_abnormal());
  auto claim =
      request_ok({"volume", "claim", "db", "--alloc", "a1", "--node", "n1", "--allow-abnormal"});
  CHECK(claim.volume_claim().allow_abnormal());
  auto run = request_ok({"alloc", "run", "--node", "n1", "--volume", "data=db"});
  REQUIRE(run.command_case() == v1::Request::kAllocRun);
  CHECK_FALSE(run.alloc_run().allow_abnormal());
  auto allowed = request_ok({"alloc", "run", "--node", "n1", "--volume", "data=db",
                             "--allow-abnormal", "--", "sleep", "1"});
  CHECK(allowed.alloc_run().allow_abnormal());
  // After -- it is the command's word, not the flag.
  auto word = request_ok({"alloc", "run", "--node", "n1", "--", "echo", "--allow-abnormal"});
  CHECK_FALSE(word.alloc_run().allow_abnormal());
  CHECK(word.alloc_run().command(1) == "--allow-abnormal");
}

TEST_CASE("request: volume expand reads SIZE as capacity_min in a spec") {
  const std::pair<const char*, int64_t> sizes[] = {
      {"2GiB", 2LL << 30}, {"500MiB", 500LL << 20}, {"1073741824", 1LL << 30}, {"3MB", 3000000}};
  for (const auto& [word, bytes] : sizes) {
    auto r = request_ok({"-n", "prod", "volume", "expand", "db", word});
    REQUIRE(r.command_case() == v1::Request::kVolumeExpand);
    CHECK(r.volume_expand().namespace_() == "prod");
    CHECK(r.volume_expand().volume_id() == "db");
    CHECK(r.volume_expand().required_bytes() == bytes);
  }
  for (const char* bad : {"lots", "2 parsecs", "0", "-1GiB", "GiB", "99999999999999999999"}) {
    auto f = request_error({"volume", "expand", "db", bad});
    CHECK(f.code == errc::invalid);
    CHECK(contains(f.message, "is not a size"));
  }
}

TEST_CASE("request: alloc run takes its volumes and the words after -- as they are") {
  auto r = request_ok({"alloc", "run", "--node", "n1", "--id", "web", "--volume", "data=db",
                       "--volume", "logs=l1:ro", "--", "sh", "-c", "echo --node"});
  REQUIRE(r.command_case() == v1::Request::kAllocRun);
  const auto& run = r.alloc_run();
  CHECK(run.node_id() == "n1");
  CHECK(run.id() == "web");
  CHECK(run.namespace_() == "default");
  REQUIRE(run.volumes_size() == 2);
  CHECK(run.volumes(0).name() == "data");
  CHECK(run.volumes(0).volume_id() == "db");
  CHECK_FALSE(run.volumes(0).read_only());
  CHECK(run.volumes(1).read_only());
  CHECK(words(run.command().begin(), run.command().end()) == words{"sh", "-c", "echo --node"});
  // Without a command the alloc runs until stopped.
  CHECK(request_ok({"alloc", "run", "--node", "n1"}).alloc_run().command().empty());
}

TEST_CASE("request: alloc run carries an id the shell makes when --id is not given") {
  auto a = request_ok({"alloc", "run", "--node", "n1"}).alloc_run().id();
  auto b = request_ok({"alloc", "run", "--node", "n1"}).alloc_run().id();
  CHECK(a.size() == 12);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(a != b);  // each command line is a new alloc; its own retries keep its id
}

TEST_CASE("request: alloc run without --node is placed by the leader; --explain runs nothing") {
  auto placed = request_ok({"alloc", "run", "--volume", "data=db"}).alloc_run();
  CHECK(placed.node_id().empty());
  CHECK_FALSE(placed.explain());
  CHECK(placed.volumes(0).volume_id() == "db");
  auto explain = request_ok({"alloc", "run", "--explain", "--volume", "data=db"});
  CHECK(explain.alloc_run().explain());
  CHECK(explain.alloc_run().node_id().empty());
  // Nothing runs, so it is safe to send again even without an id.
  explain.mutable_alloc_run()->clear_id();
  CHECK(safe_to_repeat(explain));
  auto both = request_error({"alloc", "run", "--explain", "--node", "n1", "--volume", "data=db"});
  CHECK(both.code == errc::invalid);
  CHECK(both.message.find("leave out --node") != std::string::npos);
}

TEST_CASE("retry: which requests change state, are safe to send again, and how to check them") {
  struct row {
    words args;
    bool changes, safe;
    std::string check;
  };
  std::vector<row> rows = {
      {{"volume", "status"}, false, true, "berth operator raft list-peers"},
      {{"alloc", "status", "web"}, false, true, "berth operator raft list-peers"},
      {{"alloc", "run", "--node", "n1", "--id", "web"}, true, true, "berth alloc status web"},
      {{"alloc", "stop", "web"}, true, true, "berth alloc status web"},
      {{"volume", "claim", "db", "--alloc", "a1", "--node", "n1"}, true, true,
       "berth volume status db"},
      {{"volume", "release", "db", "--alloc", "a1"}, true, true, "berth volume status db"},
      {{"--namespace", "prod", "volume", "deregister", "db"}, true, true,
       "berth --namespace prod volume status db"},
      {{"volume", "delete", "db"}, true, true, "berth volume status db"},
      {{"volume", "detach", "db", "n1"}, true, true, "berth volume status db"},
      {{"-n", "prod", "volume", "availability", "db", "drain"}, true, true,
       "berth --namespace prod volume status db"},
      {{"operator", "raft", "remove-peer", "s3"}, true, false, "berth operator raft list-peers"},
      {{"node", "drain", "n1"}, true, true, "berth node status n1"},
      {{"node", "eligibility", "n1", "--enable"}, true, true, "berth node status n1"},
      {{"node", "status", "n1", "--stale"}, false, true, "berth operator raft list-peers"},
      {{"volume", "snapshot", "create", "db"}, true, true, "berth volume snapshot list"},
      {{"volume", "snapshot", "delete", "hp", "s1"}, true, true, "berth volume snapshot list"},
      {{"volume", "snapshot", "list"}, false, true, "berth operator raft list-peers"},
      {{"volume", "modify", "db", "--parameter", "iops=1"}, true, true,
       "berth volume status db"},
  };
  for (const auto& r : rows) {
    CAPTURE(r.args);
    auto req = request_ok(r.args);
    CHECK(changes_state(req) == r.changes);
    CHECK(safe_to_repeat(req) == r.safe);
    CHECK(check_command(req) == r.check);
  }
  // An alloc run without an id would make a second alloc: never sent again.
  v1::Request bare;
  bare.mutable_alloc_run()->set_node_id("n1");
  CHECK_FALSE(safe_to_repeat(bare));
  v1::Request create;
  create.mutable_volume_create()->set_id("db");
  CHECK(changes_state(create));
  CHECK_FALSE(safe_to_repeat(create));  // a second CreateVolume answer would say "exists"
  CHECK(check_command(create) == "berth volume status db");
}

TEST_CASE("request: volume snapshot and modify carry their flags; secrets only as given") {
  auto create = request_ok({"--namespace", "team", "volume", "snapshot", "create", "db",
                            "--parameter", "p=1", "--secret", "token=hunter2"});
  REQUIRE(create.has_snapshot_create());
  const auto& c = create.snapshot_create();
  CHECK(c.namespace_() == "team");
  CHECK(c.volume_id() == "db");
  CHECK(c.name().rfind("berth-team-db-", 0) == 0);  // made once, by the shell
  CHECK(c.parameters().at("p") == "1");
  CHECK(c.secrets().at("token") == "hunter2");
  CHECK(c.source_external_id().empty());
  auto named = request_ok({"volume", "snapshot", "create", "db", "nightly"});
  CHECK(named.snapshot_create().name() == "nightly");

  auto del = request_ok({"volume", "snapshot", "delete", "hp", "snap-1", "--secret", "k=v=w"});
  CHECK(del.snapshot_delete().plugin_id() == "hp");
  CHECK(del.snapshot_delete().snapshot_id() == "snap-1");
  CHECK(del.snapshot_delete().secrets().at("k") == "v=w");  // the first '=' splits

  auto list = request_ok({"volume", "snapshot", "list", "--plugin", "hp", "--per-page", "2",
                          "--page-token", "t"});
  CHECK(list.snapshot_list().plugin_id() == "hp");
  CHECK(list.snapshot_list().per_page() == 2);
  CHECK(list.snapshot_list().page_token() == "t");

  auto modify = request_ok({"volume", "modify", "db", "--parameter", "iops=100", "--parameter",
                            "tier=gold"});
  CHECK(modify.volume_modify().parameters().size() == 2);
  CHECK(request_error({"volume", "modify", "db", "--parameter", "noequals"}).code ==
        errc::invalid);
  CHECK(request_error({"volume", "snapshot", "create", "db", "--secret", "=x"}).code ==
        errc::invalid);
}

TEST_CASE("request: alloc run refuses a malformed --volume; only alloc run takes a command") {
  CHECK(request_error({"alloc", "run", "--node", "n1", "--volume", "nameless"}).code ==
        errc::invalid);
  auto dashes = request_error({"volume", "status", "--", "x"});
  CHECK(contains(dashes.message, "only `berth alloc run` takes a command after --"));
}

TEST_CASE("request: alloc stop and status") {
  auto stop = request_ok({"alloc", "stop", "web"});
  REQUIRE(stop.command_case() == v1::Request::kAllocStop);
  CHECK(stop.alloc_stop() == "web");
  auto one = request_ok({"alloc", "status", "web"});
  REQUIRE(one.command_case() == v1::Request::kAllocStatus);
  CHECK(one.alloc_status() == "web");
  auto list = request_ok({"-n", "prod", "alloc", "status"});
  REQUIRE(list.command_case() == v1::Request::kAllocList);
  CHECK(list.alloc_list().namespace_() == "prod");
}

TEST_CASE("request: plugin and node status, one or all") {
  CHECK(request_ok({"plugin", "status"}).command_case() == v1::Request::kPluginList);
  auto plugin = request_ok({"plugin", "status", "hostpath"});
  REQUIRE(plugin.command_case() == v1::Request::kPluginStatus);
  CHECK(plugin.plugin_status() == "hostpath");
  CHECK(request_ok({"node", "status"}).command_case() == v1::Request::kNodeList);
  auto node = request_ok({"node", "status", "n1"});
  REQUIRE(node.command_case() == v1::Request::kNodeStatus);
  CHECK(node.node_status() == "n1");
}

TEST_CASE("request: node drain takes a deadline, none, now, or cancels") {
  auto d = request_ok({"node", "drain", "n1"});
  REQUIRE(d.command_case() == v1::Request::kNodeDrain);
  CHECK(d.node_drain().node_id() == "n1");
  CHECK(d.node_drain().deadline_ms() == 3'600'000);  // Nomad's default: 1h
  CHECK_FALSE(d.node_drain().no_deadline());
  CHECK_FALSE(d.node_drain().keep_plugins());
  auto timed = request_ok({"node", "drain", "n1", "--deadline", "1m30s", "--keep-plugins"});
  CHECK(timed.node_drain().deadline_ms() == 90'000);
  CHECK(timed.node_drain().keep_plugins());
  CHECK(request_ok({"node", "drain", "n1", "--no-deadline"}).node_drain().no_deadline());
  auto now = request_ok({"node", "drain", "n1", "--force"});
  CHECK(now.node_drain().deadline_ms() == 0);
  CHECK_FALSE(now.node_drain().no_deadline());
  auto cancel = request_ok({"node", "drain", "n1", "--disable", "--keep-ineligible"});
  CHECK(cancel.node_drain().disable());
  CHECK(cancel.node_drain().keep_ineligible());
  auto bad = request_error({"node", "drain", "n1", "--deadline", "soon"});
  CHECK(bad.code == errc::invalid);
  CHECK(contains(bad.message, "--deadline soon"));
  CHECK(request_error({"node", "drain", "n1", "--deadline", "0s"}).code == errc::invalid);
  // Options that contradict each other, or no node: usage errors.
  CHECK(parse_command({"node", "drain", "n1", "--force", "--no-deadline"}) == exit_usage);
  CHECK(parse_command({"node", "drain", "n1", "--disable", "--force"}) == exit_usage);
  CHECK(parse_command({"node", "drain", "n1", "--keep-ineligible"}) == exit_usage);
  CHECK(parse_command({"node", "drain"}) == exit_usage);
}

TEST_CASE("request: node eligibility needs exactly one of --enable and --disable") {
  auto on = request_ok({"node", "eligibility", "n1", "--enable"});
  REQUIRE(on.command_case() == v1::Request::kNodeEligibility);
  CHECK(on.node_eligibility().node_id() == "n1");
  CHECK(on.node_eligibility().eligible());
  CHECK_FALSE(request_ok({"node", "eligibility", "n1", "--disable"}).node_eligibility().eligible());
  CHECK(request_error({"node", "eligibility", "n1"}).code == errc::invalid);
  CHECK(parse_command({"node", "eligibility", "n1", "--enable", "--disable"}) == exit_usage);
}

TEST_CASE("request: every status command can be answered --stale by the server asked") {
  for (const words& args :
       std::vector<words>{{"volume", "status", "--stale"},
                          {"volume", "status", "db", "--stale"},
                          {"alloc", "status", "--stale", "--state", "running"},
                          {"plugin", "status", "--stale"},
                          {"node", "status", "n1", "--stale"},
                          {"node", "status", "--stale", "--per-page", "2"}}) {
    CAPTURE(args);
    CHECK(request_ok(args).stale());
  }
  CHECK_FALSE(request_ok({"node", "status"}).stale());
}

TEST_CASE("request: plugin fingerprint reports a healthy monolith unless told otherwise") {
  auto r = request_ok({"plugin", "fingerprint", "hostpath", "--node", "n1"});
  REQUIRE(r.command_case() == v1::Request::kPluginFingerprint);
  const auto& f = r.plugin_fingerprint();
  CHECK(f.plugin_id() == "hostpath");
  CHECK(f.node_id() == "n1");
  CHECK(f.type() == v1::PLUGIN_MONOLITH);
  CHECK_FALSE(f.remove());
  CHECK(f.instance().healthy());
  CHECK(f.instance().csi_node_id() == "n1");  // the node's own id when not given
  auto full = request_ok({"plugin", "fingerprint", "hostpath", "--node", "n1", "--type",
                          "controller", "--unhealthy", "--health-description", "no socket",
                          "--remove", "--provider", "hp", "--provider-version", "1.2",
                          "--csi-node-id", "csi-n1", "--controller-publish", "--stage-unstage",
                          "--max-volumes", "7"})
                  .plugin_fingerprint();
  CHECK(full.type() == v1::PLUGIN_CONTROLLER);
  CHECK(full.remove());
  CHECK_FALSE(full.instance().healthy());
  CHECK(full.instance().health_description() == "no socket");
  CHECK(full.instance().provider() == "hp");
  CHECK(full.instance().provider_version() == "1.2");
  CHECK(full.instance().csi_node_id() == "csi-n1");
  CHECK(full.instance().publish_unpublish());
  CHECK(full.instance().stage_unstage());
  CHECK(full.instance().max_volumes() == 7);
}

TEST_CASE("request: operator raft commands") {
  CHECK(request_ok({"operator", "raft", "list-peers"}).raft_list_peers());
  auto remove = request_ok({"operator", "raft", "remove-peer", "s3"});
  REQUIRE(remove.command_case() == v1::Request::kRaftRemovePeer);
  CHECK(remove.raft_remove_peer() == "s3");
  auto any = request_ok({"operator", "raft", "transfer-leadership"});
  REQUIRE(any.command_case() == v1::Request::kRaftTransferLeadership);
  CHECK(any.raft_transfer_leadership().empty());
  CHECK(request_ok({"operator", "raft", "transfer-leadership", "s2"}).raft_transfer_leadership() ==
        "s2");
}

TEST_CASE("request: operator snapshot save asks for a copy; restore sends the file's bytes") {
  CHECK(request_ok({"operator", "snapshot", "save", "/tmp/never-written.snap"}).snapshot_save());
  std::string bytes("snap\0shot", 9);
  temp_file snap(bytes);
  auto restore = request_ok({"operator", "snapshot", "restore", snap.path});
  REQUIRE(restore.command_case() == v1::Request::kSnapshotRestore);
  CHECK(restore.snapshot_restore() == bytes);
  CHECK(request_error({"operator", "snapshot", "restore", "/nonexistent.snap"}).code ==
        errc::invalid);
}

TEST_CASE("request: usage errors, help and the shell send nothing") {
  CHECK(contains(request_error({"volume", "claim", "db"}).message, "--alloc is required"));
  CHECK(contains(request_error({"--timeout", "0", "status"}).message, "--timeout"));
  CHECK(contains(request_error({"plugin", "fingerprint", "p", "--node", "n", "--type", "x"}).message,
                 "--type"));
  CHECK(contains(request_error({"volume", "--help"}).message, "Register, inspect"));
  CHECK(request_error({"shell"}).code == errc::invalid);
  CHECK(request_error({}).code == errc::invalid);
}

TEST_CASE("parse_command: what run_command would run or refuse, without running it") {
  CHECK(parse_command({"volume", "status", "db"}) == exit_ok);
  CHECK(parse_command({"alloc", "run", "--node", "n", "--", "sleep", "1"}) == exit_ok);
  CHECK(parse_command({"volume", "claim", "db"}) == exit_usage);
  CHECK(parse_command({"volume", "status", "--", "db"}) == exit_usage);
}

TEST_CASE("parse_command: event stream takes topics, an index and an until index") {
  CHECK(parse_command({"event", "stream"}) == exit_ok);
  CHECK(parse_command({"event", "stream", "--topic", "volume,claim", "--index", "5",
                       "--until-index", "9"}) == exit_ok);
  CHECK(parse_command({"event", "stream", "--index", "five"}) == exit_usage);
  CHECK(parse_command({"event", "stream", "extra"}) == exit_usage);
}

// --- human output -------------------------------------------------------------

TEST_CASE("render: a node's eligibility and drain progress") {
  v1::Response r;
  auto* n = r.add_nodes();
  n->set_id("n1");
  n->add_plugin_ids("hp");
  n->set_ineligible(true);
  n->mutable_drain()->set_started_at_ms(1000);
  n->mutable_drain()->set_deadline_ms(1000 + 3'600'000);
  n->mutable_drain_progress()->set_allocs_left(2);
  n->mutable_drain_progress()->set_claims_left(3);
  auto text = render_node(r, 61'000);
  CHECK(contains(text, "Eligibility = draining\n"));
  CHECK(contains(text, "Drain       = 2 alloc(s) to stop, 3 claim(s) to release; deadline in 59m0s; "
                       "started 1m ago\n"));
  CHECK(contains(render_node_list(r, 61'000), "n1  unknown  draining"));
  n->mutable_drain()->set_forced(true);
  CHECK(contains(render_node(r, 61'000), "deadline passed: releasing without the node"));
  n->clear_drain();
  n->set_drained_at_ms(1000);
  n->set_plugins_withdrawn(true);
  text = render_node(r, 61'000);
  CHECK(contains(text, "Eligibility = drained\n"));
  CHECK(contains(text, "Drained     = 1m ago\n"));
  CHECK(contains(text, "Plugins     = hp (withdrawn by the drain)\n"));
  n->set_drained_at_ms(0);
  CHECK(contains(render_node(r, 61'000), "Eligibility = ineligible\n"));
}

TEST_CASE("render: lists inside a cell are joined, '-' when empty") {
  v1::Response r;
  auto* n1 = r.add_nodes();
  n1->set_id("n1");
  n1->add_plugin_ids("hp");
  n1->add_plugin_ids("nfs");
  r.add_nodes()->set_id("n2");
  auto nodes = render_node_list(r, 0);
  CHECK(contains(nodes, "hp,nfs"));
  CHECK(contains(nodes, "n2  unknown  eligible     no      -"));
  CHECK(contains(render_node(r, 0), "Plugins     = hp, nfs\n"));

  auto* a = r.add_allocs();
  a->set_id("a1");
  for (const char* word : {"sh", "-c", "x y"}) a->add_command(word);
  auto* data = a->add_volumes();
  data->set_name("data");
  data->set_volume_id("db");
  data->set_read_only(true);
  auto* logs = a->add_volumes();
  logs->set_name("l");
  logs->set_volume_id("logs");
  CHECK(contains(render_alloc_list(r, 0), "data=db:ro,l=logs"));
  CHECK(contains(render_alloc(r, 0), "Command   = sh -c x y\n"));
}

// --- volume init -------------------------------------------------------------

namespace {

// Every key a volume spec has (docs/user-guide.md, "The volume spec").
const words spec_keys = {
    "id",           "name",        "namespace",       "plugin_id",     "external_id",
    "capabilities", "access_mode", "attachment_mode", "mount_options", "fs_type",
    "mount_flags",  "secrets",     "parameters",      "context",       "topology_request",
    "required",     "preferred",   "capacity_min",    "capacity_max",  "snapshot_id",
    "clone_id"};

v1::Volume parsed_example(const std::string& text, spec_use use) {
  auto r = parse_volume_spec(text, use);
  if (auto* problems = std::get_if<std::vector<problem>>(&r)) FAIL(describe("example", *problems));
  return std::get<v1::Volume>(r);
}

// The line that holds `key:` as a key (not inside a comment), or npos.
size_t key_line(const std::vector<std::string>& lines, const std::string& key) {
  for (size_t i = 0; i < lines.size(); ++i) {
    auto at = lines[i].find_first_not_of(" -");
    if (at != std::string::npos && lines[i].compare(at, key.size() + 1, key + ":") == 0) return i;
  }
  return std::string::npos;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("volume init: the YAML example has every key of the spec, each under a comment") {
  auto text = volume_spec_example(spec_format::yaml);
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  for (const auto& key : spec_keys) {
    auto i = key_line(lines, key);
    REQUIRE_MESSAGE(i != std::string::npos, key);
    REQUIRE(i > 0);
    auto above = lines[i - 1].substr(lines[i - 1].find_first_not_of(' '));
    CHECK_MESSAGE(above.rfind("#", 0) == 0, key << " has no comment above it");
  }
}

TEST_CASE("volume init: both examples are taken by volume create as they are, and are the same") {
  auto yaml = parsed_example(volume_spec_example(spec_format::yaml), spec_use::create);
  auto json_text = volume_spec_example(spec_format::json);
  auto doc = nlohmann::json::parse(json_text);
  for (const auto& key : spec_keys)
    if (key != "access_mode" && key != "attachment_mode" && key != "fs_type" &&
        key != "mount_flags" && key != "required" && key != "preferred")
      CHECK_MESSAGE(doc.contains(key), key);
  CHECK(doc["capabilities"][0].contains("access_mode"));
  CHECK(doc["mount_options"].contains("mount_flags"));
  CHECK(doc["topology_request"].contains("preferred"));
  auto json = parsed_example(json_text, spec_use::create);
  CHECK(volume_json(yaml, nullptr) == volume_json(json, nullptr));
  CHECK(yaml.id() == "db");
  CHECK(yaml.capacity_min() == (int64_t{1} << 30));
  CHECK(yaml.secrets().at("example_secret") == "xyzzy");
  CHECK(yaml.external_id().empty());
  CHECK(yaml.snapshot_id().empty());
  CHECK(yaml.clone_id().empty());
  // For volume register, the one key to fill is external_id.
  auto text = volume_spec_example(spec_format::yaml);
  auto at = text.find("\nexternal_id:") + 13;
  text.insert(at, " vol-1");
  CHECK(parsed_example(text, spec_use::registration).external_id() == "vol-1");
  CHECK(std::holds_alternative<std::vector<problem>>(
      parse_volume_spec(volume_spec_example(spec_format::yaml), spec_use::registration)));
}

TEST_CASE("volume init: writes the file, keeps an existing one unless --force, sends nothing") {
  char dir_template[] = "/tmp/berth-init-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  std::string dir = dir_template;
  auto file = dir + "/spec.yaml";
  CHECK(run_command({"volume", "init", "--output", file}) == exit_ok);
  CHECK(read_file(file) == volume_spec_example(spec_format::yaml));
  { std::ofstream(file) << "mine\n"; }
  CHECK(run_command({"volume", "init", "--output", file}) == exit_refused);
  CHECK(read_file(file) == "mine\n");
  CHECK(run_command({"volume", "init", "--output", file, "--json"}) == exit_refused);
  CHECK(run_command({"volume", "init", "--output", file, "--json", "--force"}) == exit_ok);
  CHECK(read_file(file) == volume_spec_example(spec_format::json));
  CHECK(run_command({"volume", "init", "--type", "host", "--output", dir + "/h"}) == exit_usage);
  CHECK(run_command({"volume", "init", "--output", dir + "/no/such/dir/x"}) == exit_usage);
  CHECK(request_error({"volume", "init"}).message == "no command that sends a request");
  std::remove(file.c_str());
  rmdir(dir.c_str());
}
