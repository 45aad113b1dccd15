// HTTP/2 on a terminated TLS connection (issue #12): both legs negotiated h2 (Relay::terminate_tls
// offers the sandbox h2 only when the upstream chose it), and this relays streams between a
// server session facing the sandbox and a client session facing the upstream (nghttp2, which
// does the framing, HPACK, flow-control bookkeeping and the protocol's checks of what it
// receives: header names and values, pseudo-headers, content-length against DATA).
//
// Per stream, before anything of it goes upstream: the :authority (and a Host, if sent) must be
// the TLS server name; CONNECT is refused; the inject rules for the request's method and :path
// set their headers (net/inject.h); then no header, pseudo-header or trailer may hold a
// placeholder. A refused stream gets a 403 with the JSON body of the HTTP/1.1 path (or, once its
// response has begun, RST_STREAM) and a log line of its own (rule "inject", the secret's name,
// never a value); the connection's other streams go on.
//
// DATA is forwarded with flow control end to end: a side's bytes are acknowledged to it
// (WINDOW_UPDATE) only when the other session has taken them, so the relay holds at most one
// connection window per direction. Trailers, RST_STREAM (with its code) and GOAWAY cross over;
// the upstream's server push is disabled (SETTINGS_ENABLE_PUSH 0), and the sandbox may open at
// most kMaxConcurrentStreams streams at once. Secrets' bytes: the injected fields are sent
// never-indexed (HPACK keeps no copy), the upstream session's memory is wiped when nghttp2 frees
// it, and so is every buffer written upstream (OPENSSL_cleanse).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "net/engine/sandbox.h"

namespace hutch::net {

using TlsStream = asio::ssl::stream<asio::ip::tcp::socket&>;

// What the connection that owns the streams learns from the relay. Called on the sandbox's
// strand; nothing is called after on_end.
struct H2Hooks {
  std::function<void(uint64_t up, uint64_t down)> on_bytes;  // TLS bytes read or written
  std::function<void(std::string_view header)> on_injected;  // a header set from a secret
  // The connection is over: both sessions are done ("closed"), a peer closed or failed, or a
  // peer broke the protocol (reset: true).
  std::function<void(std::string reason, bool reset)> on_end;
};

struct H2Legs {
  std::shared_ptr<SandboxContext> sandbox;
  TlsStream& sandbox_tls;   // handshaken, ALPN h2
  TlsStream& upstream_tls;  // handshaken, ALPN h2
  // The connection's log line so far (name, address, port): each refused stream logs a copy.
  ConnectionLog log;
};

inline constexpr uint32_t kMaxConcurrentStreams = 100;

// Starts relaying. `owner` (the connection holding both streams) is kept alive until the last
// operation on them has completed: reads are pending on both legs until on_end, so closing
// either socket ends the relay.
void start_h2_relay(H2Legs legs, std::shared_ptr<void> owner, H2Hooks hooks);

}  // namespace hutch::net
