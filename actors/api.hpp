// The api actor: what berthd publishes for the shell.  One stable handler
// that hands each request to the leader.
#pragma once

#include "actors/actors.hpp"

namespace berth {

api_actor::behavior_type api(api_actor::pointer self, leader_actor leader);

}  // namespace berth
