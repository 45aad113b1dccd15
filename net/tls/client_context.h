// The TLS client the engine dials a terminated host's upstream with: the peer's certificate is
// verified against the host's trust store (OpenSSL's default paths) or, for tests, a CA file
// given explicitly, and its name against the host the sandbox asked for (SSL_set1_host), which
// is also sent as SNI. ALPN upstream is negotiated independently of the sandbox side.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/tls/openssl.h"
#include "runtime/base/error.h"

namespace hutch::net::tls {

struct UpstreamOptions {
  // Trust only this PEM file's certificates instead of the host's store (tests' upstreams).
  std::optional<std::string> ca_file{};
  std::vector<std::string> alpn = {"h2", "http/1.1"};
};

// TLS 1.2 at least; SSL_VERIFY_PEER, so a handshake with an unverified peer fails.
Result<SslCtxPtr> make_upstream_context(const UpstreamOptions& options = {});

// An SSL for one upstream connection to `host` (a normalised name, or an IP literal: then the
// certificate must name that address and no SNI is sent, RFC 6066 3), in client mode.
Result<SslPtr> make_upstream_ssl(SSL_CTX* context, std::string_view host);
// The same settings on an SSL made elsewhere (an asio::ssl::stream's).
Result<void> configure_upstream_ssl(SSL* ssl, std::string_view host);

}  // namespace hutch::net::tls
