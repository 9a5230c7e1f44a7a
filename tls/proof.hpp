// A server's proof, over the raft link, that it holds a server certificate
// of the cluster's CA.  CAF 0.17.6's TLS module verifies the peer's chain
// and nothing else (no verify callback, the SSL object private), so a
// client or cli certificate of the same CA can open a raft connection; the
// replicated log therefore asks every peer for this proof and ignores the
// Raft and discovery messages of a peer that has not given it.
//
// The exchange (actors/raft_log.cpp): the prover asks the verifier for a
// challenge (fresh random bytes, remembered per connection), signs it with
// its private key and sends its certificate with the signature; the
// verifier checks the certificate's chain against the CA for a TLS server,
// its name (server.<cluster>.berth) and the signature with the
// certificate's key.  A replayed proof fails: each challenge is new.
//
// OpenSSL; errors are values naming what failed.  Tests: tests/tls_test.cpp.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "messages/failure.hpp"
#include "tls/tls.hpp"

namespace berth::tls {

struct server_proof {
  std::string certificate;  // PEM
  std::string signature;    // over signed_bytes(challenge), with the certificate's key
};

// 32 random bytes, hex.
std::string new_challenge();

// What a proof signs: a fixed prefix (so that the signature means nothing
// elsewhere) and the challenge.
std::string signed_bytes(const std::string& challenge);

// The certificate and key of this process (--tls-cert, --tls-key), loaded
// once; copies share them.
class identity {
 public:
  static std::variant<identity, failure> load(const files& f);
  std::variant<server_proof, failure> prove(const std::string& challenge) const;
  const std::string& ca_pem() const { return ca_pem_; }

 private:
  struct key;
  std::shared_ptr<key> key_;
  std::string cert_pem_;
  std::string ca_pem_;
};

// Checks `p` against the CA (PEM) and `challenge`: the certificate chains
// to the CA for a TLS server (extended key usage serverAuth: a client or
// cli certificate of berth's fails here), its common name is
// server.<cluster>.berth, and the signature verifies with its key.
// Returns the certificate's common name, or why the proof fails.
std::variant<std::string, failure> verify_server_proof(const std::string& ca_pem,
                                                       const std::string& challenge,
                                                       const server_proof& p);

}  // namespace berth::tls
