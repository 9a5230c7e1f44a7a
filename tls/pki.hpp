// The OpenSSL side of `berth tls`: writes the CA and the certificates that
// tls/tls.hpp planned, checks that a certificate chains to a CA, and tells
// why a TLS connection to a berthd failed.  Keys are EC P-256, signed with
// SHA-256.  A key file is mode 0600, a certificate 0644; each is written to
// FILE.tmp, fsynced, linked to FILE (never over an existing one) and the
// directory fsynced.  No key is ever printed or logged.
#pragma once

#include <optional>
#include <string>

#include "messages/failure.hpp"
#include "tls/tls.hpp"

namespace berth::tls {

// Writes a self-signed CA (key and certificate).
std::optional<failure> create_ca(const ca_plan& p);

// Writes a key and a certificate signed by the CA in the two files.
std::optional<failure> create_cert(const cert_plan& p, const std::string& ca_cert_file,
                                   const std::string& ca_key_file);

// Whether the certificate in `cert_file` chains to the CA in `ca_file`
// (X509_verify_cert), for use as `r` says: as a server (TLS server purpose)
// when r is role::server, else as a client.
std::optional<failure> verify_chain(const std::string& cert_file, const std::string& ca_file,
                                    role r);

// Checks that the three files can be read and that the key belongs to the
// certificate, before an actor system is built on them (CAF only says
// "cannot load certificate" when the first connection starts).
std::optional<failure> check_files(const files& f);

// After a connection to HOST:PORT failed: whether a TLS server answers
// there.  Tries a TLS handshake (with `f`'s certificate when enabled) and
// returns a sentence for the operator, or nothing when no TLS server
// answered (the server is then plain text, or not there).
std::optional<std::string> diagnose(const std::string& host, uint16_t port, const files& f);

}  // namespace berth::tls
