// Alloc supervision on a client (actors/node_allocs): the stop and report
// decisions, and real commands recorded in a real client.db.
#include "actors/node_allocs.hpp"
#include "tests/test_bins.hpp"

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "actors/clock.hpp"
#include "actors/node_mounts.hpp"
#include "control/lease.hpp"
#include "helpers.hpp"

using namespace berth;
using test::drop_table;
using test::must;
using test::temp_dir;

namespace {

alloc_record record(const std::string& id, int64_t pid, bool exited, int32_t code = 0) {
  alloc_record a;
  a.alloc.set_id(id);
  a.pid = pid;
  a.exited = exited;
  a.exit_code = code;
  return a;
}

v1::Alloc alloc_with(const std::string& id, std::vector<std::string> command) {
  v1::Alloc a;
  a.set_id(id);
  for (auto& c : command) a.add_command(c);
  return a;
}

// The supervisor built beside the tests; with a lease file, it fences.
alloc_supervision supervised(const std::string& lease_file = {}, int64_t kill_timeout_ms = 5000) {
  alloc_supervision s;
  s.binary = berth::test_bins::alloc;
  s.lease_file = lease_file;
  s.kill_timeout_ms = kill_timeout_ms;
  return s;
}

// Writes the lease file as the node actor does (tmp, rename).
void write_lease(const std::string& path, const std::string& text) {
  { std::ofstream(path + ".tmp", std::ios::trunc) << text; }
  REQUIRE(std::rename((path + ".tmp").c_str(), path.c_str()) == 0);
}

bool process_gone(pid_t pid) {
  if (kill(pid, 0) == -1) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  return close != std::string::npos && text.size() > close + 2 && text[close + 2] == 'Z';
}

// Polls until the alloc's command exited (the condition, with a deadline).
bool wait_for_exit(client_store& store, alloc_table& allocs, const std::string& id) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    REQUIRE_FALSE(collect_exits(store, allocs));
    if (allocs.at(id).exited) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

TEST_CASE("allocs: a command is running until its exit is seen") {
  CHECK(command_running(record("a", 42, false)));
  CHECK_FALSE(command_running(record("a", 42, true)));
  CHECK_FALSE(command_running(record("a", 0, false)));  // no command
}

TEST_CASE("allocs: a volume is never unpublished from under the alloc's running command") {
  alloc_table t{{"runs", record("runs", 42, false)},
                {"ended", record("ended", 42, true)},
                {"none", record("none", 0, false)}};
  auto f = refuse_unpublish_under_command(t, "runs", "c1");
  REQUIRE(f);
  CHECK(f->code == errc::unavailable);
  CHECK(f->message.find("alloc 'runs' still runs its command on node 'c1'") == 0);
  CHECK(f->message.find("berth alloc stop runs") != std::string::npos);
  CHECK_FALSE(refuse_unpublish_under_command(t, "ended", "c1"));
  CHECK_FALSE(refuse_unpublish_under_command(t, "none", "c1"));     // a claim without a command
  CHECK_FALSE(refuse_unpublish_under_command(t, "unknown", "c1"));  // forgotten, or never here
}

TEST_CASE("allocs: a stop waits for a running command") {
  alloc_table t{{"a", record("a", 42, false)}};
  CHECK_FALSE(stop_answers_at_once(t, "a", false, false));
  CHECK_FALSE(stop_answers_at_once(t, "a", true, true));
}

TEST_CASE("allocs: a stop of an exited, commandless or unknown alloc answers at once") {
  alloc_table t{{"done", record("done", 42, true, 3)}, {"none", record("none", 0, false)}};
  CHECK(stop_answers_at_once(t, "done", false, false));
  CHECK(stop_answers_at_once(t, "none", false, false));
  CHECK(stop_answers_at_once(t, "unknown", false, false));
  CHECK(exit_code_of(t, "done") == 3);
  CHECK(exit_code_of(t, "none") == 0);
  CHECK(exit_code_of(t, "unknown") == 0);
}

TEST_CASE("allocs: a stop that must unmount what the client still has waits for it") {
  alloc_table t{{"done", record("done", 42, true)}};
  CHECK_FALSE(stop_answers_at_once(t, "done", true, true));
  CHECK(stop_answers_at_once(t, "done", true, false));  // nothing left to unmount
  CHECK(stop_answers_at_once(t, "done", false, true));  // not asked to unmount
}

TEST_CASE("allocs: an exit is reported complete with 0, failed otherwise") {
  auto ok = record("a1", 42, true, 0);
  ok.alloc.set_message("exited with 0");
  auto r = exit_report(ok, "n1", "node-secret-of-n1");
  REQUIRE(r.has_alloc_update());
  CHECK(r.node_secret() == "node-secret-of-n1");
  CHECK(r.alloc_update().id() == "a1");
  CHECK(r.alloc_update().node_id() == "n1");
  CHECK(r.alloc_update().state() == v1::ALLOC_COMPLETE);
  CHECK(r.alloc_update().message() == "the command exited with 0");
  auto bad = record("a2", 42, true, 137);
  bad.alloc.set_message("killed by signal 9");
  r = exit_report(bad, "n1", "node-secret-of-n1");
  CHECK(r.alloc_update().state() == v1::ALLOC_FAILED);
  CHECK(r.alloc_update().exit_code() == 137);
}

TEST_CASE("allocs: a report is done when the leader took it or no longer knows the alloc") {
  CHECK(exit_report_taken(v1::OK));
  CHECK(exit_report_taken(v1::NOT_FOUND));
  CHECK_FALSE(exit_report_taken(v1::UNAVAILABLE));
  CHECK_FALSE(exit_report_taken(v1::INTERNAL));
  CHECK_FALSE(exit_report_taken(v1::REFUSED));
}

TEST_CASE("allocs: polling is needed while anything is left to watch or answer") {
  CHECK_FALSE(needs_polling({}, false, false));
  CHECK(needs_polling({}, true, false));
  CHECK(needs_polling({}, false, true));
  CHECK(needs_polling({{"a", record("a", 42, false)}}, false, false));
  CHECK(needs_polling({{"a", record("a", 0, true)}}, false, false));  // exit to report
  CHECK_FALSE(needs_polling({{"a", record("a", 0, false)}}, false, false));
}

TEST_CASE("allocs: a command runs, its exit code is recorded and survives a restart") {
  temp_dir d;
  auto file = (d.path / "client.db").string();
  {
    auto store_db = must(client_store::open(file));
    auto& store = *store_db;
    alloc_table t;
    REQUIRE_FALSE(start_alloc(store, t, alloc_with("a1", {"sh", "-c", "exit 3"}),
                              (d.path / "allocs").string(), "n1", supervised()));
    REQUIRE(t.count("a1"));
    CHECK(t.at("a1").pid > 0);
    REQUIRE(wait_for_exit(store, t, "a1"));
    CHECK(t.at("a1").exit_code == 3);
  }
  auto store_db = must(client_store::open(file));
  auto& store = *store_db;
  alloc_table loaded;
  REQUIRE_FALSE(load_allocs(store, loaded));
  REQUIRE(loaded.count("a1"));
  CHECK(loaded.at("a1").exited);
  CHECK(loaded.at("a1").exit_code == 3);
  REQUIRE_FALSE(forget_alloc(store, loaded, "a1"));
  alloc_table after;
  REQUIRE_FALSE(load_allocs(store, after));
  CHECK(after.empty());
}

TEST_CASE("allocs: SIGTERM stops a command's process group") {
  temp_dir d;
  auto store_db = must(client_store::open((d.path / "client.db").string()));
  auto& store = *store_db;
  alloc_table t;
  REQUIRE_FALSE(
      start_alloc(store, t, alloc_with("a1", {"sleep", "60"}), (d.path / "allocs").string(), "n1",
                  supervised()));
  signal_alloc(t, "a1", false);
  REQUIRE(wait_for_exit(store, t, "a1"));
  CHECK(t.at("a1").exit_code != 0);
}

TEST_CASE("allocs: an alloc that cannot be recorded is a failure naming it, not an exception") {
  temp_dir d;
  auto file = (d.path / "client.db").string();
  auto store_db = must(client_store::open(file));
  auto& store = *store_db;
  drop_table(file, "allocs");
  alloc_table t;
  auto f =
      start_alloc(store, t, alloc_with("a1", {"sleep", "60"}), (d.path / "allocs").string(), "n1",
                  supervised());
  REQUIRE(f);
  CHECK(f->code == errc::internal);
  CHECK(f->message.find("alloc 'a1'") != std::string::npos);
  CHECK(f->message.find(file) != std::string::npos);
  CHECK(t.empty());
  alloc_table none;
  CHECK(load_allocs(store, none));  // the damage shows as a failure, not an exception
}

TEST_CASE("allocs: a command that cannot start names the node and the alloc") {
  temp_dir d;
  auto store_db = must(client_store::open((d.path / "client.db").string()));
  auto& store = *store_db;
  alloc_table t;
  // The alloc directory's parent is a file: it cannot be created.
  auto blocker = d.path / "file";
  { std::ofstream(blocker.string()) << "x"; }
  auto f = start_alloc(store, t, alloc_with("a1", {"true"}), blocker.string(), "n1", supervised());
  REQUIRE(f);
  CHECK(f->message.find("node 'n1' could not start alloc 'a1'") == 0);
  CHECK(t.empty());
}

// The guard that outlives the agent (control/lease.hpp): berth-alloc runs
// the command and fences it on the lease file alone, with nobody else
// watching the lease (no node actor, no lease guard thread here).

TEST_CASE("allocs: the supervisor stops its writer when the lease file runs out") {
  temp_dir d;
  auto store_db = must(client_store::open((d.path / "client.db").string()));
  auto& store = *store_db;
  auto lease = (d.path / "lease").string();
  auto boot = boot_id_text();
  REQUIRE_FALSE(boot.empty());
  auto first_until = steady_ms() + 1000;
  write_lease(lease, lease_file_text(boot, first_until));
  alloc_table t;
  // The supervisor reads the lease before it starts the command: once the
  // command runs, it holds the first end.
  REQUIRE_FALSE(start_alloc(store, t, alloc_with("w", {"sh", "-c", "touch started; exec sleep 60"}),
                            (d.path / "allocs").string(), "n1", supervised(lease)));
  auto started = d.path / "allocs" / "w" / "started";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!std::filesystem::exists(started) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(std::filesystem::exists(started));
  // A renewal before the end: the writer runs on past the first end (the
  // supervisor reads the file again once what it held ran out).
  auto second_until = steady_ms() + 3000;
  write_lease(lease, lease_file_text(boot, second_until));
  while (steady_ms() < first_until + 300)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE_FALSE(collect_exits(store, t));
  if (steady_ms() < second_until - 200) CHECK_FALSE(t.at("w").exited);  // else too late to tell
  // A restarted agent's older record (or a lapse it computed from it)
  // never shortens a lease that holds.
  write_lease(lease, lease_file_text(boot, steady_ms() - 1));
  auto looked = steady_ms() + 300;
  while (steady_ms() < looked) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE_FALSE(collect_exits(store, t));
  if (steady_ms() < second_until - 200) CHECK_FALSE(t.at("w").exited);
  // Nobody renews it: SIGTERM once it runs out, not before.
  REQUIRE(wait_for_exit(store, t, "w"));
  CHECK(steady_ms() >= second_until);
  CHECK(t.at("w").exit_code == 128 + SIGTERM);
  std::ifstream err((d.path / "allocs" / "w" / "stderr").string());
  std::string said((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  CHECK(said.find("the client's lease ran out") != std::string::npos);
  std::ifstream exit_file(t.at("w").exit_file);
  int code = 0;
  CHECK((exit_file >> code));
  CHECK(code == 128 + SIGTERM);
}

TEST_CASE("allocs: a supervisor fences at once on no lease file, another boot's, or none granted") {
  for (std::string text : {std::string("-"), std::string("another-boot 99999999999\n"),
                           boot_id_text() + " 0\n", boot_id_text() + " 12"}) {
    CAPTURE(text);
    temp_dir d;
    auto store_db = must(client_store::open((d.path / "client.db").string()));
    auto& store = *store_db;
    auto lease = (d.path / "lease").string();
    if (text != "-") write_lease(lease, text);
    alloc_table t;
    REQUIRE_FALSE(start_alloc(store, t, alloc_with("w", {"sleep", "60"}),
                              (d.path / "allocs").string(), "n1", supervised(lease)));
    REQUIRE(wait_for_exit(store, t, "w"));
    CHECK(t.at("w").exit_code == 128 + SIGTERM);
  }
}

TEST_CASE("allocs: a writer that ignores SIGTERM is killed after the kill timeout") {
  temp_dir d;
  auto store_db = must(client_store::open((d.path / "client.db").string()));
  auto& store = *store_db;
  auto lease = (d.path / "lease").string();
  write_lease(lease, lease_file_text(boot_id_text(), steady_ms() + 5000));
  alloc_table t;
  // sh ignores SIGTERM, and so does the sleep it starts (an ignored signal
  // stays ignored across exec): only SIGKILL ends them.  It says when it
  // ignores it, which must be before the lease runs out for the test to
  // tell (under ASan on a busy machine a 200 ms lease ran out before sh
  // had set its trap).
  REQUIRE_FALSE(start_alloc(store, t,
                            alloc_with("w", {"sh", "-c",
                                             "trap '' TERM; touch ignoring; sleep 60; :"}),
                            (d.path / "allocs").string(), "n1", supervised(lease, 300)));
  auto ignoring = d.path / "allocs" / "w" / "ignoring";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!std::filesystem::exists(ignoring) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(std::filesystem::exists(ignoring));
  REQUIRE(wait_for_exit(store, t, "w"));
  CHECK(t.at("w").exit_code == 128 + SIGKILL);
  std::ifstream exit_file(t.at("w").exit_file);
  int code = 0;
  CHECK((exit_file >> code));
  CHECK(code == 128 + SIGKILL);
}

TEST_CASE("allocs: an alloc without a lease file is never fenced, and its command dies with its "
          "supervisor") {
  temp_dir d;
  auto store_db = must(client_store::open((d.path / "client.db").string()));
  auto& store = *store_db;
  auto pid_file = (d.path / "pid").string();
  alloc_table t;
  REQUIRE_FALSE(start_alloc(store, t,
                            alloc_with("r", {"sh", "-c",
                                             "echo $$ > " + pid_file + "; exec sleep 60"}),
                            (d.path / "allocs").string(), "n1", supervised()));
  pid_t command = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (command == 0 && std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(pid_file);
    if (!(in >> command)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(command > 0);
  REQUIRE_FALSE(collect_exits(store, t));
  CHECK_FALSE(t.at("r").exited);
  // Only the supervisor is killed (not its group): the command goes with it.
  REQUIRE(kill(static_cast<pid_t>(t.at("r").pid), SIGKILL) == 0);
  REQUIRE(wait_for_exit(store, t, "r"));
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!process_gone(command) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(process_gone(command));
}

TEST_CASE("allocs: a supervisor starts its command only on the agent's go, never when the agent "
          "ends before recording it") {
  // fault.short: a client killed between starting an alloc's supervisor
  // and recording the alloc in client.db left a command running that its
  // restarted client did not know of; the alloc's stop found nothing to
  // stop and its claims were released while the command read on.
  temp_dir d;
  auto started = [&](const std::string& id) { return d.path / ("started-" + id); };
  auto spawn = [&](const std::string& id) {
    auto s = start_alloc_process(alloc_with(id, {"sh", "-c", "touch " + started(id).string()}),
                                 (d.path / "allocs" / id).string(), supervised());
    REQUIRE(s.error.empty());
    REQUIRE(s.start_fd >= 0);
    return s;
  };
  auto ended = [](alloc_spawn& s) {
    int status = 0;
    REQUIRE(waitpid(static_cast<pid_t>(s.pid), &status, 0) == s.pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  // Two supervisors waiting at once: the first's pipe closed without the go
  // ends it, though the second (which must hold no end of the first's pipe)
  // still waits.
  auto a = spawn("a");
  auto b = spawn("b");
  release_alloc_process(a, false);
  CHECK(ended(a) == 125);
  CHECK_FALSE(std::filesystem::exists(started("a")));
  std::ifstream err(d.path / "allocs" / "a" / "stderr");
  std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  CHECK(text.find("is not started") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(started("b")));  // no go yet
  release_alloc_process(b, true);
  CHECK(ended(b) == 0);
  CHECK(std::filesystem::exists(started("b")));
  release_alloc_process(b, true);  // again: nothing
  CHECK(b.start_fd == -1);
  // The go to a supervisor that died meanwhile does not end this process
  // (its SIGPIPE is taken back): the alloc's exit is seen as any other.
  std::signal(SIGPIPE, SIG_DFL);
  auto c = spawn("c");
  REQUIRE(kill(static_cast<pid_t>(c.pid), SIGKILL) == 0);
  int status = 0;
  REQUIRE(waitpid(static_cast<pid_t>(c.pid), &status, 0) == c.pid);
  release_alloc_process(c, true);
  CHECK(c.start_fd == -1);
  CHECK_FALSE(std::filesystem::exists(started("c")));
}

TEST_CASE("allocs: a stop signalled while the supervisor waits for the go reaches the command") {
  // An `alloc stop` right after the go: its SIGTERM to the alloc's group
  // found the supervisor (which blocks it, the signals being for the
  // command) before the command existed, and the command ran on until the
  // SIGKILL after the grace period ("SIGTERM stops a command's process
  // group" failed under load).  Here the SIGTERM is sent once the
  // supervisor blocks it and waits for the go, before the go.
  temp_dir d;
  auto s = start_alloc_process(alloc_with("t", {"sleep", "60"}), (d.path / "allocs" / "t").string(),
                               supervised());
  REQUIRE(s.error.empty());
  auto blocks_sigterm = [&] {
    std::ifstream in("/proc/" + std::to_string(s.pid) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("SigBlk:", 0) == 0)
        return (std::stoull(line.substr(7), nullptr, 16) >> (SIGTERM - 1)) & 1;
    return 0ull;
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!blocks_sigterm() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(blocks_sigterm());
  signal_alloc_process(s.pid, SIGTERM);
  release_alloc_process(s, true);
  // The command ends of the SIGTERM, not of the end of its 60 s: the
  // supervisor records 143 and ends as it did.
  int status = 0;
  auto started_wait = std::chrono::steady_clock::now();
  REQUIRE(waitpid(static_cast<pid_t>(s.pid), &status, 0) == s.pid);
  auto waited = std::chrono::steady_clock::now() - started_wait;
  CHECK(waited < std::chrono::seconds(50));
  CHECK(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGTERM);
  std::ifstream exit_file(s.exit_file);
  int code = 0;
  CHECK((exit_file >> code));
  CHECK(code == 128 + SIGTERM);
}

TEST_CASE("allocs: start_alloc gives the go once the alloc is recorded") {
  temp_dir d;
  auto store_db = must(client_store::open((d.path / "client.db").string()));
  alloc_table t;
  auto marker = (d.path / "ran").string();
  REQUIRE_FALSE(start_alloc(*store_db, t, alloc_with("r", {"sh", "-c", "touch " + marker}),
                            (d.path / "allocs").string(), "n1", supervised()));
  REQUIRE(wait_for_exit(*store_db, t, "r"));
  CHECK(t.at("r").exit_code == 0);
  CHECK(std::filesystem::exists(marker));
  auto recorded = must(store_db->allocs());
  REQUIRE(recorded.size() == 1);
  CHECK(recorded[0].pid == t.at("r").pid);
}
