// The engine's side of a CONNECT to the upstream proxy (net/upstream_proxy.h): the credentials
// header from a secret, the request, and the proxy's answer read up to its empty line and not a
// byte further, so whatever follows on the socket is the tunnel's (a server that speaks first,
// a TLS handshake) and the relay goes on exactly as over a direct connection.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "net/inject.h"
#include "net/upstream_proxy.h"
#include "runtime/base/error.h"

namespace hutch::net {

// "Basic " + base64("user:password") from the proxy's credentials secret; nullopt when the proxy
// takes none. Fails naming the secret (never its value) when `secrets` does not hold it. The
// caller wipes the result once it is sent.
Result<std::optional<std::string>> proxy_authorization(const UpstreamProxy& proxy,
                                                       const SecretLookup& secrets);

struct TunnelResult {
  bool open = false;   // the proxy answered 2xx: the socket now carries the tunnel
  int status = 0;      // the proxy's status code; 0 when it gave none
  std::string detail;  // for the log when not open: "answered 407", "no answer within 10000 ms"
};

// Sends `request` (connect_request(); wiped once written) on `socket`, connected to the proxy,
// and calls `done` once, on the socket's executor, when the answer's head was read, the proxy
// closed or failed, or `timeout` passed (the socket's operations are then cancelled). `done`
// keeps whatever owns the socket alive until then.
void open_proxy_tunnel(boost::asio::ip::tcp::socket& socket, std::string request,
                       std::chrono::milliseconds timeout, std::function<void(TunnelResult)> done);

}  // namespace hutch::net
