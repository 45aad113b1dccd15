// The network engine end to end (net/engine/engine.h), as root: a sandbox namespace S with the
// egress data path, an upstream namespace U whose lo holds TEST-NET and metadata addresses with
// servers on them, the engine dialling from U only (no packet leaves this machine, even if the
// floor were broken), and clients on threads inside S.
#include "net/engine/engine.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "net/dns_message.h"
#include "net/egress_path.h"
#include "net/engine/fake_names.h"
#include "tests/common/command.h"
#include "tests/common/must_work.h"
#include "tests/common/netns.h"
#include "tests/common/socket_io.h"
#include "tests/common/wait.h"
#include "tests/net/engine_world.h"

namespace hutch::net {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Address addr(const char* text) { return *Address::parse(text); }

using testing::new_netns;

using testing::in_netns;

sockaddr_in sockaddr_of(const Address& address, uint16_t port) {
  sockaddr_in out{};
  out.sin_family = AF_INET;
  out.sin_port = htons(port);
  out.sin_addr.s_addr = htonl(address.v4_value());
  return out;
}

// A client socket of the calling thread's namespace, connected, with timeouts so that a broken
// engine fails the test instead of hanging it. -errno when connect fails.
int dial(const Address& address, uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  const timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  const sockaddr_in to = sockaddr_of(address, port);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
    const int error = errno;
    close(fd);
    return -error;
  }
  return fd;
}

using testing::send_all;

// Reads until EOF (read_error 0) or an error (its errno).
struct Received {
  std::string data;
  int read_error = 0;
};
Received read_all(int fd) {
  Received out;
  char buffer[16384];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n == 0) return out;
    if (n < 0) {
      out.read_error = errno;
      return out;
    }
    out.data.append(buffer, static_cast<size_t>(n));
  }
}

struct Exchange {
  int connect_error = 0;
  int send_error = 0;
  std::string data;
  int read_error = 0;
  // A reset shows on the first call after it: the send when it came early, else the read. A
  // connection refused at accept can be reset before connect() returns (Linux 6.1 over loopback
  // wakes the connecting thread after the RST was processed), and connect() reports it.
  bool reset() const {
    return connect_error == ECONNRESET || send_error == ECONNRESET || read_error == ECONNRESET;
  }
  // For failure messages: what the client saw at each step.
  std::string seen() const {
    return "connect: " + std::string(connect_error ? strerror(connect_error) : "ok") +
           ", send: " + (send_error ? strerror(send_error) : "ok") +
           ", read: " + (read_error ? strerror(read_error) : "ok") + ", " +
           std::to_string(data.size()) + " bytes";
  }
};
// Connects, sends, half-closes and reads everything back.
Exchange exchange(const Address& address, uint16_t port, std::string_view request) {
  Exchange out;
  const int fd = dial(address, port);
  if (fd < 0) {
    out.connect_error = -fd;
    return out;
  }
  if (!send_all(fd, request)) out.send_error = errno;
  shutdown(fd, SHUT_WR);
  Received received = read_all(fd);
  close(fd);
  out.data = std::move(received.data);
  out.read_error = received.read_error;
  return out;
}

// The same over IPv6, for the engine's [::1] listener.
Exchange exchange6(const char* address, uint16_t port, std::string_view request) {
  Exchange out;
  const int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in6 to{};
  to.sin6_family = AF_INET6;
  to.sin6_port = htons(port);
  inet_pton(AF_INET6, address, &to.sin6_addr);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
    out.connect_error = errno;
    close(fd);
    return out;
  }
  if (!send_all(fd, request)) out.send_error = errno;
  shutdown(fd, SHUT_WR);
  Received received = read_all(fd);
  close(fd);
  out.data = std::move(received.data);
  out.read_error = received.read_error;
  return out;
}

std::string get_request(std::string_view host) {
  return "GET / HTTP/1.1\r\nHost: " + std::string(host) + "\r\nConnection: close\r\n\r\n";
}

// A DNS query of the sandbox: to any address, port 53 (the data path redirects it to the stub).
std::vector<uint8_t> dns_query(const std::string& name, uint16_t type, uint16_t id) {
  std::vector<uint8_t> out{
      static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    out.push_back(static_cast<uint8_t>(dot - start));
    out.insert(out.end(), name.begin() + start, name.begin() + dot);
    start = dot + 1;
  }
  out.push_back(0);
  out.insert(out.end(), {static_cast<uint8_t>(type >> 8), static_cast<uint8_t>(type), 0, 1});
  return out;
}

const Address kAnyResolver = addr("198.51.100.53");

