#include "daemon/service/network_service.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace hutch::daemon::service {
namespace {

bool has_egress(net::Mode mode) { return mode == net::Mode::kFiltered || mode == net::Mode::kOpen; }

// fake address -> name, as remember_name() appended them (a torn last line is skipped).
std::map<net::Address, std::string> read_names(const std::string& path) {
  std::map<net::Address, std::string> names;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string address, name;
    if (!(fields >> address >> name)) continue;
    if (auto parsed = net::Address::parse(address)) names[*parsed] = name;
  }
  return names;
}

}  // namespace

bool uses_engine(const net::Policy& policy) { return has_egress(policy.mode); }

ServiceResult<void> check_inject_secrets(const net::Policy& policy, const SecretStore* secrets) {
  for (const net::InjectRule& rule : policy.inject) {
    for (const net::InjectHeader& header : rule.headers) {
      if (auto purpose = secrets ? secrets->reserved_for(header.secret) : std::nullopt) {
        return service_error(ErrorKind::kInvalid, "reserved_secret",
                             "network.inject: header \"" + header.name + "\" names secret \"" +
                                 header.secret + "\", which hutchd keeps for " + *purpose +
                                 ": no inject rule may send it elsewhere");
      }
      if (secrets == nullptr || !secrets->contains(header.secret)) {
        return service_error(ErrorKind::kInvalid, "unknown_secret",
                             "network.inject: header \"" + header.name + "\" names secret \"" +
                                 header.secret +
                                 "\", which hutchd does not hold (PUT /v1/secrets/" +
                                 header.secret + ", --secrets-file or --secret-from-env)");
      }
    }
  }
  return {};
}

Result<void> set_test_network_options(NetworkOptions& options, const std::string& upstream_netns,
                                      const std::vector<std::string>& resolve,
                                      const std::string& upstream_ca) {
  if (upstream_netns.empty() && resolve.empty() && upstream_ca.empty()) return {};
  const char* test_net = std::getenv("HUTCH_TEST_NET");
  if (test_net == nullptr || std::string_view(test_net) != "1")
    return plain_error("--net-upstream-netns, --net-resolve and --net-upstream-ca",
                       "these are for tests: they need HUTCH_TEST_NET=1");
  options.upstream_netns = upstream_netns;
  options.upstream_ca_file = upstream_ca;
  for (const std::string& entry : resolve) {
    const size_t eq = entry.find('=');
    auto name =
        net::normalize_name(std::string_view(entry).substr(0, eq == std::string::npos ? 0 : eq));
    auto address =
        net::Address::parse(eq == std::string::npos ? "" : std::string_view(entry).substr(eq + 1));
    if (eq == std::string::npos || !name || !address)
      return plain_error("--net-resolve", "wants NAME=ADDR, got \"" + entry + "\"");
    options.static_names[*name].push_back(*address);
  }
  return {};
}

Result<std::optional<net::UpstreamProxy>> upstream_proxy_from_options(
    const std::string& url, const std::string& no_proxy, const std::string& secret,
    SecretStore* secrets, const std::map<std::string, std::vector<net::Address>>& static_names) {
  if (url.empty()) {
    if (!no_proxy.empty() || !secret.empty())
      return plain_error(
          "upstream proxy",
          "--net-no-proxy and --net-upstream-proxy-secret need --net-upstream-proxy");
    return std::optional<net::UpstreamProxy>();
  }
  const net::ProxyUrl parsed = HUTCH_TRY(net::parse_proxy_url(url));
  net::UpstreamProxy proxy;
  proxy.host = parsed.host;
  proxy.port = parsed.port;
  proxy.no_proxy = HUTCH_TRY(net::NoProxy::parse(no_proxy));
  if (parsed.address) {
    proxy.address = *parsed.address;
  } else if (auto it = static_names.find(parsed.host); it != static_names.end()) {
    proxy.address = it->second.front();
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    if (const int rc = ::getaddrinfo(parsed.host.c_str(), nullptr, &hints, &list); rc != 0)
      return plain_error("getaddrinfo",
                         parsed.host + " (--net-upstream-proxy): " + gai_strerror(rc));
    if (list->ai_family == AF_INET) {
      proxy.address = net::Address::v4(
          ntohl(reinterpret_cast<const sockaddr_in*>(list->ai_addr)->sin_addr.s_addr));
    } else {
      std::array<uint8_t, 16> bytes{};
      std::memcpy(bytes.data(), &reinterpret_cast<const sockaddr_in6*>(list->ai_addr)->sin6_addr,
                  bytes.size());
      proxy.address = net::Address::v6(bytes);
    }
    ::freeaddrinfo(list);
  }
  if (!secret.empty()) {
    if (secrets == nullptr || !secrets->contains(secret)) {
      return plain_error("upstream proxy",
                         "--net-upstream-proxy-secret " + secret +
                             ": hutchd holds no such secret (--secrets-file or --secret-from-env)");
    }
    secrets->reserve(secret, "the upstream proxy's credentials");
    proxy.credentials_secret = secret;
  }
  return std::optional<net::UpstreamProxy>(std::move(proxy));
}

