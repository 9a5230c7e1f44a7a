#include "actors/csi_plugin.hpp"

#include "actors/clock.hpp"
#include "control/lease.hpp"
#include "csi/client.hpp"
#include "log/log.hpp"

namespace berth {

namespace {

using self_ptr = csi_plugin_actor::stateful_pointer<csi_plugin_state>;

// The CSI volume of the job a worker runs, for the log lines of its calls
// (each worker is a thread of its own).
thread_local const std::string* current_volume = nullptr;

// A worker: runs one job at a time on its own thread.
csi_plugin_actor::behavior_type csi_worker(std::shared_ptr<csi::client> client) {
  return {
      [client](csi_atom, const csi_job& job) -> csi_outcome {
        current_volume = &job.volume;
        struct reset {
          ~reset() { current_volume = nullptr; }
        } on_return;
        try {
          return job.run(*client);
        } catch (const std::exception& e) {
          csi_outcome out;
          out.error = failure{errc::internal, std::string("CSI call failed: ") + e.what()};
          return out;
        }
      },
      [](tick_atom) {},  // a worker has no timer
  };
}

void report(self_ptr self, const std::string& plugin, const std::shared_ptr<metrics>& stats) {
  auto& g = *self->state.gate;
  for (auto [kind, name] :
       {std::pair{call_kind::controller, "controller"}, std::pair{call_kind::node, "node"}})
    stats->csi_calls_in_flight(plugin, name, static_cast<size_t>(g.running(kind)),
                               static_cast<size_t>(g.limit(kind)));
}

void run_ready(self_ptr self, const std::string& plugin, const std::shared_ptr<metrics>& stats);

void on_done(self_ptr self, const std::string& plugin, const std::shared_ptr<metrics>& stats,
             uint64_t ticket, csi_plugin_actor worker, csi_outcome out) {
  auto& st = self->state;
  st.idle.push_back(std::move(worker));
  auto it = st.jobs.find(ticket);
  if (it == st.jobs.end()) return;
  if (st.gate->finish(ticket, out.overloaded, steady_ms()) == call_gate::verdict::retry) {
    stats->csi_call_backoff(plugin);
    logging::warn("csi", "plugin overloaded: CSI call retried after a backoff",
                  {{"plugin", plugin},
                   {"external_id", it->second.job.volume},
                   {"calls_limit", st.gate->limit(it->second.job.kind)}});
  } else {
    it->second.rp.deliver(std::move(out));
    st.jobs.erase(it);
  }
  run_ready(self, plugin, stats);
}

// Sends a job the gate started to a worker.
void send_job(self_ptr self, const std::string& plugin, const std::shared_ptr<metrics>& stats,
              uint64_t ticket) {
  auto& st = self->state;
  auto it = st.jobs.find(ticket);
  if (it == st.jobs.end()) return;
  csi_plugin_actor worker;
  if (st.idle.empty()) {
    worker = self->spawn<caf::detached + caf::linked>(csi_worker, st.client);
    ++st.workers;
  } else {
    worker = std::move(st.idle.back());
    st.idle.pop_back();
  }
  self->request(worker, caf::infinite, csi_atom::value, it->second.job)
      .then(
          [self, plugin, stats, ticket, worker](csi_outcome& out) {
            on_done(self, plugin, stats, ticket, worker, std::move(out));
          },
          [self, plugin, stats, ticket, worker](caf::error& e) {
            csi_outcome out;
            out.error = failure{errc::internal, "CSI call failed: " + to_string(e)};
            on_done(self, plugin, stats, ticket, worker, std::move(out));
          });
}

// Answers a job with `f` without sending its call; `started`: the gate let
// it start, so its slot is given back.
void answer_unsent(self_ptr self, uint64_t ticket, failure f, bool started) {
  auto& st = self->state;
  auto it = st.jobs.find(ticket);
  if (it == st.jobs.end()) return;
  csi_outcome out;
  out.error = std::move(f);
  it->second.rp.deliver(std::move(out));
  st.jobs.erase(it);
  if (started) st.gate->finish(ticket, false, steady_ms());
}

// Hands every job the gate lets start to a worker; arms the timer for the
// next backoff that ends.
void run_ready(self_ptr self, const std::string& plugin, const std::shared_ptr<metrics>& stats) {
  auto& st = self->state;
  // Calls that waited longer than --csi-timeout for their turn are answered
  // without being sent: the server gives up on a step after 75 s, and a
  // call that started later could undo what it did since.
  for (auto ticket : st.gate->expire(steady_ms())) {
    auto it = st.jobs.find(ticket);
    if (it == st.jobs.end()) continue;
    logging::warn("csi", "CSI call not sent: it waited too long for its turn",
                  {{"plugin", plugin}, {"external_id", it->second.job.volume}});
    answer_unsent(self, ticket,
                  failure{errc::unavailable,
                          "plugin '" + plugin +
                              "': the call waited longer than --csi-timeout behind other calls "
                              "of this plugin or volume and was not sent; retry"},
                  false);
  }
  for (auto ticket : st.gate->start(steady_ms())) {
    auto& waiting = st.jobs.at(ticket);
    uint64_t newest = st.fence ? st.fence->load() : 0;
    if (waiting.job.leader_term != 0 && waiting.job.leader_term < newest) {
      // Admitted when its leader was the newest; this node has heard of a
      // newer one since, while the call waited for its turn.
      answer_unsent(self, ticket,
                    failure{errc::refused, "plugin '" + plugin +
                                               "': a call of the deposed leader of term " +
                                               std::to_string(waiting.job.leader_term) +
                                               " was not sent (this node follows term " +
                                               std::to_string(newest) + ")"},
                    true);
      continue;
    }
    if (waiting.job.publish && st.publish_floor &&
        !publish_allowed(waiting.job.claim_index, st.publish_floor->load())) {
      // Admitted before this node's lease ran out; the servers may have
      // released the claim without the node since (control/lease).
      answer_unsent(self, ticket,
                    failure{errc::unavailable,
                            "plugin '" + plugin +
                                "': the publish waited while this node's lease ran out and was "
                                "not sent (its claim may have been released meanwhile); retry"},
                    true);
      continue;
    }
    if (!waiting.job.confirm) {
      send_job(self, plugin, stats, ticket);
      continue;
    }
    // A step of a server's helper (actors/node_call.hpp): sent only once
    // the helper said, just now, that it still waits for it.  Its turn
    // (the gate's slot, the volume's place) is held meanwhile.
    auto helper = caf::actor_cast<caf::actor>(waiting.job.confirm);
    auto refuse = [self, plugin, ticket](const std::string& why) {
      auto& st = self->state;
      auto it = st.jobs.find(ticket);
      if (it == st.jobs.end()) return;
      logging::warn("csi", "CSI call not sent: the server gave up on its step",
                    {{"plugin", plugin}, {"external_id", it->second.job.volume}, {"why", why}});
      answer_unsent(self, ticket,
                    failure{errc::unavailable,
                            "plugin '" + plugin +
                                "': the step reached this node after the server gave up on it (" +
                                why + ") and its CSI call was not sent; the server retries it"},
                    true);
    };
    if (!helper) {
      refuse("its sender is gone");
      self->send(self, tick_atom::value);  // the jobs behind it, once this loop is done
      continue;
    }
    self->request(helper, step_confirm_timeout, confirm_atom::value)
        .then(
            [self, plugin, stats, ticket, refuse](bool waits) {
              if (waits) {
                send_job(self, plugin, stats, ticket);
                return;
              }
              refuse("its sender no longer waits for it");
              run_ready(self, plugin, stats);
            },
            [self, plugin, stats, refuse](caf::error& e) {
              refuse("its sender did not confirm it: " + to_string(e));
              run_ready(self, plugin, stats);
            });
  }
  report(self, plugin, stats);
  auto wake = st.gate->next_wakeup();
  if (wake && !st.tick_pending) {
    st.tick_pending = true;
    self->delayed_send(self, std::chrono::milliseconds(std::max<int64_t>(1, *wake - steady_ms())),
                       tick_atom::value);
  }
}

}  // namespace

csi_plugin_actor::behavior_type csi_plugin(
    csi_plugin_actor::stateful_pointer<csi_plugin_state> self, node_plugin plugin,
    std::chrono::milliseconds deadline, std::shared_ptr<metrics> stats,
    std::shared_ptr<const std::atomic<uint64_t>> fence,
    std::shared_ptr<const std::atomic<uint64_t>> publish_floor) {
  auto& st = self->state;
  st.fence = std::move(fence);
  st.publish_floor = std::move(publish_floor);
  st.client = std::make_shared<csi::client>(plugin.endpoint, deadline);
  st.wait_limit_ms = deadline.count();
  st.client->observe(
      [stats, id = plugin.id](csi::method m, const csi::call_status& s, double seconds) {
        auto method = std::string(csi::method_name(m));
        stats->csi_call(id, method, csi::code_name(s.grpc_code), seconds);
        // Never the request: it may carry secrets, parameters, contexts and
        // mount flags.  The plugin's own code and message only.
        // The job's key: the CSI volume id, or "create NS/ID" for CreateVolume.
        std::string_view key = "external_id";
        auto volume = current_volume ? *current_volume : std::string();
        if (volume.rfind("create ", 0) == 0) {
          key = "volume";
          volume = volume.substr(7);
        }
        if (!s.ok())
          logging::warn("csi", "CSI call failed",
                        {{"plugin", id},
                         {"method", method},
                         {"code", csi::code_name(s.grpc_code)},
                         {"message", s.message},
                         {key, volume},
                         {"outcome", std::string(csi::outcome_name(s.kind))}});
        else if (logging::enabled(logging::level::trace))
          logging::trace("csi", "CSI call done",
                         {{"plugin", id},
                          {"method", method},
                          {key, volume},
                          {"ms", static_cast<int64_t>(seconds * 1000)}});
      });
  st.gate = std::make_unique<call_gate>(plugin.max_controller_calls, plugin.max_node_calls);
  report(self, plugin.id, stats);
  // Idle workers end with the connection (they are linked to it).
  return {
      [self, id = plugin.id, stats](csi_atom, csi_job& job) -> caf::result<csi_outcome> {
        auto& st = self->state;
        auto rp = self->make_response_promise<csi_outcome>();
        auto now = steady_ms();
        auto start_by = job.kind == call_kind::identity ? 0 : now + st.wait_limit_ms;
        auto ticket = st.gate->add(job.kind, job.volume, now, start_by);
        st.jobs.emplace(ticket, csi_plugin_state::waiting_job{std::move(job), rp});
        run_ready(self, id, stats);
        return rp;
      },
      [self, id = plugin.id, stats](tick_atom) {
        self->state.tick_pending = false;
        run_ready(self, id, stats);
      },
  };
}

}  // namespace berth
