#include "net/egress_path.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <linux/netfilter_ipv6/ip6_tables.h>
#include <linux/nsfs.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <array>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "net/floor.h"
#include "net/netlink.h"
#include "net/nft_ruleset.h"

namespace hutch::net {
namespace {

// The dead end: a veth pair whose both ends stay in the namespace. Its addresses are the
// source of the sandbox's connections (connect() needs one) and lie in floor ranges, so no
// policy can allow them and the engine never sees them as a destination: 192.0.0.8 is the IPv4
// "dummy address" (RFC 7600, for hosts with no other), 100::1 is in the discard-only prefix
// (RFC 6666). A connection to them stays inside the namespace, like one to its loopback.
constexpr const char* kVethName = "hutch0";
constexpr const char* kVethPeer = "hutch1";
constexpr uint32_t kVethV4 = 0xc0000008;  // 192.0.0.8
constexpr std::array<uint8_t, 16> kVethV6{0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

// The owner of a namespace the host's user namespace does not own can administer it (its root
// could flush the rules): refused.
Result<void> check_owned_by_us(int netns_fd) {
  UniqueFd owner(ioctl(netns_fd, NS_GET_USERNS));
  if (!owner) return sys_error("ioctl", "NS_GET_USERNS of netns fd " + std::to_string(netns_fd));
  struct stat owner_stat = {};
  struct stat own_stat = {};
  if (fstat(owner.get(), &owner_stat) != 0) return sys_error("fstat", "owner user namespace");
  if (stat("/proc/self/ns/user", &own_stat) != 0) return sys_error("stat", "/proc/self/ns/user");
  if (owner_stat.st_ino != own_stat.st_ino || owner_stat.st_dev != own_stat.st_dev) {
    return kind_error(ErrorKind::kInvalid, "install_egress_path",
                      "the network namespace is owned by another user namespace (whose root "
                      "could change the egress path)");
  }
  return {};
}

Result<UniqueFd> make_socket(int domain, int type, int protocol) {
  UniqueFd fd(socket(domain, type | SOCK_CLOEXEC, protocol));
  if (!fd) {
    return sys_error("socket", std::string(domain == AF_INET6 ? "AF_INET6" : "AF_INET") + " type " +
                                   std::to_string(type) + " protocol " + std::to_string(protocol));
  }
  return fd;
}

// The kernel completes an IPv6 address from a work queue, even with IFA_F_NODAD: until then it
// has no local route, and the answer to a SYN sent meanwhile is routed out of the veth and
// dropped (the first connect() takes the 1 s SYN retransmission). Done within a millisecond.
Result<void> wait_until_local(Rtnetlink& rtnetlink, const Address& address) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!HUTCH_TRY(rtnetlink.routes_locally(address))) {
    if (std::chrono::steady_clock::now() > deadline) {
      return plain_error("install_egress_path",
                         address.to_string() + " has no local route after 2 s");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return {};
}

// The dead end on a new veth: both ends up, its addresses, default routes through it.
Result<void> configure_dead_end(Rtnetlink& rtnetlink) {
  // Both ends up, or the kernel treats the link as without carrier.
  HUTCH_TRY(rtnetlink.set_link_up(kVethName));
  HUTCH_TRY(rtnetlink.set_link_up(kVethPeer));
  HUTCH_TRY(rtnetlink.add_address(kVethName, Address::v4(kVethV4)));
  HUTCH_TRY(rtnetlink.add_address(kVethName, Address::v6(kVethV6)));
  HUTCH_TRY(rtnetlink.add_default_route(kVethName, Family::kV4));
  HUTCH_TRY(rtnetlink.add_default_route(kVethName, Family::kV6));
  // ::1 too: lo may have come up just before (make_loopback_netns), and the redirect goes there.
  HUTCH_TRY(wait_until_local(rtnetlink, *Address::parse("::1")));
  return wait_until_local(rtnetlink, Address::v6(kVethV6));
}

// Adds a failed undo step to the error being returned.
void note_undo(Error& error, const Result<void>& undone) {
  if (!undone)
    error.detail += " (undoing the install failed too: " + undone.error().message() + ")";
}

// In the target namespace. Rules before routes: the namespace never has a way out that the
// rules do not cover (without the routes connect() fails with ENETUNREACH).
Result<void> install_here() {
  if (HUTCH_TRY(has_link(kVethName))) {
    return kind_error(
        ErrorKind::kConflict, "install_egress_path",
        std::string("the namespace has the egress path already (link ") + kVethName + " exists)");
  }
  const std::vector<Cidr> floor = Floor::static_ranges();
  // One transaction starting with `create table`: on an existing table nothing changes.
  HUTCH_TRY(run_nft(egress_ruleset(floor)));
  // From here on a failure undoes what this call made: deleting the veth takes its addresses and
  // routes with it.
  auto rtnetlink = Rtnetlink::open();
  Result<void> done = rtnetlink ? rtnetlink->add_veth_pair(kVethName, kVethPeer)
                                : Result<void>(std::unexpect, rtnetlink.error());
  if (done) {
    done = configure_dead_end(*rtnetlink);
    if (!done) note_undo(done.error(), rtnetlink->delete_link(kVethName));
  }
  if (!done) note_undo(done.error(), run_nft(kDeleteEgressTable));
  return done;
}

// A listener on loopback at `port`: TCP listening, UDP bound.
Result<UniqueFd> bind_listener(int domain, int type, uint16_t port) {
  UniqueFd fd = HUTCH_TRY(make_socket(domain, type | SOCK_NONBLOCK, 0));
  const bool stream = type == SOCK_STREAM;
  const std::string where = std::string(domain == AF_INET6 ? "[::1]:" : "127.0.0.1:") +
                            std::to_string(port) + (stream ? " tcp" : " udp");
  const int one = 1;
  // TCP only: after a hutchd restart the old connections' TIME_WAIT must not block the port.
  // Linux still refuses a second listener on it. UDP without: two sockets could share the port.
  if (stream && setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    return sys_error("setsockopt", "SO_REUSEADDR " + where);
  }
  int bound;
  if (domain == AF_INET6) {
    if (setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0) {
      return sys_error("setsockopt", "IPV6_V6ONLY " + where);
    }
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_port = htons(port);
    address.sin6_addr = in6addr_loopback;
    bound = bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  } else {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bound = bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  }
  if (bound != 0) return sys_error("bind", where);
  if (stream && listen(fd.get(), SOMAXCONN) != 0) return sys_error("listen", where);
  return fd;
}

Result<EgressListeners> bind_here() {
  EgressListeners listeners;
  listeners.tcp4 = HUTCH_TRY(bind_listener(AF_INET, SOCK_STREAM, kEgressPort));
  listeners.tcp6 = HUTCH_TRY(bind_listener(AF_INET6, SOCK_STREAM, kEgressPort));
  listeners.dns_udp4 = HUTCH_TRY(bind_listener(AF_INET, SOCK_DGRAM, kDnsPort));
  listeners.dns_udp6 = HUTCH_TRY(bind_listener(AF_INET6, SOCK_DGRAM, kDnsPort));
  listeners.dns_tcp4 = HUTCH_TRY(bind_listener(AF_INET, SOCK_STREAM, kDnsPort));
  listeners.dns_tcp6 = HUTCH_TRY(bind_listener(AF_INET6, SOCK_STREAM, kDnsPort));
  return listeners;
}

Destination to_destination(const sockaddr_storage& storage) {
  if (storage.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(storage);
    return {Address::v4(ntohl(in.sin_addr.s_addr)), ntohs(in.sin_port)};
  }
  const auto& in6 = reinterpret_cast<const sockaddr_in6&>(storage);
  std::array<uint8_t, 16> bytes;
  std::memcpy(bytes.data(), &in6.sin6_addr, bytes.size());
  return {Address::v6(bytes), ntohs(in6.sin6_port)};
}

}  // namespace

Result<void> install_egress_path(int netns_fd) {
  HUTCH_TRY(check_owned_by_us(netns_fd));
  return run_in_netns(netns_fd, install_here);
}

Result<EgressListeners> bind_egress_listeners(int netns_fd) {
  return run_in_netns(netns_fd, bind_here);
}

Result<Destination> original_destination(int accepted_fd) {
  sockaddr_storage local{}, original{};
  socklen_t local_length = sizeof local, original_length = sizeof original;
  if (getsockname(accepted_fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0) {
    return sys_error("getsockname", "fd " + std::to_string(accepted_fd));
  }
  const bool v4 = local.ss_family == AF_INET;
  if (getsockopt(accepted_fd, v4 ? SOL_IP : SOL_IPV6, v4 ? SO_ORIGINAL_DST : IP6T_SO_ORIGINAL_DST,
                 &original, &original_length) != 0) {
    return sys_error("getsockopt", std::string(v4 ? "SO_ORIGINAL_DST" : "IP6T_SO_ORIGINAL_DST") +
                                       " fd " + std::to_string(accepted_fd));
  }
  const Destination destination = to_destination(original);
  // conntrack tracks every connection, NATed or not: one that was not redirected has its own
  // listener's address as its original destination.
  const Destination listener = to_destination(local);
  if (destination.address == listener.address && destination.port == listener.port) {
    return kind_error(ErrorKind::kInvalid, "original_destination",
                      "the connection was not redirected (dialled the listener itself)");
  }
  return destination;
}

Result<UniqueFd> socket_in_netns(int netns_fd, int domain, int type, int protocol) {
  return run_in_netns(netns_fd, [&] { return make_socket(domain, type, protocol); });
}

}  // namespace hutch::net
