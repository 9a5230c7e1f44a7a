#include "actors/api.hpp"

#include <chrono>

#include <caf/typed_event_based_actor.hpp>

namespace berth {

namespace {

std::string command_name(const v1::Request& r) {
  auto* field = v1::Request::descriptor()->FindFieldByNumber(r.command_case());
  return field ? field->name() : "unknown";
}

std::string outcome_name(const v1::Response& r) {
  switch (r.error().code()) {
    case v1::OK: return "ok";
    case v1::INVALID: return "invalid";
    case v1::NOT_FOUND: return "not_found";
    case v1::REFUSED: return "refused";
    case v1::UNAVAILABLE: return "unavailable";
    default: return "internal";
  }
}

}  // namespace

api_actor::behavior_type api(api_actor::pointer self, leader_actor leader,
                             std::shared_ptr<metrics> stats) {
  return {
      [=](api_atom a, pb<v1::Request>& req) -> caf::result<pb<v1::Response>> {
        auto rp = self->make_response_promise<pb<v1::Response>>();
        auto start = std::chrono::steady_clock::now();
        auto command = command_name(req.msg);
        self->request(leader, caf::infinite, a, std::move(req))
            .then(
                [=](pb<v1::Response>& resp) mutable {
                  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
                  stats->request_done(command, outcome_name(resp.msg), took.count());
                  rp.deliver(std::move(resp));
                },
                [=](caf::error& e) mutable {
                  auto f = to_failure(e);
                  v1::Response resp;
                  resp.mutable_error()->set_code(static_cast<v1::ErrorCode>(f.code));
                  resp.mutable_error()->set_message(f.message);
                  stats->request_done(command, outcome_name(resp), 0);
                  rp.deliver(wrap(std::move(resp)));
                });
        return rp;
      },
  };
}

}  // namespace berth
