#include "runtime/ns/net.h"

#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hutch {
namespace {

// Brings "lo" up in the caller's network namespace. Async-signal-safe; returns errno.
int set_loopback_up() {
  int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return errno;
  ifreq req{};
  std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
  req.ifr_flags = IFF_UP | IFF_RUNNING;
  int err = ioctl(sock, SIOCSIFFLAGS, &req) == 0 ? 0 : errno;
  close(sock);
  return err;
}

}  // namespace

bool bring_loopback_up(const ChildPlan& plan, ChildError* error) {
  if (!plan.loopback_up) return true;
  if (int err = set_loopback_up()) return child_failure(error, "ioctl", "SIOCSIFFLAGS lo up", err);
  return true;
}

Result<UniqueFd> make_loopback_netns() {
  UniqueFd own(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!own) return sys_error("open", "/proc/thread-self/ns/net");
  if (unshare(CLONE_NEWNET) != 0) return sys_error("unshare", "CLONE_NEWNET");
  UniqueFd made(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  const int open_err = made ? 0 : errno;
  const int up_err = made ? set_loopback_up() : 0;
  // Back home on every path, whatever failed in the new namespace.
  if (setns(own.get(), CLONE_NEWNET) != 0) return sys_error("setns", "back to the own netns");
  if (open_err) return sys_error("open", "/proc/thread-self/ns/net (new)", open_err);
  if (up_err) return sys_error("ioctl", "SIOCSIFFLAGS lo up", up_err);
  return made;
}

}  // namespace hutch
