#include "tls/pki.hpp"

#include "tls/openssl_ptr.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>

#include "persistence/durable_file.hpp"

namespace berth::tls {

namespace {

// OpenSSL's queued errors as one line (never key material: these are
// library and reason strings).
std::string ssl_errors() {
  std::string out;
  while (auto e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

failure ssl_failure(const std::string& what) {
  return {errc::internal, what + " (" + ssl_errors() + ")"};
}

// FILE.tmp, fsynced, linked to FILE (EEXIST: another writer was faster,
// nothing is overwritten), FILE.tmp removed, the directory fsynced.
std::optional<failure> write_new_file(const std::string& path, const std::string& bytes,
                                      mode_t mode) {
  auto tmp = path + ".tmp";
  ::unlink(tmp.c_str());  // a leftover of a crash; its mode may be another
  if (auto f = write_and_fsync(tmp, bytes)) return f;
  if (::chmod(tmp.c_str(), mode) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return failure{errc::internal, "cannot set the mode of " + tmp + ": " + std::strerror(err)};
  }
  if (::link(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    if (err == EEXIST)
      return failure{errc::refused, "'" + path + "' exists already: berth tls never overwrites it"};
    return failure{errc::internal, "cannot create " + path + ": " + std::strerror(err)};
  }
  ::unlink(tmp.c_str());
  return fsync_dir_of(path);
}

std::string pem_of(const std::function<int(BIO*)>& write) {
  bio_ptr b{BIO_new(BIO_s_mem())};
  if (!b || write(b.get()) != 1) return {};
  char* data = nullptr;
  long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

key_ptr new_key() {
  return key_ptr{EVP_EC_gen("P-256")};
}

key_ptr read_key(const std::string& file) {
  bio_ptr b{BIO_new_file(file.c_str(), "r")};
  if (!b) return nullptr;
  return key_ptr{PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr)};
}

x509_ptr read_cert(const std::string& file) {
  bio_ptr b{BIO_new_file(file.c_str(), "r")};
  if (!b) return nullptr;
  return x509_ptr{PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr)};
}

bool add_ext(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return false;
  bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `key` named `cn`, valid from now for `days`, with a
// random 127-bit serial; not yet signed, without extensions.
x509_ptr new_cert(EVP_PKEY* key, const std::string& cn, int days) {
  x509_ptr c{X509_new()};
  if (!c) return nullptr;
  X509_set_version(c.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return nullptr;
  serial[0] &= 0x7f;
  std::unique_ptr<BIGNUM, openssl_deleter<BIGNUM, BN_free>> bn{BN_bin2bn(serial, sizeof serial, nullptr)};
  if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(c.get()))) return nullptr;
  X509_gmtime_adj(X509_getm_notBefore(c.get()), -60);  // clocks a little behind
  X509_time_adj_ex(X509_getm_notAfter(c.get()), days, 0, nullptr);
  X509_NAME* name = X509_get_subject_name(c.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_pubkey(c.get(), key);
  return c;
}

std::optional<failure> write_pair(const std::string& key_file, EVP_PKEY* key,
                                  const std::string& cert_file, X509* cert) {
  auto key_pem = pem_of([&](BIO* b) {
    return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
  auto cert_pem = pem_of([&](BIO* b) { return PEM_write_bio_X509(b, cert); });
  if (key_pem.empty() || cert_pem.empty()) return ssl_failure("cannot encode the PEM files");
  if (auto f = write_new_file(key_file, key_pem, 0600)) return f;
  return write_new_file(cert_file, cert_pem, 0644);
}

}  // namespace

std::optional<failure> create_ca(const ca_plan& p) {
  auto key = new_key();
  if (!key) return ssl_failure("cannot generate an EC P-256 key");
  auto cert = new_cert(key.get(), p.common_name, p.days);
  if (!cert) return ssl_failure("cannot build the CA certificate");
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  if (!add_ext(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !add_ext(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !add_ext(cert.get(), cert.get(), NID_subject_key_identifier, "hash"))
    return ssl_failure("cannot add the CA's extensions");
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0)
    return ssl_failure("cannot sign the CA certificate");
  return write_pair(p.key_file, key.get(), p.cert_file, cert.get());
}

std::optional<failure> create_cert(const cert_plan& p, const std::string& ca_cert_file,
                                   const std::string& ca_key_file) {
  auto ca = read_cert(ca_cert_file);
  if (!ca)
    return failure{errc::invalid, "cannot read a CA certificate from '" + ca_cert_file +
                                      "': create one with `berth tls ca create` or name it "
                                      "with --ca-cert"};
  auto ca_key = read_key(ca_key_file);
  if (!ca_key)
    return failure{errc::invalid,
                   "cannot read the CA's key from '" + ca_key_file + "': name it with --ca-key"};
  if (X509_check_private_key(ca.get(), ca_key.get()) != 1)
    return failure{errc::invalid,
                   "the key '" + ca_key_file + "' is not the key of the CA '" + ca_cert_file + "'"};
  ERR_clear_error();
  auto key = new_key();
  if (!key) return ssl_failure("cannot generate an EC P-256 key");
  auto cert = new_cert(key.get(), p.common_name, p.days);
  if (!cert) return ssl_failure("cannot build the certificate");
  X509_set_issuer_name(cert.get(), X509_get_subject_name(ca.get()));
  std::string san;
  for (const auto& d : p.dns_names) san += (san.empty() ? "DNS:" : ",DNS:") + d;
  for (const auto& ip : p.ip_addresses) san += (san.empty() ? "IP:" : ",IP:") + ip;
  std::string eku = p.server_auth && p.client_auth ? "serverAuth,clientAuth"
                    : p.server_auth                ? "serverAuth"
                                                   : "clientAuth";
  if (!add_ext(cert.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE") ||
      !add_ext(cert.get(), ca.get(), NID_key_usage, "critical,digitalSignature,keyAgreement") ||
      !add_ext(cert.get(), ca.get(), NID_ext_key_usage, eku) ||
      !add_ext(cert.get(), ca.get(), NID_subject_alt_name, san) ||
      !add_ext(cert.get(), ca.get(), NID_subject_key_identifier, "hash") ||
      !add_ext(cert.get(), ca.get(), NID_authority_key_identifier, "keyid:always"))
    return ssl_failure("cannot add the certificate's extensions");
  if (X509_sign(cert.get(), ca_key.get(), EVP_sha256()) == 0)
    return ssl_failure("cannot sign the certificate");
  return write_pair(p.key_file, key.get(), p.cert_file, cert.get());
}

std::optional<failure> verify_chain(const std::string& cert_file, const std::string& ca_file,
                                    role r) {
  auto cert = read_cert(cert_file);
  if (!cert) return failure{errc::invalid, "cannot read a certificate from '" + cert_file + "'"};
  auto ca = read_cert(ca_file);
  if (!ca) return failure{errc::invalid, "cannot read a CA certificate from '" + ca_file + "'"};
  store_ptr store{X509_STORE_new()};
  store_ctx_ptr ctx{X509_STORE_CTX_new()};
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1)
    return ssl_failure("cannot set up the verification");
  X509_STORE_CTX_set_purpose(ctx.get(),
                             r == role::server ? X509_PURPOSE_SSL_SERVER : X509_PURPOSE_SSL_CLIENT);
  if (X509_verify_cert(ctx.get()) != 1)
    return failure{errc::refused,
                   "'" + cert_file + "' does not verify against the CA '" + ca_file + "' for a " +
                       (r == role::server ? "server" : "client") + ": " +
                       X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()))};
  return std::nullopt;
}

std::optional<failure> check_files(const files& f) {
  auto ca = read_cert(f.ca);
  if (!ca)
    return failure{errc::invalid,
                   "cannot read a CA certificate (PEM) from the TLS CA file '" + f.ca + "'"};
  auto cert = read_cert(f.cert);
  if (!cert)
    return failure{
        errc::invalid,
        "cannot read a certificate (PEM) from the TLS certificate file '" + f.cert + "'"};
  auto key = read_key(f.key);
  if (!key)
    return failure{errc::invalid,
                   "cannot read a private key (PEM, no passphrase) from the TLS "
                   "key file '" +
                       f.key + "'"};
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return failure{errc::invalid, "the TLS key file '" + f.key +
                                      "' does not hold the key of the certificate '" + f.cert +
                                      "'"};
  }
  return std::nullopt;
}

std::optional<std::string> diagnose(const std::string& host, uint16_t port, const files& f) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res)
    return std::nullopt;
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool connected = fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0;
  ::freeaddrinfo(res);
  if (!connected) {
    if (fd >= 0) ::close(fd);
    return std::nullopt;
  }
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ssl_ctx_ptr ctx{SSL_CTX_new(TLS_client_method())};
  std::optional<std::string> out;
  if (ctx) {
    // Accept any certificate here: the verify result is read afterwards.
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, [](int, X509_STORE_CTX*) { return 1; });
    if (f.enabled()) {
      SSL_CTX_load_verify_locations(ctx.get(), f.ca.c_str(), nullptr);
      SSL_CTX_use_certificate_chain_file(ctx.get(), f.cert.c_str());
      SSL_CTX_use_PrivateKey_file(ctx.get(), f.key.c_str(), SSL_FILETYPE_PEM);
    }
    ssl_ptr ssl{SSL_new(ctx.get())};
    if (ssl) {
      SSL_set_fd(ssl.get(), fd);
      int rc = SSL_connect(ssl.get());
      bool tls_server = SSL_get0_peer_certificate(ssl.get()) != nullptr;
      if (rc == 1) {
        // TLS 1.3: the server judges our certificate after the handshake;
        // a refusal arrives as an alert on the first read.
        char byte;
        if (SSL_peek(ssl.get(), &byte, 1) <= 0 && ERR_peek_error() != 0) rc = 0;
      }
      if (tls_server && !f.enabled())
        out =
            "the server requires TLS: pass --tls-ca, --tls-cert and --tls-key (or set "
            "BERTH_CACERT, BERTH_CLIENT_CERT and BERTH_CLIENT_KEY)";
      else if (tls_server && SSL_get_verify_result(ssl.get()) != X509_V_OK)
        out = std::string("the server's certificate does not verify against --tls-ca '") + f.ca +
              "': " + X509_verify_cert_error_string(SSL_get_verify_result(ssl.get())) +
              " (is it the CA of this cluster?)";
      else if (tls_server && rc != 1)
        out = "the server refused this certificate (" + ssl_errors() +
              "): it must be signed by the cluster's CA (`berth tls cert create --cli`)";
      else if (tls_server)
        out = "a TLS handshake with the server succeeds, but berth's connection did not";
      else if (f.enabled())
        out =
            "the server does not answer in TLS: is it started with --tls-ca, --tls-cert and "
            "--tls-key?";
    }
  }
  ERR_clear_error();
  ::close(fd);
  return out;
}

}  // namespace berth::tls
