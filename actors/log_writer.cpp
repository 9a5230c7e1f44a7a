#include "actors/log_writer.hpp"

#include <cstdio>
#include <cstdlib>

namespace berth {

log_writer_actor::behavior_type log_writer(log_writer_actor::stateful_pointer<log_writer_state> self,
                                           std::shared_ptr<log_store> store) {
  self->state.store = std::move(store);
  return {
      [self](append_atom, const log_batch& batch) -> uint64_t {
        log_write w;
        w.entries = batch.records;
        try {
          self->state.store->write(w);
        } catch (const std::exception& e) {
          // Nothing after this point could be made durable: stop at once
          // rather than acknowledge anything (fail-stop).
          std::fprintf(stderr, "berthd: fatal: cannot write the log: %s\n", e.what());
          std::_Exit(70);
        }
        return batch.records.empty() ? 0 : batch.records.back().index;
      },
  };
}

}  // namespace berth
