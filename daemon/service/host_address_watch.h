// The host's own addresses for the floor (net/floor.h), kept current: an address the host gets
// after hutchd started (DHCP, a new interface, a bridge) is refused to sandboxes as soon as the
// kernel announces it, not after a restart. A thread reads rtnetlink's address notifications
// (RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR) and, after each batch, reads the addresses again whole
// (getifaddrs) and replaces the floor's list.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "net/address.h"
#include "net/floor.h"
#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch::daemon::service {

// The addresses of the calling thread's network namespace (getifaddrs).
Result<std::vector<net::Address>> host_addresses();

class HostAddressWatch {
 public:
  // Subscribes, then reads the addresses into `addresses`, then keeps them current until
  // destroyed. `netns`: the network namespace to watch (an fd, tests); -1: this thread's.
  static Result<std::unique_ptr<HostAddressWatch>> start(
      std::shared_ptr<net::HostAddresses> addresses, int netns = -1);
  ~HostAddressWatch();  // stops and joins the thread
  HostAddressWatch(const HostAddressWatch&) = delete;
  HostAddressWatch& operator=(const HostAddressWatch&) = delete;

 private:
  HostAddressWatch() = default;
  void run(std::shared_ptr<net::HostAddresses> addresses);

  UniqueFd netlink_;  // subscribed in the watched namespace
  UniqueFd stop_;     // an eventfd: written by the destructor
  int netns_ = -1;    // borrowed: the thread's getifaddrs must run in the watched namespace
  std::thread thread_;
};

}  // namespace hutch::daemon::service
