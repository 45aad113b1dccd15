#include "net/tls/client_context.h"

#include <openssl/x509v3.h>

#include "net/address.h"

namespace hutch::net::tls {

Result<SslCtxPtr> make_upstream_context(const UpstreamOptions& options) {
  std::string alpn;
  for (const std::string& protocol : options.alpn) {
    if (protocol.empty() || protocol.size() > 255) {
      return kind_error(ErrorKind::kInvalid, "TLS upstream",
                        "ALPN protocol names are 1..255 bytes");
    }
    alpn += static_cast<char>(protocol.size());
    alpn += protocol;
  }
  SslCtxPtr context(SSL_CTX_new(TLS_client_method()));
  if (!context) return openssl_error("SSL_CTX_new", "TLS upstream");
  if (SSL_CTX_set_min_proto_version(context.get(), TLS1_2_VERSION) != 1) {
    return openssl_error("SSL_CTX_set_min_proto_version", "TLS upstream");
  }
  if (options.ca_file) {
    if (SSL_CTX_load_verify_file(context.get(), options.ca_file->c_str()) != 1) {
      return openssl_error("SSL_CTX_load_verify_file", *options.ca_file);
    }
  } else if (SSL_CTX_set_default_verify_paths(context.get()) != 1) {
    return openssl_error("SSL_CTX_set_default_verify_paths", "host trust store");
  }
  // SSL_CTX_set_alpn_protos returns 0 on success, unlike the rest of the API.
  if (!alpn.empty() &&
      SSL_CTX_set_alpn_protos(context.get(), reinterpret_cast<const unsigned char*>(alpn.data()),
                              static_cast<unsigned>(alpn.size())) != 0) {
    return openssl_error("SSL_CTX_set_alpn_protos", "TLS upstream");
  }
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
  return context;
}

Result<SslPtr> make_upstream_ssl(SSL_CTX* context, std::string_view host) {
  SslPtr ssl(SSL_new(context));
  if (!ssl) return openssl_error("SSL_new", std::string(host));
  HUTCH_TRY(configure_upstream_ssl(ssl.get(), host));
  return ssl;
}

Result<void> configure_upstream_ssl(SSL* ssl, std::string_view host) {
  const std::string name(host);
  SSL_set_connect_state(ssl);
  // Partial wildcards ("a*.example.com") are not accepted as a match.
  SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  if (Address::parse(name)) {
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) != 1) {
      return openssl_error("X509_VERIFY_PARAM_set1_ip_asc", name);
    }
    return {};
  }
  if (SSL_set1_host(ssl, name.c_str()) != 1 || SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    return openssl_error("SSL_set1_host", name);
  }
  return {};
}

}  // namespace hutch::net::tls
