// The api actor: what berthd publishes for the shell.  One stable handler
// that hands each request to the leader.
#pragma once

#include <memory>

#include "actors/actors.hpp"
#include "actors/metrics.hpp"

namespace berth {

// Times every request and counts it by command and outcome.
api_actor::behavior_type api(api_actor::pointer self, leader_actor leader,
                             std::shared_ptr<metrics> stats);

}  // namespace berth
