// The kernel half of a filtered sandbox's egress: what is installed inside its network namespace
// so that every TCP connection and every DNS query it makes lands on a listener of the engine
// (a host process), and nothing else leaves. Nothing of hutch's runs inside the sandbox.
//
// Inside the namespace (owned by the host's user namespace, so the sandbox's root cannot change
// any of it): lo up; a veth pair with both ends inside as a dead-end default route for IPv4 and
// IPv6 (this kernel kind has no `dummy`), so connect() to any address reaches the output hook;
// an nftables table `inet hutch`: DNS (UDP and TCP port 53, any address) is redirected to the
// engine's stub, loopback passes, the static floor ranges are not redirected and so get a TCP
// reset, every other TCP connection is redirected to kEgressPort; the filter chain accepts lo
// and `ct status dnat`, resets other TCP and drops everything else (sendto fails with EPERM,
// QUIC falls back to TCP).
#pragma once

#include <fcntl.h>
#include <sched.h>

#include <cstdint>
#include <string>

#include "net/address.h"
#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch::net {

// Ports of the engine's listeners inside the namespace. Below 1024: the sandbox's root has no
// CAP_NET_BIND_SERVICE in a namespace the host's user namespace owns, so nothing inside can bind
// them first (after a hutchd restart, while the listeners are re-made).
inline constexpr uint16_t kEgressPort = 900;
inline constexpr uint16_t kDnsPort = 53;

// The engine's listeners, each bound inside the sandbox's namespace (non-blocking, CLOEXEC):
// TCP on 127.0.0.1 and [::1] at kEgressPort; DNS on 127.0.0.1 and [::1] at kDnsPort, UDP and TCP.
struct EgressListeners {
  UniqueFd tcp4, tcp6;
  UniqueFd dns_udp4, dns_udp6;
  UniqueFd dns_tcp4, dns_tcp6;
};

// Installs the data path above in the network namespace `netns_fd` (setns(2) on the calling
// thread, which is back in its own namespace on every path). Fails, naming the step, when the
// namespace already has it or is not owned by the caller's user namespace.
Result<void> install_egress_path(int netns_fd);

// Binds the engine's listeners in `netns_fd`: at create, and again for a sandbox re-adopted
// after a hutchd restart (the path itself survives in the namespace).
Result<EgressListeners> bind_egress_listeners(int netns_fd);

// The address and port a connection accepted on an egress listener was dialled to, from
// conntrack (SO_ORIGINAL_DST, IP6T_SO_ORIGINAL_DST). Fails when the connection was not
// redirected (something inside dialled the listener itself on loopback): the engine refuses it.
struct Destination {
  Address address;
  uint16_t port = 0;
};
Result<Destination> original_destination(int accepted_fd);

// A socket(2) made in the network namespace `netns_fd` (sockets stay in the namespace they were
// made in): the engine's upstream sockets in a test's namespace, hutchd's connections to a
// sandbox's own ports.
Result<UniqueFd> socket_in_netns(int netns_fd, int domain, int type, int protocol = 0);

// Runs `body` (returning a Result) with the calling thread in the network namespace `netns_fd`,
// and brings the thread back to its own namespace on every path.
template <class Body>
auto run_in_netns(int netns_fd, Body&& body) -> decltype(body()) {
  UniqueFd own(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!own) return sys_error("open", "/proc/thread-self/ns/net");
  if (setns(netns_fd, CLONE_NEWNET) != 0) {
    return sys_error("setns", "CLONE_NEWNET fd " + std::to_string(netns_fd));
  }
  auto result = body();
  if (setns(own.get(), CLONE_NEWNET) != 0) return sys_error("setns", "back to the own netns");
  return result;
}

}  // namespace hutch::net