NetworkService::NetworkService(NetworkOptions options, Metrics& metrics, UniqueFd upstream_netns)
    : options_(std::move(options)),
      metrics_(metrics),
      upstream_netns_(std::move(upstream_netns)),
      trust_pool_(options_.state_dir.empty() ? "" : options_.state_dir + "/ca-ahead",
                  options_.netns_ahead, {kNetworkNames}, options_.ca_rotation.validity),
      pool_(options_.netns_ahead) {}

Result<std::unique_ptr<NetworkService>> NetworkService::create(NetworkOptions options,
                                                               Metrics& metrics) {
  UniqueFd upstream;
  if (!options.upstream_netns.empty()) {
    upstream.reset(::open(options.upstream_netns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!upstream) return sys_error("open", options.upstream_netns + " (--net-upstream-netns)");
  }
  std::unique_ptr<NetworkService> service(
      new NetworkService(std::move(options), metrics, std::move(upstream)));
  if (service->options_.watch_host_addresses) {
    service->host_watch_ =
        HUTCH_TRY(HostAddressWatch::start(service->options_.floor.host_addresses));
  }
  net::EngineOptions engine;
  engine.floor = net::Floor(service->options_.floor);
  if (!service->options_.static_names.empty())
    engine.resolver = net::static_resolver(service->options_.static_names);
  engine.upstream_netns_fd = service->upstream_netns_.get();
  if (!service->options_.upstream_ca_file.empty())
    engine.upstream_ca_file = service->options_.upstream_ca_file;
  engine.upstream_proxy = service->options_.upstream_proxy;
  if (auto store = service->options_.secrets) {
    engine.secrets = [store](std::string_view name) -> std::optional<std::string> {
      auto value = store->value(name);
      if (!value) return std::nullopt;
      return std::string(value->view());
    };
  }
  NetworkService* self = service.get();
  service->engine_ = std::make_unique<net::Engine>(
      std::move(engine), [self](const net::ConnectionLog& log) { self->record(log); },
      [self](const std::string& id, const net::Address& address, const std::string& name) {
        self->remember_name(id, address, name);
      });
  service->rotation_thread_ = std::thread([self] {
    std::unique_lock lock(self->rotation_mutex_);
    while (!self->rotation_wake_.wait_for(lock, self->options_.ca_rotation.check_interval(),
                                          [self] { return self->stopping_; })) {
      lock.unlock();
      self->rotate_cas(std::chrono::system_clock::now());
      lock.lock();
    }
  });
  return service;
}

NetworkService::~NetworkService() {
  if (rotation_thread_.joinable()) {
    {
      std::lock_guard lock(rotation_mutex_);
      stopping_ = true;
    }
    rotation_wake_.notify_all();
    rotation_thread_.join();
  }
  engine_.reset();
}

void NetworkService::rotate_cas(std::chrono::system_clock::time_point now) {
  struct Due {
    std::string id, dir;
    RotationStep step;
    std::shared_ptr<net::tls::SandboxCa> next;
  };
  std::vector<Due> due;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, entry] : attached_) {
      if (entry.dir.empty() || !entry.ca) continue;
      const RotationStep step =
          rotation_step(entry.ca->not_after(), entry.next != nullptr, now, options_.ca_rotation);
      if (step != RotationStep::kNone) due.push_back({id, entry.dir, step, entry.next});
    }
  }
  // Outside the lock: the engine's threads take it (record), and set_ca waits for them.
  for (Due& sandbox : due) {
    if (sandbox.step == RotationStep::kAnnounce) {
      auto next = announce_next_ca(sandbox.dir, options_.ca_rotation.validity);
      metrics_.count_ca_rotation(true, !next);
      if (!next) {
        spdlog::error("sandbox={} CA rotation: {}", sandbox.id, next.error().message());
        continue;
      }
      std::lock_guard lock(mutex_);
      if (auto it = attached_.find(sandbox.id); it != attached_.end()) it->second.next = *next;
      spdlog::info(
          "sandbox={} CA rotation: the next CA is trusted inside; it signs once the current one "
          "has {} s left",
          sandbox.id, options_.ca_rotation.switch_before().count());
      continue;
    }
    if (auto switched = switch_to_next_ca(sandbox.dir); !switched) {
      metrics_.count_ca_rotation(false, true);
      spdlog::error("sandbox={} CA rotation: {}", sandbox.id, switched.error().message());
      continue;
    }
    if (auto set = engine_->set_ca(sandbox.id, sandbox.next); !set) {
      // Detached meanwhile: its dir, next.pem renamed included, goes with it.
      if (set.error().kind != ErrorKind::kNotFound) {
        metrics_.count_ca_rotation(false, true);
        spdlog::error("sandbox={} CA rotation: {}", sandbox.id, set.error().message());
      }
      continue;
    }
    metrics_.count_ca_rotation(false, false);
    std::lock_guard lock(mutex_);
    if (auto it = attached_.find(sandbox.id); it != attached_.end()) {
      it->second.ca = std::move(it->second.next);
      spdlog::info("sandbox={} CA rotation: the next CA signs from now on", sandbox.id);
    }
  }
}

