#include "actors/csi_plugin.hpp"

#include "csi/client.hpp"

namespace berth {

csi_plugin_actor::behavior_type csi_plugin(csi_plugin_actor::stateful_pointer<csi_plugin_state> self,
                                           std::string plugin_id, std::string endpoint,
                                           std::chrono::milliseconds deadline,
                                           std::shared_ptr<metrics> stats) {
  self->state.client = std::make_shared<csi::client>(endpoint, deadline);
  self->state.client->observe([stats, plugin_id](csi::method m, csi::code c, double seconds) {
    stats->csi_call(plugin_id, std::string(csi::method_name(m)), csi::code_name(c), seconds);
  });
  return {
      [self](csi_atom, const csi_job& job) -> csi_outcome {
        try {
          return job.run(*self->state.client);
        } catch (const std::exception& e) {
          csi_outcome out;
          out.error = failure{errc::internal, std::string("CSI call failed: ") + e.what()};
          return out;
        }
      },
  };
}

}  // namespace berth
