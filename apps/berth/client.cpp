#include "apps/berth/client.hpp"

#include <optional>

#include <thread>

#include <atomic>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/actors.hpp"
#include "control/views.hpp"
#include "tls/caf_tls.hpp"
#include "tls/pki.hpp"

namespace berth {

namespace {

tls::files& process_tls() {
  static tls::files f;
  return f;
}

}  // namespace

void use_tls(const tls::files& f) {
  process_tls() = f;
}

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
      tls::configure(c, process_tls());
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

bool changes_state(const v1::Request& req) {
  switch (req.command_case()) {
    case v1::Request::kAgentStatus:
    case v1::Request::kRaftListPeers:
    case v1::Request::kSnapshotSave:
    case v1::Request::kMonitor:
    case v1::Request::kEventStream:
    case v1::Request::kSnapshotList:
    case v1::Request::kVolumeListExternal:
    case v1::Request::kAclPolicyList:
    case v1::Request::kAclPolicyInfo:
    case v1::Request::kAclTokenList:
    case v1::Request::kAclTokenInfo:
    case v1::Request::kAclTokenSelf:
    case v1::Request::COMMAND_NOT_SET:
      return false;
    default:
      return !is_read(req);
  }
}

bool safe_to_repeat(const v1::Request& req) {
  switch (req.command_case()) {
    case v1::Request::kAllocRun:
      // A second run without an id is a second alloc; --explain runs nothing.
      // A group's members have their ids (NAME[i]).
      return req.alloc_run().explain() || !req.alloc_run().id().empty() ||
             !req.alloc_run().group().empty();
    case v1::Request::kAllocStop:
    case v1::Request::kVolumeClaim:
    case v1::Request::kVolumeRelease:
    case v1::Request::kVolumeDetach:
    case v1::Request::kVolumeDeregister:
    case v1::Request::kVolumeDelete:
    case v1::Request::kNodeDrain:
    case v1::Request::kNodeEligibility:
    case v1::Request::kSystemGc:
    // The snapshot's name is the shell's (fixed before the first send), so
    // CreateSnapshot finds what a first attempt made; delete and modify are
    // idempotent.
    case v1::Request::kSnapshotCreate:
    case v1::Request::kSnapshotDelete:
    case v1::Request::kVolumeModify:
    case v1::Request::kVolumeAvailability:
    case v1::Request::kVolumeExpand:  // the same size again changes nothing
    // The shell made the token's ids: a second send finds the first's token.
    case v1::Request::kAclBootstrap:
    case v1::Request::kAclTokenCreate:
    case v1::Request::kAclPolicyApply:  // the same document again changes nothing
      return true;
    default:
      return !changes_state(req);
  }
}

std::string check_command(const v1::Request& req) {
  auto volume = [](const std::string& ns, const std::string& id) {
    return "berth" + (ns.empty() || ns == "default" ? std::string() : " --namespace " + ns) +
           " volume status " + id;
  };
  switch (req.command_case()) {
    case v1::Request::kAllocRun:
      return req.alloc_run().id().empty() ? "berth alloc status"
                                          : "berth alloc status " + req.alloc_run().id();
    case v1::Request::kAllocStop:
      return "berth alloc status " + req.alloc_stop();
    case v1::Request::kVolumeRegister:
      return volume(req.volume_register().namespace_(), req.volume_register().id());
    case v1::Request::kVolumeCreate:
      return volume(req.volume_create().namespace_(), req.volume_create().id());
    case v1::Request::kVolumeClaim:
      return volume(req.volume_claim().namespace_(), req.volume_claim().volume_id());
    case v1::Request::kVolumeRelease:
      return volume(req.volume_release().namespace_(), req.volume_release().volume_id());
    case v1::Request::kVolumeDetach:
      return volume(req.volume_detach().namespace_(), req.volume_detach().volume_id());
    case v1::Request::kVolumeDeregister:
      return volume(req.volume_deregister().namespace_(), req.volume_deregister().volume_id());
    case v1::Request::kVolumeDelete:
      return volume(req.volume_delete().namespace_(), req.volume_delete().volume_id());
    case v1::Request::kVolumeAvailability:
      return volume(req.volume_availability().namespace_(),
                    req.volume_availability().volume_id());
    case v1::Request::kVolumeExpand:
      return volume(req.volume_expand().namespace_(), req.volume_expand().volume_id());
    case v1::Request::kPluginFingerprint:
      return "berth plugin status " + req.plugin_fingerprint().plugin_id();
    case v1::Request::kNodeDrain:
      return "berth node status " + req.node_drain().node_id();
    case v1::Request::kNodeEligibility:
      return "berth node status " + req.node_eligibility().node_id();
    case v1::Request::kSystemGc:
      return "berth system gc (it is safe to repeat)";
    case v1::Request::kSnapshotCreate:
    case v1::Request::kSnapshotDelete:
      return "berth volume snapshot list";
    case v1::Request::kVolumeModify:
      return volume(req.volume_modify().namespace_(), req.volume_modify().volume_id());
    case v1::Request::kAclBootstrap:
    case v1::Request::kAclTokenCreate:
    case v1::Request::kAclTokenDelete:
      return "berth acl token list";
    case v1::Request::kAclPolicyApply:
    case v1::Request::kAclPolicyDelete:
      return "berth acl policy list";
    default:
      return "berth operator raft list-peers";
  }
}

namespace {
std::string& process_token() {
  static std::string token;
  return token;
}
}  // namespace

void client::set_token(std::string secret) { process_token() = std::move(secret); }

std::variant<v1::Response, failure> client::call(const v1::Request& given) {
  std::optional<v1::Request> with_token;
  if (given.token().empty() && !process_token().empty()) {
    with_token = given;
    with_token->set_token(process_token());
  }
  const v1::Request& req = with_token ? *with_token : given;
  // A server answers "retry" when it did nothing (no leader elected yet,
  // the leader's server not reachable): send the same request again until
  // the timeout, so the shell just works through an election.  A lost
  // answer (maybe applied) is sent again too when that is safe; once one
  // was lost, the outcome stays "maybe applied" unless an answer comes.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_);
  auto backoff = std::chrono::milliseconds(50);
  bool repeat = safe_to_repeat(req);
  std::optional<v1::Response> lost;
  for (;;) {
    // Every attempt ends by the deadline: the command answers within --timeout.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto out = call_once(req, std::max(left, std::chrono::milliseconds(100)));
    auto* r = std::get_if<v1::Response>(&out);
    bool maybe = r != nullptr && r->error().maybe_applied();
    if (maybe) lost = *r;
    bool again = r == nullptr ? lost.has_value() : r->error().retry() || (maybe && repeat);
    if (!again || std::chrono::steady_clock::now() + backoff > deadline) {
      bool answered = r != nullptr && !r->error().retry() && !maybe;
      if (lost && !answered) return *lost;
      return out;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

std::variant<v1::Response, failure> client::call_once(const v1::Request& req,
                                                     std::chrono::milliseconds wait) {
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
    // Through the middleman actor, with a deadline: a plain-text shell that
    // reaches a TLS server waits for a handshake that never comes.
    caf::error err;
    {
      caf::scoped_actor self{impl_->sys};
      self->request(tls::connector(impl_->sys), std::chrono::seconds(std::min(timeout_, 10)),
                    caf::connect_atom::value, host, static_cast<uint16_t>(port))
          .receive([&](caf::node_id&, caf::strong_actor_ptr& ptr,
                       std::set<std::string>&) { impl_->api = caf::actor_cast<api_actor>(ptr); },
                   [&](caf::error& e) { err = std::move(e); });
    }
    if (!impl_->api) {
      // Something may have answered, but not as berthd does: say why when
      // TLS is why (a TLS server for a plain shell, another CA, ...).
      if (auto why = tls::diagnose(host, static_cast<uint16_t>(port), process_tls()))
        return failure{errc::unavailable, "cannot connect to berthd at " + address_ + ": " + *why};
      return unreachable(err == caf::sec::cannot_connect_to_node || !err ? "nothing answers there"
                                                                         : impl_->sys.render(err));
    }
    impl_->lost = std::make_shared<std::atomic<bool>>(false);
    impl_->api->attach_functor([lost = impl_->lost] { *lost = true; });
  }
  std::variant<v1::Response, failure> out = failure{errc::internal, "no response"};
  caf::scoped_actor self{impl_->sys};
  v1::Request copy = req;
  copy.set_api_version(1);
  // Sent: an answer lost from here on may hide a change that was made.
  auto lost = [&](const std::string& why) -> std::variant<v1::Response, failure> {
    if (!changes_state(req)) return failure{errc::unavailable, why};
    v1::Response r;
    r.mutable_error()->set_code(v1::UNAVAILABLE);
    r.mutable_error()->set_message(why + ": the change may or may not have been made");
    r.mutable_error()->set_maybe_applied(true);
    return r;
  };
  self->request(impl_->api, wait, api_atom::value, wrap(std::move(copy)))
      .receive([&](pb<v1::Response>& r) { out = std::move(r.msg); },
               [&](caf::error& e) {
                 if (e == caf::sec::request_timeout)
                   out = lost("berthd at " + address_ + " did not answer within " +
                              std::to_string(timeout_) + "s");
                 else
                   out = lost("the connection to berthd at " + address_ + " was lost (" +
                              impl_->sys.render(e) + ")");
                 impl_->disconnect();
               });
  return out;
}

}  // namespace berth
