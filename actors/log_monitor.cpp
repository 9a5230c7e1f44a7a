#include "actors/log_monitor.hpp"

#include <algorithm>

#include <caf/actor_registry.hpp>
#include <caf/actor_system.hpp>
#include <caf/send.hpp>

#include "actors/clock.hpp"
#include "log/log.hpp"

namespace berth {

namespace {

using self_ptr = log_monitor_actor::stateful_pointer<log_monitor_state>;

// A monitor's stream keeps lines down to its level coming this long after
// its last request (it asks again right after each answer).
constexpr auto keep_level = std::chrono::seconds(30);
constexpr uint32_t default_max_wait_ms = 30000;

logging::level level_of(const v1::MonitorRequest& r) {
  return logging::parse_level(r.level()).value_or(logging::level::info);
}

v1::MonitorResult read(const v1::MonitorRequest& r) {
  auto got = logging::lines_after(r.after(), level_of(r), r.tail());
  v1::MonitorResult out;
  for (auto& l : got.lines) out.add_lines(std::move(l));
  out.set_last(got.last);
  out.set_dropped(got.dropped);
  return out;
}

// Answers every waiting request that has lines or whose wait is over.
void answer(const self_ptr& self) {
  auto& ws = self->state.waits;
  auto now = steady_ms();
  for (auto it = ws.begin(); it != ws.end();) {
    auto r = read(it->request);
    if (r.lines_size() > 0 || it->deadline_ms <= now) {
      it->rp.deliver(wrap(std::move(r)));
      it = ws.erase(it);
    } else {
      ++it;
    }
  }
  logging::arm(!ws.empty());
}

}  // namespace

log_monitor_actor::behavior_type log_monitor(self_ptr self, uint32_t max_wait_ms) {
  // The logging thread only sends a message: this actor reads the ring.
  auto me = caf::actor_cast<log_monitor_actor>(self);
  logging::on_line([me] { caf::anon_send(me, tick_atom::value); });
  return {
      [self, max_wait_ms](monitor_atom,
                          pb<v1::MonitorRequest>& req) -> caf::result<pb<v1::MonitorResult>> {
        auto wait = std::min(req.msg.wait_ms(), max_wait_ms);
        logging::want(level_of(req.msg), std::chrono::steady_clock::now() + keep_level +
                                             std::chrono::milliseconds(wait));
        auto r = read(req.msg);
        if (r.lines_size() > 0 || wait == 0) return wrap(std::move(r));
        auto rp = self->make_response_promise<pb<v1::MonitorResult>>();
        self->state.waits.push_back({std::move(req.msg), steady_ms() + wait, rp});
        logging::arm(true);
        self->delayed_send(self, std::chrono::milliseconds(wait), tick_atom::value);
        return rp;
      },
      [self](tick_atom) { answer(self); },
  };
}

log_monitor_actor start_log_monitor(caf::actor_system& sys) {
  // Spawned with an argument: CAF 0.17's init-function factory dereferences
  // an empty argument tuple for an actor spawned without any (UBSan's
  // "reference binding to null pointer", issue 32).
  auto m = sys.spawn(log_monitor, default_max_wait_ms);
  sys.registry().put(monitor_atom::value, caf::actor_cast<caf::strong_actor_ptr>(m));
  return m;
}

log_monitor_actor log_monitor_of(caf::actor_system& sys) {
  return caf::actor_cast<log_monitor_actor>(sys.registry().get(monitor_atom::value));
}

}  // namespace berth
