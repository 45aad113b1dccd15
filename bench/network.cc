// network: the filtered egress path (net/egress_path.h + net/engine/engine.h) against a direct
// connection, measured in the same run.
//
//   network --upstream-netns PATH --direct-netns PATH [--runs N] [--bulk-mib N] [--sandboxes N]
//
// bench/network.sh makes the namespaces: an upstream namespace U whose 198.51.100.10 serves, and
// a direct namespace D joined to U by a veth pair (the plain kernel path a sandbox with a routed
// interface would have). This bench makes a sandbox-like namespace S the way hutchd does (lo up,
// owned by this user namespace, the egress path installed, the engine's listeners bound in it)
// and an engine that dials its upstreams from U. Prints p50/p95 of, S through the engine against
// D direct, interleaved run by run so both see the same machine noise:
//   dns            a UDP A query to 8.8.8.8:53 (the stub answers; nothing is forwarded);
//   tcp connect    connect + one byte each way + close, on a port allowed by name;
//   http request   connect + GET with a Host header (the engine reads the head) + the reply;
//   bulk           --bulk-mib MiB read to EOF, as MiB/s, and the process's CPU time per GiB;
//   https h1/h2    connect + TLS handshake + one GET + the reply, HTTP/1.1 and HTTP/2, to a host an
//                  inject rule names (so the engine terminates TLS on both legs and sets a header
//                  from a secret), against the same requests from D straight to the upstream;
// and the cost per sandbox of the namespace, the path and the listeners made ahead, and the
// engine's resident memory per idle attached sandbox (--sandboxes of them).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bench/figures.h"
#include "bench/https_client.h"
#include "net/dns_message.h"
#include "net/egress_path.h"
#include "net/engine/engine.h"
#include "net/inject.h"
#include "net/tls/sandbox_ca.h"
#include "runtime/ns/net.h"
#include "tests/net/h2_upstream.h"

namespace {

using hutch::UniqueFd;
using hutch::bench::Clock;
using hutch::bench::figures;
using hutch::bench::Figures;
using hutch::bench::HttpsClient;
using hutch::bench::ms_since;
using namespace hutch::net;

constexpr uint32_t kUpstream = 0xc633640a;  // 198.51.100.10
constexpr uint16_t kPingPort = 9000;
constexpr uint16_t kBulkPort = 9001;
constexpr uint16_t kHttpPort = 80;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "network bench: %s\n", message.c_str());
  std::exit(1);
}

template <typename T>
T must(hutch::Result<T> result, const char* what) {
  if (!result) die(std::string(what) + ": " + result.error().message());
  if constexpr (!std::is_void_v<T>) return std::move(*result);
}

UniqueFd open_netns(const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) die("open " + path + ": " + std::strerror(errno));
  return fd;
}

// Runs `work` on a thread that joined the network namespace `netns` (sockets it makes are there).
void in_netns(int netns, const std::function<void()>& work) {
  std::thread thread([&] {
    if (setns(netns, CLONE_NEWNET) != 0) die(std::string("setns: ") + std::strerror(errno));
    work();
  });
  thread.join();
}

sockaddr_in ipv4(uint32_t address, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(address);
  sa.sin_port = htons(port);
  return sa;
}

