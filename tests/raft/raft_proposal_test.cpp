// proposal_refusal: the replicated log takes a proposal only while it leads,
// and only from a proposer of its current leader term.
#include <doctest/doctest.h>

#include "raft/proposal.hpp"

using berth::raft::proposal_refusal;

TEST_CASE("proposal_refusal: only a leader takes proposals") {
  CHECK(proposal_refusal(false, 5, 5));
  CHECK(proposal_refusal(false, 5, 0));
  CHECK_FALSE(proposal_refusal(true, 5, 5));
  CHECK_FALSE(proposal_refusal(true, 5, 0));  // no term given: the server's own
}

TEST_CASE("proposal_refusal: an actor of an earlier leadership of this server is refused") {
  // Led in term 27, lost it, leads again in term 33: a volume actor of the
  // term-27 leader that outlived it must not write its old state.
  auto why = proposal_refusal(true, 33, 27);
  REQUIRE(why);
  CHECK(why->find("term 27") != std::string::npos);
  CHECK(why->find("term 33") != std::string::npos);
  CHECK(proposal_refusal(true, 33, 34));  // a term this server does not lead
}
