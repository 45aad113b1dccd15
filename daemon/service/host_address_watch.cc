#include "daemon/service/host_address_watch.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "net/egress_path.h"

namespace hutch::daemon::service {

Result<std::vector<net::Address>> host_addresses() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return sys_error("getifaddrs", "the host's addresses");
  std::vector<net::Address> out;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr) continue;
    if (it->ifa_addr->sa_family == AF_INET) {
      const auto* in4 = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
      out.push_back(net::Address::v4(ntohl(in4->sin_addr.s_addr)));
    } else if (it->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(it->ifa_addr);
      std::array<uint8_t, 16> bytes{};
      std::memcpy(bytes.data(), &in6->sin6_addr, bytes.size());
      out.push_back(net::Address::v6(bytes));
    }
  }
  ::freeifaddrs(list);
  return out;
}

Result<std::unique_ptr<HostAddressWatch>> HostAddressWatch::start(
    std::shared_ptr<net::HostAddresses> addresses, int netns) {
  std::unique_ptr<HostAddressWatch> watch(new HostAddressWatch());
  watch->netns_ = netns;
  const int type = SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK;
  watch->netlink_ = netns >= 0
                        ? HUTCH_TRY(net::socket_in_netns(netns, AF_NETLINK, type, NETLINK_ROUTE))
                        : UniqueFd(::socket(AF_NETLINK, type, NETLINK_ROUTE));
  if (!watch->netlink_) return sys_error("socket", "AF_NETLINK NETLINK_ROUTE");
  sockaddr_nl groups{};
  groups.nl_family = AF_NETLINK;
  groups.nl_groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
  if (::bind(watch->netlink_.get(), reinterpret_cast<const sockaddr*>(&groups), sizeof groups) != 0)
    return sys_error("bind", "rtnetlink address notifications");
  watch->stop_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!watch->stop_) return sys_error("eventfd", "the host address watch");
  // Read after subscribing: a change meanwhile is announced too, and read again.
  auto now =
      netns >= 0 ? net::run_in_netns(netns, [] { return host_addresses(); }) : host_addresses();
  addresses->set(HUTCH_TRY(std::move(now)));
  watch->thread_ = std::thread([raw = watch.get(), addresses = std::move(addresses)]() mutable {
    raw->run(std::move(addresses));
  });
  return watch;
}

HostAddressWatch::~HostAddressWatch() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  (void)!::write(stop_.get(), &one, sizeof one);
  thread_.join();
}

void HostAddressWatch::run(std::shared_ptr<net::HostAddresses> addresses) {
  if (netns_ >= 0 && ::setns(netns_, CLONE_NEWNET) != 0) {
    spdlog::error("host address watch: setns: {}: the floor's host addresses stay as they are",
                  std::strerror(errno));
    return;
  }
  std::array<char, 8192> buffer;
  for (;;) {
    std::array<pollfd, 2> ready{pollfd{netlink_.get(), POLLIN, 0}, pollfd{stop_.get(), POLLIN, 0}};
    if (::poll(ready.data(), ready.size(), -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("host address watch: poll: {}", std::strerror(errno));
      return;
    }
    if (ready[1].revents != 0) return;
    // The batch drained (ENOBUFS, an overrun, loses only notifications: the read below is whole).
    while (::recv(netlink_.get(), buffer.data(), buffer.size(), 0) > 0 || errno == ENOBUFS) {
    }
    auto now = host_addresses();
    if (!now) {
      spdlog::error("host address watch: {}", now.error().message());
      continue;
    }
    addresses->set(std::move(*now));
  }
}

}  // namespace hutch::daemon::service
