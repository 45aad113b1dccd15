// The egress path for real (net/egress_path.h), as root, in network namespaces the tests make
// (owned by the host's user namespace, as hutch's sandboxes' are). Client sockets are made in the
// namespace with socket_in_netns: a socket routes in the namespace it was made in. Nothing here
// leaves the namespace: its only way out is the veth dead end.
#include "net/egress_path.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "net/netlink.h"
#include "net/nft_ruleset.h"
#include "runtime/ns/net.h"
#include "tests/common/must_work.h"

namespace hutch::net {
namespace {

using Clock = std::chrono::steady_clock;

struct Endpoint {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

Endpoint endpoint(const std::string& address, uint16_t port) {
  Endpoint out;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
  if (inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    out.length = sizeof(sockaddr_in);
  } else {
    EXPECT_EQ(inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr), 1) << address;
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    out.length = sizeof(sockaddr_in6);
  }
  return out;
}

// "1.2.3.4:80", "[2001:db8::5]:22".
std::string to_string(const sockaddr_storage& storage) {
  char text[INET6_ADDRSTRLEN] = {};
  if (storage.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(storage);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(v4.sin_port));
  }
  const auto& v6 = reinterpret_cast<const sockaddr_in6&>(storage);
  inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
  return "[" + std::string(text) + "]:" + std::to_string(ntohs(v6.sin6_port));
}

// What original_destination gives, as text: "1.2.3.4:80", "[2001:db8::5]:22", or its error.
std::string dialled(int accepted_fd) {
  auto destination = original_destination(accepted_fd);
  if (!destination) return destination.error().message();
  const std::string address = destination->address.to_string();
  return (destination->address.is_v4() ? address : "[" + address + "]") + ":" +
         std::to_string(destination->port);
}

// Waits up to 2 s for `fd` to be readable.
bool readable(int fd) {
  pollfd entry{fd, POLLIN, 0};
  return poll(&entry, 1, 2000) == 1;
}

UniqueFd accept_one(int listener) {
  if (!readable(listener)) return UniqueFd();
  return UniqueFd(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
}

ino_t own_netns_inode() {
  struct stat st {};
  EXPECT_EQ(stat("/proc/thread-self/ns/net", &st), 0);
  return st.st_ino;
}

class EgressPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    home_ = own_netns_inode();
    auto made = make_loopback_netns();
    ASSERT_TRUE(made) << made.error().message();
    netns_ = std::move(*made);
    auto installed = install_egress_path(netns_.get());
    ASSERT_TRUE(installed) << installed.error().message();
    auto bound = bind_egress_listeners(netns_.get());
    ASSERT_TRUE(bound) << bound.error().message();
    listeners_ = std::move(*bound);
  }
  void TearDown() override {
    if (netns_) {
      EXPECT_EQ(own_netns_inode(), home_) << "a call left the thread in another netns";
    }
  }

  UniqueFd client(int family, int type, int protocol = 0) {
    auto fd = socket_in_netns(netns_.get(), family, type, protocol);
    EXPECT_TRUE(fd) << fd.error().message();
    return fd ? std::move(*fd) : UniqueFd();
  }

  // connect() from inside: 0 or errno.
  int connect_from_inside(const Endpoint& to, UniqueFd* out = nullptr) {
    UniqueFd fd = client(to.family(), SOCK_STREAM);
    const int err = connect(fd.get(), to.get(), to.length) == 0 ? 0 : errno;
    if (out) *out = std::move(fd);
    return err;
  }

  // A TCP connection to `address`:`port` from inside arrives on `listener`, and its original
  // destination is what was dialled.
  void expect_redirected(const std::string& address, uint16_t port, int listener) {
    const Endpoint to = endpoint(address, port);
    UniqueFd fd;
    ASSERT_EQ(connect_from_inside(to, &fd), 0) << address << ": " << std::strerror(errno);
    UniqueFd accepted = accept_one(listener);
    ASSERT_TRUE(accepted) << "nothing arrived for " << address;
    EXPECT_EQ(dialled(accepted.get()), to_string(to.storage));
  }

  ino_t home_ = 0;
  UniqueFd netns_;
  EgressListeners listeners_;
};

