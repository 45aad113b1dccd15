#include "net/netlink.h"

#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace hutch::net {
namespace {

// Room for any request below and for an acknowledgement (which echoes the request).
constexpr size_t kBufferSize = 8192;

nlmsghdr* put_header(std::vector<char>& buffer, uint16_t type, uint16_t flags) {
  nlmsghdr* message = mnl_nlmsg_put_header(buffer.data());
  message->nlmsg_type = type;
  message->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
  return message;
}

Result<uint32_t> link_index(const std::string& link) {
  const unsigned index = if_nametoindex(link.c_str());
  if (index == 0) return sys_error("if_nametoindex", link);
  return index;
}

}  // namespace

Result<bool> has_link(const std::string& link) {
  if (if_nametoindex(link.c_str()) != 0) return true;
  if (errno == ENODEV) return false;
  return sys_error("if_nametoindex", link);
}

Result<Rtnetlink> Rtnetlink::open() {
  mnl_socket* socket = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
  if (socket == nullptr) return sys_error("socket", "AF_NETLINK NETLINK_ROUTE");
  Rtnetlink rtnetlink(socket);
  if (mnl_socket_bind(socket, 0, MNL_SOCKET_AUTOPID) != 0) {
    return sys_error("bind", "AF_NETLINK NETLINK_ROUTE");
  }
  return rtnetlink;
}

int Rtnetlink::request(nlmsghdr* message, mnl_cb_t callback, void* data) {
  message->nlmsg_seq = ++seq_;
  if (mnl_socket_sendto(socket_.get(), message, message->nlmsg_len) < 0) return errno;
  std::vector<char> reply(kBufferSize);
  const ssize_t length = mnl_socket_recvfrom(socket_.get(), reply.data(), reply.size());
  if (length < 0) return errno;
  // The acknowledgement's error field becomes errno (0: done).
  if (mnl_cb_run(reply.data(), length, seq_, mnl_socket_get_portid(socket_.get()), callback, data) <
      0) {
    return errno;
  }
  return 0;
}

Result<void> Rtnetlink::add_veth_pair(const std::string& name, const std::string& peer) {
  std::vector<char> buffer(kBufferSize);
  nlmsghdr* message = put_header(buffer, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
  auto* link = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(message, sizeof(ifinfomsg)));
  link->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(message, IFLA_IFNAME, name.c_str());
  nlattr* info = mnl_attr_nest_start(message, IFLA_LINKINFO);
  mnl_attr_put_strz(message, IFLA_INFO_KIND, "veth");
  nlattr* data = mnl_attr_nest_start(message, IFLA_INFO_DATA);
  // VETH_INFO_PEER holds an ifinfomsg of its own, then the peer's attributes.
  nlattr* peer_info = mnl_attr_nest_start(message, VETH_INFO_PEER);
  auto* peer_link = static_cast<ifinfomsg*>(mnl_nlmsg_get_payload_tail(message));
  std::memset(peer_link, 0, sizeof(ifinfomsg));
  peer_link->ifi_family = AF_UNSPEC;
  message->nlmsg_len += MNL_ALIGN(sizeof(ifinfomsg));
  mnl_attr_put_strz(message, IFLA_IFNAME, peer.c_str());
  mnl_attr_nest_end(message, peer_info);
  mnl_attr_nest_end(message, data);
  mnl_attr_nest_end(message, info);
  if (int err = request(message)) {
    return sys_error("RTM_NEWLINK", "veth " + name + " peer " + peer, err);
  }
  return {};
}

Result<void> Rtnetlink::set_link_up(const std::string& link) {
  const uint32_t index = HUTCH_TRY(link_index(link));
  std::vector<char> buffer(kBufferSize);
  nlmsghdr* message = put_header(buffer, RTM_NEWLINK, 0);
  auto* header = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(message, sizeof(ifinfomsg)));
  header->ifi_family = AF_UNSPEC;
  header->ifi_index = static_cast<int>(index);
  header->ifi_flags = header->ifi_change = IFF_UP;
  if (int err = request(message)) return sys_error("RTM_NEWLINK", link + " up", err);
  return {};
}

