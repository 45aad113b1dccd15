// A scripted HTTP/2 client for the engine's tests, for what curl cannot do: request trailers,
// resetting a stream, watching RST_STREAM codes, GOAWAY and the server's SETTINGS. Blocking
// OpenSSL and an nghttp2 client session, on the calling thread (make it in the namespace whose
// connections are to be relayed).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "net/address.h"
#include "net/tls/openssl.h"
#include "runtime/base/unique_fd.h"

struct nghttp2_session;

namespace hutch::testing {

class H2Client {
 public:
  using Fields = std::vector<std::pair<std::string, std::string>>;
  struct Stream {
    std::string status;
    std::string body;
    bool closed = false;
    uint32_t code = 0;  // RST_STREAM's, 0 for a clean end
    // The request's body and trailers, sent after its headers.
    std::string request_body;
    size_t request_sent = 0;
    Fields request_trailers;
  };

  // Connects to `address`:443 with SNI `host`, offering only h2, trusting `ca_file`; ok() false
  // on any failure.
  H2Client(const net::Address& address, const std::string& host, const std::string& ca_file);
  ~H2Client();
  bool ok() const { return session_ != nullptr; }

  // GET (no body) or POST (a body, trailers after it); the stream's id.
  int32_t request(const std::string& method, const std::string& path, Fields extra = {},
                  std::optional<std::string> body = std::nullopt, Fields trailers = {});
  void reset(int32_t stream, uint32_t code);
  // Exchanges frames until `done` holds (true) or 10 s pass or the connection ends (false).
  bool run_until(const std::function<bool()>& done);

  std::map<int32_t, Stream> streams;
  bool goaway = false;
  uint32_t max_concurrent_streams() const;

 private:
  std::string host_;
  UniqueFd fd_;
  net::tls::SslCtxPtr context_;
  net::tls::SslPtr ssl_;
  nghttp2_session* session_ = nullptr;
};

}  // namespace hutch::testing