Result<void> NetworkService::attach(const std::string& id, const std::string& dir,
                                    const LiveSandbox& live, const net::Policy& policy,
                                    std::optional<PreparedEgress> prepared,
                                    std::optional<SandboxTrust> trust) {
  if (!has_egress(policy.mode)) return {};
  if (!trust) trust.emplace(HUTCH_TRY(load_trust(dir)));
  auto netns = HUTCH_TRY(live.open_netns());
  if (prepared) {
    // The zygote was asked to start the sandbox in this namespace: make sure it did, or the
    // listeners would serve a namespace nobody is in while the sandbox's has no path at all.
    struct stat given {
    }, found{};
    if (::fstat(prepared->netns.get(), &given) != 0)
      return sys_error("fstat", "the namespace made ahead");
    if (::fstat(netns.get(), &found) != 0) return sys_error("fstat", "the sandbox's namespace");
    if (given.st_ino != found.st_ino || given.st_dev != found.st_dev)
      return plain_error("network", "the sandbox is not in the namespace made ahead for it (net:[" +
                                        std::to_string(given.st_ino) + "], found net:[" +
                                        std::to_string(found.st_ino) + "])");
    return attach_listeners(id, dir, policy, std::move(prepared->listeners), true,
                            std::move(*trust));
  }
  HUTCH_TRY(net::install_egress_path(netns.get()));
  auto listeners = HUTCH_TRY(net::bind_egress_listeners(netns.get()));
  return attach_listeners(id, dir, policy, std::move(listeners), true, std::move(*trust));
}

Result<void> NetworkService::reattach(const std::string& id, const std::string& dir,
                                      const LiveSandbox& live, const net::Policy& policy) {
  if (!has_egress(policy.mode)) return {};
  auto trust = load_trust(dir);
  if (!trust && trust.error().kind == ErrorKind::kNotFound) {
    // Made by a hutchd that kept no CA: a new one, kept from now on. The sandbox does not trust
    // it (nothing can bind it into a running sandbox): GET .../network gives it to install.
    spdlog::warn("sandbox={} recovery: {}; a new CA is made", id, trust.error().message());
    trust = provision_trust(dir);
  }
  if (!trust) return std::unexpected(trust.error());
  auto netns = HUTCH_TRY(live.open_netns());
  // The path stays in the namespace across a hutchd restart; the listeners do not.
  auto listeners = HUTCH_TRY(net::bind_egress_listeners(netns.get()));
  return attach_listeners(id, dir, policy, std::move(listeners), false, std::move(*trust));
}