TEST_F(EgressPathTest, TcpV4ArrivesOnTheEgressListenerWithTheDialledAddress) {
  expect_redirected("192.0.2.1", 80, listeners_.tcp4.get());
  expect_redirected("198.51.100.7", 5432, listeners_.tcp4.get());
}

TEST_F(EgressPathTest, TcpV6ArrivesOnTheEgressListenerWithTheDialledAddress) {
  expect_redirected("2001:db8::5", 22, listeners_.tcp6.get());
  expect_redirected("2001:db8:ffff::1", 443, listeners_.tcp6.get());
}

TEST_F(EgressPathTest, TcpToTheFloorIsRefusedAtOnce) {
  // ::ffff:169.254.169.254 leaves an IPv6 socket as IPv4; the NAT64 and 6to4 forms embed the
  // metadata address; fd00:ec2::254 is AWS's IPv6 metadata address.
  for (const char* address :
       {"169.254.169.254", "169.254.1.1", "100.100.100.200", "168.63.129.16", "0.1.2.3",
        "240.0.0.1", "192.0.0.192", "fd00:ec2::254", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe",
        "2002:a9fe:a9fe::1", "2001::1", "100::5", "fec0::1"}) {
    const auto start = Clock::now();
    EXPECT_EQ(connect_from_inside(endpoint(address, 80)), ECONNREFUSED) << address;
    EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(500)) << address;
  }
}

TEST_F(EgressPathTest, DnsOverUdpToAnyServerReachesTheStubAndItsAnswerComesFromThatServer) {
  struct Case {
    const char* server;
    int listener;
  };
  for (const Case& c : {Case{"8.8.8.8", listeners_.dns_udp4.get()},
                        Case{"2001:4860::8888", listeners_.dns_udp6.get()}}) {
    const Endpoint server = endpoint(c.server, 53);
    UniqueFd fd = client(server.family(), SOCK_DGRAM);
    ASSERT_EQ(sendto(fd.get(), "query", 5, 0, server.get(), server.length), 5)
        << c.server << ": " << std::strerror(errno);
    ASSERT_TRUE(readable(c.listener)) << c.server;
    char buffer[16];
    sockaddr_storage from{};
    socklen_t from_length = sizeof from;
    ASSERT_EQ(recvfrom(c.listener, buffer, sizeof buffer, 0, reinterpret_cast<sockaddr*>(&from),
                       &from_length),
              5);
    ASSERT_EQ(sendto(c.listener, "answer", 6, 0, reinterpret_cast<sockaddr*>(&from), from_length),
              6);
    ASSERT_TRUE(readable(fd.get())) << c.server;
    sockaddr_storage answer_from{};
    socklen_t answer_length = sizeof answer_from;
    ASSERT_EQ(recvfrom(fd.get(), buffer, sizeof buffer, 0,
                       reinterpret_cast<sockaddr*>(&answer_from), &answer_length),
              6);
    EXPECT_EQ(to_string(answer_from), to_string(server.storage)) << "conntrack un-NATs the answer";
  }
}

TEST_F(EgressPathTest, DnsOverTcpToAnyServerReachesTheStub) {
  expect_redirected("8.8.8.8", 53, listeners_.dns_tcp4.get());
  expect_redirected("2001:4860::8888", 53, listeners_.dns_tcp6.get());
  expect_redirected("169.254.169.254", 53, listeners_.dns_tcp4.get());
}

TEST_F(EgressPathTest, OtherUdpIsDropped) {
  for (const char* address : {"192.0.2.1", "2001:db8::1"}) {
    const Endpoint to = endpoint(address, 443);  // QUIC
    UniqueFd fd = client(to.family(), SOCK_DGRAM);
    EXPECT_EQ(sendto(fd.get(), "x", 1, 0, to.get(), to.length), -1) << address;
    EXPECT_EQ(errno, EPERM) << address;
  }
}

