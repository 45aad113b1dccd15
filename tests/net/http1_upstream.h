// An HTTP/1.1 server for the engine's tests, on `address`:`port` of a network namespace the caller
// made, over TLS when given a server context: keep-alive, Content-Length bodies read and dropped,
// every request head recorded, each request answered 200 with a fixed body (never echoing a
// header: what the sandbox reads must not hold the secret). One connection at a time.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/address.h"
#include "net/tls/openssl.h"
#include "runtime/base/unique_fd.h"

namespace hutch::testing {

class Http1Upstream {
 public:
  Http1Upstream(int netns, const net::Address& address, uint16_t port, std::string body,
                net::tls::SslCtxPtr context = nullptr);
  ~Http1Upstream();
  bool ok() const { return static_cast<bool>(listener_); }
  int accepted() const { return accepted_; }
  std::vector<std::string> heads() const;

 private:
  void run();
  template <class Read, class Write>
  void serve(Read read, Write write);

  std::string body_;
  net::tls::SslCtxPtr context_;
  UniqueFd listener_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> heads_;
};

}  // namespace hutch::testing
