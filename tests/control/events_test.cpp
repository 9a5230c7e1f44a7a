// The event stream's pure parts (control/events): the events each applied
// change gives, and the bounded journal the servers answer from.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "control/catalog.hpp"
#include "control/entries.hpp"
#include "control/events.hpp"
#include "messages/codec.hpp"

using namespace berth;

namespace {

v1::Volume volume(const std::string& id, const std::string& ns = "default") {
  v1::Volume v;
  v.set_id(id);
  v.set_namespace_(ns);
  v.set_plugin_id("p");
  v.set_external_id("ext-" + id);
  auto* cap = v.add_capabilities();
  cap->set_access_mode(v1::SINGLE_NODE_WRITER);
  cap->set_attachment_mode(v1::FILE_SYSTEM);
  return v;
}

v1::Claim claim(const std::string& alloc, v1::ClaimState state = v1::CLAIM_TAKEN) {
  v1::Claim c;
  c.set_alloc_id(alloc);
  c.set_node_id("n1");
  c.set_state(state);
  c.set_mode(v1::CLAIM_WRITE);
  return c;
}

v1::Node node(const std::string& id, v1::NodeStatus status) {
  v1::Node n;
  n.set_id(id);
  n.set_status(status);
  n.set_has_client(true);
  return n;
}

v1::Alloc alloc(const std::string& id, v1::AllocState state) {
  v1::Alloc a;
  a.set_id(id);
  a.set_namespace_("default");
  a.set_node_id("n1");
  a.set_state(state);
  return a;
}

v1::Plugin plugin(const std::string& id) {
  v1::Plugin p;
  p.set_id(id);
  p.add_nodes()->set_node_id("n1");
  return p;
}

// Commits the changes as one entry at the catalog's next index and returns
// its events: the way every server derives them.
std::vector<v1::Event> commit(catalog& c, std::vector<v1::Change> changes) {
  auto index = c.applied_index + 1;
  return events_of(index, apply(c, index, make_entry(std::move(changes))));
}

std::vector<std::string> types(const std::vector<v1::Event>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.type());
  return out;
}

using strings = std::vector<std::string>;

v1::Event event_at(uint64_t index, uint32_t seq, v1::EventTopic topic = v1::EVENT_VOLUME,
                   const std::string& ns = "default") {
  v1::Event e;
  e.set_index(index);
  e.set_seq(seq);
  e.set_topic(topic);
  e.set_namespace_(ns);
  e.set_type("VolumeUpdated");
  return e;
}

}  // namespace

TEST_CASE("volume_registration_gives_volume_registered_redacted_with_index_and_key") {
  catalog c;
  auto v = volume("db");
  (*v.mutable_secrets())["password"] = "hunter2";
  v.mutable_mount_options()->add_mount_flags("noatime");
  auto events = commit(c, {upsert_change(v)});
  REQUIRE(events.size() == 1);
  const auto& e = events[0];
  CHECK(e.index() == 1);
  CHECK(e.seq() == 0);
  CHECK(e.topic() == v1::EVENT_VOLUME);
  CHECK(e.type() == "VolumeRegistered");
  CHECK(e.namespace_() == "default");
  CHECK(e.key() == "db");
  CHECK(e.volume().secrets().empty());
  CHECK(e.volume().mount_options().mount_flags().empty());
  CHECK(e.volume().create_index() == 1);
}

TEST_CASE("event_json_never_shows_a_secret") {
  catalog c;
  auto v = volume("db");
  (*v.mutable_secrets())["password"] = "hunter2";
  auto line = event_json(commit(c, {upsert_change(v)})[0]).dump();
  CHECK(line.find("hunter2") == std::string::npos);
  CHECK(line.find("password") == std::string::npos);
  auto j = nlohmann::json::parse(line);
  CHECK(j["index"] == 1);
  CHECK(j["seq"] == 0);
  CHECK(j["topic"] == "volume");
  CHECK(j["type"] == "VolumeRegistered");
  CHECK(j["key"] == "db");
  CHECK(j["object"]["id"] == "db");
  // Health derives from the plugin, not from the change.
  CHECK_FALSE(j["object"].contains("healthy"));
}

