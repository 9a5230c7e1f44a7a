// node: the Raft behaviours, one scenario each, on a synchronous in-memory
// network that delivers everything unless a member is cut off.
#include "raft/raft.hpp"

#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <memory>
#include <set>

using namespace berth::raft;

namespace {

struct member {
  memory_storage disk;
  std::unique_ptr<node> raft;
  std::vector<pb::Entry> applied;
  std::vector<read_state> reads;
  std::vector<ready> readies;  // every Ready, for contract checks
};

class cluster {
 public:
  explicit cluster(std::vector<uint64_t> ids, size_t max_size = 1 << 20)
      : max_size_per_msg(max_size) {
    std::vector<peer> peers;
    for (auto id : ids) peers.push_back({id, "addr-" + std::to_string(id)});
    for (auto id : ids) {
      start(id);
      at(id).bootstrap(peers);
    }
    settle();
  }

  node& at(uint64_t id) { return *members[id].raft; }
  member& state(uint64_t id) { return members[id]; }

  void start(uint64_t id, uint64_t applied = 0) {
    config cfg;
    cfg.id = id;
    cfg.seed = id;
    cfg.applied = applied;
    cfg.max_size_per_msg = max_size_per_msg;
    members[id].applied.clear();
    members[id].raft = std::make_unique<node>(cfg, members[id].disk);
  }

  // Processes every Ready and delivers every message, until quiet.
  void settle() {
    for (bool busy = true; busy;) {
      busy = false;
      for (auto& [id, m] : members) {
        if (!m.raft || !m.raft->has_ready()) continue;
        busy = true;
        ready rd = m.raft->get_ready();
        if (rd.snapshot) m.disk.apply_snapshot(*rd.snapshot);
        m.disk.append(rd.entries);
        if (rd.hard_state) m.disk.set_hard_state(*rd.hard_state);
        for (auto& msg : rd.messages) outbox.push_back(msg);
        for (auto& e : rd.committed_entries) m.applied.push_back(e);
        for (auto& r : rd.read_states) m.reads.push_back(r);
        m.raft->advance();
        m.readies.push_back(std::move(rd));
      }
      auto msgs = std::move(outbox);
      outbox.clear();
      for (auto& msg : msgs) {
        busy = true;
        if (cut.count(msg.from()) || cut.count(msg.to()) || (drop && drop(msg))) continue;
        auto it = members.find(msg.to());
        if (it == members.end() || !it->second.raft) continue;
        it->second.raft->step(msg);
      }
    }
  }

  void tick(uint64_t id, int n = 1) {
    for (int i = 0; i < n; ++i) {
      at(id).tick();
      settle();
    }
  }

  // Ticks everyone until `id` is leader (it campaigns first).
  void elect(uint64_t id) {
    at(id).transfer_leadership(id);  // harmless if there is no leader
    for (int i = 0; i < 100 && at(id).current_role() != role::leader; ++i) tick(id);
    REQUIRE(at(id).current_role() == role::leader);
  }

  void tick_all(int n) {
    for (int i = 0; i < n; ++i) {
      for (auto& [id, m] : members)
        if (m.raft) m.raft->tick();
      settle();
    }
  }

  std::vector<std::string> data(uint64_t id) {
    std::vector<std::string> out;
    for (auto& e : members[id].applied)
      if (e.type() == pb::ENTRY_NORMAL && !e.data().empty()) out.push_back(e.data());
    return out;
  }

  std::map<uint64_t, member> members;
  std::vector<pb::Message> outbox;
  std::set<uint64_t> cut;                        // members whose messages are all lost
  std::function<bool(const pb::Message&)> drop;  // and single messages lost
  size_t max_size_per_msg = 1 << 20;
};

pb::ConfChange conf_change(pb::ConfChangeType type, uint64_t id) {
  pb::ConfChange cc;
  cc.set_type(type);
  cc.set_node_id(id);
  cc.set_context("addr-" + std::to_string(id));
  return cc;
}

}  // namespace

TEST_CASE("single_member_elects_itself_and_commits_a_proposal") {
  cluster c({1});
  c.tick(1, 20);
  REQUIRE(c.at(1).current_role() == role::leader);
  auto r = c.at(1).propose("hello");
  REQUIRE(r.ok());
  c.settle();
  CHECK(c.data(1) == std::vector<std::string>{"hello"});
  CHECK(c.at(1).status().applied == r.index);
}

