// Spare directories (persistence/spare_dirs.hpp): a claim's directories are
// moved aside when emptied and moved into place for the next publication,
// and nothing that holds a file or a mount is ever moved.
#include "persistence/spare_dirs.hpp"

#include <doctest/doctest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>
#include <vector>

#include "tests/temp_dir.hpp"

using namespace berth;
namespace fs = std::filesystem;

namespace {

struct temp_dir : berth::test::temp_dir {
  temp_dir() : berth::test::temp_dir("berth-spares-") {}
};

size_t entries(const fs::path& dir) {
  size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream f(p);
  f << text;
}

dev_t device_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_dev;
}

}  // namespace

TEST_CASE("spare dirs: emptied directories become spares and the next make reuses them") {
  temp_dir t;
  spare_dirs spares(t.path / ".spare", 16);
  auto stop = t.path / "per-alloc";
  fs::create_directories(stop);
  auto leaf = stop / "a1" / "default" / "v1";
  REQUIRE_FALSE(spares.make(leaf));
  CHECK(fs::is_directory(leaf));
  CHECK(spares.made().created == 3);
  CHECK(spares.made().reused == 0);

  CHECK(spares.remove_empty(leaf, stop) == 3);
  CHECK_FALSE(fs::exists(stop / "a1"));
  CHECK(fs::is_directory(stop));  // the stop stays
  CHECK(spares.kept() == 3);
  CHECK(entries(t.path / ".spare") == 3);

  auto other = stop / "a2" / "default" / "v2";
  REQUIRE_FALSE(spares.make(other));
  CHECK(fs::is_directory(other));
  CHECK(entries(other) == 0);
  CHECK(spares.made().reused == 3);
  CHECK(spares.made().created == 3);
  CHECK(spares.kept() == 0);

  // A directory that exists is fine; one below it is made.
  REQUIRE_FALSE(spares.make(other));
  REQUIRE_FALSE(spares.make(other / "deeper"));
  CHECK(fs::is_directory(other / "deeper"));
}

TEST_CASE("spare dirs: a directory with a file stays, and so does every parent above it") {
  temp_dir t;
  spare_dirs spares(t.path / ".spare", 16);
  auto stop = t.path / "per-alloc";
  auto leaf = stop / "a1" / "default" / "v1";
  REQUIRE_FALSE(spares.make(leaf));
  write(leaf / "data", "written by the volume's user");
  CHECK(spares.remove_empty(leaf, stop) == 0);
  CHECK(fs::exists(leaf / "data"));
  CHECK(spares.kept() == 0);

  // A sibling's removal stops at the parent the first one still uses.
  auto sibling = stop / "a1" / "default" / "v2";
  REQUIRE_FALSE(spares.make(sibling));
  CHECK(spares.remove_empty(sibling, stop) == 1);
  CHECK(fs::is_directory(stop / "a1" / "default"));
  CHECK(fs::exists(leaf / "data"));
  std::ifstream f(leaf / "data");
  std::string text;
  std::getline(f, text);
  CHECK(text == "written by the volume's user");

  // A missing directory ends the walk: nothing above it goes.
  CHECK(spares.remove_empty(stop / "a1" / "default" / "gone", stop) == 0);
  CHECK(fs::is_directory(stop / "a1" / "default"));
}

TEST_CASE("spare dirs: a symlink is not taken for the directory it points to") {
  temp_dir t;
  spare_dirs spares(t.path / ".spare", 16);
  auto real = t.path / "real";
  fs::create_directories(real);
  auto stop = t.path / "per-alloc";
  fs::create_directories(stop);
  fs::create_directory_symlink(real, stop / "link");
  CHECK(spares.remove_empty(stop / "link", stop) == 0);
  CHECK(fs::is_symlink(stop / "link"));
  CHECK(fs::is_directory(real));
  CHECK(spares.kept() == 0);
}

TEST_CASE("spare dirs: past the limit a directory is removed, not kept") {
  temp_dir t;
  spare_dirs spares(t.path / ".spare", 2);
  auto stop = t.path / "per-alloc";
  auto leaf = stop / "a" / "b" / "c";
  REQUIRE_FALSE(spares.make(leaf));
  CHECK(spares.remove_empty(leaf, stop) == 3);
  CHECK(spares.kept() == 2);
  CHECK(entries(t.path / ".spare") == 2);
  CHECK_FALSE(fs::exists(stop / "a"));
}

