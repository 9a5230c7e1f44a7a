// control/views: the read views (answer_read): secrets redacted, unknown
// objects named with the fix, and the list commands paged in key order with
// filters and namespaces.
#include "control/views.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "fixtures.hpp"

using namespace berth;
using namespace berth::test;

TEST_CASE("views_redact_secrets_and_name_the_fix_for_unknown_objects") {
  catalog c;
  auto v = make_volume("db");
  (*v.mutable_secrets())["token"] = "s3cr3t";
  commit(c, {upsert_change(v), upsert_change(controller_plugin({{"n1", true}}))});
  v1::Request req;
  req.mutable_volume_status()->set_id("db");
  auto none = [](const std::string&) -> int64_t { return 0; };
  auto r = answer_read(c, req, none);
  REQUIRE(r);
  REQUIRE(r->volumes_size() == 1);
  CHECK(r->volumes(0).secrets().empty());
  CHECK(r->DebugString().find("s3cr3t") == std::string::npos);
  CHECK(r->plugins_size() == 1);
  req.mutable_volume_status()->set_id("nope");
  auto missing = answer_read(c, req, none);
  CHECK(missing->error().code() == v1::NOT_FOUND);
  CHECK(missing->error().message().find("berth volume status") != std::string::npos);
  req.mutable_alloc_stop()->assign("x");
  CHECK_FALSE(answer_read(c, req, none));
}

TEST_CASE("lists_are_paged_in_key_order_with_filters_and_namespaces") {
  catalog c;
  std::vector<v1::Change> changes;
  for (int i = 0; i < 25; ++i) {
    auto v = make_volume("v" + std::string(i < 10 ? "0" : "") + std::to_string(i));
    v.set_plugin_id(i % 2 == 0 ? "even" : "odd");
    changes.push_back(upsert_change(v));
  }
  auto other = make_volume("zz");
  other.set_namespace_("prod");
  changes.push_back(upsert_change(other));
  commit(c, changes);
  auto list = [&](const std::string& ns, const std::string& flt, uint32_t per_page,
                  const std::string& token) {
    v1::Request req;
    auto* q = req.mutable_volume_list();
    q->set_namespace_(ns);
    q->set_filter(flt);
    q->set_per_page(per_page);
    q->set_page_token(token);
    return *answer_read(c, req, [](const std::string&) { return int64_t{0}; });
  };
  // Every page in order, no duplicate, no gap, across pages of 4.
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    auto r = list("default", "", 4, token);
    REQUIRE(r.error().code() == v1::OK);
    for (const auto& v : r.volumes()) seen.push_back(v.id());
    token = r.next_page_token();
    ++pages;
  } while (!token.empty());
  CHECK(pages == 7);
  REQUIRE(seen.size() == 25);
  for (size_t i = 1; i < seen.size(); ++i) CHECK(seen[i - 1] < seen[i]);
  // The last full page names no next page when nothing follows.
  CHECK(list("default", "", 25, "").next_page_token().empty());
  CHECK(list("default", "", 24, "").next_page_token() == "default/v23");
  // Filters count toward the page, not the objects skipped.
  auto odd = list("default", "plugin_id == odd", 5, "");
  REQUIRE(odd.volumes_size() == 5);
  CHECK(odd.volumes(4).id() == "v09");
  auto rest = list("default", "plugin_id == odd", 0, odd.next_page_token());
  CHECK(rest.volumes_size() == 7);
  // Namespaces: one, or every one ("").
  CHECK(list("prod", "", 0, "").volumes_size() == 1);
  CHECK(list("", "", 0, "").volumes_size() == 26);
  CHECK(list("prod", "", 0, "default/v03").volumes_size() == 1);  // a token of another namespace
  CHECK(list("default", "", 0, "prod/zz").volumes_size() == 0);
  // A bad filter is an error naming it.
  CHECK(list("default", "plugin_id ==", 0, "").error().code() == v1::INVALID);
}

TEST_CASE("list_reads_carry_their_tables_index_even_empty_and_a_volume_its_claims_allocs") {
  catalog c;
  auto none = [](const std::string&) -> int64_t { return 0; };
  v1::Request list;
  list.mutable_volume_list();
  v1::Request plugins;
  plugins.mutable_plugin_list();
  CHECK(answer_read(c, list, none)->index() == 0);
  auto v = make_volume("db");
  auto* claim = v.add_claims();
  claim->set_alloc_id("a1");
  claim->set_node_id("n1");
  claim->set_state(v1::CLAIM_TAKEN);
  v1::Alloc a;
  a.set_id("a1");
  a.set_node_id("n1");
  commit(c, {upsert_change(v), upsert_change(a)});                // index 1
  commit(c, {upsert_change(controller_plugin({{"n1", true}}))});  // 2
  commit(c, {upsert_change(make_node("n1"))});                    // 3: neither table
  CHECK(answer_read(c, list, none)->index() == 1);
  CHECK(answer_read(c, plugins, none)->index() == 2);
  v1::Request status;
  status.mutable_volume_status()->set_id("db");
  auto r = answer_read(c, status, none);
  REQUIRE(r->allocs_size() == 1);
  CHECK(r->allocs(0).id() == "a1");
  // The last volume gone: an empty list at the deregistration's index.
  commit(c, {volume_delete_change("default", "db")});  // 4
  auto empty = answer_read(c, list, none);
  CHECK(empty->volumes_size() == 0);
  CHECK(empty->index() == 4);
  commit(c, {plugin_delete_change("p")});  // 5
  CHECK(answer_read(c, plugins, none)->index() == 5);
}