std::vector<uint8_t> udp_exchange(const std::vector<uint8_t>& packet) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const timeval timeout{3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  const sockaddr_in to = sockaddr_of(kAnyResolver, 53);
  sendto(fd, packet.data(), packet.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
  std::vector<uint8_t> reply(4096);
  const ssize_t n = recv(fd, reply.data(), reply.size(), 0);
  close(fd);
  reply.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return reply;
}

std::vector<uint8_t> tcp_dns_exchange(const std::vector<uint8_t>& packet) {
  const int fd = dial(kAnyResolver, 53);
  if (fd < 0) return {};
  std::string framed{static_cast<char>(packet.size() >> 8), static_cast<char>(packet.size())};
  framed.append(packet.begin(), packet.end());
  send_all(fd, framed);
  std::string got;
  char buffer[4096];
  // The two-byte length, then that many bytes.
  const auto complete = [&] {
    return got.size() >= 2 &&
           got.size() >= 2u + (static_cast<uint8_t>(got[0]) << 8 | static_cast<uint8_t>(got[1]));
  };
  while (!complete()) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  if (got.size() < 2) return {};
  return std::vector<uint8_t>(got.begin() + 2, got.end());
}

Result<DnsAnswer> resolve_a(const std::string& name, bool tcp = false) {
  const auto query = dns_query(name, kDnsTypeA, 0x4242);
  return parse_dns_answer(tcp ? tcp_dns_exchange(query) : udp_exchange(query), 0x4242, name);
}

// A ClientHello as OpenSSL writes it, with this SNI.
std::string client_hello(const char* sni) {
  SSL_CTX* context = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(context);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  SSL_set_tlsext_host_name(ssl, sni);
  SSL_connect(ssl);  // wants to read the ServerHello: the hello is in `out`
  char* data = nullptr;
  const long size = BIO_get_mem_data(out, &data);
  std::string hello(data, static_cast<size_t>(size));
  SSL_free(ssl);
  SSL_CTX_free(context);
  return hello;
}

// A TCP server in U on one address, a thread per connection; the handler ends with a FIN.
class Upstream {
 public:
  using Handler = std::function<void(int fd)>;
  Upstream(int netns, const Address& address, uint16_t port, Handler handler)
      : handler_(std::move(handler)) {
    listener_ = in_netns(netns, [&] {
      UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      const int one = 1;
      setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      const sockaddr_in at = sockaddr_of(address, port);
      if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0 ||
          listen(fd.get(), 512) != 0) {
        return UniqueFd();
      }
      return fd;
    });
    if (listener_) thread_ = std::thread([this] { run(); });
  }
  ~Upstream() {
    if (!listener_) return;
    shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
    std::lock_guard lock(mutex_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    for (std::thread& one : connections_) one.join();
    for (int fd : fds_) close(fd);
  }
  bool ok() const { return static_cast<bool>(listener_); }
  int accepted() const { return accepted_; }

 private:
  void run() {
    while (true) {
      const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      ++accepted_;
      std::lock_guard lock(mutex_);
      fds_.push_back(fd);
      connections_.emplace_back([this, fd] {
        handler_(fd);
        shutdown(fd, SHUT_WR);
      });
    }
  }

  Handler handler_;
  UniqueFd listener_;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<int> fds_;
  std::vector<std::thread> connections_;
  std::atomic<int> accepted_{0};
};

// HTTP/1.1: one response naming the Host it got.
void serve_http(int fd) {
  std::string head;
  char buffer[4096];
  while (head.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) return;
    head.append(buffer, static_cast<size_t>(n));
  }
  std::string host;
  if (auto at = head.find("\r\nHost: "); at != std::string::npos) {
    host = head.substr(at + 8, head.find("\r\n", at + 8) - at - 8);
  }
  const std::string body = "hello from upstream " + host;
  send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                   "\r\nConnection: close\r\n\r\n" + body);
}

void serve_echo(int fd) {
  char buffer[65536];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0 || !send_all(fd, std::string_view(buffer, static_cast<size_t>(n)))) return;
  }
}

constexpr std::string_view kBanner = "SSH-2.0-hutch-test\r\n";
void serve_banner(int fd) {
  send_all(fd, kBanner);
  serve_echo(fd);
}

constexpr size_t kBulk = 64 << 20;
void serve_bulk(int fd) {
  std::vector<char> chunk(1 << 20, 'x');
  for (size_t sent = 0; sent < kBulk; sent += chunk.size()) {
    if (!send_all(fd, std::string_view(chunk.data(), chunk.size()))) return;
  }
}

// Records the names the engine asked for: denied names must never reach a resolver.
class RecordingResolver final : public Resolver {
 public:
  explicit RecordingResolver(std::shared_ptr<Resolver> inner) : inner_(std::move(inner)) {}
  void resolve(const std::string& name,
               std::function<void(Result<std::vector<Address>>)> done) override {
    {
      std::lock_guard lock(mutex_);
      asked_.insert(name);
    }
    inner_->resolve(name, std::move(done));
  }
  bool asked(const std::string& name) {
    std::lock_guard lock(mutex_);
    return asked_.contains(name);
  }

 private:
  std::shared_ptr<Resolver> inner_;
  std::mutex mutex_;
  std::set<std::string> asked_;
};

// Keeps every lookup until told to answer: lookups still pending when the engine goes.
class ParkedResolver final : public Resolver {
 public:
  void resolve(const std::string&,
               std::function<void(Result<std::vector<Address>>)> done) override {
    std::lock_guard lock(mutex_);
    parked_.push_back(std::move(done));
  }
  size_t parked() {
    std::lock_guard lock(mutex_);
    return parked_.size();
  }
  void answer_all(const std::vector<Address>& addresses) {
    std::vector<std::function<void(Result<std::vector<Address>>)>> all;
    {
      std::lock_guard lock(mutex_);
      all.swap(parked_);
    }
    for (auto& done : all) done(addresses);
  }