TEST_CASE("three_members_elect_exactly_one_leader") {
  cluster c({1, 2, 3});
  c.tick_all(30);
  int leaders = 0;
  for (uint64_t id : {1, 2, 3}) leaders += c.at(id).current_role() == role::leader;
  CHECK(leaders == 1);
  uint64_t l = c.at(1).leader();
  CHECK(l != 0);
  CHECK(c.at(2).leader() == l);
  CHECK(c.at(3).leader() == l);
}

TEST_CASE("follower_refuses_proposal_and_names_the_leader") {
  cluster c({1, 2, 3});
  c.elect(1);
  auto r = c.at(2).propose("x");
  CHECK(r.code == errc::not_leader);
  CHECK(r.leader == 1);
  CHECK(r.message() == "not leader, leader is 1");
}

TEST_CASE("proposal_commits_on_every_member_in_the_same_order") {
  cluster c({1, 2, 3});
  c.elect(1);
  for (auto v : {"a", "b", "c"}) REQUIRE(c.at(1).propose(v).ok());
  c.settle();
  c.tick(1);  // a heartbeat carries the final commit index
  for (uint64_t id : {1, 2, 3}) CHECK(c.data(id) == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("leader_does_not_commit_without_a_majority") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.cut = {2, 3};
  auto r = c.at(1).propose("lonely");
  c.settle();
  CHECK(c.at(1).status().commit < r.index);
  CHECK(c.data(1).empty());
  c.cut.clear();
  c.tick(1);
  CHECK(c.data(1) == std::vector<std::string>{"lonely"});
}

// Raft paper, figure 8: an entry of an earlier term stored on a majority is
// not committed by counting, because a leader of a later term that lacks it
// can still be elected and overwrite it.
TEST_CASE("leader_never_commits_an_earlier_term_entry_by_counting_replicas") {
  cluster c({1, 2, 3, 4, 5}, 1);  // one entry per append
  c.elect(1);
  uint64_t b = c.at(1).status().last_index;
  auto append_of = [](const pb::Message& m, uint64_t index) {
    return m.type() == pb::MSG_APP && m.entries_size() > 0 && m.entries(0).index() == index;
  };
  // (a) 1 replicates "old" (term T) to 2 only.
  c.drop = [](const pb::Message& m) { return m.from() == 1 && m.to() > 2; };
  REQUIRE(c.at(1).propose("old").ok());
  c.settle();
  c.drop = nullptr;
  // (b) 1 crashes; 5 wins term T+1 with 3 and 4, writes its own b+1, crashes.
  c.cut = {1};
  for (uint64_t id : {2, 3, 4}) c.tick(id, 10);
  c.drop = [](const pb::Message& m) { return m.from() == 5 && m.type() == pb::MSG_APP; };
  c.elect(5);
  c.drop = nullptr;
  // (c) 1 restarts, wins term T+2 and gets "old" onto 3, but its own b+2
  //     reaches nobody: "old" is on a majority, yet not committed.
  c.cut = {5};
  c.start(1);
  for (uint64_t id : {2, 3, 4}) c.tick(id, 10);
  // Lose b+2 wherever it would be accepted (probes that fail are harmless).
  c.drop = [&](const pb::Message& m) {
    return append_of(m, b + 2) && c.at(m.to()).log().last_index() >= b + 1;
  };
  c.elect(1);
  c.settle();
  CHECK(c.at(1).status().commit < b + 1);
  CHECK(c.data(1).empty());
  // (d) 1 crashes; 5 (last term T+1) wins and overwrites b+1 everywhere.
  c.drop = nullptr;
  c.cut = {1};
  c.start(5);
  for (uint64_t id : {2, 3, 4}) c.tick(id, 10);
  c.elect(5);
  c.cut.clear();
  c.tick(5, 2);
  for (uint64_t id : {1, 2, 3, 4}) {
    auto& mine = c.state(id).applied;
    auto& theirs = c.state(5).applied;
    for (size_t i = 0; i < std::min(mine.size(), theirs.size()); ++i) {
      CHECK(mine[i].index() == theirs[i].index());
      CHECK(mine[i].term() == theirs[i].term());
    }
  }
}

TEST_CASE("pre_vote_keeps_an_isolated_member_from_raising_its_term") {
  cluster c({1, 2, 3});
  c.elect(1);
  uint64_t term = c.at(1).term();
  c.cut = {3};
  c.tick(3, 100);
  CHECK(c.at(3).term() == term);
  c.cut.clear();
  c.tick_all(5);
  CHECK(c.at(1).current_role() == role::leader);
  CHECK(c.at(1).term() == term);
}

TEST_CASE("check_quorum_makes_an_isolated_leader_step_down") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.cut = {1};
  c.tick(1, 25);
  CHECK(c.at(1).current_role() == role::follower);
}

