#include "apps/berth/event_stream.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/berth/client.hpp"
#include "apps/berth/commands.hpp"
#include "apps/berth/send.hpp"
#include "messages/codec.hpp"

namespace berth {

namespace {

// How long a server holds a poll without events, and how long the shell
// waits for its answer before it tries the next server (a killed server's
// connection does not always fail the request in flight).
constexpr uint32_t poll_wait_ms = 1000;
constexpr int poll_timeout_s = 6;

}  // namespace

int stream_events(const event_stream_options& o, bool json_errors, std::ostream& out,
                  std::ostream& err) {
  globals g;
  g.json = json_errors;
  if (o.addresses.empty()) return fail(g, failure{errc::invalid, "no server address given"});
  size_t at = 0;
  uint64_t next = o.index;
  auto c = std::make_unique<client>(o.addresses[at], poll_timeout_s);
  auto last_answer = std::chrono::steady_clock::now();
  size_t compacted = 0;  // servers in a row whose journal starts after `next`
  for (;;) {
    if (o.until_index != 0 && next > o.until_index) return exit_ok;
    v1::Request req;
    auto* s = req.mutable_event_stream();
    s->set_index(next);
    for (auto t : o.topics) s->add_topics(t);
    s->set_namespace_(o.ns);
    s->set_wait_ms(poll_wait_ms);
    auto result = c->call(req);
    failure why{errc::internal, ""};
    if (auto* f = std::get_if<failure>(&result)) {
      why = *f;
    } else {
      auto& r = std::get<v1::Response>(result);
      if (r.error().code() == v1::OK) {
        last_answer = std::chrono::steady_clock::now();
        compacted = 0;
        for (const auto& e : r.events()) {
          if (o.until_index != 0 && e.index() > o.until_index) break;
          out << event_json(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
        }
        out.flush();
        next = std::max(next, r.next_index());
        continue;
      }
      why = failure{static_cast<errc>(r.error().code()), r.error().message()};
      if (r.error().code() == v1::NOT_FOUND && r.journal_first_index() != 0) {
        // Another server may have kept more (this one restarted, say).
        if (++compacted >= o.addresses.size()) return fail(g, why);
      } else if (why.code != errc::unavailable) {
        return fail(g, why);
      }
    }
    if (std::chrono::steady_clock::now() - last_answer > std::chrono::seconds(o.timeout))
      return fail(g, why);
    at = (at + 1) % o.addresses.size();
    err << "berth: " << why.message << "; going on at index " << next << " with "
        << o.addresses[at] << "\n";
    c.reset();
    c = std::make_unique<client>(o.addresses[at], poll_timeout_s);
    // Pacing, when every server is down at once.
    if (at == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace berth
