// The server actor: what a berthd publishes for shells and clients.  While
// this server leads (the replicated log says so, and the state machine
// holds everything committed) it runs the leader actor and hands requests
// to it; otherwise it forwards them to the leader's server.  Operator
// commands about the replicated log itself (list-peers) are answered here.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/actors.hpp"
#include "actors/leader.hpp"
#include "actors/metrics.hpp"

namespace berth {

struct server_state {
  using promise = caf::typed_response_promise<pb<v1::Response>>;
  replicated_log_actor log;
  v1::ServerInfo self;
  state_machine_actor machine;
  event_journal_actor journal;  // answers event stream requests
  std::shared_ptr<metrics> stats;
  leader_actor leader;                     // valid while this server leads
  uint64_t leader_id = 0;
  v1::ServerInfo leader_info;
  api_actor remote;                        // the leader's server, when another leads
  bool connecting = false;
  std::vector<std::pair<v1::Request, promise>> waiting;  // for `remote`
  std::map<uint64_t, promise> inflight;     // forwarded to `remote`, unanswered
  uint64_t next_inflight = 0;
  std::map<std::string, node_actor> nodes;  // registrations, replayed to a new leader
  std::map<std::string, std::string> node_secrets;  // with them: each node's secret
  std::map<std::string, int64_t> node_kill_ms;  // and its --kill-timeout (ms)
  leader_options options;
  uint64_t term = 0;  // the Raft term this server last became leader in
  // operator snapshot restore: answered once the leader actor started again
  // from the restored state (the restore's index, its promise).
  std::vector<std::pair<uint64_t, promise>> restoring;
  // The newest Raft term in which a leader is known (this server or the one
  // it follows): told to clients in heartbeat answers, so they refuse any
  // older leader, which a newer leader's existence has deposed.
  uint64_t leader_term = 0;
  static inline const char* name = "server";
};

server_actor::behavior_type server(server_actor::stateful_pointer<server_state> self,
                                   state_machine_actor machine, event_journal_actor journal,
                                   std::shared_ptr<metrics> stats,
                                   leader_options options);

}  // namespace berth
