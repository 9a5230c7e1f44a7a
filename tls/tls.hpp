// berth's TLS decisions as pure functions: the names and files of a
// cluster's CA and certificates (`berth tls ...`), and whether a set of
// --tls-* options is complete.  No OpenSSL, no files: tests/tls_test.cpp.
// The OpenSSL calls are in tls/pki.hpp, CAF's TLS module in tls/caf_tls.hpp.
//
// Certificate names, as Nomad names its own (`server.<region>.nomad`):
//   server.<cluster>.berth   berthd --server (and --dev)
//   client.<cluster>.berth   berthd --client
//   cli.<cluster>.berth      the berth shell
// with <cluster> "global" unless --name says otherwise.  Every certificate
// also holds the SANs localhost and 127.0.0.1.  A server certificate may be
// used to serve and to connect (extended key usage serverAuth and
// clientAuth); client and cli certificates only to connect (clientAuth), so
// that one of them cannot pose as a server to anyone who connects.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "messages/failure.hpp"

namespace berth::tls {

enum class role { server, client, cli };

// "server", "client", "cli".
const char* role_word(role r);

// The name a certificate of this role carries as its common name and its
// first DNS SAN: "server.global.berth".
std::string role_name(role r, const std::string& cluster);

// A cluster name goes into DNS names and file names: letters, digits and
// '-', 1 to 63 characters, not starting or ending with '-'.
std::optional<failure> check_cluster_name(const std::string& cluster);

// Validity in days: 1 to 36500.
std::optional<failure> check_days(int days);

constexpr int default_ca_days = 5 * 365;
constexpr int default_cert_days = 365;

// What `berth tls ca create` writes.
struct ca_plan {
  std::string cert_file;  // DIR/NAME.pem
  std::string key_file;   // DIR/NAME-key.pem (mode 0600)
  std::string common_name;
  int days = default_ca_days;
};

// name: the files' prefix (default "berth-agent-ca"), also in the common
// name.  `exists` tells which of the planned files exist already: a plan
// never overwrites one.
std::variant<ca_plan, failure> plan_ca(const std::string& dir, const std::string& name, int days,
                                       const std::vector<std::string>& existing);

// What `berth tls cert create` writes.
struct cert_plan {
  role kind = role::server;
  std::string cert_file;  // DIR/CLUSTER-ROLE-berth.pem
  std::string key_file;   // DIR/CLUSTER-ROLE-berth-key.pem (mode 0600)
  std::string common_name;
  std::vector<std::string> dns_names;     // role name, localhost
  std::vector<std::string> ip_addresses;  // 127.0.0.1
  bool server_auth = false;               // may serve (extended key usage serverAuth)
  bool client_auth = true;                // may connect (clientAuth)
  int days = default_cert_days;
};

// The files planned, for the existence check: plan_ca's and plan_cert's
// `existing` are the ones of these that exist.
std::vector<std::string> ca_files(const std::string& dir, const std::string& name);
std::vector<std::string> cert_files(const std::string& dir, role r, const std::string& cluster);

std::variant<cert_plan, failure> plan_cert(const std::string& dir, role r,
                                           const std::string& cluster, int days,
                                           const std::vector<std::string>& existing);

// The default CA files of `berth tls cert create` (those ca create wrote in
// the current directory).
constexpr const char* default_ca_cert = "berth-agent-ca.pem";
constexpr const char* default_ca_key = "berth-agent-ca-key.pem";

// The three files of a TLS configuration: all given, or none.
struct files {
  std::string ca;
  std::string cert;
  std::string key;
  bool enabled() const { return !ca.empty(); }
};

// The names the options go by where they were given, for the error: e.g.
// {"--tls-ca", "--tls-cert", "--tls-key"}, or "--tls-ca (BERTH_CACERT)".
struct option_names {
  std::string ca, cert, key;
};

// None or all three: a partial set is an error naming what is missing.
std::optional<failure> check_complete(const files& f, const option_names& names);

}  // namespace berth::tls
