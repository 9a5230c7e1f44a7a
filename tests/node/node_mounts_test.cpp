// The node's mount decisions (actors/node_mounts): paths, records, what to
// unstage, what a lost alloc leaves to undo, client.db round trips; and
// the calls waiting for a plugin's first probe (actors/node_csi).
#include "actors/node_mounts.hpp"

#include <doctest/doctest.h>

#include "actors/node_csi.hpp"
#include "helpers.hpp"

using namespace berth;
using test::drop_table;
using test::must;
using test::temp_dir;

namespace {

v1::NodeVolumeRequest request(const std::string& alloc, const std::string& vol = "db") {
  v1::NodeVolumeRequest r;
  r.set_plugin_id("hp");
  r.set_alloc_id(alloc);
  r.mutable_volume()->set_id(vol);
  r.mutable_volume()->set_namespace_("prod");
  r.mutable_volume()->set_external_id("ext-" + vol);
  (*r.mutable_volume()->mutable_secrets())["token"] = "s3cret";
  r.set_access_mode(v1::SINGLE_NODE_WRITER);
  r.set_attachment_mode(v1::FILE_SYSTEM);
  return r;
}

mount_table table_of(std::initializer_list<v1::NodeVolumeRequest> rs, bool staged = true) {
  mount_table t;
  for (const auto& r : rs) {
    auto m = record_of(r, paths_of("/csi", r), staged, 1);
    t.emplace(key_of(m), m);
  }
  return t;
}

}  // namespace

TEST_CASE("mounts: staging is per volume and mode, publication per alloc") {
  auto r = request("a1");
  auto p = paths_of("/var/lib/berth/csi", r);
  CHECK(p.staging == "/var/lib/berth/csi/hp/staging/prod/db/single-node-writer-file-system");
  CHECK(p.target == "/var/lib/berth/csi/hp/per-alloc/a1/prod/db/single-node-writer-file-system");
  auto other = paths_of("/var/lib/berth/csi", request("a2"));
  CHECK(other.staging == p.staging);
  CHECK(other.target != p.target);
  r.set_attachment_mode(v1::BLOCK_DEVICE);
  CHECK(paths_of("/var/lib/berth/csi", r).staging != p.staging);
}

TEST_CASE("mounts: a publication record keeps no secret") {
  auto r = request("a1");
  auto m = record_of(r, paths_of("/csi", r), true, 42);
  CHECK(m.request.volume().secrets().empty());
  CHECK(r.volume().secrets().at("token") == "s3cret");  // the request itself is untouched
  CHECK(m.published_at_ms == 42);
  CHECK(m.alloc_id == "a1");
  CHECK(m.ns == "prod");
  CHECK(m.volume_id == "db");
  CHECK(m.plugin_id == "hp");
  CHECK(key_of(m) == key_of(r));
}

TEST_CASE("mounts: an unstaged publication records no staging path") {
  auto r = request("a1");
  CHECK(record_of(r, paths_of("/csi", r), false, 1).staging_path.empty());
  CHECK_FALSE(record_of(r, paths_of("/csi", r), true, 1).staging_path.empty());
}

TEST_CASE("mounts: published already only when recorded at that target and present") {
  auto r = request("a1");
  auto t = table_of({r});
  auto p = paths_of("/csi", r);
  CHECK(published_already(t, r, p, true));
  CHECK_FALSE(published_already(t, r, p, false));  // recorded, but gone from disk
  CHECK_FALSE(published_already({}, r, p, true));  // on disk, but not ours
  auto moved = p;
  moved.target = "/elsewhere";
  CHECK_FALSE(published_already(t, r, moved, true));
}

TEST_CASE("mounts: a publication is recorded before it is asked, with its staging") {
  // A NodeStage done before a failed NodePublish (or before the client
  // died) leaves this record: the claim's undoing unstages from it.
  auto r = request("a1");
  auto p = paths_of("/csi", r);
  auto intent = intent_of(r, p);
  CHECK(intent.published_at_ms == 0);
  CHECK(intent.staging_path == p.staging);
  CHECK(intent.target_path == p.target);
  CHECK(intent.request.volume().secrets().empty());
  mount_table t{{key_of(intent), intent}};
  // Asked, not confirmed: a repeat publishes again.
  CHECK_FALSE(published_already(t, r, p, true));
  auto u = unmounts_of(t, "a1");
  REQUIRE(u.size() == 1);
  CHECK(u[0].unstage);
  // It uses the staging: another alloc's unpublish leaves it staged.
  CHECK(staging_in_use(t, p.staging, key_of(request("a2"))));
}

TEST_CASE("mounts: the last publication out of a staging unstages it") {
  // Unstaged together with the unpublish: nothing more to do.
  CHECK_FALSE(unstage_last_out(true, false));
  CHECK_FALSE(unstage_last_out(true, true));
  // Left to others when asked: unstage once none uses it, never while one does.
  CHECK(unstage_last_out(false, false));
  CHECK_FALSE(unstage_last_out(false, true));
}

