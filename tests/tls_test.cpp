// berth tls: the names and files (pure), and the certificates OpenSSL writes
// from them (in a temporary directory): they chain to their CA, only a
// server certificate serves, keys are mode 0600, nothing is overwritten.
#include "tls/tls.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tls/https.hpp"
#include "tls/pki.hpp"
#include "tls/proof.hpp"

namespace fs = std::filesystem;
using namespace berth;
using namespace berth::tls;

TEST_CASE("role_names_follow_nomads_scheme") {
  CHECK(role_name(role::server, "global") == "server.global.berth");
  CHECK(role_name(role::client, "eu-1") == "client.eu-1.berth");
  CHECK(role_name(role::cli, "global") == "cli.global.berth");
}

TEST_CASE("cluster_name_must_fit_in_a_dns_label") {
  CHECK_FALSE(check_cluster_name("global"));
  CHECK_FALSE(check_cluster_name("eu-west-1"));
  CHECK(check_cluster_name(""));
  CHECK(check_cluster_name("-a"));
  CHECK(check_cluster_name("a-"));
  CHECK(check_cluster_name("a.b"));
  CHECK(check_cluster_name("a/b"));
  CHECK(check_cluster_name(std::string(64, 'a')));
  CHECK(check_cluster_name("a b")->message.find("--name 'a b'") != std::string::npos);
}

TEST_CASE("days_out_of_range_refused") {
  CHECK_FALSE(check_days(1));
  CHECK_FALSE(check_days(36500));
  CHECK(check_days(0));
  CHECK(check_days(-5));
  CHECK(check_days(36501)->code == errc::invalid);
}

TEST_CASE("ca_plan_names_files_after_the_name") {
  auto p = std::get<ca_plan>(plan_ca("/etc/berth", "berth-agent-ca", 10, {}));
  CHECK(p.cert_file == "/etc/berth/berth-agent-ca.pem");
  CHECK(p.key_file == "/etc/berth/berth-agent-ca-key.pem");
  CHECK(p.days == 10);
  auto here = std::get<ca_plan>(plan_ca(".", "berth-agent-ca", 10, {}));
  CHECK(here.cert_file == std::string(default_ca_cert));
  CHECK(here.key_file == std::string(default_ca_key));
  auto slash = std::get<ca_plan>(plan_ca("d/", "x", 10, {}));
  CHECK(slash.cert_file == "d/x.pem");
}

TEST_CASE("ca_plan_refuses_to_overwrite_either_file") {
  auto f = std::get<failure>(plan_ca("d", "ca", 10, {"d/ca-key.pem"}));
  CHECK(f.code == errc::refused);
  CHECK(f.message.find("'d/ca-key.pem' exists already") != std::string::npos);
  CHECK(std::holds_alternative<failure>(plan_ca("d", "ca", 10, {"d/ca.pem"})));
  CHECK(std::holds_alternative<ca_plan>(plan_ca("d", "ca", 10, {"d/other.pem"})));
}

TEST_CASE("cert_plan_server_may_serve_and_connect") {
  auto p = std::get<cert_plan>(plan_cert("", role::server, "global", 365, {}));
  CHECK(p.cert_file == "global-server-berth.pem");
  CHECK(p.key_file == "global-server-berth-key.pem");
  CHECK(p.common_name == "server.global.berth");
  CHECK(p.dns_names == std::vector<std::string>{"server.global.berth", "localhost"});
  CHECK(p.ip_addresses == std::vector<std::string>{"127.0.0.1"});
  CHECK(p.server_auth);
  CHECK(p.client_auth);
}

TEST_CASE("cert_plan_client_and_cli_may_only_connect") {
  for (auto r : {role::client, role::cli}) {
    auto p = std::get<cert_plan>(plan_cert("certs", r, "dc1", 30, {}));
    CHECK_FALSE(p.server_auth);
    CHECK(p.client_auth);
    CHECK(p.common_name == std::string(role_word(r)) + ".dc1.berth");
    CHECK(p.cert_file == "certs/dc1-" + std::string(role_word(r)) + "-berth.pem");
  }
}