 private:
  std::mutex mutex_;
  std::vector<std::function<void(Result<std::vector<Address>>)>> parked_;
};

Policy test_policy() {
  Policy policy;
  policy.mode = Mode::kFiltered;
  for (const char* rule : {"api.test", "api.test:22", "api.test:5001", "other.test", "meta.test",
                           "rebind.test", "*.wild.test", "198.51.100.20"}) {
    policy.allow.push_back(*parse_rule(rule));
  }
  policy.deny.push_back(*parse_rule("bad.wild.test"));
  return policy;
}

// Sockets of this process in the network namespace with inode `netns_inode` (SIOCGSKNS).
int sockets_in(ino_t netns_inode) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(entry.path().filename().c_str());
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    UniqueFd ns(ioctl(fd, SIOCGSKNS));
    if (!ns) continue;
    struct stat ns_stat {};
    if (fstat(ns.get(), &ns_stat) == 0 && ns_stat.st_ino == netns_inode) ++count;
  }
  return count;
}

const Address kApi = addr("198.51.100.10");
const Address kOther = addr("198.51.100.20");
const Address kMetadata = addr("169.254.169.254");

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    sandbox_ns_ = new_netns();
    upstream_ns_ = new_netns();
    HUTCH_REQUIRE(sandbox_ns_ && upstream_ns_, "unshare(CLONE_NEWNET) failed");
    // lo comes up with the sandbox's namespace (the runtime makes it so), before the path.
    ASSERT_NO_FATAL_FAILURE(testing::prepare_namespaces(sandbox_ns_.get(), upstream_ns_.get(),
                                                        {kApi, kOther, kMetadata}));
    servers_.push_back(std::make_unique<Upstream>(upstream_ns_.get(), kApi, 80, serve_http));
    servers_.push_back(std::make_unique<Upstream>(upstream_ns_.get(), kOther, 80, serve_http));
    servers_.push_back(std::make_unique<Upstream>(upstream_ns_.get(), kApi, 443, serve_echo));
    servers_.push_back(std::make_unique<Upstream>(upstream_ns_.get(), kApi, 22, serve_banner));
    servers_.push_back(std::make_unique<Upstream>(upstream_ns_.get(), kApi, 5001, serve_bulk));
    servers_.push_back(std::make_unique<Upstream>(upstream_ns_.get(), kMetadata, 80, serve_http));
    servers_.push_back(
        std::make_unique<Upstream>(upstream_ns_.get(), addr("127.0.0.1"), 80, serve_http));
    for (const auto& server : servers_) ASSERT_TRUE(server->ok()) << "an upstream server's bind";
    resolver_ = std::make_shared<RecordingResolver>(static_resolver({
        {"api.test", {kApi}},
        {"other.test", {kOther}},
        {"x.wild.test", {kApi}},
        {"bad.wild.test", {kApi}},
        {"evil.test", {kApi}},
        {"rebind.test", {addr("127.0.0.1")}},
        {"meta.test", {kMetadata}},
    }));
    options_.resolver = resolver_;
    options_.upstream_netns_fd = upstream_ns_.get();
    options_.threads = 2;
  }

  void TearDown() override {
    engine_.reset();
    servers_.clear();
  }

  void start_engine(Policy policy = test_policy()) {
    engine_ = std::make_unique<Engine>(options_, [this](const ConnectionLog& log) {
      std::lock_guard lock(mutex_);
      logs_.push_back(log);
    });
    auto listeners = bind_egress_listeners(sandbox_ns_.get());
    ASSERT_TRUE(listeners) << listeners.error().message();
    auto attached = engine_->attach("sb", std::move(*listeners), std::move(policy));
    ASSERT_TRUE(attached) << attached.error().message();
  }

  // In the sandbox.
  template <class Body>
  auto in_sandbox(Body&& body) {
    return in_netns(sandbox_ns_.get(), std::forward<Body>(body));
  }

  Address fake(const std::string& name) {
    auto answer = in_sandbox([&] { return resolve_a(name); });
    EXPECT_TRUE(answer) << name;
    if (!answer || answer->addresses.size() != 1) {
      ADD_FAILURE() << "no fake address for " << name;
      return Address();
    }
    return answer->addresses[0];
  }

  // The one log of a relayed connection to `port` matching `name`, once it was written.
  // The first log `matches` accepts, waited for: the engine logs a refusal after its reset.
  std::optional<ConnectionLog> log_where(const std::function<bool(const ConnectionLog&)>& matches) {
    std::optional<ConnectionLog> found;
    (void)testing::wait_until(
        [&] {
          std::lock_guard lock(mutex_);
          const auto it = std::find_if(logs_.begin(), logs_.end(), matches);
          if (it != logs_.end()) found = *it;
          return found.has_value();
        },
        5s, "the connection's log");
    return found;
  }

  std::optional<ConnectionLog> connection_log(const std::string& name, uint16_t port) {
    std::optional<ConnectionLog> found;
    (void)testing::wait_until(
        [&] {
          std::lock_guard lock(mutex_);
          for (const ConnectionLog& log : logs_) {
            if (log.protocol != "dns" && log.port == port && log.name.value_or("") == name) {
              found = log;
            }
          }
          return found.has_value();
        },
        5s, "the connection's log");
    return found;
  }

  UniqueFd sandbox_ns_, upstream_ns_;
  std::vector<std::unique_ptr<Upstream>> servers_;
  std::shared_ptr<RecordingResolver> resolver_;
  EngineOptions options_;
  std::unique_ptr<Engine> engine_;
  std::mutex mutex_;
  std::vector<ConnectionLog> logs_;
};

