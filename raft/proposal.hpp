// Whether the replicated log takes a proposal: a pure rule.  A proposal
// carries the leader term its proposer serves (a volume, plugin or leader
// actor of this server's leader in that term).  An actor can outlive the
// leadership it was made for (e.g. one waiting out a CSI step's timeout
// while its leader stopped); if this server leads again in a later term, its
// proposal, built on that old term's state, must not be appended.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace berth::raft {

// nullopt: take it; else why not (the proposer should retry through the
// current leader).  proposer_term 0: the proposer serves no particular term.
inline std::optional<std::string> proposal_refusal(bool leads, uint64_t current_term,
                                                   uint64_t proposer_term) {
  if (!leads) return "this server does not lead";
  if (proposer_term != 0 && proposer_term != current_term)
    return "the proposal was made for leader term " + std::to_string(proposer_term) +
           ", and this server now leads term " + std::to_string(current_term) +
           " (the proposer's leader is gone)";
  return std::nullopt;
}

}  // namespace berth::raft