UniqueFd connect_to(uint32_t address, uint16_t port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_in sa = ipv4(address, port);
  if (!fd || connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0)
    die(std::string("connect: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void send_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n <= 0) die(std::string("send: ") + std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// Reads to EOF; the byte count.
size_t drain(int fd) {
  static thread_local std::vector<char> buffer(1 << 16);
  size_t total = 0;
  for (;;) {
    ssize_t n = recv(fd, buffer.data(), buffer.size(), 0);
    if (n < 0) die(std::string("recv: ") + std::strerror(errno));
    if (n == 0) return total;
    total += static_cast<size_t>(n);
  }
}

// The upstream's three servers on 198.51.100.10 in U, one thread each, one connection at a time
// (the clients are sequential).
class Upstream {
 public:
  Upstream(int netns, size_t bulk_bytes) : bulk_bytes_(bulk_bytes) {
    for (uint16_t port : {kPingPort, kBulkPort, kHttpPort}) {
      UniqueFd listener = must(socket_in_netns(netns, AF_INET, SOCK_STREAM | SOCK_CLOEXEC),
                               "socket in the upstream namespace");
      const int one = 1;
      setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      const sockaddr_in sa = ipv4(kUpstream, port);
      if (bind(listener.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 ||
          listen(listener.get(), 64) != 0)
        die("bind 198.51.100.10:" + std::to_string(port) + ": " + std::strerror(errno) +
            " (bench/network.sh makes the upstream namespace)");
      threads_.emplace_back([this, port, fd = listener.get()] { serve(fd, port); });
      listeners_.push_back(std::move(listener));
    }
  }
  ~Upstream() {
    stopping_ = true;
    for (auto& listener : listeners_) shutdown(listener.get(), SHUT_RDWR);
    for (auto& thread : threads_) thread.join();
  }

 private:
  void serve(int listener, uint16_t port) {
    std::vector<char> chunk(1 << 16, 'x');
    while (!stopping_) {
      UniqueFd client(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
      if (!client) continue;
      const int one = 1;
      setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      char head[4096];
      if (port == kPingPort) {
        if (recv(client.get(), head, 1, 0) == 1) send_all(client.get(), "p", 1);
        drain(client.get());
      } else if (port == kBulkPort) {
        for (size_t left = bulk_bytes_; left > 0;) {
          size_t n = std::min(left, chunk.size());
          send_all(client.get(), chunk.data(), n);
          left -= n;
        }
      } else {
        std::string request;
        while (request.find("\r\n\r\n") == std::string::npos) {
          ssize_t n = recv(client.get(), head, sizeof head, 0);
          if (n <= 0) break;
          request.append(head, static_cast<size_t>(n));
        }
        static constexpr char kReply[] =
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        send_all(client.get(), kReply, sizeof kReply - 1);
      }
    }
  }

  size_t bulk_bytes_;
  std::atomic<bool> stopping_{false};
  std::vector<UniqueFd> listeners_;
  std::vector<std::thread> threads_;
};

// A sandbox-like namespace with the egress path and the engine's listeners.
struct FilteredNetns {
  UniqueFd netns;
  EgressListeners listeners;
};

FilteredNetns make_filtered_netns() {
  FilteredNetns made;
  made.netns = must(hutch::make_loopback_netns(), "make_loopback_netns");
  must(install_egress_path(made.netns.get()), "install_egress_path");
  made.listeners = must(bind_egress_listeners(made.netns.get()), "bind_egress_listeners");
  return made;
}

Policy bench_policy() {
  Policy policy;
  policy.mode = Mode::kFiltered;
  for (const char* rule : {"bench.test", "bench.test:9000", "bench.test:9001"})
    policy.allow.push_back(must(parse_rule(rule), "parse_rule"));
  return policy;
}

// The terminated host's sandbox: tls.bench allowed, and an inject rule for it, so its TLS is
// terminated and every request gets Authorization from the secret BENCH_KEY.
Policy tls_policy() {
  Policy policy;
  policy.mode = Mode::kFiltered;
  policy.allow.push_back(must(parse_rule("tls.bench"), "parse_rule"));
  policy.inject.push_back(InjectRule{
      .match_hosts = {must(parse_rule("tls.bench"), "parse_rule")},
      .method = std::nullopt,
      .path_prefix = "/v1/",
      .headers = {{.name = "Authorization", .secret = "BENCH_KEY", .prefix = "Bearer "}}});
  return policy;
}

// One A query for bench.test to 8.8.8.8:53 (the redirect takes it to the stub); the address.
uint32_t dns_query(int udp, uint16_t id) {
  static const uint8_t kQuestion[] = {5,   'b', 'e', 'n', 'c', 'h', 4, 't',
                                      'e', 's', 't', 0,   0,   1,   0, 1};
  uint8_t packet[12 + sizeof kQuestion] = {
      static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id), 1, 0, 0, 1};
  std::memcpy(packet + 12, kQuestion, sizeof kQuestion);
  if (send(udp, packet, sizeof packet, 0) != static_cast<ssize_t>(sizeof packet))
    die(std::string("dns send: ") + std::strerror(errno));
  uint8_t reply[512];
  ssize_t n = recv(udp, reply, sizeof reply, 0);
  if (n <= 0) die(std::string("dns recv: ") + std::strerror(errno));
  auto answer =
      must(parse_dns_answer(std::span(reply, static_cast<size_t>(n)), id, "bench.test"), "dns");
  if (answer.rcode != kRcodeNoError || answer.addresses.empty()) die("dns: no address");
  return answer.addresses.front().v4_value();
}

// CPU time of this process, every thread (the client, the upstream's servers, the engine), in ms.
double cpu_ms() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3;
}

size_t resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6));
  return 0;
}

