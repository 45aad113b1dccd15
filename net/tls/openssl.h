// Owners of OpenSSL objects (std::unique_ptr with their free functions) and the one conversion of
// OpenSSL's error queue into an Error.
#pragma once

#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <string_view>

#include "runtime/base/error.h"

namespace hutch::net::tls {

template <class T, void (*Free)(T*)>
struct OpenSslFree {
  void operator()(T* object) const { Free(object); }
};

using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, OpenSslFree<X509, X509_free>>;
using X509ExtensionPtr =
    std::unique_ptr<X509_EXTENSION, OpenSslFree<X509_EXTENSION, X509_EXTENSION_free>>;
using X509NamePtr = std::unique_ptr<X509_NAME, OpenSslFree<X509_NAME, X509_NAME_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslFree<BIO, BIO_free_all>>;
using SslCtxPtr = std::unique_ptr<SSL_CTX, OpenSslFree<SSL_CTX, SSL_CTX_free>>;
using SslPtr = std::unique_ptr<SSL, OpenSslFree<SSL, SSL_free>>;
using SslSessionPtr = std::unique_ptr<SSL_SESSION, OpenSslFree<SSL_SESSION, SSL_SESSION_free>>;

// An Error for a failed OpenSSL call: `step` names the call, the detail is `detail` and the
// queued OpenSSL reasons ("X509_sign(leaf api.example.com): error:...:bad signature"). Empties
// the thread's error queue, so a later failure does not report this one's reasons.
std::unexpected<Error> openssl_error(std::string_view step, std::string detail);

// The PEM text of a certificate.
Result<std::string> certificate_pem(X509* certificate);

}  // namespace hutch::net::tls
