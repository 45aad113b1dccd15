// The TLS server the engine shows the sandbox for a host it terminates: one SSL_CTX per sandbox
// whose servername callback presents the sandbox CA's leaf for the ClientHello's SNI, offering
// ALPN protocols in the engine's order of preference (h2, http/1.1 unless told otherwise).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "net/tls/openssl.h"
#include "net/tls/sandbox_ca.h"
#include "runtime/base/error.h"

namespace hutch::net::tls {

struct ServerOptions {
  std::vector<std::string> alpn = {"h2", "http/1.1"};
  // Issue session tickets (TLS 1.3: OpenSSL's default two per handshake), as public servers do.
  // Off for the engine's own server (below); on for the upstreams tests and benches stand up.
  bool session_tickets = false;
};

// `ca` must outlive the context and every SSL made from it. A hello without SNI, or with a name
// leaf_for refuses, ends the handshake with an unrecognized_name alert: the engine terminates
// only names it chose to, and has checked SNI against DNS before it gets here. A client that
// offers no protocol of ours gets no ALPN (RFC 7301 lets the server ignore it) and falls back
// to its default, HTTP/1.1. TLS 1.2 is the lowest version accepted.
Result<SslCtxPtr> make_server_context(SandboxCa& ca, const ServerOptions& options = {});

// Narrows what one connection of such a context offers to `protocols` (server preference as
// above): the engine offers the sandbox only what the upstream leg chose, so that both legs speak
// the same protocol. Before the handshake; without it the context's list applies.
Result<void> offer_alpn(SSL* ssl, std::span<const std::string> protocols);

}  // namespace hutch::net::tls