Result<void> Rtnetlink::add_address(const std::string& link, const Address& address) {
  const uint32_t index = HUTCH_TRY(link_index(link));
  std::vector<char> buffer(kBufferSize);
  nlmsghdr* message = put_header(buffer, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
  auto* header = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(message, sizeof(ifaddrmsg)));
  header->ifa_family = address.is_v4() ? AF_INET : AF_INET6;
  header->ifa_prefixlen = address.bit_length();
  header->ifa_flags = address.is_v4() ? 0 : IFA_F_NODAD;
  header->ifa_scope = RT_SCOPE_UNIVERSE;
  header->ifa_index = index;
  const size_t size = address.bit_length() / 8;
  mnl_attr_put(message, IFA_LOCAL, size, address.bytes().data());
  mnl_attr_put(message, IFA_ADDRESS, size, address.bytes().data());
  if (int err = request(message)) {
    return sys_error("RTM_NEWADDR", address.to_string() + " on " + link, err);
  }
  return {};
}

Result<void> Rtnetlink::add_default_route(const std::string& link, Family family) {
  const uint32_t index = HUTCH_TRY(link_index(link));
  std::vector<char> buffer(kBufferSize);
  nlmsghdr* message = put_header(buffer, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL);
  auto* route = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(message, sizeof(rtmsg)));
  route->rtm_family = family == Family::kV4 ? AF_INET : AF_INET6;
  route->rtm_table = RT_TABLE_MAIN;
  route->rtm_protocol = RTPROT_BOOT;
  // No gateway: every destination is "on the link" (what `ip route add default dev X` makes).
  route->rtm_scope = family == Family::kV4 ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;
  route->rtm_type = RTN_UNICAST;
  mnl_attr_put_u32(message, RTA_OIF, index);
  if (int err = request(message)) {
    return sys_error("RTM_NEWROUTE",
                     std::string(family == Family::kV4 ? "IPv4" : "IPv6") + " default dev " + link,
                     err);
  }
  return {};
}

Result<bool> Rtnetlink::routes_locally(const Address& address) {
  std::vector<char> buffer(kBufferSize);
  nlmsghdr* message = mnl_nlmsg_put_header(buffer.data());
  message->nlmsg_type = RTM_GETROUTE;
  message->nlmsg_flags = NLM_F_REQUEST;  // answered by one RTM_NEWROUTE, or an error
  auto* route = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(message, sizeof(rtmsg)));
  route->rtm_family = address.is_v4() ? AF_INET : AF_INET6;
  route->rtm_dst_len = address.bit_length();
  mnl_attr_put(message, RTA_DST, address.bit_length() / 8, address.bytes().data());
  bool local = false;
  const auto on_route = [](const nlmsghdr* answer, void* out) {
    const auto* found = static_cast<const rtmsg*>(mnl_nlmsg_get_payload(answer));
    *static_cast<bool*>(out) = found->rtm_type == RTN_LOCAL;
    return MNL_CB_OK;
  };
  if (int err = request(message, on_route, &local)) {
    return sys_error("RTM_GETROUTE", address.to_string(), err);
  }
  return local;
}

Result<void> Rtnetlink::delete_link(const std::string& link) {
  std::vector<char> buffer(kBufferSize);
  nlmsghdr* message = put_header(buffer, RTM_DELLINK, 0);
  auto* header = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(message, sizeof(ifinfomsg)));
  header->ifi_family = AF_UNSPEC;
  mnl_attr_put_strz(message, IFLA_IFNAME, link.c_str());
  const int err = request(message);
  if (err != 0 && err != ENODEV) return sys_error("RTM_DELLINK", link, err);
  return {};
}

}  // namespace hutch::net