TEST_CASE("cert_plan_refuses_existing_files_and_bad_input") {
  CHECK(std::get<failure>(plan_cert("", role::cli, "global", 365, {"global-cli-berth.pem"})).code ==
        errc::refused);
  CHECK(std::get<failure>(plan_cert("", role::cli, "a.b", 365, {})).code == errc::invalid);
  CHECK(std::get<failure>(plan_cert("", role::cli, "global", 0, {})).code == errc::invalid);
}

TEST_CASE("tls_options_all_or_none") {
  option_names n{"--tls-ca", "--tls-cert", "--tls-key"};
  CHECK_FALSE(check_complete({}, n));
  CHECK_FALSE(check_complete({"a", "b", "c"}, n));
  auto one = check_complete({"a", "b", ""}, n);
  REQUIRE(one);
  CHECK(one->code == errc::invalid);
  CHECK(one->message.find("--tls-key is missing") != std::string::npos);
  auto two = check_complete({"a", "", ""}, n);
  REQUIRE(two);
  CHECK(two->message.find("--tls-cert and --tls-key are missing") != std::string::npos);
}

// --- the OpenSSL layer, on real files ---------------------------------------

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "berth-tls-test-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~temp_dir() { fs::remove_all(path); }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

unsigned mode_of(const std::string& f) {
  struct stat st {};
  ::stat(f.c_str(), &st);
  return st.st_mode & 0777;
}

ca_plan make_ca(const temp_dir& d, const std::string& name) {
  auto p = std::get<ca_plan>(plan_ca(d.path.string(), name, 30, {}));
  auto f = create_ca(p);
  REQUIRE_MESSAGE(!f, (f ? f->message : ""));
  return p;
}

cert_plan make_cert(const temp_dir& d, role r, const ca_plan& ca, const std::string& cluster) {
  auto p = std::get<cert_plan>(plan_cert(d.path.string(), r, cluster, 30, {}));
  auto f = create_cert(p, ca.cert_file, ca.key_file);
  REQUIRE_MESSAGE(!f, (f ? f->message : ""));
  return p;
}

}  // namespace

TEST_CASE("written_certificates_chain_to_their_ca") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  auto server = make_cert(d, role::server, ca, "global");
  auto client = make_cert(d, role::client, ca, "global");
  auto cli = make_cert(d, role::cli, ca, "global");
  CHECK_FALSE(verify_chain(server.cert_file, ca.cert_file, role::server));
  CHECK_FALSE(verify_chain(server.cert_file, ca.cert_file, role::client));
  CHECK_FALSE(verify_chain(client.cert_file, ca.cert_file, role::client));
  CHECK_FALSE(verify_chain(cli.cert_file, ca.cert_file, role::cli));
  CHECK_FALSE(check_files({ca.cert_file, server.cert_file, server.key_file}));
}

TEST_CASE("only_a_server_certificate_verifies_as_a_server") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  auto client = make_cert(d, role::client, ca, "global");
  auto cli = make_cert(d, role::cli, ca, "global");
  CHECK(verify_chain(client.cert_file, ca.cert_file, role::server));
  CHECK(verify_chain(cli.cert_file, ca.cert_file, role::server));
}

TEST_CASE("a_certificate_of_another_ca_does_not_verify") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  auto other = make_ca(d, "other-ca");
  auto server = make_cert(d, role::server, other, "global");
  auto f = verify_chain(server.cert_file, ca.cert_file, role::server);
  REQUIRE(f);
  CHECK(f->code == errc::refused);
  CHECK(f->message.find("does not verify against the CA") != std::string::npos);
}

TEST_CASE("keys_are_mode_0600_certificates_0644") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  auto cli = make_cert(d, role::cli, ca, "global");
  CHECK(mode_of(ca.key_file) == 0600);
  CHECK(mode_of(cli.key_file) == 0600);
  CHECK(mode_of(ca.cert_file) == 0644);
  CHECK(mode_of(cli.cert_file) == 0644);
  CHECK_FALSE(fs::exists(cli.key_file + ".tmp"));
  std::ifstream in(cli.key_file);
  std::string first;
  std::getline(in, first);
  CHECK(first == "-----BEGIN PRIVATE KEY-----");
}