TEST_CASE("claim_taken_gives_a_claim_event_and_no_volume_updated") {
  catalog c;
  auto v = volume("db");
  commit(c, {upsert_change(v)});
  *v.add_claims() = claim("a1");
  auto events = commit(c, {upsert_change(v), upsert_change(alloc("a1", v1::ALLOC_PENDING))});
  CHECK(types(events) == strings{"ClaimTaken", "AllocCreated"});
  CHECK(events[0].topic() == v1::EVENT_CLAIM);
  CHECK(events[0].key() == "db/a1");
  CHECK(events[0].volume_id() == "db");
  CHECK(events[0].claim().alloc_id() == "a1");
  CHECK(events[1].seq() == 1);
  auto j = event_json(events[0]);
  CHECK(j["object"]["volume_id"] == "db");
  CHECK(j["object"]["state"] == "taken");
}

TEST_CASE("each_release_step_is_a_claim_event_then_claim_freed") {
  catalog c;
  auto v = volume("db");
  *v.add_claims() = claim("a1");
  commit(c, {upsert_change(v)});
  strings seen;
  for (auto state : {v1::CLAIM_UNPUBLISHING, v1::CLAIM_NODE_DETACHED,
                     v1::CLAIM_CONTROLLER_DETACHED, v1::CLAIM_READY_TO_FREE}) {
    v.mutable_claims(0)->set_state(state);
    for (auto& t : types(commit(c, {upsert_change(v)}))) seen.push_back(t);
  }
  v.clear_claims();
  auto freed = commit(c, {upsert_change(v)});
  for (auto& t : types(freed)) seen.push_back(t);
  CHECK(seen == strings{"ClaimUnpublishing", "ClaimNodeDetached", "ClaimControllerDetached",
                        "ClaimReadyToFree", "ClaimFreed"});
  CHECK(freed[0].claim().alloc_id() == "a1");
  CHECK(freed[0].claim().state() == v1::CLAIM_READY_TO_FREE);  // as it was
}

TEST_CASE("a_failed_release_step_recorded_on_the_claim_is_claim_updated") {
  catalog c;
  auto v = volume("db");
  *v.add_claims() = claim("a1", v1::CLAIM_UNPUBLISHING);
  commit(c, {upsert_change(v)});
  v.mutable_claims(0)->set_release_reason("alloc-stopped");
  CHECK(types(commit(c, {upsert_change(v)})) == strings{"ClaimUpdated"});
}

TEST_CASE("a_volume_change_besides_claims_is_volume_updated_after_its_claim_events") {
  catalog c;
  auto v = volume("db");
  commit(c, {upsert_change(v)});
  (*v.mutable_context())["k"] = "v";
  *v.add_claims() = claim("a1");
  CHECK(types(commit(c, {upsert_change(v)})) == strings{"ClaimTaken", "VolumeUpdated"});
}

TEST_CASE("a_volume_written_again_unchanged_is_still_an_event") {
  catalog c;
  auto v = volume("db");
  commit(c, {upsert_change(v)});
  CHECK(types(commit(c, {upsert_change(v)})) == strings{"VolumeUpdated"});
}

TEST_CASE("deregistering_a_volume_with_claims_frees_them_then_deregisters") {
  catalog c;
  auto v = volume("db");
  *v.add_claims() = claim("a1", v1::CLAIM_UNPUBLISHING);
  *v.add_claims() = claim("a2", v1::CLAIM_UNPUBLISHING);
  (*v.mutable_secrets())["token"] = "s3cret";
  commit(c, {upsert_change(v)});
  auto events = commit(c, {volume_delete_change("default", "db")});
  CHECK(types(events) == strings{"ClaimFreed", "ClaimFreed", "VolumeDeregistered"});
  CHECK(events[2].volume().id() == "db");
  CHECK(events[2].volume().secrets().empty());
  CHECK(events[2].seq() == 2);
}

TEST_CASE("deleting_an_unknown_volume_still_names_it") {
  catalog c;
  auto events = commit(c, {volume_delete_change("prod", "gone")});
  CHECK(types(events) == strings{"VolumeDeregistered"});
  CHECK(events[0].namespace_() == "prod");
  CHECK(events[0].key() == "gone");
}