TEST_CASE("spare dirs: a new process takes the spares an earlier one kept, and nothing else") {
  temp_dir t;
  auto pool = t.path / ".spare";
  auto stop = t.path / "per-alloc";
  {
    spare_dirs first(pool, 16);
    REQUIRE_FALSE(first.make(stop / "a" / "b"));
    CHECK(first.remove_empty(stop / "a" / "b", stop) == 2);
  }
  // Not ours: a name that is no number, and a numbered directory with a file.
  fs::create_directories(pool / "notes");
  fs::create_directories(pool / "77");
  write(pool / "77" / "keep", "x");

  spare_dirs second(pool, 16);
  CHECK(second.kept() == 2);
  REQUIRE_FALSE(second.make(stop / "c" / "d" / "e"));
  CHECK(second.made().reused == 2);
  CHECK(second.made().created == 1);
  CHECK(fs::exists(pool / "77" / "keep"));
  CHECK(fs::is_directory(pool / "notes"));
  // The next spare's name is past every number in the pool.
  CHECK(second.remove_empty(stop / "c" / "d" / "e", stop) == 3);
  CHECK(fs::is_directory(pool / "78"));
}

TEST_CASE("spare dirs: a file where a directory is asked for is an error") {
  temp_dir t;
  spare_dirs spares(t.path / ".spare", 16);
  write(t.path / "file", "x");
  CHECK(spares.make(t.path / "file"));
  CHECK(spares.make(t.path / "file" / "below"));
  CHECK(fs::is_regular_file(t.path / "file"));
}

TEST_CASE("spare dirs: a pool on another filesystem falls back to mkdir and rmdir") {
  temp_dir t;
  fs::path shm = "/dev/shm";
  if (!fs::is_directory(shm) || device_of(shm) == device_of(t.path)) {
    MESSAGE("no second filesystem at /dev/shm: skipped");
    return;
  }
  auto pool = shm / ("berth-spares-test-" + std::to_string(::getpid()));
  spare_dirs spares(pool, 16);
  auto stop = t.path / "per-alloc";
  fs::create_directories(stop);
  REQUIRE_FALSE(spares.make(stop / "a" / "b"));
  CHECK(spares.remove_empty(stop / "a" / "b", stop) == 2);
  CHECK_FALSE(fs::exists(stop / "a"));
  CHECK(spares.kept() == 0);
  REQUIRE_FALSE(spares.make(stop / "a" / "b"));
  CHECK(spares.made().created == 4);
  fs::remove_all(pool);
}

TEST_CASE("spare dirs: a mount point is never moved into the pool") {
  if (::geteuid() != 0) {
    MESSAGE("not root: no bind mount, skipped");
    return;
  }
  temp_dir t;
  spare_dirs spares(t.path / ".spare", 16);
  auto source = t.path / "volume";
  fs::create_directories(source);
  auto stop = t.path / "per-alloc";
  auto target = stop / "a1" / "v1";
  REQUIRE_FALSE(spares.make(target));
  REQUIRE(::mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr) == 0);
  // The source is empty, so the mount point looks empty: rename refuses it.
  CHECK(spares.remove_empty(target, stop) == 0);
  CHECK(fs::is_directory(target));
  CHECK(spares.kept() == 0);
  write(target / "through-the-mount", "x");
  CHECK(fs::exists(source / "through-the-mount"));
  REQUIRE(::umount2(target.c_str(), 0) == 0);
  CHECK(spares.remove_empty(target, stop) == 2);
}

TEST_CASE("spare dirs: threads making and removing chains under one parent never lose a file") {
  temp_dir t;
  spare_dirs spares(t.path / ".spare", 8);
  auto stop = t.path / "per-alloc";
  fs::create_directories(stop);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int n = 0; n < 300; ++n) {
        // Every thread shares "shared"; each has its own leaf.
        auto leaf = stop / "shared" / ("t" + std::to_string(i)) / std::to_string(n % 3);
        if (spares.make(leaf)) {
          ++failures;
          continue;
        }
        auto file = leaf / "data";
        write(file, "x");
        if (!fs::exists(file)) ++failures;
        if (spares.remove_empty(leaf, stop) != 0) ++failures;  // holds a file: stays
        fs::remove(file);
        spares.remove_empty(leaf, stop);
        if (fs::exists(leaf)) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  CHECK(spares.kept() <= 8);
  for (const auto& e : fs::directory_iterator(t.path / ".spare")) CHECK(entries(e.path()) == 0);
  CHECK_FALSE(fs::exists(stop / "shared"));
}
