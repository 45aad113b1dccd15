// An HTTPS server speaking HTTP/2 (ALPN h2, and HTTP/1.1 too if asked) for the engine's tests and
// bench/network.cc: 443 of an address in a network namespace the caller made, a certificate from
// the caller's CA, one thread per connection (an nghttp2 server session over blocking OpenSSL).
// It records every request's fields and body size, and answers HTTP/2 requests by path:
//   /v1/echo...      200 with the request's body
//   /v1/trailers...  200 "ok" followed by trailers (x-checksum: 4f1c, grpc-status: 0)
//   /v1/pair...      held until a second /v1/pair request is open on the same connection, then
//                    200 "paired" to both (or "alone" after 3 s): proves two concurrent streams
//   /v1/reset...     RST_STREAM ENHANCE_YOUR_CALM, no response
//   /v1/goaway...    200 "ok", then GOAWAY naming this stream the last
//   anything else    200 "ok"
// and every HTTP/1.1 request (kept alive, Content-Length bodies only) with 200 "ok". It never
// echoes a header: what the sandbox reads must not hold the secret.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net/address.h"
#include "net/tls/openssl.h"
#include "net/tls/sandbox_ca.h"
#include "runtime/base/unique_fd.h"

namespace hutch::testing {

class H2Upstream {
 public:
  struct Request {
    std::vector<std::pair<std::string, std::string>> fields;  // in the order received
    size_t body_size = 0;
    // The first value of a field, "" without one.
    std::string field(std::string_view name) const;
  };

  enum class Alpn : uint8_t { kH2, kH2AndHttp11 };
  H2Upstream(int netns, const net::Address& address, net::tls::SandboxCa& ca,
             Alpn alpn = Alpn::kH2);
  ~H2Upstream();
  bool ok() const { return static_cast<bool>(listener_); }
  int accepted() const { return accepted_; }
  std::vector<Request> requests() const;
  // The error codes of the streams a peer reset (RST_STREAM received), in order.
  std::vector<uint32_t> resets() const;

 private:
  void run();
  void serve(UniqueFd connection);
  void serve_http11(SSL* ssl);

  net::tls::SslCtxPtr context_;
  UniqueFd listener_;
  std::thread thread_;
  std::vector<std::thread> connections_;  // the accept thread's only
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  mutable std::mutex mutex_;
  std::vector<Request> requests_;
  std::vector<uint32_t> resets_;
};

}  // namespace hutch::testing