TEST_F(EgressPathTest, IcmpIsDropped) {
  icmphdr echo{};
  echo.type = ICMP_ECHO;
  UniqueFd raw4 = client(AF_INET, SOCK_RAW, IPPROTO_ICMP);
  const Endpoint v4 = endpoint("192.0.2.1", 0);
  EXPECT_EQ(sendto(raw4.get(), &echo, sizeof echo, 0, v4.get(), v4.length), -1);
  EXPECT_EQ(errno, EPERM);
  icmp6_hdr echo6{};
  echo6.icmp6_type = ICMP6_ECHO_REQUEST;
  UniqueFd raw6 = client(AF_INET6, SOCK_RAW, IPPROTO_ICMPV6);
  const Endpoint v6 = endpoint("2001:db8::1", 0);
  EXPECT_EQ(sendto(raw6.get(), &echo6, sizeof echo6, 0, v6.get(), v6.length), -1);
  EXPECT_EQ(errno, EPERM);
  // A ping socket (what `ping` uses unprivileged): refused at socket() by the namespace's
  // net.ipv4.ping_group_range, or at sendto() by the rules.
  auto ping = socket_in_netns(netns_.get(), AF_INET, SOCK_DGRAM, IPPROTO_ICMP);
  if (ping) {
    EXPECT_EQ(sendto(ping->get(), &echo, sizeof echo, 0, v4.get(), v4.length), -1);
    EXPECT_EQ(errno, EPERM);
  }
}

TEST_F(EgressPathTest, DirectConnectionToTheEgressPortHasNoOriginalDestination) {
  UniqueFd fd;
  ASSERT_EQ(connect_from_inside(endpoint("127.0.0.1", kEgressPort), &fd), 0);
  UniqueFd accepted = accept_one(listeners_.tcp4.get());
  ASSERT_TRUE(accepted);
  auto destination = original_destination(accepted.get());
  ASSERT_FALSE(destination) << dialled(accepted.get());
  EXPECT_EQ(destination.error().kind, ErrorKind::kInvalid);
  UniqueFd fd6;
  ASSERT_EQ(connect_from_inside(endpoint("::1", kEgressPort), &fd6), 0);
  UniqueFd accepted6 = accept_one(listeners_.tcp6.get());
  ASSERT_TRUE(accepted6);
  EXPECT_FALSE(original_destination(accepted6.get())) << dialled(accepted6.get());
}

// RTM_DELROUTE of the IPv4 default route: 0 or errno.
int delete_default_route() {
  std::vector<char> buffer(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* message = mnl_nlmsg_put_header(buffer.data());
  message->nlmsg_type = RTM_DELROUTE;
  message->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  message->nlmsg_seq = 1;
  auto* route = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(message, sizeof(rtmsg)));
  route->rtm_family = AF_INET;
  route->rtm_table = RT_TABLE_MAIN;
  route->rtm_scope = RT_SCOPE_NOWHERE;
  mnl_socket* socket = mnl_socket_open(NETLINK_ROUTE);
  if (socket == nullptr) return errno;
  int err = 0;
  if (mnl_socket_bind(socket, 0, MNL_SOCKET_AUTOPID) != 0 ||
      mnl_socket_sendto(socket, message, message->nlmsg_len) < 0) {
    err = errno;
  } else {
    const ssize_t length = mnl_socket_recvfrom(socket, buffer.data(), buffer.size());
    if (length < 0 ||
        mnl_cb_run(buffer.data(), length, 1, mnl_socket_get_portid(socket), nullptr, nullptr) < 0) {
      err = errno;
    }
  }
  mnl_socket_close(socket);
  return err;
}

TEST_F(EgressPathTest, TheSandboxRootCannotChangeThePath) {
  // What a sandbox's root is: root of a user namespace of its own, in a network namespace that
  // the host's user namespace owns. The test binary has no threads here: fork is safe.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setns(netns_.get(), CLONE_NEWNET) != 0 || unshare(CLONE_NEWUSER) != 0) _exit(10);
    const int map = open("/proc/self/uid_map", O_WRONLY | O_CLOEXEC);
    if (map < 0 || write(map, "0 0 1", 5) != 5) _exit(11);
    close(map);
    int failures = 0;
    auto flushed = run_nft("flush ruleset");
    if (flushed || flushed.error().detail.find("Operation not permitted") == std::string::npos) {
      failures |= 1;
    }
    if (delete_default_route() != EPERM) failures |= 2;
    auto rtnetlink = Rtnetlink::open();
    auto deleted = rtnetlink ? rtnetlink->delete_link("hutch0") : Result<void>();
    if (!rtnetlink || deleted || deleted.error().err != EPERM) failures |= 4;
    _exit(failures);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: nft flush, 2: route delete, 4: link delete was not EPERM"
                                    << " (10, 11: the child's setup failed)";
  expect_redirected("192.0.2.1", 80, listeners_.tcp4.get());
}

