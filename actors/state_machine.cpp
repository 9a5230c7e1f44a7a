#include "actors/state_machine.hpp"

#include <cstdio>
#include <cstdlib>

namespace berth {

state_machine_actor::behavior_type state_machine(
    state_machine_actor::stateful_pointer<state_machine_state> self,
    std::shared_ptr<state_store> store, std::shared_ptr<metrics> stats) {
  self->state.store = std::move(store);
  self->state.stats = std::move(stats);
  return {
      [self](apply_atom, const committed_batch& batch) {
        self->state.stats->mailbox("state_machine", self->mailbox().size());
        try {
          self->state.store->apply(batch.entries);
          if (!batch.entries.empty()) self->state.stats->applied(batch.entries.back().first);
        } catch (const std::exception& e) {
          // The log still holds these entries; a restart applies them again.
          std::fprintf(stderr, "berthd: fatal: cannot apply committed entries: %s\n", e.what());
          std::_Exit(70);
        }
      },
      [self](applied_atom) -> uint64_t { return self->state.store->applied_index(); },
      [self](load_atom) -> state_contents { return self->state.store->load(); },
      [self](snapshot_atom) -> std::tuple<uint64_t, std::string> {
        try {
          return {self->state.store->applied_index(), self->state.store->snapshot()};
        } catch (const std::exception& e) {
          std::fprintf(stderr, "berthd: fatal: cannot snapshot the state: %s\n", e.what());
          std::_Exit(70);
        }
      },
      [self](install_atom, const std::string& bytes) {
        try {
          self->state.store->install(bytes);
          self->state.stats->applied(self->state.store->applied_index());
        } catch (const std::exception& e) {
          std::fprintf(stderr, "berthd: fatal: cannot install a snapshot: %s\n", e.what());
          std::_Exit(70);
        }
      },
      [self](digest_atom) -> std::tuple<uint64_t, std::string> {
        return {self->state.store->applied_index(), self->state.store->digest()};
      },
  };
}

}  // namespace berth