Result<void> NetworkService::attach_listeners(const std::string& id, const std::string& dir,
                                              const net::Policy& policy,
                                              net::EgressListeners listeners, bool fresh,
                                              SandboxTrust trust) {
  std::map<net::Address, std::string> known;
  UniqueFd names;
  if (!dir.empty()) {
    const std::string path = dir + "/" + kNetworkNames;
    if (!fresh) known = read_names(path);
    // Usually there already, empty: made ahead with the sandbox's CA (TrustPool).
    names.reset(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!names) return sys_error("open", path);
    // A fresh sandbox (a rollback's too) starts with no names: never another one's. Truncated
    // only when it has some: O_TRUNC updates the inode (a journal write) even for an empty file.
    struct stat st {};
    if (fresh &&
        (::fstat(names.get(), &st) != 0 || (st.st_size > 0 && ::ftruncate(names.get(), 0) != 0)))
      return sys_error("ftruncate", path);
  }
  // Every sandbox with egress has a CA of its own (a fork's too: never another's), so that
  // inject rules a later PUT adds find the sandbox trusting it already.
  net::SandboxInjection injection;
  injection.ca = std::move(trust.ca);
  injection.placeholder_key = trust.placeholder_key;
  {
    std::lock_guard lock(mutex_);
    Attached& entry = attached_[id];
    entry.names = std::move(names);
    entry.dir = dir;
    entry.ca = injection.ca;
    entry.next = std::move(trust.next);
    entry.placeholder_key = injection.placeholder_key;
  }
  // Outside the lock: the engine's threads call record() and remember_name(), which take it.
  if (auto attached =
          engine_->attach(id, std::move(listeners), policy, std::move(known), std::move(injection));
      !attached) {
    std::lock_guard lock(mutex_);
    attached_.erase(id);
    return std::unexpected(attached.error());
  }
  spdlog::info("sandbox={} network {} attached ({} allow, {} deny, {} inject rules{})", id,
               net::mode_name(policy.mode), policy.allow.size(), policy.deny.size(),
               policy.inject.size(), fresh ? "" : ", re-adopted");
  return {};
}

Result<UniqueFd> NetworkService::attach_bake(const std::string& id, const net::Policy& policy) {
  std::optional<PreparedEgress> prepared = pool_.take();
  if (!prepared) prepared.emplace(HUTCH_TRY(prepare_egress()));
  // A bake's CA lives as long as the bake, in memory only: nothing binds it into the bake (its
  // layer must not hold one) and no restart re-adopts a bake.
  SandboxTrust trust;
  trust.ca = HUTCH_TRY(net::tls::SandboxCa::create({.label = "bake " + id}));
  trust.placeholder_key = HUTCH_TRY(net::new_placeholder_key());
  HUTCH_TRY(attach_unsupervised(id, policy, std::move(prepared->listeners), std::move(trust)));
  return std::move(prepared->netns);
}

void NetworkService::detach(const std::string& id) {
  // Outside the lock, as in attach: detach waits for the engine's threads.
  engine_->detach(id);
  {
    std::lock_guard lock(mutex_);
    if (attached_.erase(id) == 0) return;
  }
  changed_.notify_all();
}

ServiceResult<void> check_mode_change(const net::Policy& current, const net::Policy& next) {
  if (current.mode == next.mode || (has_egress(current.mode) && has_egress(next.mode))) return {};
  return service_error(
      ErrorKind::kConflict, "network_mode_fixed",
      "network mode cannot change from " + std::string(net::mode_name(current.mode)) + " to " +
          std::string(net::mode_name(next.mode)) +
          " on a running sandbox: its network namespace is made for its mode at create (filtered "
          "and open get one that only hutchd administers, with the engine's rules in it; none and "
          "loopback get one without egress), so only filtered <-> open and rule changes apply at "
          "runtime; create a new sandbox for this mode");
}

