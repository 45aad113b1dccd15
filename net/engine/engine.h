// The network engine: the user-space half of filtered egress (net/egress_path.h is the kernel
// half). One engine serves every sandbox of a hutchd on a few threads (Boost.Asio): per sandbox it
// owns the listeners inside the sandbox's namespace, a DNS stub that answers allowed names with
// fake addresses (198.18.0.0/15, remembered per sandbox) and NXDOMAIN for the rest, and a relay
// that learns each connection's name (fake address, TLS SNI, HTTP Host; they must agree), decides
// with the sandbox's policy (net/policy.h), resolves the real name itself, checks every address
// (floor, rebinding), dials the address it checked and splices both ways. A denial is immediate:
// plain HTTP gets a 403 whose JSON body names the rule, anything else a reset. Every decision is
// one ConnectionLog. No HTTP server and no JSON here: hutchd's network service builds on it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/address.h"
#include "net/egress_path.h"
#include "net/floor.h"
#include "net/inject.h"
#include "net/policy.h"
#include "net/tls/sandbox_ca.h"
#include "net/upstream_proxy.h"
#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch::net {

// One decision, logged when the connection ends (or at once when it was denied).
struct ConnectionLog {
  std::string sandbox;
  std::string protocol;  // "dns", "http", "tls", "tcp"
  std::optional<std::string> name;
  std::string address;  // what was dialled (or would have been), "" when never resolved
  uint16_t port = 0;
  bool allowed = false;
  std::string rule;         // Decision::rule
  std::string reason;       // Decision::reason
  uint64_t bytes_up = 0;    // sandbox -> upstream
  uint64_t bytes_down = 0;  // upstream -> sandbox
  double duration_ms = 0;
  std::chrono::system_clock::time_point started;
  // Tunnelled through EngineOptions::upstream_proxy: its HOST:PORT ("" when dialled directly),
  // and whether it refused the CONNECT, failed or did not answer in time.
  std::string via_proxy;
  bool proxy_failed = false;
};

// Resolves a name to addresses on the host. Called on an engine thread; must not block it for
// long: the system resolver runs getaddrinfo on its own thread.
class Resolver {
 public:
  virtual ~Resolver() = default;
  virtual void resolve(const std::string& name,
                       std::function<void(Result<std::vector<Address>>)> done) = 0;
};
std::shared_ptr<Resolver> system_resolver();
// Tests: names -> addresses, nothing else resolves (never the host's resolver).
std::shared_ptr<Resolver> static_resolver(std::map<std::string, std::vector<Address>> names);

struct EngineOptions {
  int threads = 1;
  Floor floor;
  std::shared_ptr<Resolver> resolver;  // null: system_resolver()
  // Tests: upstream sockets are made in this network namespace (one the test made, whose only
  // routes lead to its own upstreams), never the host's. -1: the engine's own namespace.
  int upstream_netns_fd = -1;
  size_t max_connections_per_sandbox = 256;              // beyond: reset, and logged
  std::chrono::milliseconds first_bytes_timeout{10000};  // TLS hello / HTTP head
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
  // Credential injection: the secrets' values, looked up for each request a rule applies to.
  SecretLookup secrets;
  // Tests only: upstreams of terminated connections are verified with this PEM file's CAs
  // instead of the host's trust store.
  std::optional<std::string> upstream_ca_file;
  // A corporate proxy every allowed connection goes through as CONNECT (no_proxy aside), with
  // credentials from `secrets` (net/upstream_proxy.h). The CONNECT answer must come within
  // connect_timeout.
  std::optional<UpstreamProxy> upstream_proxy;
};

// A sandbox's side of credential injection: its CA (whose leaves the engine shows for the hosts
// an inject rule names) and the key of its placeholders. Without one, TLS is never terminated.
struct SandboxInjection {
  std::shared_ptr<tls::SandboxCa> ca;
  PlaceholderKey placeholder_key{};
};

struct SandboxNetStats {
  uint64_t connections = 0;  // decided so far
  uint64_t denied = 0;
  uint64_t dns_queries = 0;
  uint64_t dns_denied = 0;
  uint64_t active = 0;  // open now
  uint64_t bytes_up = 0;
  uint64_t bytes_down = 0;
};

// Threads: each sandbox's sockets live on one Asio strand (its own serial queue), so a sandbox
// needs no locks on the I/O path and sandboxes run in parallel on `threads`. The sinks are called
// on those threads, concurrently for different sandboxes, and must not call detach().
class Engine {
 public:
  using LogSink = std::function<void(const ConnectionLog&)>;
  // Told of each new fake address, so the caller can persist it for a restart.
  using NameSink =
      std::function<void(const std::string& sandbox, const Address&, const std::string& name)>;

  Engine(EngineOptions options, LogSink log, NameSink names = {});
  ~Engine();  // closes every listener and connection, joins its threads
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Starts serving a sandbox on its listeners with `policy`. `known_names`: fake address ->
  // name, as persisted before a restart (so connections to cached fake addresses still work).
  // Fails when the sandbox is attached already.
  Result<void> attach(const std::string& sandbox, EgressListeners listeners, Policy policy,
                      std::map<Address, std::string> known_names = {},
                      std::optional<SandboxInjection> injection = std::nullopt);
  // The new policy applies to every later DNS query and connection (open ones keep running).
  Result<void> set_policy(const std::string& sandbox, Policy policy);
  // A sandbox with a CA signs every later terminated connection's leaf with `ca` (a rotation:
  // the sandbox trusts it already); connections open keep theirs. kNotFound when not attached,
  // kInvalid when it had no CA.
  Result<void> set_ca(const std::string& sandbox, std::shared_ptr<tls::SandboxCa> ca);
  // Closes the sandbox's listeners and connections; on return the engine holds no socket of the
  // sandbox's namespace (so the namespace can be freed). Unknown: no-op.
  void detach(const std::string& sandbox);

  std::optional<SandboxNetStats> stats(const std::string& sandbox) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hutch::net
