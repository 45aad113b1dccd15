#include "runtime/ns/net.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hutch {

int bring_loopback_up() {
  int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return errno;
  ifreq req{};
  std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
  req.ifr_flags = IFF_UP | IFF_RUNNING;
  int err = ioctl(sock, SIOCSIFFLAGS, &req) == 0 ? 0 : errno;
  close(sock);
  return err;
}

}  // namespace hutch
