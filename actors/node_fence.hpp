// The node's fence against deposed leaders: the newest Raft term in which
// this node knows a leader, kept in client.db so it holds across restarts.
// A storage-changing CSI request carries its leader's term and is refused
// when older (messages/model's `fence` decides); a newer term, from a
// request or from a server's heartbeat answer, is recorded in client.db
// before anything runs.  Never throws: SQLite errors come back as failures
// naming the file.  Not thread-safe: the node actor owns it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "messages/model.hpp"
#include "persistence/client_store.hpp"

namespace berth {

class leader_fence {
 public:
  explicit leader_fence(std::string node_id = {}) : node_id_(std::move(node_id)) {}

  // Reads the recorded term; `forget` starts over at 0 (servers rebuilt as
  // a new cluster, whose terms start again at 1).
  std::optional<failure> load(client_store& store, bool forget);

  // A request of a leader of `term` (0: unfenced): refused when a newer
  // leader is known, recorded first when it is the newest.
  std::optional<failure> admit(client_store& store, uint64_t term);

  // A server's heartbeat answer: the newest term it knows a leader in.
  // Raises the fence when newer; an older one (a server behind the others)
  // changes nothing.
  std::optional<failure> heard(client_store& store, uint64_t term);

  uint64_t term() const { return term_; }

  // The fence's term for the plugin connections (read on their own
  // actors): a call queued there is checked again when it starts, so a
  // deposed leader's call that waited for its turn is not sent after this
  // node heard of a newer leader.
  std::shared_ptr<const std::atomic<uint64_t>> published() const { return published_; }

 private:
  std::optional<failure> raise(client_store& store, uint64_t term);

  std::string node_id_;
  uint64_t term_ = 0;
  std::shared_ptr<std::atomic<uint64_t>> published_ = std::make_shared<std::atomic<uint64_t>>(0);
};

}  // namespace berth
