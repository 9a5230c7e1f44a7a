#include "actors/event_journal.hpp"

#include <algorithm>
#include <chrono>

namespace berth {

namespace {

using self_ptr = event_journal_actor::stateful_pointer<event_journal_state>;

constexpr uint32_t default_max_events = 1000;
constexpr uint32_t longest_wait_ms = 60'000;

// The page for a request, or nullopt while it should wait.
std::optional<v1::Response> answer(const event_journal& j, const v1::EventStreamRequest& req,
                                   bool waited_enough) {
  event_filter f;
  for (auto t : req.topics()) f.topics.insert(static_cast<v1::EventTopic>(t));
  f.ns = req.namespace_();
  auto page = j.read(f, req.index(), req.max_events() == 0 ? default_max_events : req.max_events());
  v1::Response r;
  if (page.error) {
    r.mutable_error()->set_code(static_cast<v1::ErrorCode>(page.error->code));
    r.mutable_error()->set_message(page.error->message);
    r.set_journal_first_index(page.first_index);
    return r;
  }
  if (page.events.empty() && !waited_enough) return std::nullopt;
  for (auto& e : page.events) *r.add_events() = std::move(e);
  r.set_next_index(page.next_index);
  return r;
}

// Answers the waiting requests that have events now.
void answer_waiting(self_ptr self) {
  auto& st = self->state;
  for (auto it = st.waits.begin(); it != st.waits.end();) {
    if (auto r = answer(st.journal, it->second.request, false)) {
      it->second.rp.deliver(wrap(std::move(*r)));
      it = st.waits.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

event_journal_actor::behavior_type event_journal_server(self_ptr self, size_t capacity,
                                                        uint64_t applied) {
  self->state.journal = event_journal(capacity, applied);
  return {
      [self](apply_atom, event_batch& batch) {
        auto& j = self->state.journal;
        if (batch.reset)
          j.reset(batch.applied);
        else
          j.append(batch.applied, std::move(batch.events));
        answer_waiting(self);
      },
      [self](stream_atom, pb<v1::EventStreamRequest>& req) -> caf::result<pb<v1::Response>> {
        auto& st = self->state;
        // "From now" is pinned to this server's next index when asked, so
        // the events applied while it waits are not missed.
        if (req.msg.index() == 0) req.msg.set_index(st.journal.applied() + 1);
        auto wait = std::min(req.msg.wait_ms(), longest_wait_ms);
        if (auto r = answer(st.journal, req.msg, wait == 0)) return wrap(std::move(*r));
        auto id = st.next_wait++;
        auto rp = self->make_response_promise<pb<v1::Response>>();
        st.waits.emplace(id, event_journal_state::waiting{std::move(req.msg), rp});
        self->delayed_send(self, std::chrono::milliseconds(wait), tick_atom::value, id);
        return rp;
      },
      [self](tick_atom, uint64_t id) {
        auto& st = self->state;
        auto it = st.waits.find(id);
        if (it == st.waits.end()) return;
        if (auto r = answer(st.journal, it->second.request, true))
          it->second.rp.deliver(wrap(std::move(*r)));
        st.waits.erase(it);
      },
  };
}

}  // namespace berth
