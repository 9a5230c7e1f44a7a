#include "apps/berth/client.hpp"

#include <thread>

#include <atomic>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/actors.hpp"

namespace berth {

struct client::impl {
  impl() : sys(config()) {}

  static caf::actor_system_config& config() {
    static caf::actor_system_config cfg = [] {
      caf::actor_system_config c;
      c.load<caf::io::middleman>();
      c.set("scheduler.max-threads", size_t{1});
      c.set("logger.file-verbosity", caf::atom("quiet"));
      c.set("logger.console-verbosity", caf::atom("quiet"));
      add_message_types(c);
      return c;
    }();
    return cfg;
  }

  // Forgets the server's actor handle: the next call connects anew.
  void disconnect() {
    api = nullptr;
    lost.reset();
  }

  caf::actor_system sys;
  api_actor api;
  // Set by the middleman (on its thread) when the connection behind `api`
  // closes, e.g. berthd was killed while the shell sat at its prompt.
  // Checked before sending so that a request is never sent to a dead proxy
  // and never sent twice.
  std::shared_ptr<std::atomic<bool>> lost;
};

client::client(std::string address, int timeout_seconds)
    : address_(std::move(address)), timeout_(timeout_seconds), impl_(std::make_unique<impl>()) {}

client::~client() = default;

std::variant<v1::Response, failure> client::call(const v1::Request& req) {
  // A server answers "retry" when it did nothing (no leader elected yet,
  // the leader's server not reachable): send the same request again until
  // the timeout, so the shell just works through an election.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_);
  auto backoff = std::chrono::milliseconds(50);
  for (;;) {
    auto out = call_once(req);
    auto* r = std::get_if<v1::Response>(&out);
    if (r == nullptr || !r->error().retry() ||
        std::chrono::steady_clock::now() + backoff > deadline)
      return out;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

std::variant<v1::Response, failure> client::call_once(const v1::Request& req) {
  auto unreachable = [&](const std::string& why) {
    return failure{errc::unavailable, "cannot reach berthd at " + address_ + ": " + why +
                                          " (is berthd running? set --address or BERTH_ADDRESS)"};
  };
  if (impl_->lost && *impl_->lost) impl_->disconnect();
  if (!impl_->api) {
    auto colon = address_.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return failure{errc::invalid, "address '" + address_ + "' is not HOST:PORT"};
    int port = 0;
    try {
      port = std::stoi(address_.substr(colon + 1));
    } catch (...) {
      port = -1;
    }
    if (port <= 0 || port > 65535)
      return failure{errc::invalid, "address '" + address_ + "' has no valid port"};
    auto host = address_.substr(0, colon);
    auto api = impl_->sys.middleman().remote_actor<api_actor>(host, static_cast<uint16_t>(port));
    if (!api)
      return unreachable(api.error() == caf::sec::cannot_connect_to_node
                             ? "nothing answers there"
                             : impl_->sys.render(api.error()));
    impl_->api = *api;
    impl_->lost = std::make_shared<std::atomic<bool>>(false);
    impl_->api->attach_functor([lost = impl_->lost] { *lost = true; });
  }
  std::variant<v1::Response, failure> out = failure{errc::internal, "no response"};
  caf::scoped_actor self{impl_->sys};
  v1::Request copy = req;
  copy.set_api_version(1);
  self->request(impl_->api, std::chrono::seconds(timeout_), api_atom::value, wrap(std::move(copy)))
      .receive([&](pb<v1::Response>& r) { out = std::move(r.msg); },
               [&](caf::error& e) {
                 if (e == caf::sec::request_timeout)
                   out = failure{errc::unavailable, "berthd at " + address_ + " did not answer within " +
                                                        std::to_string(timeout_) + "s"};
                 else
                   out = unreachable(impl_->sys.render(e));
                 impl_->disconnect();
               });
  return out;
}

}  // namespace berth