ServiceResult<void> NetworkService::set_policy(const std::string& id, const net::Policy& next) {
  if (auto known = check_inject_secrets(next, secrets()); !known) return known;
  if (auto set = engine_->set_policy(id, next); !set)
    return std::unexpected(from_runtime(set.error()));
  spdlog::info("sandbox={} network policy replaced: {} ({} allow, {} deny rules)", id,
               net::mode_name(next.mode), next.allow.size(), next.deny.size());
  return {};
}

NetworkStatus NetworkService::status(const std::string& id, const net::Policy& policy) const {
  NetworkStatus out{policy, std::nullopt, std::nullopt, {}};
  if (!has_egress(policy.mode)) return out;
  out.stats = engine_->stats(id);
  out.ca_pem = ca_pem(id);
  for (const net::InjectRule& rule : policy.inject) {
    for (const net::InjectHeader& header : rule.headers) {
      if (auto text = placeholder(id, header.secret)) out.placeholders[header.secret] = *text;
    }
  }
  return out;
}

std::optional<std::string> NetworkService::ca_pem(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = attached_.find(id);
  if (it == attached_.end() || !it->second.ca) return std::nullopt;
  if (!it->second.next) return it->second.ca->certificate_pem();
  return it->second.ca->certificate_pem() + it->second.next->certificate_pem();
}

std::optional<std::string> NetworkService::placeholder(const std::string& id,
                                                       const std::string& secret) const {
  std::lock_guard lock(mutex_);
  auto it = attached_.find(id);
  if (it == attached_.end() || !it->second.ca) return std::nullopt;
  return net::placeholder_for(it->second.placeholder_key, secret);
}

std::vector<LoggedDecision> NetworkService::decisions(const std::string& id, uint64_t after,
                                                      std::chrono::milliseconds wait,
                                                      bool* ended) const {
  std::unique_lock lock(mutex_);
  auto newer = [&]() -> std::vector<LoggedDecision> {
    auto it = attached_.find(id);
    if (it == attached_.end()) return {};
    std::vector<LoggedDecision> out;
    for (const LoggedDecision& entry : it->second.ring) {
      if (entry.seq > after) out.push_back(entry);
    }
    return out;
  };
  auto out = newer();
  if (out.empty() && wait.count() > 0) {
    changed_.wait_for(lock, wait, [&] {
      auto it = attached_.find(id);
      return it != attached_.end() && !it->second.ring.empty() &&
             it->second.ring.back().seq > after;
    });
    out = newer();
  }
  if (ended != nullptr) *ended = !attached_.contains(id);
  return out;
}

void NetworkService::record(const net::ConnectionLog& log) {
  metrics_.count_network(log.protocol == "dns", log.allowed, log.bytes_up, log.bytes_down);
  if (log.proxy_failed) metrics_.count_network_proxy_failure();
  // hutchd's log: one structured line per decision.
  spdlog::info(
      "sandbox={} net={} allowed={} name={} address={} port={} rule={:?} reason={:?} "
      "bytes_up={} bytes_down={} duration_ms={:.1f}",
      log.sandbox, log.protocol, log.allowed, log.name.value_or("-"),
      log.address.empty() ? "-" : log.address, log.port, log.rule, log.reason, log.bytes_up,
      log.bytes_down, log.duration_ms);
  {
    std::lock_guard lock(mutex_);
    auto it = attached_.find(log.sandbox);
    if (it == attached_.end()) return;
    Attached& entry = it->second;
    entry.ring.push_back({entry.next_seq++, log});
    while (entry.ring.size() > options_.log_ring) entry.ring.pop_front();
  }
  changed_.notify_all();
}

void NetworkService::remember_name(const std::string& id, const net::Address& address,
                                   const std::string& name) {
  const std::string line = address.to_string() + " " + name + "\n";
  std::lock_guard lock(mutex_);
  auto it = attached_.find(id);
  if (it == attached_.end() || !it->second.names) return;
  // One write to an O_APPEND file: a crash leaves at most a torn last line, which is skipped.
  if (::write(it->second.names.get(), line.data(), line.size()) < 0)
    spdlog::warn("sandbox={} write({}): {}", id, kNetworkNames, std::strerror(errno));
}

}  // namespace hutch::daemon::service
