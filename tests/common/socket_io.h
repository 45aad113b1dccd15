// Writing a whole buffer to a socket in the tests (MSG_NOSIGNAL: a peer that closed is a false,
// not a SIGPIPE).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <string_view>

namespace hutch::testing {

inline bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace hutch::testing