TEST_CASE("an_existing_file_is_never_overwritten") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  // Created between the plan and the write: the write refuses.
  auto p = std::get<cert_plan>(plan_cert(d.path.string(), role::cli, "global", 30, {}));
  { std::ofstream(p.key_file) << "mine"; }
  auto f = create_cert(p, ca.cert_file, ca.key_file);
  REQUIRE(f);
  CHECK(f->code == errc::refused);
  std::ifstream in(p.key_file);
  std::string kept;
  in >> kept;
  CHECK(kept == "mine");
}

TEST_CASE("a_key_that_is_not_the_certificates_is_named") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  auto server = make_cert(d, role::server, ca, "global");
  auto cli = make_cert(d, role::cli, ca, "global");
  auto f = check_files({ca.cert_file, server.cert_file, cli.key_file});
  REQUIRE(f);
  CHECK(f->message.find("does not hold the key of the certificate") != std::string::npos);
  auto missing = check_files({ca.cert_file, d / "nope.pem", cli.key_file});
  REQUIRE(missing);
  CHECK(missing->message.find("nope.pem") != std::string::npos);
}

TEST_CASE("cert_create_names_a_wrong_ca_key") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  auto other = make_ca(d, "other-ca");
  auto p = std::get<cert_plan>(plan_cert(d.path.string(), role::cli, "global", 30, {}));
  auto f = create_cert(p, ca.cert_file, other.key_file);
  REQUIRE(f);
  CHECK(f->code == errc::invalid);
  CHECK_FALSE(fs::exists(p.key_file));
}

// --- the server proof over the raft link (tls/proof.hpp) ---------------------

namespace {

identity load_identity(const ca_plan& ca, const cert_plan& c) {
  auto id = identity::load({ca.cert_file, c.cert_file, c.key_file});
  REQUIRE_MESSAGE(std::holds_alternative<identity>(id),
                  (std::holds_alternative<failure>(id) ? std::get<failure>(id).message : ""));
  return std::get<identity>(id);
}

server_proof prove(const identity& id, const std::string& challenge) {
  auto p = id.prove(challenge);
  REQUIRE(std::holds_alternative<server_proof>(p));
  return std::get<server_proof>(p);
}

std::string refusal(const std::variant<std::string, failure>& r) {
  REQUIRE(std::holds_alternative<failure>(r));
  CHECK(std::get<failure>(r).code == errc::refused);
  return std::get<failure>(r).message;
}

}  // namespace

TEST_CASE("a_server_certificate_proves_a_server") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  auto id = load_identity(ca, make_cert(d, role::server, ca, "global"));
  auto challenge = new_challenge();
  CHECK(challenge.size() == 64);
  CHECK(new_challenge() != challenge);
  auto r = verify_server_proof(id.ca_pem(), challenge, prove(id, challenge));
  REQUIRE(std::holds_alternative<std::string>(r));
  CHECK(std::get<std::string>(r) == "server.global.berth");
}

TEST_CASE("a_client_or_cli_certificate_does_not_prove_a_server") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  for (auto r : {role::client, role::cli}) {
    auto id = load_identity(ca, make_cert(d, r, ca, "global"));
    auto challenge = new_challenge();
    auto why = refusal(verify_server_proof(id.ca_pem(), challenge, prove(id, challenge)));
    CHECK(why.find("is not a server certificate") != std::string::npos);
    CHECK(why.find(role_name(r, "global")) != std::string::npos);
  }
}

TEST_CASE("a_server_proof_holds_for_its_challenge_only") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  auto id = load_identity(ca, make_cert(d, role::server, ca, "global"));
  auto old = prove(id, new_challenge());
  auto why = refusal(verify_server_proof(id.ca_pem(), new_challenge(), old));
  CHECK(why.find("not signed with its key over this challenge") != std::string::npos);
}