void print_pair(const char* name, const std::vector<double>& through,
                const std::vector<double>& direct) {
  Figures t = figures(through), d = figures(direct);
  std::printf(
      "  %-14s engine p50 %7.3f ms p95 %7.3f ms | direct p50 %7.3f ms p95 %7.3f ms | "
      "+%.3f ms p50, ratio %.2f\n",
      name, t.p50, t.p95, d.p50, d.p95, t.p50 - d.p50, d.p50 > 0 ? t.p50 / d.p50 : 0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string upstream_path, direct_path;
  int runs = 500, sandboxes = 50;
  size_t bulk_mib = 256;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--upstream-netns")
      upstream_path = value();
    else if (arg == "--direct-netns")
      direct_path = value();
    else if (arg == "--runs")
      runs = std::stoi(value());
    else if (arg == "--bulk-mib")
      bulk_mib = std::stoul(value());
    else if (arg == "--sandboxes")
      sandboxes = std::stoi(value());
    else
      die("unknown argument " + arg);
  }
  if (upstream_path.empty() || direct_path.empty())
    die("usage: network --upstream-netns PATH --direct-netns PATH [--runs N] [--bulk-mib N] "
        "[--sandboxes N]");
  UniqueFd upstream_netns = open_netns(upstream_path);
  UniqueFd direct_netns = open_netns(direct_path);
  Upstream upstream(upstream_netns.get(), bulk_mib << 20);
  // The HTTPS upstream (h2 and HTTP/1.1 on 443) with a certificate from a CA of the bench's, which
  // the engine is told to trust as it would the host's roots.
  std::shared_ptr<tls::SandboxCa> upstream_ca =
      must(tls::SandboxCa::create({.label = "bench upstreams"}), "upstream CA");
  std::shared_ptr<tls::SandboxCa> sandbox_ca =
      must(tls::SandboxCa::create({.label = "bench sandbox"}), "sandbox CA");
  hutch::testing::H2Upstream https_upstream(upstream_netns.get(), Address::v4(kUpstream),
                                            *upstream_ca,
                                            hutch::testing::H2Upstream::Alpn::kH2AndHttp11);
  if (!https_upstream.ok()) die("bind 198.51.100.10:443 in the upstream namespace");
  char ca_file[] = "/tmp/hutch-bench-upstream-ca.XXXXXX";
  UniqueFd ca_fd(mkstemp(ca_file));
  if (!ca_fd) die(std::string("mkstemp: ") + std::strerror(errno));
  std::ofstream(ca_file) << upstream_ca->certificate_pem();
  const PlaceholderKey key = must(new_placeholder_key(), "placeholder key");

  EngineOptions options;
  options.threads = 1;
  options.upstream_netns_fd = upstream_netns.get();
  options.upstream_ca_file = ca_file;
  options.secrets = [](std::string_view name) -> std::optional<std::string> {
    if (name == "BENCH_KEY") return std::string("sk-bench-secret");
    return std::nullopt;
  };
  options.resolver = static_resolver(
      {{"bench.test", {Address::v4(kUpstream)}}, {"tls.bench", {Address::v4(kUpstream)}}});
  std::atomic<uint64_t> logged{0};
  Engine engine(std::move(options), [&](const ConnectionLog&) { ++logged; });

  FilteredNetns sandbox = make_filtered_netns();
  must(engine.attach("bench", std::move(sandbox.listeners), bench_policy()), "attach");

  std::printf("network: %d runs, %zu MiB bulk, S through the engine against D direct\n", runs,
              bulk_mib);
  std::vector<double> dns, connect_through, connect_direct, http_through, http_direct;
  uint32_t fake = 0;
  in_netns(sandbox.netns.get(), [&] {
    UniqueFd udp(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    const sockaddr_in resolver = ipv4(0x08080808, 53);
    if (connect(udp.get(), reinterpret_cast<const sockaddr*>(&resolver), sizeof resolver) != 0)
      die(std::string("dns connect: ") + std::strerror(errno));
    for (int i = 0; i < runs; ++i) {
      auto start = Clock::now();
      fake = dns_query(udp.get(), static_cast<uint16_t>(i));
      dns.push_back(ms_since(start));
    }
  });
  std::printf("  %-14s stub p50 %7.3f ms p95 %7.3f ms (bench.test -> %s)\n", "dns",
              figures(dns).p50, figures(dns).p95, Address::v4(fake).to_string().c_str());

  auto ping = [](uint32_t address, std::vector<double>& samples) {
    auto start = Clock::now();
    UniqueFd fd = connect_to(address, kPingPort);
    char byte = 'q';
    send_all(fd.get(), &byte, 1);
    if (recv(fd.get(), &byte, 1, 0) != 1) die("ping: no reply");
    samples.push_back(ms_since(start));
  };
  auto http = [](uint32_t address, std::vector<double>& samples) {
    static constexpr char kRequest[] = "GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n";
    auto start = Clock::now();
    UniqueFd fd = connect_to(address, kHttpPort);
    send_all(fd.get(), kRequest, sizeof kRequest - 1);
    if (drain(fd.get()) == 0) die("http: no reply");
    samples.push_back(ms_since(start));
  };
  for (int i = 0; i < runs; ++i) {
    in_netns(sandbox.netns.get(), [&] { ping(fake, connect_through); });
    in_netns(direct_netns.get(), [&] { ping(kUpstream, connect_direct); });
    in_netns(sandbox.netns.get(), [&] { http(fake, http_through); });
    in_netns(direct_netns.get(), [&] { http(kUpstream, http_direct); });
  }
  print_pair("tcp connect", connect_through, connect_direct);
  print_pair("http request", http_through, http_direct);

  std::vector<double> bulk_through, bulk_direct, cpu_through, cpu_direct;
  auto bulk = [&](uint32_t address, std::vector<double>& rates, std::vector<double>& cpu) {
    const double cpu_start = cpu_ms();
    auto start = Clock::now();
    UniqueFd fd = connect_to(address, kBulkPort);
    size_t got = drain(fd.get());
    if (got != bulk_mib << 20) die("bulk: short read");
    rates.push_back(static_cast<double>(bulk_mib) / (ms_since(start) / 1000));
    cpu.push_back((cpu_ms() - cpu_start) * 1024 / static_cast<double>(bulk_mib));
  };
  for (int i = 0; i < 5; ++i) {
    in_netns(sandbox.netns.get(), [&] { bulk(fake, bulk_through, cpu_through); });
    in_netns(direct_netns.get(), [&] { bulk(kUpstream, bulk_direct, cpu_direct); });
  }
  const double through_rate = figures(bulk_through).p50, direct_rate = figures(bulk_direct).p50;
  std::printf("  %-14s engine %8.0f MiB/s | direct %8.0f MiB/s | %.0f %% of direct (median of 5)\n",
              "bulk", through_rate, direct_rate, 100 * through_rate / direct_rate);
  // On a shared machine the rate is mostly the CPU share the run got (the engine's path needs
  // three busy threads, the direct one two); the CPU it used per GiB is steadier.
  const double through_cpu = figures(cpu_through).p50, direct_cpu = figures(cpu_direct).p50;
  std::printf("  %-14s engine %8.0f ms/GiB | direct %8.0f ms/GiB | ratio %.2f (median of 5)\n",
              "bulk cpu", through_cpu, direct_cpu, through_cpu / direct_cpu);

  // HTTPS through a terminated connection, HTTP/1.1 and HTTP/2 interleaved with the same from D.
  FilteredNetns tls_sandbox = make_filtered_netns();
  must(engine.attach("bench-tls", std::move(tls_sandbox.listeners), tls_policy(), {},
                     SandboxInjection{sandbox_ca, key}),
       "attach bench-tls");
  HttpsClient client({upstream_ca->certificate_pem(), sandbox_ca->certificate_pem()});
  const std::string placeholder = "Bearer " + placeholder_for(key, "BENCH_KEY");
  using Protocol = HttpsClient::Protocol;
  std::vector<double> h1_through, h1_direct, h2_through, h2_direct;
  auto https = [&](Protocol protocol, std::vector<double>& samples) {
    auto start = Clock::now();
    client.get(kUpstream, "tls.bench", "/v1/x", "authorization", placeholder, protocol);
    samples.push_back(ms_since(start));
  };
  const int https_runs = std::min(runs, 200);
  for (int i = 0; i < https_runs; ++i) {
    in_netns(tls_sandbox.netns.get(), [&] { https(Protocol::kHttp11, h1_through); });
    in_netns(direct_netns.get(), [&] { https(Protocol::kHttp11, h1_direct); });
    in_netns(tls_sandbox.netns.get(), [&] { https(Protocol::kH2, h2_through); });
    in_netns(direct_netns.get(), [&] { https(Protocol::kH2, h2_direct); });
  }
  print_pair("https h1 term", h1_through, h1_direct);
  print_pair("https h2 term", h2_through, h2_direct);
  std::printf("  %-14s h2 - h1 through the engine p50 %+.3f ms (%d runs each)\n", "https h2-h1",
              figures(h2_through).p50 - figures(h1_through).p50, https_runs);
  engine.detach("bench-tls");
  unlink(ca_file);

  std::vector<double> made_ahead;
  std::vector<FilteredNetns> idle;
  const size_t rss_before = resident_kib();
  for (int i = 0; i < sandboxes; ++i) {
    auto start = Clock::now();
    FilteredNetns made = make_filtered_netns();
    made_ahead.push_back(ms_since(start));
    must(engine.attach("idle-" + std::to_string(i), std::move(made.listeners), bench_policy()),
         "attach idle");
    idle.push_back(std::move(made));
  }
  const size_t rss_after = resident_kib();
  std::printf("  %-14s p50 %7.3f ms p95 %7.3f ms per sandbox (netns, egress path, listeners)\n",
              "made ahead", figures(made_ahead).p50, figures(made_ahead).p95);
  std::printf("  %-14s %.1f KiB resident in the engine's process per idle filtered sandbox (%d)\n",
              "memory", static_cast<double>(rss_after - rss_before) / sandboxes, sandboxes);
  for (int i = 0; i < sandboxes; ++i) engine.detach("idle-" + std::to_string(i));
  engine.detach("bench");
  std::printf("  %llu connection decisions logged\n",
              static_cast<unsigned long long>(logged.load()));
  return 0;
}
