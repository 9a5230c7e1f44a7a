#include "actors/api.hpp"

#include <caf/typed_event_based_actor.hpp>

namespace berth {

api_actor::behavior_type api(api_actor::pointer self, leader_actor leader) {
  return {
      [self, leader](api_atom a, pb<v1::Request>& req) {
        return self->delegate(leader, a, std::move(req));
      },
  };
}

}  // namespace berth
