// The interactive shell's pure parts: line splitting and completion.
#include <doctest/doctest.h>

#include "apps/berth/commands.hpp"
#include "apps/berth/line.hpp"

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
  REQUIRE_MESSAGE(std::holds_alternative<std::string>(r), line);
  return std::get<std::string>(r);
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
  CHECK(real("volume ", "") ==
        words{"claim", "create", "delete", "deregister", "detach", "register", "release",
              "status"});
  CHECK(real("alloc ", "") == words{"run", "status", "stop"});
  CHECK(real("alloc stop ", "") == words{"web-1", "web-2"});
  CHECK(real("alloc run --node ", "") == words{"n1", "n2"});
  CHECK(real("volume detach db ", "") == words{"n1", "n2"});
  CHECK(real("volume release ", "") == words{"data", "db", "logs"});
  CHECK(real("volume release db --alloc ", "") == words{"web-1", "web-2"});
  CHECK(real("volume claim db ", "--a") ==
        words{"--access-mode", "--address", "--alloc", "--attachment-mode"});
  CHECK(real("plugin fingerprint hostpath --node ", "") == words{"n1", "n2"});
  CHECK(real("plugin fingerprint ", "") == words{"hostpath"});
  CHECK(real("node status ", "") == words{"n1", "n2"});
  CHECK(complete(tree, "volume create ", "", ids).filenames);
}

TEST_CASE("summary: the first clause of a description") {
  CHECK(summary("Register a volume from a spec file (JSON or YAML; - reads stdin), or update") ==
        "Register a volume from a spec file");
  CHECK(summary("Show one volume, or list every volume") == "Show one volume");
  CHECK(summary("Release an alloc's claim on a volume") == "Release an alloc's claim on a volume");
  CHECK(summary("Remove a volume. The storage stays.") == "Remove a volume");
}
