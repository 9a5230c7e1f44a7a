// berth tls ca create / berth tls cert create: a cluster's CA and
// certificates, written here (no berthd involved).  Names and files:
// tls/tls.hpp; the OpenSSL calls: tls/pki.hpp.
#pragma once

#include <string>

#include "tls/tls.hpp"

namespace berth {

struct tls_ca_options {
  std::string dir = ".";
  std::string name = "berth-agent-ca";
  int days = tls::default_ca_days;
};

struct tls_cert_options {
  bool server = false, client = false, cli = false;
  std::string dir = ".";
  std::string name = "global";  // the cluster: server.NAME.berth
  std::string ca_cert = tls::default_ca_cert;
  std::string ca_key = tls::default_ca_key;
  int days = tls::default_cert_days;
};

// Each prints the files written (never a key's contents) and returns the
// exit code.
int run_tls_ca_create(const tls_ca_options& o, bool json);
int run_tls_cert_create(const tls_cert_options& o, bool json);

}  // namespace berth
