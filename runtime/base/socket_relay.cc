#include "runtime/base/socket_relay.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace hutch {

void relay_bytes(int a, int b, const std::atomic<bool>& stopping) {
  struct Direction {
    int from, to;
    bool open = true;
  } directions[2] = {{a, b}, {b, a}};
  char buffer[64 * 1024];
  while ((directions[0].open || directions[1].open) && !stopping.load()) {
    pollfd polled[2];
    nfds_t count = 0;
    Direction* which[2];
    for (Direction& d : directions) {
      if (!d.open) continue;
      polled[count] = {d.from, POLLIN, 0};
      which[count++] = &d;
    }
    int ready = ::poll(polled, count, 1000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return;
    for (nfds_t i = 0; i < count; ++i) {
      if (polled[i].revents == 0) continue;
      Direction& d = *which[i];
      ssize_t n = ::read(d.from, buffer, sizeof buffer);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n < 0) return;  // a reset: the other side learns it when this returns
      if (n == 0) {
        d.open = false;
        ::shutdown(d.to, SHUT_WR);
        continue;
      }
      for (ssize_t sent = 0; sent < n;) {
        ssize_t m = ::send(d.to, buffer + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
        if (m < 0 && errno == EINTR) continue;
        // A non-blocking socket (hutchd's client connections) that is full: wait for room.
        if (m < 0 && errno == EAGAIN) {
          pollfd writable{d.to, POLLOUT, 0};
          if (::poll(&writable, 1, 1000) < 0 && errno != EINTR) return;
          if (stopping.load()) return;
          continue;
        }
        if (m <= 0) return;
        sent += m;
      }
    }
  }
}

}  // namespace hutch
