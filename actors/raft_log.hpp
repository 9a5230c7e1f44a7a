// The replicated log actor: the shell around the pure Raft core
// (raft).  It owns the core, its durable log (log.db), the
// timer, the connections to the other servers' replicated logs, and the
// group commit: every input only marks the core dirty; one flush message
// then persists (one fsync), sends and applies whatever the core made ready,
// so everything that arrived during the previous fsync shares the next.
//
// Runs detached (its own thread): the fsync blocks.  In --dev it is a
// single-member cluster.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/actors.hpp"
#include "actors/metrics.hpp"
#include "raft/compaction.hpp"
#include "raft/raft.hpp"
#include "persistence/recovery.hpp"
#include "tls/proof.hpp"

namespace berth {

struct raft_options {
  v1::ServerInfo self;                   // name, raft and api addresses
  size_t bootstrap_expect = 1;           // servers to wait for before bootstrapping
  std::vector<std::string> join;         // raft addresses (HOST:PORT) of other servers
  std::chrono::milliseconds tick{100};   // election timeout: 10-20 ticks
  uint64_t snapshot_threshold = 8192;    // applied entries between snapshots
  uint64_t snapshot_keep = 256;          // entries kept behind a snapshot
  uint64_t snapshot_piece = 1 << 20;     // bytes per piece of a snapshot sent
  // With TLS: this server's certificate and key, to prove to each peer that
  // it holds a server certificate, and the CA to check theirs
  // (tls/proof.hpp).  Null without TLS: nothing is proved or checked.
  std::shared_ptr<const tls::identity> identity;
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
    // With TLS: whether the peer accepted this server's proof (tls/proof.hpp)
    // over this handle, one in flight, the last try.
    bool proven_to = false;
    bool proving = false;
    std::chrono::steady_clock::time_point last_proof{};
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
  uint64_t snapshot_bytes = 0;  // size of the last snapshot's state (0: none)
  uint64_t bytes_since_snapshot = 0;  // of the entries applied since it
  bool snapshotting = false;
  std::string snapshot_path;                       // DATA/raft-snapshot.bin
  // A leader's snapshot file coming in, in pieces, as
  // DATA/raft-snapshot.bin.incoming (actors/raft_log_snapshots.cpp; the
  // rules in raft/compaction.hpp), with the running checksum of
  // the bytes after the file's header and that header.
  raft::incoming_pieces incoming;
  uint32_t incoming_crc = 0;
  std::string incoming_header;
  uint64_t transfers = 0;  // snapshot transfers started (each reads its own link)
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
  // With TLS: the challenge given to each peer process, the processes
  // whose server proof verified (their Raft and discovery messages count),
  // and those whose refusal was logged already.
  std::map<caf::node_id, std::string> challenges;
  std::set<caf::node_id> proven;
  std::set<caf::node_id> refusal_logged;
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

}  // namespace berth
