// Network namespaces of the tests: a new one made on a thread of its own (unshare(CLONE_NEWNET)
// changes only the calling thread's namespace, so the test's threads stay where they were), and
// work done inside one, each time on a thread of its own for the same reason (setns(2)).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/unique_fd.h"
#include "tests/common/command.h"

namespace hutch::testing {

// The namespace's fd, or an empty one when unshare failed.
inline UniqueFd new_netns() {
  UniqueFd fd;
  std::thread([&] {
    if (unshare(CLONE_NEWNET) == 0)
      fd.reset(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  }).join();
  return fd;
}

// `body()` inside the network namespace `netns`, its result returned. Aborts when setns fails:
// the namespace is the test's own, and `body` must never run in the host's.
template <class Body>
auto in_netns(int netns, Body&& body) {
  decltype(body()) result{};
  std::thread([&] {
    if (setns(netns, CLONE_NEWNET) != 0) abort();
    result = body();
  }).join();
  return result;
}

// `argv` run inside `netns`: true when it exited 0 (false too when setns failed).
inline bool run_in(int netns, const std::vector<std::string>& argv) {
  bool ok = false;
  std::thread([&] {
    if (setns(netns, CLONE_NEWNET) == 0) ok = run_command(argv).exit_code == 0;
  }).join();
  return ok;
}

// A TCP listener on `ipv4` (host byte order):`port` inside `netns` (the socket keeps the
// namespace it was made in), or an empty fd when setns, socket, bind or listen failed.
inline UniqueFd listen_in(int netns, uint32_t ipv4, uint16_t port) {
  UniqueFd listener;
  std::thread([&] {
    if (setns(netns, CLONE_NEWNET) != 0) return;
    UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    // A test may replace a server on the same port, whose connections linger in TIME_WAIT.
    const int on = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_port = htons(port);
    at.sin_addr.s_addr = htonl(ipv4);
    if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&at), sizeof at) == 0 &&
        listen(fd.get(), 16) == 0) {
      listener = std::move(fd);
    }
  }).join();
  return listener;
}

}  // namespace hutch::testing