TEST_CASE("a_server_certificate_without_its_key_does_not_prove") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  auto server = make_cert(d, role::server, ca, "global");
  auto client = make_cert(d, role::client, ca, "global");
  // The server's certificate (public), signed with the client's key.
  auto forged = prove(load_identity(ca, client), "c");
  forged.certificate = prove(load_identity(ca, server), "c").certificate;
  refusal(verify_server_proof(load_identity(ca, server).ca_pem(), "c", forged));
}

TEST_CASE("a_server_certificate_of_another_ca_does_not_prove") {
  temp_dir d;
  auto ca = make_ca(d, "berth-agent-ca");
  auto other = make_ca(d, "other-ca");
  auto theirs = load_identity(other, make_cert(d, role::server, other, "global"));
  auto ours = load_identity(ca, make_cert(d, role::client, ca, "global"));
  auto why = refusal(verify_server_proof(ours.ca_pem(), "c", prove(theirs, "c")));
  CHECK(why.find("is not a server certificate of this cluster's CA") != std::string::npos);
  refusal(verify_server_proof(ours.ca_pem(), "c", server_proof{"not a pem", "x"}));
}

// The HTTPS port (tls/https.hpp).

TEST_CASE("https_port_tells_a_client_hello_from_plain_http") {
  CHECK(classify_first_bytes("") == first_bytes::need_more);
  // A ClientHello's record: handshake (0x16), version 3.x.
  CHECK(classify_first_bytes(std::string("\x16\x03\x01\x02\x00", 5)) == first_bytes::tls);
  CHECK(classify_first_bytes(std::string("\x16", 1)) == first_bytes::tls);
  CHECK(classify_first_bytes(std::string("\x16\x07", 2)) == first_bytes::other);
  for (const char* method : {"GET / HTTP/1.1\r\n", "POST", "HEAD", "PUT", "DELETE", "OPTIONS"})
    CHECK(classify_first_bytes(method) == first_bytes::plain_http);
  // SSLv2-style hellos, binary noise, lower case: closed.
  CHECK(classify_first_bytes(std::string("\x80\x2e\x01", 3)) == first_bytes::other);
  CHECK(classify_first_bytes(std::string("\x00\x00", 2)) == first_bytes::other);
  CHECK(classify_first_bytes("get /") == first_bytes::other);
}

TEST_CASE("plain_http_on_the_https_port_is_answered_400_naming_https") {
  auto a = plain_http_refusal(4746);
  CHECK(a.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  CHECK(a.find("this port serves HTTPS") != std::string::npos);
  CHECK(a.find("https://HOST:4746/") != std::string::npos);
  auto body = a.substr(a.find("\r\n\r\n") + 4);
  CHECK(a.find("Content-Length: " + std::to_string(body.size()) + "\r\n") != std::string::npos);
}

TEST_CASE("verify_http_client_needs_the_tls_options") {
  CHECK_FALSE(check_https_options({}, false));
  CHECK_FALSE(check_https_options({"ca.pem", "c.pem", "k.pem"}, true));
  CHECK_FALSE(check_https_options({"ca.pem", "c.pem", "k.pem"}, false));
  auto f = check_https_options({}, true);
  REQUIRE(f);
  CHECK(f->code == errc::invalid);
  CHECK(f->message.find("--tls-verify-http-client needs --tls-ca") != std::string::npos);
}

TEST_CASE("https_relay_closes_a_stalled_or_idle_connection_only") {
  https_limits l;
  l.stall_ms = 30'000;
  l.idle_ms = 300'000;
  // Bytes nobody takes: closed after stall_ms.
  CHECK(judge_quiet(l, 29'999, 10) == relay_verdict::keep);
  CHECK(judge_quiet(l, 30'000, 10) == relay_verdict::close_stalled);
  // Nothing either way (a quiet event stream beats every 10 s): idle_ms.
  CHECK(judge_quiet(l, 30'000, 0) == relay_verdict::keep);
  CHECK(judge_quiet(l, 299'999, 0) == relay_verdict::keep);
  CHECK(judge_quiet(l, 300'000, 0) == relay_verdict::close_idle);
}
