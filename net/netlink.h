// rtnetlink (through libmnl) in the calling thread's network namespace: only what the egress
// path's dead end needs (a veth pair, an address on it, default routes through it).
#pragma once

#include <libmnl/libmnl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "net/address.h"
#include "runtime/base/error.h"

namespace hutch::net {

// Whether the calling thread's network namespace has a link of that name.
Result<bool> has_link(const std::string& link);

class Rtnetlink {
 public:
  // A NETLINK_ROUTE socket of the calling thread's network namespace (a socket keeps the
  // namespace it was made in).
  static Result<Rtnetlink> open();

  // A veth pair `name` <-> `peer`, both in this namespace, down. Fails with EEXIST when either
  // name is taken (NLM_F_EXCL). Not up at creation: the kernel configures the peer before the
  // pair is whole, and opening it then fails with ENOTCONN.
  Result<void> add_veth_pair(const std::string& name, const std::string& peer);
  Result<void> set_link_up(const std::string& link);
  // `address` as a full-length prefix on `link` (IPv6 without duplicate address detection, so
  // it is usable at once).
  Result<void> add_address(const std::string& link, const Address& address);
  // A default route of `family` out of `link` without a gateway.
  Result<void> add_default_route(const std::string& link, Family family);
  // Whether the kernel routes `address` to this host (a local route, RTN_LOCAL).
  Result<bool> routes_locally(const Address& address);
  // Deletes `link` (a veth's peer goes with it); no such link is success.
  Result<void> delete_link(const std::string& link);

 private:
  struct Close {
    void operator()(mnl_socket* socket) const { mnl_socket_close(socket); }
  };
  explicit Rtnetlink(mnl_socket* socket) : socket_(socket) {}
  // Sends one request and waits for its acknowledgement, or its answer (given to `callback`): 0
  // or the errno.
  int request(nlmsghdr* message, mnl_cb_t callback = nullptr, void* data = nullptr);

  std::unique_ptr<mnl_socket, Close> socket_;
  uint32_t seq_ = 0;
};

}  // namespace hutch::net
