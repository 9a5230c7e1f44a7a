#include "tls/caf_tls.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <openssl/crypto.h>
#include <openssl/ssl.h>

namespace berth::tls {

void keep_openssl_until_exit() {
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT, nullptr);
}

void configure(caf::actor_system_config& cfg, const files& f) {
  if (!f.enabled()) return;
  cfg.load<caf::openssl::manager>();
  cfg.openssl_cafile = f.ca;
  cfg.openssl_certificate = f.cert;
  cfg.openssl_key = f.key;
  cfg.set("middleman.enable-automatic-connections", false);
}

bool enabled(caf::actor_system& sys) {
  return sys.has_openssl_manager();
}

caf::io::middleman_actor connector(caf::actor_system& sys) {
  if (sys.has_openssl_manager()) return sys.openssl_manager().actor_handle();
  return sys.middleman().actor_handle();
}

caf::expected<uint16_t> publish_tls(caf::actor_system& sys, const caf::strong_actor_ptr& whom,
                                    std::set<std::string> signatures, uint16_t port,
                                    const std::string& bind) {
  return caf::openssl::publish(sys, whom, std::move(signatures), port, bind.c_str(), true);
}

caf::expected<caf::strong_actor_ptr> remote_actor_tls(caf::actor_system& sys,
                                                      const std::set<std::string>& signatures,
                                                      const std::string& host, uint16_t port) {
  return caf::openssl::remote_actor(sys, signatures, host, port);
}

}  // namespace berth::tls
