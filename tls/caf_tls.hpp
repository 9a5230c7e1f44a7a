// CAF's TLS module (caf::openssl) for berth's actor systems: one switch in
// the configuration, and the two calls that differ (publish, and the
// middleman actor that connects).  With TLS every connection of the actor
// system verifies the peer's certificate against the CA, on both sides.
// The module is CAF 0.17.6's, built from third_party/caf_openssl with the
// fixes its PATCHES.md lists (not Debian's libcaf_openssl.so).
//
// What CAF 0.17.6 does not allow: a check of the peer certificate's name.
// Its session sets SSL_VERIFY_PEER without a verify callback and keeps the
// SSL object private, so berth cannot refuse, e.g., a client certificate on
// the raft port.  What the extended key usage of berth's certificates gives
// instead: only a server certificate can serve (see tls/tls.hpp).
#pragma once

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <cstdint>
#include <set>
#include <string>

#include "tls/tls.hpp"

namespace berth::tls {

// Call first in main, before anything uses OpenSSL.  Stops OpenSSL from
// freeing its state in an atexit handler: CAF 0.17's detached actor threads
// (named caf.actor) may still run their thread-local destructors, which free
// OpenSSL's per-thread error state, after the actor system's destructor
// returned, so the exit-time clean-up raced them (a double free and leaks
// under ASan in the TLS shell, issue 32).  The process's memory goes back to
// the kernel at exit either way.
void keep_openssl_until_exit();

// Loads caf::openssl and sets its certificate options; turns CAF's
// automatic connections off (they open a plain-text port of their own).
// Call before the actor system is built, after caf::io::middleman is
// loaded; nothing when TLS is not enabled.
void configure(caf::actor_system_config& cfg, const files& f);

// Whether `sys` was configured with TLS.
bool enabled(caf::actor_system& sys);

// The middleman actor to send caf::connect_atom to: CAF's own, or the TLS
// one.
caf::io::middleman_actor connector(caf::actor_system& sys);

caf::expected<uint16_t> publish_tls(caf::actor_system& sys, const caf::strong_actor_ptr& whom,
                                    std::set<std::string> signatures, uint16_t port,
                                    const std::string& bind);
caf::expected<caf::strong_actor_ptr> remote_actor_tls(caf::actor_system& sys,
                                                      const std::set<std::string>& signatures,
                                                      const std::string& host, uint16_t port);

// Publishes the typed handle `whom` at port (0: any) on `bind`, with TLS
// when configured.
template <class Handle>
caf::expected<uint16_t> publish(caf::actor_system& sys, const Handle& whom, uint16_t port,
                                const std::string& bind) {
  if (enabled(sys))
    return publish_tls(sys, caf::actor_cast<caf::strong_actor_ptr>(whom), sys.message_types(whom),
                       port, bind);
  return sys.middleman().publish(whom, port, bind.c_str(), true);
}

// Connects to the actor at host:port (blocking), with TLS when configured.
template <class Handle>
caf::expected<Handle> remote_actor(caf::actor_system& sys, const std::string& host, uint16_t port) {
  if (!enabled(sys)) return sys.middleman().remote_actor<Handle>(host, port);
  caf::detail::type_list<Handle> tk;
  auto res = remote_actor_tls(sys, sys.message_types(tk), host, port);
  if (!res) return std::move(res.error());
  return caf::actor_cast<Handle>(std::move(*res));
}

}  // namespace berth::tls
