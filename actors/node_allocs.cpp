#include "actors/node_allocs.hpp"

#include <fstream>

#include <signal.h>

#include <exception>
#include <filesystem>
#include <fstream>

#include "actors/alloc_process.hpp"
#include "actors/node_mounts.hpp"

namespace berth {

bool command_running(const alloc_record& a) {
  return a.pid != 0 && !a.exited;
}

std::optional<failure> refuse_unpublish_under_command(const alloc_table& allocs,
                                                      const std::string& alloc_id,
                                                      const std::string& node_id) {
  auto it = allocs.find(alloc_id);
  if (it == allocs.end() || !command_running(it->second)) return std::nullopt;
  return failure{errc::unavailable,
                 "alloc '" + alloc_id + "' still runs its command on node '" + node_id +
                     "': its volume is not unmounted from under it; the release goes on once "
                     "the command stopped (berth alloc stop " + alloc_id + ")"};
}

bool stop_answers_at_once(const alloc_table& allocs, const std::string& id, bool unmount,
                          bool has_mounts) {
  auto it = allocs.find(id);
  bool running = it != allocs.end() && command_running(it->second);
  return !running && !(unmount && has_mounts);
}

int32_t exit_code_of(const alloc_table& allocs, const std::string& id) {
  auto it = allocs.find(id);
  return it == allocs.end() ? 0 : it->second.exit_code;
}

v1::Request exit_report(const alloc_record& a, const std::string& node_id,
                        const std::string& node_secret) {
  v1::Request req;
  req.set_node_secret(node_secret);
  auto* u = req.mutable_alloc_update();
  u->set_id(a.alloc.id());
  u->set_node_id(node_id);
  u->set_state(a.exit_code == 0 ? v1::ALLOC_COMPLETE : v1::ALLOC_FAILED);
  u->set_exit_code(a.exit_code);
  u->set_message("the command " + a.alloc.message());
  return req;
}

bool exit_report_taken(v1::ErrorCode code) {
  return code == v1::OK || code == v1::NOT_FOUND;
}

bool needs_polling(const alloc_table& allocs, bool stops_waiting, bool calls_waiting) {
  if (stops_waiting || calls_waiting) return true;
  for (const auto& [id, a] : allocs)
    if (a.pid != 0 || a.exited) return true;
  return false;
}

std::optional<failure> load_allocs(client_store& store, alloc_table& allocs) {
  auto read = store.allocs();
  if (!read) return store_failure(store, "read its allocs", read.error());
  for (auto& a : *read) {
    auto id = a.alloc.id();
    allocs.insert_or_assign(std::move(id), std::move(a));
  }
  return std::nullopt;
}

std::optional<failure> start_alloc(client_store& store, alloc_table& allocs, const v1::Alloc& a,
                                   const std::string& alloc_dir, const std::string& node_id,
                                   const alloc_supervision& supervision) {
  alloc_record rec;
  rec.alloc = a;
  alloc_spawn spawned;
  if (!a.command().empty()) {
    auto dir = (std::filesystem::path(alloc_dir) / a.id()).string();
    spawned = start_alloc_process(a, dir, supervision);
    if (!spawned.error.empty())
      return failure{errc::internal, "node '" + node_id + "' could not start alloc '" + a.id() +
                                         "': " + spawned.error};
    rec.pid = spawned.pid;
    rec.exit_file = spawned.exit_file;
  }
  // The supervisor waits for its go until the record (its pid) is durable:
  // a client killed before leaves no command that a restarted one does not
  // know of and could not stop.
  if (auto f = store.put_alloc(rec)) {
    release_alloc_process(spawned, false);
    if (rec.pid) signal_alloc_process(rec.pid, SIGKILL);
    return store_failure(store, "record alloc '" + a.id() + "' (its command was killed)", *f);
  }
  release_alloc_process(spawned, true);
  allocs[a.id()] = std::move(rec);
  return std::nullopt;
}

std::string boot_id_text() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  if (!(in >> id)) return {};
  return id;
}

int64_t current_boot() {
  auto id = boot_id_text();
  if (id.empty()) return 0;
  auto h = static_cast<int64_t>(std::hash<std::string>{}(id) & 0x7fffffffffffffffULL);
  return h == 0 ? 1 : h;
}

std::optional<failure> forget_previous_boot(client_store& store, alloc_table& allocs,
                                            int64_t boot) {
  if (boot == 0) return std::nullopt;
  const char* what = "mark the allocs of the host's previous boot ended";
  auto read = store.meta("boot_id");
  if (!read) return store_failure(store, what, read.error());
  auto recorded = *read;
  if (recorded != 0 && recorded != boot)
    for (auto& [id, a] : allocs) {
      if (!command_running(a)) continue;
      a.exited = true;
      a.exit_code = -1;
      a.alloc.set_message("ended with the host's restart");
      std::ifstream in(a.exit_file);
      int code = 0;
      if (in >> code) {
        a.exit_code = code;
        a.alloc.set_message("exited with " + std::to_string(code));
      }
      if (auto f = store.put_alloc(a)) return store_failure(store, what, *f);
    }
  if (recorded != boot)
    if (auto f = store.set_meta("boot_id", boot)) return store_failure(store, what, *f);
  return std::nullopt;
}

std::optional<failure> collect_exits(client_store& store, alloc_table& allocs) {
  std::optional<failure> first;
  for (auto& [id, a] : allocs) {
    if (!command_running(a)) continue;
    auto ex = check_alloc_process(a.pid, a.exit_file);
    if (!ex.exited) continue;
    a.exited = true;
    a.exit_code = ex.exit_code;
    a.alloc.set_message(ex.how);
    // Kept in memory either way: the exit is reported; after a restart the
    // exit file tells it again.
    if (auto f = store.put_alloc(a); f && !first)
      first = store_failure(store, "record the exit of alloc '" + id + "'", *f);
  }
  return first;
}

std::optional<failure> forget_alloc(client_store& store, alloc_table& allocs,
                                    const std::string& id) {
  if (!allocs.count(id)) return std::nullopt;
  if (auto f = store.delete_alloc(id)) return store_failure(store, "forget alloc '" + id + "'", *f);
  allocs.erase(id);
  return std::nullopt;
}

void signal_alloc(const alloc_table& allocs, const std::string& id, bool kill) {
  auto it = allocs.find(id);
  if (it != allocs.end() && command_running(it->second))
    signal_alloc_process(it->second.pid, kill ? SIGKILL : SIGTERM);
}

}  // namespace berth
