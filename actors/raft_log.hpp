// The replicated log actor: the shell around the pure Raft core
// (persistence/raft).  It owns the core, its durable log (log.db), the
// timer, the connections to the other servers' replicated logs, and the
// group commit: every input only marks the core dirty; one flush message
// then persists (one fsync), sends and applies whatever the core made ready,
// so everything that arrived during the previous fsync shares the next.
//
// Runs detached (its own thread): the fsync blocks.  In --dev it is a
// single-member cluster.
#pragma once

#include <optional>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "actors/actors.hpp"
#include "actors/metrics.hpp"
#include "persistence/raft/raft.hpp"

namespace berth {

struct raft_options {
  v1::ServerInfo self;                   // name, raft and api addresses
  size_t bootstrap_expect = 1;           // servers to wait for before bootstrapping
  std::vector<std::string> join;         // raft addresses (HOST:PORT) of other servers
  std::chrono::milliseconds tick{100};   // election timeout: 10-20 ticks
  uint64_t snapshot_threshold = 8192;    // applied entries between snapshots
  uint64_t snapshot_keep = 256;          // entries kept behind a snapshot
};

// The Raft id of a server: a hash of its name (never 0).
uint64_t raft_id_of(const std::string& name);

struct raft_log_state {
  struct pending {
    uint64_t term;
    caf::typed_response_promise<uint64_t> promise;
  };
  struct peer {
    replicated_log_actor handle;
    bool connecting = false;
    std::chrono::steady_clock::time_point last_attempt{};
  };
  raft_options opts;
  std::shared_ptr<log_store> disk;
  raft::memory_storage storage;
  std::unique_ptr<raft::node> node;
  std::map<uint64_t, v1::ServerInfo> members;      // the address book
  std::map<std::string, v1::ServerInfo> discovered;  // by name, before bootstrap
  std::map<std::string, peer> links;               // by raft address
  std::map<uint64_t, pending> proposals;           // by index
  uint64_t next_read = 0;
  std::map<std::string, caf::typed_response_promise<uint64_t>> reads;  // by context
  std::multimap<uint64_t, caf::typed_response_promise<uint64_t>> reads_waiting;  // by index
  std::vector<uint64_t> unreachable;               // reported after advance()
  std::vector<std::pair<uint64_t, bool>> snapshots_sent;  // reported after advance()
  uint64_t snapshot_index = 0;
  bool snapshotting = false;
  std::string snapshot_path;                       // DATA/raft-snapshot.bin
  raft::soft_state soft;
  uint64_t applied = 0;
  bool flush_scheduled = false;
  bool leading_announced = false;
  // While this server leads, committed entries also go to the server (for
  // the leader actor's catalog): from the moment the state it starts from
  // is loaded.  Entries applied while that load runs wait in `held`.
  bool forwarding = false;
  committed_batch held;
  uint64_t announcement = 0;  // which load a reply belongs to
  bool cluster_found = false;
  state_machine_actor machine;
  server_actor server;
  std::shared_ptr<metrics> stats;
  static inline const char* name = "replicated_log";
};

// `applied`: what the state tables hold (the core resumes after it).
// Throws std::runtime_error when the durable log cannot be read.
replicated_log_actor::behavior_type raft_log(
    replicated_log_actor::stateful_pointer<raft_log_state> self, raft_options opts,
    std::shared_ptr<log_store> disk, uint64_t applied, state_machine_actor machine,
    server_actor server, std::shared_ptr<metrics> stats);

// Reads the committed entries in (applied, commit] from a durable log, for
// recovery of the state tables before anything starts.
std::vector<std::pair<uint64_t, std::string>> committed_after(log_store& disk, uint64_t applied);

// The snapshot file next to a durable log: DIR/raft-snapshot.bin.
std::string snapshot_path_of(const log_store& disk);

// Start-up check of a server's data directory, before anything runs: the
// snapshot file (header, checksum, decodable), every log entry (checksum,
// decodable, no gaps), and that the log, the snapshot and the state
// tables (at `applied`) fit together.  Throws damaged_file naming the
// file and the way to recover.
void check_data_dir(log_store& disk, uint64_t applied);

// The state database of the snapshot file when the state tables (at
// `applied`) are behind it and the log no longer holds the entries between
// (a crash between receiving a snapshot and installing it, or a lost
// state.db): start-up installs it before applying the log.
std::optional<std::string> snapshot_to_install(log_store& disk, uint64_t applied);

}  // namespace berth
