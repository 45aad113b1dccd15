#include "tests/net/http1_upstream.h"

#include <openssl/err.h>
#include <sys/socket.h>

#include "tests/common/netns.h"
#include "tests/common/socket_io.h"

namespace hutch::testing {

Http1Upstream::Http1Upstream(int netns, const net::Address& address, uint16_t port,
                             std::string body, net::tls::SslCtxPtr context)
    : body_(std::move(body)),
      context_(std::move(context)),
      listener_(listen_in(netns, address.v4_value(), port)) {
  if (listener_) thread_ = std::thread([this] { run(); });
}

Http1Upstream::~Http1Upstream() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> Http1Upstream::heads() const {
  std::lock_guard lock(mutex_);
  return heads_;
}

void Http1Upstream::run() {
  while (!stop_) {
    UniqueFd connection = accept_within_100ms(listener_.get());
    if (!connection) continue;
    ++accepted_;
    const timeval timeout{5, 0};
    setsockopt(connection.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    if (!context_) {
      serve([&](char* buffer,
                int size) { return static_cast<int>(recv(connection.get(), buffer, size, 0)); },
            [&](const std::string& text) { return send_all(connection.get(), text); });
      continue;
    }
    net::tls::SslPtr ssl(SSL_new(context_.get()));
    SSL_set_fd(ssl.get(), connection.get());
    if (SSL_accept(ssl.get()) == 1) {
      serve([&](char* buffer, int size) { return SSL_read(ssl.get(), buffer, size); },
            [&](const std::string& text) {
              return SSL_write(ssl.get(), text.data(), static_cast<int>(text.size())) > 0;
            });
    }
    ERR_clear_error();
  }
}

template <class Read, class Write>
void Http1Upstream::serve(Read read, Write write) {
  std::string buffer;
  char chunk[4096];
  while (true) {
    size_t end;
    while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
      const int n = read(chunk, sizeof chunk);
      if (n <= 0) return;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    const std::string head = buffer.substr(0, end + 4);
    buffer.erase(0, end + 4);
    size_t length = 0;
    if (auto at = head.find("Content-Length: "); at != std::string::npos)
      length = std::stoul(head.substr(at + 16));
    while (buffer.size() < length) {
      const int n = read(chunk, sizeof chunk);
      if (n <= 0) return;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    buffer.erase(0, length);
    {
      std::lock_guard lock(mutex_);
      heads_.push_back(head);
    }
    if (!write("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body_.size()) + "\r\n\r\n" +
               body_))
      return;
  }
}

}  // namespace hutch::testing
