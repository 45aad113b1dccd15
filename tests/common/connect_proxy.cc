#include "tests/common/connect_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>

namespace hutch::testing {
namespace {

sockaddr_in ipv4(const std::string& address, uint16_t port) {
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(port);
  inet_pton(AF_INET, address.c_str(), &at.sin_addr);
  return at;
}

bool send_all(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Copies both ways until both sides closed (or `stop`), half-closing as each side ends.
void splice(int a, int b, const std::atomic<bool>& stop) {
  std::array<char, 16384> buffer;
  bool a_open = true, b_open = true;
  while ((a_open || b_open) && !stop) {
    std::array<pollfd, 2> ready{{{a, static_cast<short>(a_open ? POLLIN : 0), 0},
                                 {b, static_cast<short>(b_open ? POLLIN : 0), 0}}};
    if (::poll(ready.data(), ready.size(), 100) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (ready[i].revents == 0) continue;
      const int from = i == 0 ? a : b, to = i == 0 ? b : a;
      const ssize_t n = ::recv(from, buffer.data(), buffer.size(), 0);
      if (n <= 0) {
        ::shutdown(to, SHUT_WR);
        (i == 0 ? a_open : b_open) = false;
        if (n < 0) return;
        continue;
      }
      if (!send_all(to, std::string(buffer.data(), static_cast<size_t>(n)))) return;
    }
  }
}

}  // namespace

ConnectProxy::ConnectProxy(int netns, const std::string& address, uint16_t port,
                           std::map<std::string, std::string> names)
    : names_(std::move(names)) {
  // The accepting thread joins the namespace; the threads it starts inherit it, so the proxy's
  // own dials are made there too.
  std::atomic<bool> ready{false};
  thread_ = std::thread([this, netns, address, port, &ready] {
    if (::setns(netns, CLONE_NEWNET) == 0) {
      UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      const int on = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
      const sockaddr_in at = ipv4(address, port);
      if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&at), sizeof at) == 0 &&
          ::listen(fd.get(), 64) == 0) {
        listener_ = std::move(fd);
      }
    }
    ready = true;
    if (listener_) run();
  });
  while (!ready) std::this_thread::yield();
}

ConnectProxy::~ConnectProxy() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  for (std::thread& connection : connections_) connection.join();
}

std::vector<std::string> ConnectProxy::heads() const {
  std::lock_guard lock(mutex_);
  return heads_;
}

void ConnectProxy::run() {
  while (!stop_) {
    pollfd ready{listener_.get(), POLLIN, 0};
    if (::poll(&ready, 1, 100) != 1) continue;
    UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client) continue;
    ++accepted_;
    connections_.emplace_back([this, fd = client.release()] { serve(UniqueFd(fd)); });
  }
}

void ConnectProxy::serve(UniqueFd client) {
  const timeval timeout{5, 0};
  ::setsockopt(client.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  // Byte by byte up to the empty line: whatever follows is the tunnel's.
  std::string head;
  char c;
  while (!head.ends_with("\r\n\r\n")) {
    if (::recv(client.get(), &c, 1, 0) != 1 || head.size() > 16384) return;
    head.push_back(c);
  }
  {
    std::lock_guard lock(mutex_);
    heads_.push_back(head);
  }
  if (mode_ == Mode::kSilent) {
    // Holds the connection open, answering nothing, until the engine gives up (or the test ends).
    while (!stop_) {
      pollfd ready{client.get(), POLLIN, 0};
      if (::poll(&ready, 1, 100) == 1 && ::recv(client.get(), &c, 1, 0) <= 0) return;
    }
    return;
  }
  if (mode_ == Mode::kRefuse) {
    const std::string body = "refused by the test proxy\n";
    send_all(client.get(), "HTTP/1.1 " + std::to_string(status_) +
                               " Refused\r\nProxy-Authenticate: Basic realm=\"test\"\r\n"
                               "Content-Length: " +
                               std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
                               body);
    return;
  }
  // "CONNECT host:port HTTP/1.1"
  const size_t space = head.find(' '), second = head.find(' ', space + 1);
  const std::string target = head.substr(space + 1, second - space - 1);
  const size_t colon = target.rfind(':');
  const std::string host = target.substr(0, colon);
  const int port = std::atoi(target.substr(colon + 1).c_str());
  const auto named = names_.find(host);
  const std::string address = named != names_.end() ? named->second : host;
  UniqueFd upstream(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_in at = ipv4(address, static_cast<uint16_t>(port));
  if (!head.starts_with("CONNECT ") ||
      ::connect(upstream.get(), reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0) {
    send_all(client.get(), "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
    return;
  }
  if (!send_all(client.get(), "HTTP/1.1 200 Connection established\r\n\r\n")) return;
  splice(client.get(), upstream.get(), stop_);
}

}  // namespace hutch::testing