std::string body_of(const std::string& response) {
  const auto at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

TEST_F(EngineTest, DnsStubAnswersFakeAddressesAndNxdomainOverUdpAndTcp) {
  start_engine();
  in_sandbox([] {
    auto api = resolve_a("api.test");
    EXPECT_TRUE(api && api->rcode == kRcodeNoError && api->addresses.size() == 1);
    auto again = resolve_a("api.test", true);
    EXPECT_TRUE(again && again->addresses == api->addresses) << "stable, and the same over TCP";
    EXPECT_TRUE(FakeNames::in_range(api->addresses[0])) << api->addresses[0].to_string();
    auto aaaa =
        parse_dns_answer(udp_exchange(dns_query("api.test", kDnsTypeAaaa, 7)), 7, "api.test");
    EXPECT_TRUE(aaaa && aaaa->rcode == kRcodeNoError && aaaa->addresses.empty());
    auto https = parse_dns_answer(udp_exchange(dns_query("api.test", 65, 8)), 8, "api.test");
    EXPECT_TRUE(https && https->rcode == kRcodeNoError && https->addresses.empty());
    for (const char* denied : {"evil.test", "bad.wild.test"}) {
      auto answer = resolve_a(denied);
      EXPECT_TRUE(answer && answer->rcode == kRcodeNxDomain) << denied;
      auto over_tcp = resolve_a(denied, true);
      EXPECT_TRUE(over_tcp && over_tcp->rcode == kRcodeNxDomain) << denied;
    }
    std::vector<uint8_t> malformed = dns_query("api.test", kDnsTypeA, 9);
    malformed[5] = 3;
    const auto formerr = udp_exchange(malformed);
    EXPECT_TRUE(formerr.size() >= 12 && (formerr[3] & 0x0f) == kRcodeFormErr);
    return 0;
  });
  auto stats = engine_->stats("sb");
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->dns_queries, 9u);
  EXPECT_EQ(stats->dns_denied, 5u);
  EXPECT_FALSE(resolver_->asked("evil.test")) << "a DNS query never reaches the host's resolver";
  std::lock_guard lock(mutex_);
  const auto denied = std::count_if(logs_.begin(), logs_.end(), [](const ConnectionLog& log) {
    return log.protocol == "dns" && !log.allowed && log.name == "evil.test" &&
           log.rule == "default";
  });
  EXPECT_EQ(denied, 2);
}

TEST_F(EngineTest, AllowedNameOverHttpReachesItsUpstreamAndIsLogged) {
  start_engine();
  const Address api = fake("api.test");
  const auto started = std::chrono::system_clock::now();
  const Exchange got = in_sandbox([&] { return exchange(api, 80, get_request("api.test")); });
  EXPECT_EQ(got.connect_error, 0);
  EXPECT_EQ(got.read_error, 0);
  EXPECT_EQ(body_of(got.data), "hello from upstream api.test") << got.data;
  auto log = connection_log("api.test", 80);
  ASSERT_TRUE(log);
  EXPECT_EQ(log->sandbox, "sb");
  EXPECT_EQ(log->protocol, "http");
  EXPECT_EQ(log->address, "198.51.100.10");
  EXPECT_TRUE(log->allowed);
  EXPECT_EQ(log->rule, "api.test");
  EXPECT_EQ(log->bytes_up, get_request("api.test").size());
  EXPECT_EQ(log->bytes_down, got.data.size());
  EXPECT_GT(log->duration_ms, 0);
  EXPECT_GE(log->started + 1s, started);
}

TEST_F(EngineTest, DeniedNameGets403ByFakeAddressAndByLiteralAddress) {
  start_engine();
  const Address api = fake("api.test");
  Policy without_api = test_policy();
  std::erase_if(without_api.allow, [](const Rule& rule) { return rule.name == "api.test"; });
  ASSERT_TRUE(engine_->set_policy("sb", without_api));
  // The fake address handed out before the change now leads to a denial.
  const Exchange by_fake = in_sandbox([&] { return exchange(api, 80, get_request("api.test")); });
  EXPECT_EQ(by_fake.data.rfind("HTTP/1.1 403", 0), 0u) << by_fake.data;
  auto body = nlohmann::json::parse(body_of(by_fake.data), nullptr, false);
  ASSERT_TRUE(body.is_object()) << by_fake.data;
  EXPECT_EQ(body["error"], "network_denied");
  EXPECT_EQ(body["host"], "api.test");
  EXPECT_EQ(body["rule"], "default");
  // A literal address with a denied Host: the name decides too.
  const Exchange by_literal =
      in_sandbox([&] { return exchange(kOther, 80, get_request("evil.test")); });
  EXPECT_EQ(by_literal.data.rfind("HTTP/1.1 403", 0), 0u) << by_literal.data;
  EXPECT_EQ(nlohmann::json::parse(body_of(by_literal.data), nullptr, false)["host"], "evil.test");
  EXPECT_FALSE(resolver_->asked("evil.test"));
  // The literal address alone is allowed by its rule; and a name that resolves to it.
  const Exchange literal =
      in_sandbox([&] { return exchange(kOther, 80, get_request("198.51.100.20")); });
  EXPECT_EQ(body_of(literal.data), "hello from upstream 198.51.100.20") << literal.data;
  const Exchange named =
      in_sandbox([&] { return exchange(kOther, 80, get_request("other.test")); });
  EXPECT_EQ(body_of(named.data), "hello from upstream other.test") << named.data;
  // An allowed name that does not resolve to the literal address dialled: refused.
  const Exchange elsewhere =
      in_sandbox([&] { return exchange(kOther, 80, get_request("x.wild.test")); });
  EXPECT_EQ(elsewhere.data.rfind("HTTP/1.1 403", 0), 0u) << elsewhere.data;
  auto log = connection_log("x.wild.test", 80);
  ASSERT_TRUE(log);
  EXPECT_FALSE(log->allowed);
  EXPECT_EQ(log->rule, "name");
}

