// Socket helpers of the tests: writing a whole buffer (MSG_NOSIGNAL: a peer that closed is a
// false, not a SIGPIPE), finding a free loopback TCP port and a server's accept step.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <string_view>

#include "runtime/base/unique_fd.h"

namespace hutch::testing {

inline bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// A TCP port of 127.0.0.1 the kernel had free a moment ago (0 if it could not say): the
// listener asked to use it may still lose a race for it, which then fails that test loudly.
inline int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool known = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(fd);
  return known ? ntohs(address.sin_port) : 0;
}

// A connection accepted on `listener` if one comes within 100 ms, else an empty fd: a server's
// accept loop wakes this often to see its stop flag.
inline UniqueFd accept_within_100ms(int listener) {
  pollfd ready{.fd = listener, .events = POLLIN, .revents = 0};
  if (::poll(&ready, 1, 100) != 1) return UniqueFd();
  return UniqueFd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
}

}  // namespace hutch::testing