TEST_CASE("stale_leader_steps_down_when_it_hears_the_new_term") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.cut = {1};
  c.tick(3, 10);  // 3 stops honouring 1's lease, so it may vote for 2
  c.elect(2);
  c.cut.clear();
  c.tick(1);  // its heartbeat is answered with the higher term
  CHECK(c.at(1).current_role() == role::follower);
  CHECK(c.at(1).term() == c.at(2).term());
  c.tick(2);
  CHECK(c.at(1).leader() == 2);
}

TEST_CASE("vote_is_persisted_in_the_ready_that_sends_the_vote_response") {
  cluster c({1, 2, 3});
  c.elect(1);
  for (auto& rd : c.state(2).readies) {
    for (auto& m : rd.messages) {
      if (m.type() != pb::MSG_VOTE_RESP || m.reject()) continue;
      REQUIRE(rd.hard_state);
      CHECK(rd.hard_state->vote() == 1);
      CHECK(rd.must_sync);
    }
  }
}

TEST_CASE("restarted_member_keeps_term_vote_and_log_and_reapplies_committed_entries") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.at(1).propose("a");
  c.settle();
  c.tick(1);
  auto before = c.at(2).status();
  c.start(2);  // crash: only what the shell persisted survives
  auto after = c.at(2).status();
  CHECK(after.term == before.term);
  CHECK(after.vote == before.vote);
  CHECK(after.commit == before.commit);
  CHECK(after.last_index == before.last_index);
  c.settle();
  CHECK(c.data(2) == std::vector<std::string>{"a"});
}

TEST_CASE("restart_with_applied_index_keeps_configuration_and_skips_applied_entries") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.at(1).propose("a");
  c.settle();
  c.tick(1);
  uint64_t applied = c.at(2).status().applied;
  c.start(2, applied);  // the state machine survived the crash
  CHECK(c.at(2).conf_state().voters_size() == 3);
  CHECK(c.at(2).status().applied == applied);
  c.settle();
  CHECK(c.data(2).empty());  // nothing handed out twice
}

TEST_CASE("restart_with_applied_beyond_the_persisted_commit_index_trusts_applied") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.at(1).propose("a");
  c.settle();
  c.tick(1);
  uint64_t applied = c.at(2).status().applied;
  // The commit-only hard state write was not fsync'd and got lost.
  auto hs = c.state(2).disk.hard_state();
  hs.set_commit(1);
  c.state(2).disk.set_hard_state(hs);
  c.start(2, applied);
  CHECK(c.at(2).status().commit == applied);
}

TEST_CASE("transfer_to_a_non_member_is_refused") {
  cluster c({1, 2, 3});
  c.elect(1);
  CHECK(c.at(1).transfer_leadership(7).code == errc::unknown_peer);
}

TEST_CASE("lagging_follower_is_restored_from_a_snapshot_after_compaction") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.cut = {3};
  for (int i = 0; i < 5; ++i) c.at(1).propose("v" + std::to_string(i));
  c.settle();
  auto& disk = c.state(1).disk;
  uint64_t applied = c.at(1).status().applied;
  REQUIRE(disk.create_snapshot(applied, c.at(1).conf_state(), "state@" + std::to_string(applied)) ==
          storage_error::none);
  REQUIRE(disk.compact(applied) == storage_error::none);
  c.cut.clear();
  c.tick(1, 3);
  bool restored = false;
  for (auto& rd : c.state(3).readies)
    if (rd.snapshot) restored = rd.snapshot->data() == "state@" + std::to_string(applied);
  CHECK(restored);
  CHECK(c.state(3).disk.snapshot().metadata().index() == applied);
  CHECK(c.at(3).status().applied == applied);
  c.at(1).propose("after");
  c.settle();
  c.tick(1);
  CHECK(c.data(3) == std::vector<std::string>{"after"});
}

TEST_CASE("added_member_catches_up_and_counts_in_the_quorum") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.at(1).propose("before");
  c.settle();
  c.start(4);  // a new member starts empty and never bootstraps
  REQUIRE(c.at(1).propose_conf_change(conf_change(pb::ADD_NODE, 4)).ok());
  c.settle();
  c.tick(1, 2);
  CHECK(c.at(1).conf_state().voters_size() == 4);
  CHECK(c.at(4).conf_state().voters_size() == 4);
  CHECK(c.data(4) == std::vector<std::string>{"before"});
  // With four voters, two are not a quorum.
  c.cut = {3, 4};
  auto r = c.at(1).propose("needs three");
  c.settle();
  CHECK(c.at(1).status().commit < r.index);
}