TEST_F(EngineTest, TlsWithAllowedSniPassesThroughByteForByte) {
  start_engine();
  const Address api = fake("api.test");
  const std::string hello = client_hello("api.test");
  ASSERT_GT(hello.size(), 100u);
  const Exchange got = in_sandbox([&] { return exchange(api, 443, hello); });
  EXPECT_EQ(got.read_error, 0);
  EXPECT_EQ(got.data, hello) << "the echo server got the ClientHello intact, and the half-close";
  auto log = connection_log("api.test", 443);
  ASSERT_TRUE(log);
  EXPECT_EQ(log->protocol, "tls");
  EXPECT_TRUE(log->allowed);
  EXPECT_EQ(log->bytes_up, hello.size());
  EXPECT_EQ(log->bytes_down, hello.size());
}

TEST_F(EngineTest, SniOrHostDisagreeingWithTheDnsNameIsRefused) {
  start_engine();
  const Address api = fake("api.test");
  const Exchange tls = in_sandbox([&] { return exchange(api, 443, client_hello("other.test")); });
  EXPECT_TRUE(tls.reset()) << "a reset, not a 403, for TLS: " << tls.seen();
  EXPECT_TRUE(tls.data.empty());
  const Exchange http = in_sandbox([&] { return exchange(api, 80, get_request("other.test")); });
  EXPECT_EQ(http.data.rfind("HTTP/1.1 403", 0), 0u) << http.data;
  EXPECT_NE(body_of(http.data).find("disagree"), std::string::npos) << http.data;
  EXPECT_EQ(servers_[1]->accepted(), 0) << "other.test's server was never dialled";
}

TEST_F(EngineTest, MetadataAndLoopbackBehindAllowedNamesAreRefusedByTheRebindingRule) {
  start_engine();
  for (const char* name : {"meta.test", "rebind.test"}) {
    const Address fake_address = fake(name);
    const Exchange got = in_sandbox([&] { return exchange(fake_address, 80, get_request(name)); });
    EXPECT_EQ(got.data.rfind("HTTP/1.1 403", 0), 0u) << name << ": " << got.data;
    auto log = connection_log(name, 80);
    ASSERT_TRUE(log) << name;
    EXPECT_EQ(log->rule, "rebinding") << name;
  }
  // The literal metadata address never reaches the engine: the data path resets it.
  const Exchange literal =
      in_sandbox([&] { return exchange(kMetadata, 80, get_request("169.254.169.254")); });
  EXPECT_TRUE(literal.connect_error == ECONNREFUSED || literal.read_error == ECONNRESET);
  EXPECT_EQ(servers_[5]->accepted(), 0) << "the metadata server";
  EXPECT_EQ(servers_[6]->accepted(), 0) << "the upstream's loopback";
}

TEST_F(EngineTest, ServerSpeaksFirstOnANamedPort) {
  start_engine();
  const Address api = fake("api.test");
  const std::string got = in_sandbox([&] {
    const int fd = dial(api, 22);
    if (fd < 0) return std::string("connect failed");
    std::string banner(kBanner.size(), '\0');
    const ssize_t n = recv(fd, banner.data(), banner.size(), MSG_WAITALL);
    banner.resize(n > 0 ? static_cast<size_t>(n) : 0);
    send_all(fd, "ping");
    shutdown(fd, SHUT_WR);
    banner += read_all(fd).data;
    close(fd);
    return banner;
  });
  EXPECT_EQ(got, std::string(kBanner) + "ping");
  // Not allowed on another port.
  const Exchange other = in_sandbox([&] { return exchange(api, 23, "x"); });
  EXPECT_TRUE(other.reset()) << other.seen();
}