// hutchd installs paths from several threads (its egress pool's, a create that finds the pool
// empty, a bake's). libnftables is not safe to run concurrently: before run_nft took one context
// at a time, two pools starting together crashed with a double free, and here about one run in
// ten failed with "nft: Error: Interface does not exist" (its interface cache is the process's,
// filled from whichever namespace's thread came first).
TEST(EgressPathThreads, PathsInstalledFromSeveralThreadsAtOnceAreEachWhole) {
  HUTCH_REQUIRE_ROOT();
  constexpr int kThreads = 4, kEach = 16;
  std::vector<UniqueFd> namespaces;
  for (int i = 0; i < kThreads * kEach; ++i) {
    auto made = make_loopback_netns();  // lo up, as the runtime leaves a sandbox's
    ASSERT_TRUE(made) << made.error().message();
    namespaces.push_back(std::move(*made));
  }
  std::atomic<int> installed = 0;
  std::latch start(kThreads);  // the first calls (libnftables' global setup) collide too
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < kEach; ++i) {
        auto done = install_egress_path(namespaces[t * kEach + i].get());
        EXPECT_TRUE(done) << done.error().message();
        if (done) ++installed;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(installed, kThreads * kEach);
}

TEST_F(EgressPathTest, SecondInstallFailsAndChangesNothing) {
  auto again = install_egress_path(netns_.get());
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().kind, ErrorKind::kConflict) << again.error().message();
  EXPECT_NE(again.error().message().find("already"), std::string::npos) << again.error().message();
  expect_redirected("192.0.2.1", 80, listeners_.tcp4.get());
  EXPECT_EQ(connect_from_inside(endpoint("169.254.169.254", 80)), ECONNREFUSED);
}

// Runs `body` (returning 0 for success) in a child that joined `netns`: 0, or the child's status.
template <class Body>
int in_child(int netns, Body body) {
  const pid_t child = fork();
  if (child == 0) _exit(setns(netns, CLONE_NEWNET) == 0 ? body() : 100);
  int status = -1;
  if (child < 0 || waitpid(child, &status, 0) != child) return -1;
  return status;
}

TEST_F(EgressPathTest, TableWithoutTheVethIsRefusedWholeAndLeftAsItWas) {
  // A namespace with only a table of that name: the transaction fails, no veth is added.
  auto made = make_loopback_netns();
  ASSERT_TRUE(made) << made.error().message();
  ASSERT_EQ(in_child(made->get(), [] { return run_nft("add table inet hutch") ? 0 : 1; }), 0);
  auto installed = install_egress_path(made->get());
  ASSERT_FALSE(installed);
  EXPECT_NE(installed.error().message().find("File exists"), std::string::npos)
      << installed.error().message();
  const Endpoint to = endpoint("192.0.2.1", 80);
  UniqueFd tcp = std::move(*socket_in_netns(made->get(), AF_INET, SOCK_STREAM));
  EXPECT_EQ(connect(tcp.get(), to.get(), to.length), -1);
  EXPECT_EQ(errno, ENETUNREACH) << "no route was added";
}

