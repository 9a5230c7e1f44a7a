// Helpers shared by the files implementing node; not part of its API.
#pragma once

#include "raft/raft.hpp"

namespace berth::raft {

// Carried in MsgVote's context when campaigning on MsgTimeoutNow, so voters
// grant it even while they still hear from the old leader.
inline const char* const campaign_transfer = "transfer";

inline pb::Message make(pb::MessageType type, uint64_t to) {
  pb::Message m;
  m.set_type(type);
  m.set_to(to);
  return m;
}

inline result fail(errc code, uint64_t leader = 0) {
  return {code, leader, 0, 0};
}

}  // namespace berth::raft
