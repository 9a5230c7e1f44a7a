// Helpers of the node tests: a temporary directory, and breaking a
// client.db behind its store's back (as a damaged file would).
#pragma once
#include <doctest/doctest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/persistence_values.hpp"

namespace berth::test {

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    char tmpl[] = "/tmp/berth-node-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  // Leaves nothing behind: the alloc commands started under it (each in a
  // process group of its own) are killed and what berth-hostpath mounted
  // under it is unmounted (lazily, innermost first) before it is removed.
  ~temp_dir() {
    std::error_code ec;
    auto prefix = path.string() + "/";
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      auto name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::error_code rc;
      auto cwd = std::filesystem::read_symlink(e.path() / "cwd", rc).string();
      if (rc || cwd.rfind(prefix, 0) != 0) continue;
      auto pid = static_cast<pid_t>(std::stol(name));
      if (auto pgid = ::getpgid(pid); pgid > 0 && pgid != ::getpgrp()) ::kill(-pgid, SIGKILL);
    }
    std::vector<std::string> mounts;
    std::ifstream in("/proc/self/mounts");
    std::string dev, at, rest;
    while (in >> dev >> at && std::getline(in, rest))
      if (at.rfind(prefix, 0) == 0) mounts.push_back(at);
    for (auto it = mounts.rbegin(); it != mounts.rend(); ++it) ::umount2(it->c_str(), MNT_DETACH);
    std::filesystem::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

inline void drop_table(const std::string& file, const std::string& table) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(file.c_str(), &db) == SQLITE_OK);
  auto sql = "DROP TABLE " + table;
  CHECK(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
}

}  // namespace berth::test
