#include "actors/vital.hpp"

#include <cstdio>
#include <cstdlib>

#include <caf/abstract_actor.hpp>
#include <caf/actor_control_block.hpp>

#include "log/log.hpp"

namespace berth {

void watch_vital(const caf::strong_actor_ptr& actor, std::string name, vital_ended ended) {
  if (!actor) {
    ended(name, caf::error{});
    return;
  }
  actor->get()->attach_functor(
      [name = std::move(name), ended = std::move(ended)](const caf::error& reason) {
        ended(name, reason);
      });
}

void exit_process(const std::string& name, const caf::error& reason) {
  auto why = reason ? caf::to_string(reason) : std::string("a normal exit");
  if (logging::enabled(logging::level::error))
    logging::error("berthd",
                   "an actor berthd cannot serve without ended; exiting so that a supervisor "
                   "restarts berthd",
                   {{"actor", name}, {"reason", why}});
  else
    std::fprintf(stderr, "berthd: the %s actor ended (%s); exiting\n", name.c_str(), why.c_str());
  std::_Exit(70);
}

}  // namespace berth
