#include "tls/proof.hpp"

#include "tls/openssl_ptr.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fstream>
#include <iterator>

namespace berth::tls {

namespace {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

x509_ptr cert_of(const std::string& pem) {
  bio_ptr b{BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))};
  if (!b) return nullptr;
  return x509_ptr{PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr)};
}

std::string common_name(X509* cert) {
  char buf[256] = {0};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf, sizeof buf) < 0)
    return {};
  return buf;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

failure refused(const std::string& why) {
  return {errc::refused, why};
}

}  // namespace

struct identity::key {
  key_ptr pkey;
};

std::string new_challenge() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return {};
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

std::string signed_bytes(const std::string& challenge) {
  return "berth server proof v1\n" + challenge;
}

std::variant<identity, failure> identity::load(const files& f) {
  identity id;
  auto cert = read_file(f.cert);
  if (!cert || !cert_of(*cert))
    return failure{errc::invalid, "cannot read a certificate from '" + f.cert + "'"};
  auto ca = read_file(f.ca);
  if (!ca || !cert_of(*ca))
    return failure{errc::invalid, "cannot read a CA certificate from '" + f.ca + "'"};
  bio_ptr b{BIO_new_file(f.key.c_str(), "r")};
  key_ptr pkey{b ? PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr) : nullptr};
  if (!pkey) return failure{errc::invalid, "cannot read a private key from '" + f.key + "'"};
  id.key_ = std::make_shared<key>();
  id.key_->pkey = std::move(pkey);
  id.cert_pem_ = std::move(*cert);
  id.ca_pem_ = std::move(*ca);
  return id;
}

std::variant<server_proof, failure> identity::prove(const std::string& challenge) const {
  auto msg = signed_bytes(challenge);
  md_ctx_ptr ctx{EVP_MD_CTX_new()};
  size_t len = 0;
  if (!ctx || !key_ ||
      EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key_->pkey.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(msg.data()),
                     msg.size()) != 1)
    return failure{errc::internal, "cannot sign the server proof with --tls-key"};
  std::string sig(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                     reinterpret_cast<const unsigned char*>(msg.data()), msg.size()) != 1)
    return failure{errc::internal, "cannot sign the server proof with --tls-key"};
  sig.resize(len);
  return server_proof{cert_pem_, std::move(sig)};
}

std::variant<std::string, failure> verify_server_proof(const std::string& ca_pem,
                                                       const std::string& challenge,
                                                       const server_proof& p) {
  ERR_clear_error();
  auto ca = cert_of(ca_pem);
  if (!ca) return failure{errc::internal, "cannot read the CA certificate"};
  auto cert = cert_of(p.certificate);
  if (!cert) return refused("the proof holds no readable certificate");
  auto cn = common_name(cert.get());
  store_ptr store{X509_STORE_new()};
  store_ctx_ptr ctx{X509_STORE_CTX_new()};
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1)
    return failure{errc::internal, "cannot set up the certificate verification"};
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_SERVER);
  if (X509_verify_cert(ctx.get()) != 1)
    return refused("certificate '" + cn + "' is not a server certificate of this cluster's CA (" +
                   X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())) +
                   "); start berthd --server with a certificate of berth tls cert create --server");
  if (cn.rfind("server.", 0) != 0 || !ends_with(cn, ".berth"))
    return refused("certificate '" + cn +
                   "' is not named server.<cluster>.berth; start berthd --server with a "
                   "certificate of berth tls cert create --server");
  EVP_PKEY* pub = X509_get0_pubkey(cert.get());
  md_ctx_ptr md{EVP_MD_CTX_new()};
  auto msg = signed_bytes(challenge);
  if (!pub || !md || EVP_DigestVerifyInit(md.get(), nullptr, EVP_sha256(), nullptr, pub) != 1 ||
      EVP_DigestVerify(md.get(), reinterpret_cast<const unsigned char*>(p.signature.data()),
                       p.signature.size(), reinterpret_cast<const unsigned char*>(msg.data()),
                       msg.size()) != 1) {
    ERR_clear_error();
    return refused("the proof of certificate '" + cn +
                   "' is not signed with its key over this challenge (a replayed or forged "
                   "proof, or --tls-key of another certificate)");
  }
  return cn;
}

}  // namespace berth::tls