// A portless allow covers HTTP/1.x and TLS on 80 and 443, nothing else: h2c by prior knowledge
// (its :authority would go unread), a head behind a leading CRLF (servers skip it; the engine
// would not read the Host), or another protocol on 443 need a rule naming the port.
TEST_F(EngineTest, OtherTcpOnPort80Or443NeedsARuleNamingThePort) {
  start_engine();
  const Address api = fake("api.test");
  const int accepted_80 = servers_[0]->accepted(), accepted_443 = servers_[2]->accepted();
  const std::vector<std::pair<uint16_t, std::string>> attempts{
      {80, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"},
      {80, "\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n"},
      {443, "SSH-2.0-OpenSSH_9.2\r\n"}};
  for (const auto& [port, bytes] : attempts) {
    const Exchange got = in_sandbox([&] { return exchange(api, port, bytes); });
    EXPECT_TRUE(got.reset()) << port << ": " << got.seen();
    EXPECT_EQ(got.data.find("hello"), std::string::npos) << got.data;
  }
  EXPECT_EQ(servers_[0]->accepted(), accepted_80) << "api.test:80 was never dialled";
  EXPECT_EQ(servers_[2]->accepted(), accepted_443) << "api.test:443 was never dialled";
  auto log = log_where([](const ConnectionLog& l) { return l.port == 443 && !l.allowed; });
  ASSERT_TRUE(log);
  EXPECT_EQ(log->protocol, "tcp");
  EXPECT_EQ(log->rule, "default");
  EXPECT_NE(log->reason.find("neither TLS nor HTTP/1.x"), std::string::npos) << log->reason;
  EXPECT_NE(log->reason.find("allow \"api.test:443\""), std::string::npos) << log->reason;

  Policy named = test_policy();
  named.allow.push_back(*parse_rule("api.test:443"));
  ASSERT_TRUE(engine_->set_policy("sb", named));
  const Exchange echoed = in_sandbox([&] { return exchange(api, 443, "SSH-2.0-OpenSSH_9.2\r\n"); });
  EXPECT_EQ(echoed.data, "SSH-2.0-OpenSSH_9.2\r\n") << "the port named: any TCP goes";
}

TEST_F(EngineTest, DenyWinsOverAWildcardAllow) {
  start_engine();
  const Address x = fake("x.wild.test");
  const Exchange allowed = in_sandbox([&] { return exchange(x, 80, get_request("x.wild.test")); });
  EXPECT_EQ(body_of(allowed.data), "hello from upstream x.wild.test") << allowed.data;
  auto nx = in_sandbox([] { return resolve_a("bad.wild.test"); });
  EXPECT_TRUE(nx && nx->rcode == kRcodeNxDomain);
  const Exchange denied =
      in_sandbox([&] { return exchange(kApi, 80, get_request("bad.wild.test")); });
  EXPECT_EQ(denied.data.rfind("HTTP/1.1 403", 0), 0u) << denied.data;
  EXPECT_EQ(nlohmann::json::parse(body_of(denied.data), nullptr, false)["rule"], "bad.wild.test");
  EXPECT_FALSE(resolver_->asked("bad.wild.test"));
}

TEST_F(EngineTest, StatsCountDecisionsAndBytes) {
  start_engine();
  const Address api = fake("api.test");
  std::string ok;
  for (int i = 0; i < 3; ++i) {
    ok = in_sandbox([&] { return exchange(api, 80, get_request("api.test")); }).data;
  }
  in_sandbox([&] { return exchange(api, 80, get_request("evil.test")); });
  ASSERT_TRUE(testing::wait_until([&] { return engine_->stats("sb")->active == 0; }, 5s,
                                  "the connections to end"));
  const SandboxNetStats stats = *engine_->stats("sb");
  EXPECT_EQ(stats.connections, 4u);
  EXPECT_EQ(stats.denied, 1u);
  EXPECT_EQ(stats.dns_queries, 1u);
  EXPECT_EQ(stats.bytes_up, 3 * get_request("api.test").size());
  EXPECT_EQ(stats.bytes_down, 3 * ok.size());
  EXPECT_FALSE(engine_->stats("unknown"));
}

TEST_F(EngineTest, ConnectionCapResetsAndLogsTheExtraOne) {
  options_.max_connections_per_sandbox = 2;
  start_engine();
  const Address api = fake("api.test");
  in_sandbox([&] {
    std::vector<int> held;
    for (int i = 0; i < 2; ++i) {
      held.push_back(dial(api, 22));
      std::string banner(kBanner.size(), '\0');
      EXPECT_EQ(recv(held.back(), banner.data(), banner.size(), MSG_WAITALL),
                static_cast<ssize_t>(banner.size()));
    }
    const Exchange third = exchange(api, 22, "");
    EXPECT_TRUE(third.reset()) << third.seen();
    for (int fd : held) close(fd);
    return 0;
  });
  ASSERT_TRUE(testing::wait_until([&] { return engine_->stats("sb")->active == 0; }, 5s,
                                  "the held connections to end"));
  const std::string after = in_sandbox([&] {
    const int fd = dial(api, 22);
    std::string banner(kBanner.size(), '\0');
    const ssize_t n = recv(fd, banner.data(), banner.size(), MSG_WAITALL);
    close(fd);
    return n > 0 ? banner : std::string();
  });
  EXPECT_EQ(after, kBanner);
  std::lock_guard lock(mutex_);
  EXPECT_EQ(std::count_if(logs_.begin(), logs_.end(),
                          [](const ConnectionLog& log) { return log.rule == "limit"; }),
            1);
}

TEST_F(EngineTest, DetachClosesEverySocketOfTheSandbox) {
  start_engine();
  struct stat ns {};
  ASSERT_EQ(fstat(sandbox_ns_.get(), &ns), 0);
  const Address api = fake("api.test");
  EXPECT_GE(sockets_in(ns.st_ino), 6) << "the listeners";
  const Received cut = in_sandbox([&] {
    const int fd = dial(api, 22);
    std::string banner(kBanner.size(), '\0');
    recv(fd, banner.data(), banner.size(), MSG_WAITALL);
    engine_->detach("sb");
    Received rest = read_all(fd);
    close(fd);
    return rest;
  });
  EXPECT_EQ(cut.read_error, ECONNRESET) << "the open connection was reset";
  EXPECT_EQ(sockets_in(ns.st_ino), 0);
  EXPECT_FALSE(engine_->stats("sb"));
  engine_->detach("sb");  // again: a no-op
  // The sandbox can be attached again, with new listeners.
  auto listeners = bind_egress_listeners(sandbox_ns_.get());
  ASSERT_TRUE(listeners) << listeners.error().message();
  ASSERT_TRUE(engine_->attach("sb", std::move(*listeners), test_policy()));
  EXPECT_FALSE(engine_->attach("sb", {}, test_policy())) << "attached already";
}

TEST_F(EngineTest, UnknownFakeAddressAndMalformedHeadsAreRefused) {
  start_engine();
  const Exchange unknown = in_sandbox([&] { return exchange(addr("198.18.9.9"), 22, "hello"); });
  EXPECT_TRUE(unknown.reset()) << unknown.seen();
  const Address api = fake("api.test");
  const Exchange bad = in_sandbox([&] { return exchange(api, 80, "GET / HTTP/1.1\r\n\r\n"); });
  EXPECT_EQ(bad.data.rfind("HTTP/1.1 400", 0), 0u) << bad.data;
  std::string broken = client_hello("api.test");
  broken[43] = '\xff';  // the session id's length, past the end of the hello
  const Exchange garbage = in_sandbox([&] { return exchange(api, 443, broken); });
  EXPECT_TRUE(garbage.reset()) << garbage.seen();
  const auto unknown_log =
      log_where([](const ConnectionLog& log) { return log.address == "198.18.9.9"; });
  ASSERT_TRUE(unknown_log);
  EXPECT_FALSE(unknown_log->allowed);
  EXPECT_EQ(unknown_log->rule, "name");
  EXPECT_EQ(servers_[0]->accepted(), 0);
}

TEST_F(EngineTest, TimeoutsEndSilentAndIdleConnections) {
  options_.first_bytes_timeout = 200ms;
  options_.idle_timeout = 300ms;
  start_engine();
  const Address api = fake("api.test");
  in_sandbox([&] {
    // A TLS port with nothing sent: reset once the hello is overdue.
    int fd = dial(api, 443);
    auto start = Clock::now();
    EXPECT_EQ(read_all(fd).read_error, ECONNRESET);
    EXPECT_GE(Clock::now() - start, 150ms);
    close(fd);
    // Idle after the banner: reset after idle_timeout.
    fd = dial(api, 22);
    std::string banner(kBanner.size(), '\0');
    recv(fd, banner.data(), banner.size(), MSG_WAITALL);
    start = Clock::now();
    EXPECT_EQ(read_all(fd).read_error, ECONNRESET);
    EXPECT_GE(Clock::now() - start, 250ms);
    close(fd);
    return 0;
  });
}

TEST_F(EngineTest, RefusedUpstreamIsAResetAndLogged) {
  start_engine();
  const Address other = fake("other.test");
  const Exchange refused =
      in_sandbox([&] { return exchange(other, 443, client_hello("other.test")); });
  EXPECT_TRUE(refused.reset()) << refused.seen();
  auto log = connection_log("other.test", 443);
  ASSERT_TRUE(log);
  EXPECT_TRUE(log->allowed) << "allowed, then the upstream refused";
  EXPECT_NE(log->reason.find("connect to 198.51.100.20"), std::string::npos) << log->reason;
}

TEST_F(EngineTest, KnownNamesSurviveARestartAndNewOnesAreReported) {
  std::vector<std::pair<Address, std::string>> reported;
  engine_ = std::make_unique<Engine>(
      options_, [](const ConnectionLog&) {},
      [&](const std::string& sandbox, const Address& address, const std::string& name) {
        EXPECT_EQ(sandbox, "sb");
        std::lock_guard lock(mutex_);  // the sink runs on an engine thread
        reported.emplace_back(address, name);
      });
  auto listeners = bind_egress_listeners(sandbox_ns_.get());
  ASSERT_TRUE(listeners) << listeners.error().message();
  const Address cached = addr("198.18.5.5");
  ASSERT_TRUE(engine_->attach("sb", std::move(*listeners), test_policy(), {{cached, "api.test"}}));
  const Exchange got = in_sandbox([&] { return exchange(cached, 80, get_request("api.test")); });
  EXPECT_EQ(body_of(got.data), "hello from upstream api.test") << got.data;
  EXPECT_EQ(fake("api.test"), cached);
  std::unique_lock lock(mutex_);
  EXPECT_TRUE(reported.empty()) << "a known name is not new";
  lock.unlock();
  const Address other = fake("other.test");
  lock.lock();
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_EQ(reported[0].first, other);
  EXPECT_EQ(reported[0].second, "other.test");
  lock.unlock();
  EXPECT_FALSE(
      engine_->attach("sb2", EgressListeners{}, test_policy(), {{addr("203.0.113.1"), "x.test"}}))
      << "a known address outside the fake range";
  engine_.reset();  // before `reported`, which its sink writes
}

TEST_F(EngineTest, Ipv6LiteralsReachTheEngineAndAreDecided) {
  start_engine();
  const Exchange named =
      in_sandbox([&] { return exchange6("2001:db8::10", 80, get_request("evil.test")); });
  EXPECT_EQ(named.data.rfind("HTTP/1.1 403", 0), 0u) << named.data << " " << named.connect_error;
  EXPECT_EQ(nlohmann::json::parse(body_of(named.data), nullptr, false)["host"], "evil.test");
  const Exchange bare = in_sandbox([&] { return exchange6("2001:db8::10", 22, "x"); });
  EXPECT_TRUE(bare.reset()) << bare.seen();
  EXPECT_TRUE(log_where([](const ConnectionLog& log) {
    return log.address == "2001:db8::10" && log.port == 22 && log.rule == "default";
  }));
}

// getaddrinfo off the caller's thread. The resolver's threads are made in a namespace with only
// lo (threads inherit the creating thread's namespace), so no lookup can leave the machine.
TEST(SystemResolverTest, ResolvesOnItsOwnThreads) {
  HUTCH_REQUIRE_ROOT();
  UniqueFd isolated = new_netns();
  HUTCH_REQUIRE(static_cast<bool>(isolated), "unshare(CLONE_NEWNET) failed");
  std::shared_ptr<Resolver> resolver = in_netns(isolated.get(), [] { return system_resolver(); });
  std::promise<std::pair<std::thread::id, Result<std::vector<Address>>>> got;
  resolver->resolve("localhost", [&](Result<std::vector<Address>> addresses) {
    got.set_value({std::this_thread::get_id(), std::move(addresses)});
  });
  auto future = got.get_future();
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
  auto [thread, addresses] = future.get();
  EXPECT_NE(thread, std::this_thread::get_id());
  ASSERT_TRUE(addresses) << addresses.error().message();
  EXPECT_TRUE(std::any_of(addresses->begin(), addresses->end(), [](const Address& address) {
    return address == addr("127.0.0.1") || address == addr("::1");
  }));
}

TEST_F(EngineTest, LookupsPendingWhenTheEngineGoesAreDropped) {
  auto parked = std::make_shared<ParkedResolver>();
  options_.resolver = parked;
  start_engine();
  const Address api = fake("api.test");
  const Received cut = in_sandbox([&] {
    const int fd = dial(api, 22);
    EXPECT_TRUE(testing::wait_until([&] { return parked->parked() == 1; }, 5s, "the lookup"));
    engine_.reset();
    Received rest = read_all(fd);
    close(fd);
    return rest;
  });
  EXPECT_EQ(cut.read_error, ECONNRESET);
  parked->answer_all({kApi});  // after the engine: nothing may run, nothing may crash
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Connect and read the banner: a new connection's full round trip.
double banner_ms(const Address& address) {
  const auto start = Clock::now();
  const int fd = dial(address, 22);
  std::string banner(kBanner.size(), '\0');
  recv(fd, banner.data(), banner.size(), MSG_WAITALL);
  const auto end = Clock::now();
  close(fd);
  return std::chrono::duration<double, std::milli>(end - start).count();
}

double bulk_seconds(const Address& address, size_t* bytes) {
  std::vector<char> buffer(1 << 18);
  const auto start = Clock::now();
  const int fd = dial(address, 5001);
  *bytes = 0;
  while (true) {
    const ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n <= 0) break;
    *bytes += static_cast<size_t>(n);
  }
  close(fd);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST_F(EngineTest, MeasuresAddedLatencyAndThroughput) {
  start_engine();
  const Address api = fake("api.test");
  constexpr int kRounds = 200;
  const auto rounds = [&](int netns, const Address& address) {
    return in_netns(netns, [&] {
      std::vector<double> times;
      for (int i = 0; i < kRounds; ++i) times.push_back(banner_ms(address));
      return times;
    });
  };
  const double direct = median(rounds(upstream_ns_.get(), kApi));
  const double through = median(rounds(sandbox_ns_.get(), api));
  size_t direct_bytes = 0, through_bytes = 0;
  const double direct_s =
      in_netns(upstream_ns_.get(), [&] { return bulk_seconds(kApi, &direct_bytes); });
  const double through_s =
      in_netns(sandbox_ns_.get(), [&] { return bulk_seconds(api, &through_bytes); });
  EXPECT_EQ(direct_bytes, kBulk);
  EXPECT_EQ(through_bytes, kBulk);
  std::printf(
      "new connection (connect + banner), median of %d: direct %.3f ms, through the engine %.3f "
      "ms, added %.3f ms\n64 MiB bulk: direct %.0f MB/s, through the engine %.0f MB/s\n",
      kRounds, direct, through, through - direct, kBulk / direct_s / 1e6, kBulk / through_s / 1e6);
}

}  // namespace
}  // namespace hutch::net
