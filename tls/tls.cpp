#include "tls/tls.hpp"

#include <algorithm>
#include <cctype>

namespace berth::tls {

namespace {

std::string join(const std::string& dir, const std::string& file) {
  if (dir.empty() || dir == ".") return file;
  return dir.back() == '/' ? dir + file : dir + "/" + file;
}

std::optional<failure> refuse_existing(const std::vector<std::string>& planned,
                                       const std::vector<std::string>& existing) {
  for (const auto& f : planned)
    if (std::find(existing.begin(), existing.end(), f) != existing.end())
      return failure{errc::refused, "'" + f +
                                        "' exists already: berth tls never overwrites a "
                                        "certificate or key; move it away or choose another "
                                        "--dir or --name"};
  return std::nullopt;
}

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
}

}  // namespace

const char* role_word(role r) {
  switch (r) {
    case role::server:
      return "server";
    case role::client:
      return "client";
    case role::cli:
      return "cli";
  }
  return "cli";
}

std::string role_name(role r, const std::string& cluster) {
  return std::string(role_word(r)) + "." + cluster + ".berth";
}

std::optional<failure> check_cluster_name(const std::string& cluster) {
  if (cluster.empty() || cluster.size() > 63 || cluster.front() == '-' || cluster.back() == '-' ||
      !std::all_of(cluster.begin(), cluster.end(), name_char))
    return failure{errc::invalid, "--name '" + cluster +
                                      "' cannot be part of a DNS name: use 1 to 63 letters, "
                                      "digits or '-' (not first or last), e.g. global"};
  return std::nullopt;
}

std::optional<failure> check_days(int days) {
  if (days < 1 || days > 36500)
    return failure{errc::invalid,
                   "--days " + std::to_string(days) + " is out of range: give 1 to 36500"};
  return std::nullopt;
}

std::vector<std::string> ca_files(const std::string& dir, const std::string& name) {
  return {join(dir, name + ".pem"), join(dir, name + "-key.pem")};
}

std::variant<ca_plan, failure> plan_ca(const std::string& dir, const std::string& name, int days,
                                       const std::vector<std::string>& existing) {
  if (auto f = check_cluster_name(name)) return *f;
  if (auto f = check_days(days)) return *f;
  auto planned = ca_files(dir, name);
  if (auto f = refuse_existing(planned, existing)) return *f;
  return ca_plan{planned[0], planned[1], name, days};
}

std::vector<std::string> cert_files(const std::string& dir, role r, const std::string& cluster) {
  auto stem = cluster + "-" + role_word(r) + "-berth";
  return {join(dir, stem + ".pem"), join(dir, stem + "-key.pem")};
}

std::variant<cert_plan, failure> plan_cert(const std::string& dir, role r,
                                           const std::string& cluster, int days,
                                           const std::vector<std::string>& existing) {
  if (auto f = check_cluster_name(cluster)) return *f;
  if (auto f = check_days(days)) return *f;
  auto planned = cert_files(dir, r, cluster);
  if (auto f = refuse_existing(planned, existing)) return *f;
  cert_plan p;
  p.kind = r;
  p.cert_file = planned[0];
  p.key_file = planned[1];
  p.common_name = role_name(r, cluster);
  p.dns_names = {p.common_name, "localhost"};
  p.ip_addresses = {"127.0.0.1"};
  p.server_auth = r == role::server;
  p.client_auth = true;
  p.days = days;
  return p;
}

std::optional<failure> check_complete(const files& f, const option_names& names) {
  std::vector<std::string> missing;
  if (f.ca.empty()) missing.push_back(names.ca);
  if (f.cert.empty()) missing.push_back(names.cert);
  if (f.key.empty()) missing.push_back(names.key);
  if (missing.empty() || missing.size() == 3) return std::nullopt;
  std::string list;
  for (size_t i = 0; i < missing.size(); ++i)
    list += (i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ") + missing[i];
  return failure{errc::invalid, "TLS needs the CA, a certificate and its key: " + list +
                                    (missing.size() == 1 ? " is" : " are") +
                                    " missing (give all three, or none for plain text)"};
}

}  // namespace berth::tls