TEST_CASE("node_events_say_registered_down_ready_updated_deregistered") {
  catalog c;
  CHECK(types(commit(c, {upsert_change(node("n1", v1::NODE_READY))})) ==
        strings{"NodeRegistered"});
  CHECK(types(commit(c, {upsert_change(node("n1", v1::NODE_DOWN)),
                         upsert_change(alloc("a1", v1::ALLOC_LOST))})) ==
        strings{"NodeDown", "AllocCreated"});
  CHECK(types(commit(c, {upsert_change(node("n1", v1::NODE_READY))})) == strings{"NodeReady"});
  auto n = node("n1", v1::NODE_READY);
  n.add_plugin_ids("p");
  auto updated = commit(c, {upsert_change(n)});
  CHECK(types(updated) == strings{"NodeUpdated"});
  CHECK(updated[0].namespace_().empty());
  CHECK(updated[0].key() == "n1");
  v1::Change del;
  del.set_node_delete("n1");
  auto gone = commit(c, {del});
  CHECK(types(gone) == strings{"NodeDeregistered"});
  CHECK(gone[0].node().plugin_ids_size() == 1);  // as it was
}

TEST_CASE("alloc_and_plugin_events") {
  catalog c;
  CHECK(types(commit(c, {upsert_change(alloc("a1", v1::ALLOC_PENDING))})) ==
        strings{"AllocCreated"});
  auto running = commit(c, {upsert_change(alloc("a1", v1::ALLOC_RUNNING))});
  CHECK(types(running) == strings{"AllocUpdated"});
  CHECK(running[0].alloc().state() == v1::ALLOC_RUNNING);
  CHECK(types(commit(c, {alloc_delete_change("a1")})) == strings{"AllocDeleted"});
  CHECK(types(commit(c, {upsert_change(plugin("p"))})) == strings{"PluginCreated"});
  CHECK(types(commit(c, {upsert_change(plugin("p"))})) == strings{"PluginUpdated"});
  auto deleted = commit(c, {plugin_delete_change("p")});
  CHECK(types(deleted) == strings{"PluginDeleted"});
  CHECK(deleted[0].plugin().nodes_size() == 1);
}

TEST_CASE("a_restore_is_one_state_event_without_the_bytes") {
  catalog c;
  auto events = commit(c, {restore_change("SQLite format 3...")});
  CHECK(types(events) == strings{"StateRestored"});
  CHECK(events[0].topic() == v1::EVENT_STATE);
  CHECK(event_json(events[0]).dump().find("SQLite") == std::string::npos);
}

TEST_CASE("an_entry_applied_again_gives_no_events") {
  catalog c;
  auto entry = make_entry({upsert_change(volume("db"))});
  CHECK(events_of(1, apply(c, 1, entry)).size() == 1);
  CHECK(events_of(1, apply(c, 1, entry)).empty());
}

TEST_CASE("two_catalogs_applying_the_same_entries_give_the_same_events") {
  catalog a, b;
  std::vector<v1::LogEntry> log;
  auto v = volume("db");
  log.push_back(make_entry({upsert_change(v)}));
  *v.add_claims() = claim("a1");
  log.push_back(make_entry({upsert_change(v), upsert_change(alloc("a1", v1::ALLOC_PENDING))}));
  v.mutable_claims(0)->set_state(v1::CLAIM_UNPUBLISHING);
  log.push_back(make_entry({upsert_change(v), upsert_change(alloc("a1", v1::ALLOC_COMPLETE))}));
  std::vector<std::string> from_a, from_b;
  for (size_t i = 0; i < log.size(); ++i) {
    for (auto& e : events_of(i + 1, apply(a, i + 1, log[i]))) from_a.push_back(e.SerializeAsString());
    for (auto& e : events_of(i + 1, apply(b, i + 1, log[i]))) from_b.push_back(e.SerializeAsString());
  }
  CHECK(from_a.size() == 5);
  CHECK(from_a == from_b);
}

TEST_CASE("topic_names_parse_back") {
  for (auto t : {v1::EVENT_VOLUME, v1::EVENT_CLAIM, v1::EVENT_ALLOC, v1::EVENT_NODE,
                 v1::EVENT_PLUGIN})
    CHECK(parse_event_topic(name_of(t)) == t);
  CHECK_FALSE(parse_event_topic("volumes").has_value());
}

