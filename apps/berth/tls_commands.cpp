#include "apps/berth/tls_commands.hpp"

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/berth/send.hpp"
#include "tls/pki.hpp"

namespace berth {

namespace {

std::vector<std::string> existing(const std::vector<std::string>& files) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& f : files)
    if (std::filesystem::exists(f, ec) || std::filesystem::is_symlink(f, ec)) out.push_back(f);
  return out;
}

int written(const std::string& what, const std::string& cert, const std::string& key,
            const std::string& name, bool json) {
  if (json) {
    std::cout << nlohmann::json{{"certificate", cert}, {"key", key}, {"name", name}}.dump(2)
              << "\n";
  } else {
    std::cout << "==> " << what << " " << name << "\n"
              << "    certificate " << cert << "\n"
              << "    key         " << key << " (mode 0600: keep it secret)\n";
  }
  return 0;
}

}  // namespace

int run_tls_ca_create(const tls_ca_options& o, bool json) {
  globals g;
  g.json = json;
  auto plan = tls::plan_ca(o.dir, o.name, o.days, existing(tls::ca_files(o.dir, o.name)));
  if (auto* f = std::get_if<failure>(&plan)) return fail(g, *f);
  const auto& p = std::get<tls::ca_plan>(plan);
  if (auto f = tls::create_ca(p)) return fail(g, *f);
  return written("Created the CA", p.cert_file, p.key_file, p.common_name, json);
}

int run_tls_cert_create(const tls_cert_options& o, bool json) {
  globals g;
  g.json = json;
  auto r = o.server ? tls::role::server : o.client ? tls::role::client : tls::role::cli;
  auto plan = tls::plan_cert(o.dir, r, o.name, o.days, existing(tls::cert_files(o.dir, r, o.name)));
  if (auto* f = std::get_if<failure>(&plan)) return fail(g, *f);
  const auto& p = std::get<tls::cert_plan>(plan);
  if (auto f = tls::create_cert(p, o.ca_cert, o.ca_key)) return fail(g, *f);
  // What was written must be what berthd will accept.
  if (auto f = tls::verify_chain(p.cert_file, o.ca_cert, r)) return fail(g, *f);
  return written(std::string("Created a ") + tls::role_word(r) + " certificate", p.cert_file,
                 p.key_file, p.common_name, json);
}

}  // namespace berth
