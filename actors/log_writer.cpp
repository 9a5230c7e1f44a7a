#include "actors/log_writer.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace berth {

log_writer_actor::behavior_type log_writer(log_writer_actor::stateful_pointer<log_writer_state> self,
                                           std::shared_ptr<log_store> store,
                                           std::shared_ptr<metrics> stats) {
  self->state.store = std::move(store);
  self->state.stats = std::move(stats);
  return {
      [self](append_atom, const log_batch& batch) -> uint64_t {
        log_write w;
        w.entries = batch.records;
        auto start = std::chrono::steady_clock::now();
        try {
          self->state.store->write(w);
        } catch (const std::exception& e) {
          // Nothing after this point could be made durable: stop at once
          // rather than acknowledge anything (fail-stop).
          std::fprintf(stderr, "berthd: fatal: cannot write the log: %s\n", e.what());
          std::_Exit(70);
        }
        uint64_t last = batch.records.empty() ? 0 : batch.records.back().index;
        std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        self->state.stats->log_written(batch.records.size(), last, took.count());
        return last;
      },
  };
}

}  // namespace berth