TEST_CASE("filters_by_topic_and_namespace_nodes_and_state_pass_any_namespace") {
  event_filter f{{v1::EVENT_VOLUME, v1::EVENT_NODE}, "prod"};
  CHECK(matches(f, event_at(1, 0, v1::EVENT_VOLUME, "prod")));
  CHECK_FALSE(matches(f, event_at(1, 0, v1::EVENT_VOLUME, "default")));
  CHECK_FALSE(matches(f, event_at(1, 0, v1::EVENT_CLAIM, "prod")));
  CHECK(matches(f, event_at(1, 0, v1::EVENT_NODE, "")));
  CHECK(matches(f, event_at(1, 0, v1::EVENT_STATE, "")));
  CHECK(matches(event_filter{}, event_at(1, 0, v1::EVENT_CLAIM, "x")));
}

TEST_CASE("journal_reads_from_an_index_in_order_and_says_where_to_go_on") {
  event_journal j(100, 0);
  j.append(3, {event_at(1, 0), event_at(1, 1), event_at(3, 0)});
  auto all = j.read({}, 1, 100);
  REQUIRE_FALSE(all.error);
  REQUIRE(all.events.size() == 3);
  CHECK(all.next_index == 4);
  auto later = j.read({}, 2, 100);
  REQUIRE(later.events.size() == 1);
  CHECK(later.events[0].index() == 3);
  auto none = j.read({}, 4, 100);
  CHECK(none.events.empty());
  CHECK(none.next_index == 4);
  // "From now": after what was applied.
  CHECK(j.read({}, 0, 100).next_index == 4);
  // Ahead of this server (a consumer that came from a server further on):
  // waits there, never goes back.
  CHECK(j.read({}, 9, 100).next_index == 9);
}

TEST_CASE("journal_pages_never_split_the_events_of_an_index") {
  event_journal j(100, 0);
  j.append(3, {event_at(1, 0), event_at(2, 0), event_at(2, 1), event_at(2, 2), event_at(3, 0)});
  auto page = j.read({}, 1, 2);
  CHECK(page.events.size() == 4);
  CHECK(page.next_index == 3);
  auto rest = j.read({}, page.next_index, 2);
  REQUIRE(rest.events.size() == 1);
  CHECK(rest.events[0].index() == 3);
  CHECK(rest.next_index == 4);
}

TEST_CASE("journal_with_a_filter_moves_on_past_what_does_not_match") {
  event_journal j(100, 0);
  j.append(5, {event_at(1, 0, v1::EVENT_VOLUME), event_at(4, 0, v1::EVENT_NODE, "")});
  auto page = j.read({{v1::EVENT_CLAIM}, ""}, 1, 100);
  CHECK(page.events.empty());
  CHECK(page.next_index == 6);
}

TEST_CASE("journal_over_capacity_drops_whole_old_indexes_and_refuses_older_requests") {
  event_journal j(2, 0);
  j.append(2, {event_at(1, 0), event_at(1, 1), event_at(2, 0)});
  CHECK(j.first_index() == 2);
  j.append(3, {event_at(3, 0), event_at(3, 1)});
  CHECK(j.first_index() == 3);  // index 1 and then 2 dropped whole
  CHECK(j.size() == 2);
  auto old = j.read({}, 2, 100);
  REQUIRE(old.error);
  CHECK(old.error->code == errc::not_found);
  CHECK(old.first_index == 3);
  CHECK(old.error->message.find("before index 3") != std::string::npos);
  auto ok = j.read({}, 3, 100);
  CHECK_FALSE(ok.error);
  CHECK(ok.events.size() == 2);
}

TEST_CASE("journal_starts_after_what_the_server_held_at_start_and_after_a_snapshot") {
  event_journal j(100, 40);
  CHECK(j.read({}, 40, 100).error.has_value());
  CHECK_FALSE(j.read({}, 41, 100).error.has_value());
  j.append(42, {event_at(42, 0)});
  j.reset(90);
  CHECK(j.size() == 0);
  CHECK(j.first_index() == 91);
  CHECK(j.read({}, 42, 100).error.has_value());
  CHECK(j.read({}, 0, 100).next_index == 91);
}
