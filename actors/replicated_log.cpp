#include "actors/replicated_log.hpp"

#include <caf/event_based_actor.hpp>

namespace berth {

namespace {

using self_ptr = replicated_log_actor::stateful_pointer<replicated_log_state>;

void flush(self_ptr self) {
  auto& st = self->state;
  if (st.writing || st.queued.empty()) return;
  st.writing = true;
  auto batch = std::make_shared<std::vector<replicated_log_state::pending>>(std::move(st.queued));
  st.queued.clear();
  log_batch records;
  records.records.reserve(batch->size());
  for (const auto& p : *batch) records.records.push_back({p.index, st.term, p.data});
  self->request(st.writer, caf::infinite, append_atom::value, std::move(records))
      .then([self, batch](uint64_t) {
        committed_batch committed;
        committed.entries.reserve(batch->size());
        for (auto& p : *batch) {
          p.promise.deliver(p.index);
          committed.entries.emplace_back(p.index, std::move(p.data));
        }
        self->send(self->state.machine, apply_atom::value, std::move(committed));
        self->state.writing = false;
        flush(self);
      });
}

}  // namespace

replicated_log_actor::behavior_type replicated_log(self_ptr self, uint64_t last_index,
                                                   log_writer_actor writer,
                                                   state_machine_actor machine) {
  self->state.last_index = last_index;
  self->state.writer = std::move(writer);
  self->state.machine = std::move(machine);
  return {
      [self](propose_atom, const pb<v1::LogEntry>& entry) -> caf::result<uint64_t> {
        auto& st = self->state;
        auto promise = self->make_response_promise<uint64_t>();
        st.queued.push_back({++st.last_index, entry.msg.SerializeAsString(), promise});
        flush(self);
        return promise;
      },
  };
}

}  // namespace berth
