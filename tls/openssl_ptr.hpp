// OpenSSL objects owned by unique_ptr (tls/pki, tls/proof): freed with their
// own free functions.  Only for tls/*.cpp: it includes OpenSSL's headers.
#pragma once

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>

namespace berth::tls {

template <class T, void (*F)(T*)>
struct openssl_deleter {
  void operator()(T* p) const { F(p); }
};
using bio_ptr = std::unique_ptr<BIO, openssl_deleter<BIO, BIO_free_all>>;
using key_ptr = std::unique_ptr<EVP_PKEY, openssl_deleter<EVP_PKEY, EVP_PKEY_free>>;
using x509_ptr = std::unique_ptr<X509, openssl_deleter<X509, X509_free>>;
using store_ptr = std::unique_ptr<X509_STORE, openssl_deleter<X509_STORE, X509_STORE_free>>;
using store_ctx_ptr =
    std::unique_ptr<X509_STORE_CTX, openssl_deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
using md_ctx_ptr = std::unique_ptr<EVP_MD_CTX, openssl_deleter<EVP_MD_CTX, EVP_MD_CTX_free>>;
using ssl_ctx_ptr = std::unique_ptr<SSL_CTX, openssl_deleter<SSL_CTX, SSL_CTX_free>>;
using ssl_ptr = std::unique_ptr<SSL, openssl_deleter<SSL, SSL_free>>;

}  // namespace berth::tls