TEST_F(EgressPathTest, FailureAfterTheRulesUndoesThemAndLeavesOthersLinksAlone) {
  // The peer's name taken by a link of someone else's: the veth cannot be made.
  auto made = make_loopback_netns();
  ASSERT_TRUE(made) << made.error().message();
  ASSERT_EQ(in_child(made->get(),
                     [] {
                       auto rtnetlink = Rtnetlink::open();
                       return rtnetlink && rtnetlink->add_veth_pair("hutch1", "theirs") ? 0 : 1;
                     }),
            0);
  auto installed = install_egress_path(made->get());
  ASSERT_FALSE(installed);
  EXPECT_EQ(installed.error().err, EEXIST) << installed.error().message();
  EXPECT_EQ(in_child(made->get(),
                     [] {
                       auto listed = run_nft("list table inet hutch");
                       auto has_theirs = has_link("hutch1");
                       return (listed ? 1 : 0) | (has_theirs && *has_theirs ? 0 : 2);
                     }),
            0)
      << "1: the table is still there, 2: the other link was deleted";
}

TEST_F(EgressPathTest, TheListenersPinTheNamespaceUntilTheyClose) {
  struct stat netns_stat {};
  ASSERT_EQ(fstat(netns_.get(), &netns_stat), 0);
  netns_.reset();
  // A socket keeps the namespace it was made in (SIOCGSKNS opens it from the socket).
  UniqueFd from_socket(ioctl(listeners_.tcp4.get(), SIOCGSKNS));
  ASSERT_TRUE(from_socket) << std::strerror(errno);
  struct stat pinned {};
  ASSERT_EQ(fstat(from_socket.get(), &pinned), 0);
  EXPECT_EQ(pinned.st_ino, netns_stat.st_ino);
  from_socket.reset();
  listeners_ = EgressListeners();
  // Nothing of this process refers to it any more: the kernel frees it (asynchronously).
  const std::string link = "net:[" + std::to_string(netns_stat.st_ino) + "]";
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    EXPECT_NE(std::filesystem::read_symlink(entry.path(), error).string(), link) << entry.path();
  }
}

TEST_F(EgressPathTest, SecondBindFailsWithAddressInUse) {
  auto again = bind_egress_listeners(netns_.get());
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().err, EADDRINUSE);
  EXPECT_EQ(again.error().message(), "bind(127.0.0.1:900 tcp): Address already in use");
}

TEST_F(EgressPathTest, NamespaceOwnedByAnotherUserNamespaceIsRefused) {
  int ready[2], hold[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(hold, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(hold[1]);
    char byte = unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0 ? 'y' : 'n';
    if (write(ready[1], &byte, 1) != 1) _exit(1);
    (void)read(hold[0], &byte, 1);  // until the parent closes its end
    _exit(0);
  }
  close(ready[1]);
  close(hold[0]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  ASSERT_EQ(byte, 'y');
  UniqueFd foreign(
      open(("/proc/" + std::to_string(child) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
  close(hold[1]);
  ASSERT_TRUE(foreign);
  auto installed = install_egress_path(foreign.get());
  ASSERT_FALSE(installed);
  EXPECT_EQ(installed.error().kind, ErrorKind::kInvalid) << installed.error().message();
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, 0), child);
}

TEST(EgressPathCostTest, InstallAndBindMedianOf200) {
  HUTCH_REQUIRE_ROOT();
  std::vector<double> install_ms, bind_ms;
  for (int i = 0; i < 200; ++i) {
    auto netns = make_loopback_netns();
    ASSERT_TRUE(netns) << netns.error().message();
    const auto start = Clock::now();
    auto installed = install_egress_path(netns->get());
    const auto installed_at = Clock::now();
    ASSERT_TRUE(installed) << installed.error().message();
    auto bound = bind_egress_listeners(netns->get());
    const auto bound_at = Clock::now();
    ASSERT_TRUE(bound) << bound.error().message();
    install_ms.push_back(std::chrono::duration<double, std::milli>(installed_at - start).count());
    bind_ms.push_back(std::chrono::duration<double, std::milli>(bound_at - installed_at).count());
  }
  auto quantile = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * (v.size() - 1))];
  };
  std::printf(
      "egress path cost (200 namespaces): install_egress_path median %.3f ms (p90 %.3f), "
      "bind_egress_listeners median %.3f ms (p90 %.3f)\n",
      quantile(install_ms, 0.5), quantile(install_ms, 0.9), quantile(bind_ms, 0.5),
      quantile(bind_ms, 0.9));
}

}  // namespace
}  // namespace hutch::net
