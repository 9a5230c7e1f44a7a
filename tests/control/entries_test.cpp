// control/entries: the one entry builder (the changes in order, the format
// version) and the stamping of a change's indexes.
#include "control/entries.hpp"

#include <doctest/doctest.h>

#include "fixtures.hpp"

using namespace berth;
using namespace berth::test;

TEST_CASE("make_entry_keeps_changes_in_order_with_the_format_version") {
  auto e = make_entry(
      {upsert_change(make_volume("a")), alloc_delete_change("x"), plugin_delete_change("p")});
  CHECK(e.format_version() == entry_format_version);
  REQUIRE(e.changes_size() == 3);
  CHECK(e.changes(0).volume_upsert().id() == "a");
  CHECK(e.changes(1).alloc_delete() == "x");
  CHECK(e.changes(2).plugin_delete() == "p");
}

TEST_CASE("stamp_sets_create_index_once_and_modify_index_always") {
  auto c = upsert_change(make_volume("a"));
  stamp(c, 7);
  CHECK(c.volume_upsert().create_index() == 7);
  CHECK(c.volume_upsert().modify_index() == 7);
  stamp(c, 9);
  CHECK(c.volume_upsert().create_index() == 7);
  CHECK(c.volume_upsert().modify_index() == 9);
}
