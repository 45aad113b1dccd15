#include "net/tls/server_context.h"

#include <openssl/tls1.h>

namespace hutch::net::tls {

namespace {

// SSL_CTX ex_data slots: the CA and the wire-format ALPN list, both owned by the caller or the
// context itself (the list is freed by the context's ex_data free callback).
int ca_index() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

void free_alpn(void*, void* data, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::string*>(data);
}

int alpn_index() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, free_alpn);
  return index;
}

// The same, per SSL: offer_alpn's narrower list.
int ssl_alpn_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, free_alpn);
  return index;
}

Result<std::string> wire_alpn(std::span<const std::string> protocols) {
  std::string wire;
  for (const std::string& protocol : protocols) {
    if (protocol.empty() || protocol.size() > 255) {
      return kind_error(ErrorKind::kInvalid, "TLS server", "ALPN protocol names are 1..255 bytes");
    }
    wire += static_cast<char>(protocol.size());
    wire += protocol;
  }
  return wire;
}

int select_certificate(SSL* ssl, int* alert, void*) {
  auto* ca = static_cast<SandboxCa*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ca_index()));
  const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (ca == nullptr || sni == nullptr) {
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  auto leaf = ca->leaf_for(sni);
  if (!leaf || SSL_use_certificate(ssl, (*leaf)->certificate.get()) != 1 ||
      SSL_use_PrivateKey(ssl, (*leaf)->key.get()) != 1) {
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  return SSL_TLSEXT_ERR_OK;
}

int select_alpn(SSL* ssl, const unsigned char** out, unsigned char* out_size,
                const unsigned char* offered, unsigned int offered_size, void*) {
  const auto* ours = static_cast<const std::string*>(SSL_get_ex_data(ssl, ssl_alpn_index()));
  if (ours == nullptr) {
    ours = static_cast<const std::string*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), alpn_index()));
  }
  unsigned char* chosen = nullptr;
  // Server preference: the first of our protocols the client offers.
  if (ours == nullptr ||
      SSL_select_next_proto(&chosen, out_size, reinterpret_cast<const unsigned char*>(ours->data()),
                            static_cast<unsigned>(ours->size()), offered,
                            offered_size) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

Result<SslCtxPtr> make_server_context(SandboxCa& ca, const ServerOptions& options) {
  auto alpn = std::make_unique<std::string>(HUTCH_TRY(wire_alpn(options.alpn)));
  SslCtxPtr context(SSL_CTX_new(TLS_server_method()));
  if (!context) return openssl_error("SSL_CTX_new", "TLS server");
  if (SSL_CTX_set_min_proto_version(context.get(), TLS1_2_VERSION) != 1 ||
      SSL_CTX_set_ex_data(context.get(), ca_index(), &ca) != 1 ||
      SSL_CTX_set_ex_data(context.get(), alpn_index(), alpn.get()) != 1) {
    return openssl_error("SSL_CTX_set", "TLS server version and callbacks");
  }
  alpn.release();  // owned by the context's ex_data from here
  SSL_CTX_set_tlsext_servername_callback(context.get(), select_certificate);
  SSL_CTX_set_alpn_select_cb(context.get(), select_alpn, nullptr);
  if (options.session_tickets) return context;
  // No session resumption: each CA lives with its sandbox and a full handshake costs one
  // signature, so tickets (and their keys to keep) buy little. TLS 1.2 takes the option; TLS 1.3
  // would send stateful tickets despite it unless their number is 0.
  SSL_CTX_set_options(context.get(), SSL_OP_NO_TICKET);
  if (SSL_CTX_set_num_tickets(context.get(), 0) != 1) {
    return openssl_error("SSL_CTX_set_num_tickets", "TLS server");
  }
  return context;
}

Result<void> offer_alpn(SSL* ssl, std::span<const std::string> protocols) {
  auto alpn = std::make_unique<std::string>(HUTCH_TRY(wire_alpn(protocols)));
  delete static_cast<std::string*>(SSL_get_ex_data(ssl, ssl_alpn_index()));
  if (SSL_set_ex_data(ssl, ssl_alpn_index(), alpn.get()) != 1) {
    return openssl_error("SSL_set_ex_data", "TLS server ALPN");
  }
  alpn.release();  // owned by the SSL's ex_data from here
  return {};
}

}  // namespace hutch::net::tls