TEST_CASE("second_membership_change_is_refused_while_one_is_pending") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.cut = {2, 3};  // keep the first change from committing
  REQUIRE(c.at(1).propose_conf_change(conf_change(pb::ADD_NODE, 4)).ok());
  auto r = c.at(1).propose_conf_change(conf_change(pb::REMOVE_NODE, 3));
  CHECK(r.code == errc::conf_change_pending);
  CHECK(c.at(1).propose_conf_change(conf_change(pb::ADD_NODE, 1)).code ==
        errc::conf_change_pending);
}

TEST_CASE("membership_change_that_changes_nothing_is_invalid") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.tick(1);
  CHECK(c.at(1).propose_conf_change(conf_change(pb::ADD_NODE, 2)).code ==
        errc::invalid_conf_change);
  CHECK(c.at(1).propose_conf_change(conf_change(pb::REMOVE_NODE, 9)).code ==
        errc::invalid_conf_change);
}

TEST_CASE("removed_leader_steps_down_and_the_rest_elect_a_new_one") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.tick(1);
  REQUIRE(c.at(1).propose_conf_change(conf_change(pb::REMOVE_NODE, 1)).ok());
  c.settle();
  c.tick(1);
  CHECK(c.at(1).current_role() == role::follower);
  c.tick_all(40);
  CHECK((c.at(2).current_role() == role::leader || c.at(3).current_role() == role::leader));
  CHECK(c.at(2).conf_state().voters_size() == 2);
}

TEST_CASE("leadership_transfer_moves_the_leader_to_the_target") {
  cluster c({1, 2, 3});
  c.elect(1);
  uint64_t term = c.at(1).term();
  REQUIRE(c.at(1).transfer_leadership(3).ok());
  c.settle();
  CHECK(c.at(3).current_role() == role::leader);
  CHECK(c.at(3).term() == term + 1);
  CHECK(c.at(1).leader() == 3);
}

TEST_CASE("proposals_are_refused_while_a_transfer_is_in_progress") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.cut = {3};  // the target cannot catch up, so the transfer stays pending
  c.at(1).propose("x");
  c.settle();
  c.at(1).transfer_leadership(3);
  CHECK(c.at(1).propose("y").code == errc::transfer_in_progress);
  c.tick(1, 21);  // abandoned after an election timeout
  CHECK(c.at(1).propose("z").ok());
}

TEST_CASE("read_index_on_leader_confirms_with_a_heartbeat_quorum") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.at(1).propose("w");
  c.settle();
  c.tick(1);
  uint64_t commit = c.at(1).status().commit;
  c.cut = {2, 3};
  REQUIRE(c.at(1).read_index("r1").ok());
  c.settle();
  CHECK(c.state(1).reads.empty());  // no quorum confirmed it yet
  c.cut.clear();
  c.tick(1);
  REQUIRE(c.state(1).reads.size() == 1);
  CHECK(c.state(1).reads[0].index == commit);
  CHECK(c.state(1).reads[0].context == "r1");
}

TEST_CASE("read_index_on_follower_is_answered_through_the_leader") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.tick(1);
  REQUIRE(c.at(2).read_index("r2").ok());
  c.settle();
  REQUIRE(c.state(2).reads.size() == 1);
  CHECK(c.state(2).reads[0].index == c.at(1).status().commit);
  CHECK(c.state(2).reads[0].context == "r2");
}

TEST_CASE("step_refuses_local_message_types") {
  cluster c({1, 2, 3});
  pb::Message m;
  m.set_type(pb::MSG_HUP);
  m.set_from(2);
  CHECK(c.at(1).step(m).code == errc::invalid_message);
}

TEST_CASE("bootstrap_refuses_a_node_with_state") {
  cluster c({1});
  CHECK(c.at(1).bootstrap({{1, ""}}).code == errc::bootstrap_not_empty);
}

TEST_CASE("leader_status_reports_progress_per_member") {
  cluster c({1, 2, 3});
  c.elect(1);
  c.tick(1);
  auto st = c.at(1).status();
  CHECK(st.role == role::leader);
  REQUIRE(st.progress.size() == 3);
  CHECK(st.progress[2].match == st.last_index);
  CHECK(st.progress[2].state == progress_state::replicate);
  CHECK(c.at(2).status().progress.empty());
}