TEST_CASE("mounts: an alloc starts only on the publications it was given") {
  auto alloc = [](std::initializer_list<std::pair<const char*, const char*>> vols) {
    v1::Alloc a;
    a.set_id("a1");
    a.set_namespace_("prod");
    for (auto [id, path] : vols) {
      auto* v = a.add_volumes();
      v->set_volume_id(id);
      v->set_published_path(path);
    }
    return a;
  };
  auto t = table_of({request("a1", "db"), request("a1", "logs"), request("a2", "cache")});
  std::set<mount_key> none;
  using list = std::vector<std::string>;
  CHECK(unpublished_volumes(t, none, alloc({})).empty());
  CHECK(unpublished_volumes(t, none, alloc({{"db", "/p/db"}, {"logs", "/p/logs"}})).empty());
  // Claimed where no berth client published it: nothing to check.
  CHECK(unpublished_volumes(t, none, alloc({{"other", ""}})).empty());
  // Not recorded for this alloc (another alloc's publication does not count).
  CHECK(unpublished_volumes(t, none, alloc({{"db", "/p/db"}, {"cache", "/p/c"}})) ==
        list{"cache"});
  CHECK(unpublished_volumes({}, none, alloc({{"db", "/p/db"}, {"logs", "/p/l"}})) ==
        list{"db", "logs"});
  // Being unmounted (the fence took it) or only asked, not yet published.
  std::set<mount_key> unmounting{{"a1", "prod", "logs"}};
  CHECK(unpublished_volumes(t, unmounting, alloc({{"db", "/p/db"}, {"logs", "/p/l"}})) ==
        list{"logs"});
  auto asked = t;
  asked.at({"a1", "prod", "db"}).published_at_ms = 0;
  CHECK(unpublished_volumes(asked, none, alloc({{"db", "/p/db"}})) == list{"db"});
  // Another namespace's volume of the same name is not this one.
  auto a = alloc({{"db", "/p/db"}});
  a.set_namespace_("dev");
  CHECK(unpublished_volumes(t, none, a) == list{"db"});
}

TEST_CASE("mounts: a staging shared with another alloc is in use") {
  auto t = table_of({request("a1"), request("a2")});
  auto staging = paths_of("/csi", request("a1")).staging;
  CHECK(staging_in_use(t, staging, key_of(request("a1"))));
  auto alone = table_of({request("a1")});
  CHECK_FALSE(staging_in_use(alone, staging, key_of(request("a1"))));
  CHECK_FALSE(staging_in_use(t, "/csi/hp/staging/prod/other/x", key_of(request("a1"))));
}

TEST_CASE("mounts: unstage when the plugin stages and no other record uses the staging") {
  CHECK(unstage_after_unpublish(true, false));
  CHECK_FALSE(unstage_after_unpublish(false, false));
  CHECK_FALSE(unstage_after_unpublish(true, true));
}

TEST_CASE("mounts: a lost alloc's publications are undone, unstaging what only it used") {
  auto t = table_of({request("a1", "db"), request("a1", "logs"), request("a2", "logs")});
  CHECK(has_mounts(t, "a1"));
  CHECK_FALSE(has_mounts(t, "a3"));
  auto u = unmounts_of(t, "a1");
  REQUIRE(u.size() == 2);
  for (const auto& x : u) {
    CHECK(std::get<0>(x.key) == "a1");
    // "logs" is also staged for a2: it stays staged.
    CHECK(x.unstage == (std::get<2>(x.key) == "db"));
  }
  CHECK(unmounts_of(t, "a3").empty());
}

TEST_CASE("mounts: a publication of an unstaged plugin is never unstaged") {
  auto t = table_of({request("a1")}, false);
  auto u = unmounts_of(t, "a1");
  REQUIRE(u.size() == 1);
  CHECK_FALSE(u[0].unstage);
}

TEST_CASE("mounts: records survive in client.db and are forgotten there first") {
  temp_dir d;
  auto file = (d.path / "client.db").string();
  mount_table t;
  {
    auto store_db = must(client_store::open(file));
    auto& store = *store_db;
    auto r = request("a1");
    REQUIRE_FALSE(save_mount(store, t, record_of(r, paths_of("/csi", r), true, 7)));
    REQUIRE_FALSE(
        save_mount(store, t, record_of(request("a2"), paths_of("/csi", request("a2")), true, 8)));
    CHECK(t.size() == 2);
    REQUIRE_FALSE(forget_mount(store, t, key_of(request("a2"))));
    CHECK(t.size() == 1);
  }
  auto again_db = must(client_store::open(file));
  auto& again = *again_db;
  mount_table loaded;
  REQUIRE_FALSE(load_mounts(again, loaded));
  REQUIRE(loaded.size() == 1);
  CHECK(loaded.begin()->second.target_path == paths_of("/csi", request("a1")).target);
  CHECK(loaded.begin()->second.request.volume().secrets().empty());
}

