// The client side of bench/network.cc's HTTPS figures: one request on a new connection (TCP
// connect, TLS handshake with SNI, GET, the whole response, close), in HTTP/1.1 or HTTP/2
// (nghttp2 client session), the peer's certificate verified against the given CAs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "net/tls/openssl.h"

namespace hutch::bench {

class HttpsClient {
 public:
  // `ca_pems`: the certificates the client trusts (PEM). Exits the bench on failure.
  explicit HttpsClient(const std::vector<std::string>& ca_pems);
  enum class Protocol : uint8_t { kHttp11, kH2 };
  // GET https://`host``path` at `address`:443 with one extra header; dies unless the response is
  // 200 with a body and, for kH2, unless ALPN chose h2.
  void get(uint32_t address, const std::string& host, const std::string& path,
           const std::string& header_name, const std::string& header_value, Protocol protocol);

 private:
  net::tls::SslCtxPtr context_;
};

}  // namespace hutch::bench