TEST_CASE("mounts: a client.db that cannot be written is a failure naming it, not an exception") {
  temp_dir d;
  auto file = (d.path / "client.db").string();
  auto store_db = must(client_store::open(file));
  auto& store = *store_db;
  mount_table t;
  auto r = request("a1");
  REQUIRE_FALSE(save_mount(store, t, record_of(r, paths_of("/csi", r), true, 1)));
  drop_table(file, "mounts");
  auto f = save_mount(store, t, record_of(request("a2"), paths_of("/csi", request("a2")), true, 1));
  REQUIRE(f);
  CHECK(f->code == errc::internal);
  CHECK(f->message.find(file) != std::string::npos);
  CHECK(f->message.find("alloc 'a2'") != std::string::npos);
  CHECK(f->message.find("published, but") == 0);
  CHECK(t.size() == 1);  // not in the table either: the record and the table agree
  auto g = forget_mount(store, t, key_of(r));
  REQUIRE(g);
  CHECK(g->message.find("unpublished, but") == 0);
  CHECK(t.size() == 1);  // still recorded: a retried unpublish finds it
  mount_table loaded;
  CHECK(load_mounts(store, loaded));
}

TEST_CASE("waiting_calls: a plugin's calls go in order once it is ready, others keep waiting") {
  waiting_calls w;
  std::vector<std::string> ran;
  auto call = [&](std::string plugin, int64_t deadline, std::string name) {
    return waiting_calls::call{plugin, deadline, [&ran, name] { ran.push_back(name); },
                               [](caf::error) {}};
  };
  w.add(call("a", 100, "a1"));
  w.add(call("b", 100, "b1"));
  w.add(call("a", 100, "a2"));
  for (auto& c : w.ready("a")) c.go();
  CHECK(ran == std::vector<std::string>{"a1", "a2"});
  CHECK_FALSE(w.empty());
  CHECK(w.ready("a").empty());
  CHECK(w.ready("b").size() == 1);
  CHECK(w.empty());
}

TEST_CASE("waiting_calls: calls past their deadline are taken out to fail") {
  waiting_calls w;
  w.add({"a", 100, [] {}, [](caf::error) {}});
  w.add({"a", 200, [] {}, [](caf::error) {}});
  CHECK(w.expired(99).empty());
  auto late = w.expired(100);
  REQUIRE(late.size() == 1);
  CHECK(late[0].deadline_ms == 100);
  CHECK(w.expired(150).empty());
  CHECK(w.expired(1000).size() == 1);
  CHECK(w.empty());
}

TEST_CASE(
    "mounts: queued writes are committed together, and a failed commit leaves the table as the "
    "disk") {
  temp_dir d;
  auto file = (d.path / "client.db").string();
  mount_table t;
  {
    auto store_db = must(client_store::open(file));
    auto& store = *store_db;
    auto r1 = request("a1");
    auto r2 = request("a2");
    // The node's group commit: each write applied to the table when queued,
    // then all written in one transaction.
    std::vector<mount_write> batch{{key_of(r1), intent_of(r1, paths_of("/csi", r1)), {}},
                                   {key_of(r2), record_of(r2, paths_of("/csi", r2), true, 5), {}},
                                   {key_of(r1), record_of(r1, paths_of("/csi", r1), true, 6), {}}};
    for (auto& w : batch) apply_mount_write(t, w);
    CHECK(t.size() == 2);
    CHECK_FALSE(batch[0].before);
    REQUIRE(batch[2].before);
    CHECK(batch[2].before->published_at_ms == 0);  // the intent it replaced
    REQUIRE_FALSE(commit_mount_writes(store, t, batch));

    std::vector<mount_write> forget{{key_of(r2), std::nullopt, {}}};
    apply_mount_write(t, forget[0]);
    CHECK(t.size() == 1);
    REQUIRE_FALSE(commit_mount_writes(store, t, forget));
  }
  auto again_db = must(client_store::open(file));
  mount_table loaded;
  REQUIRE_FALSE(load_mounts(*again_db, loaded));
  REQUIRE(loaded.size() == 1);
  CHECK(std::get<0>(loaded.begin()->first) == "a1");
  CHECK(loaded.begin()->second.published_at_ms == 6);
  CHECK(loaded.begin()->second.target_path == t.begin()->second.target_path);

  // A commit that fails puts nothing on disk and the table back as it was.
  auto before = t;
  auto r3 = request("a3");
  std::vector<mount_write> failing{{key_of(r3), intent_of(r3, paths_of("/csi", r3)), {}},
                                   {key_of(request("a1")), std::nullopt, {}}};
  for (auto& w : failing) apply_mount_write(t, w);
  CHECK(t.size() == 1);
  CHECK(t.count(key_of(r3)) == 1);
  drop_table(file, "mounts");
  auto f = commit_mount_writes(*again_db, t, failing);
  REQUIRE(f);
  CHECK(f->code == errc::internal);
  CHECK(f->message.find("published, but") == 0);
  CHECK(f->message.find("alloc 'a3'") != std::string::npos);
  CHECK(f->message.find("1 more") != std::string::npos);
  CHECK(f->message.find(file) != std::string::npos);
  REQUIRE(t.size() == before.size());
  CHECK(t.begin()->first == before.begin()->first);
  CHECK(t.begin()->second.published_at_ms == before.begin()->second.published_at_ms);
}
