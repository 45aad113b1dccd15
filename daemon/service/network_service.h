// hutchd's networking: the one network engine (net/engine/engine.h) and, per filtered or open
// sandbox, its egress path, its listeners on the engine, its live policy, the fake names it was
// given (persisted for a restart) and a bounded ring of its decisions for the log API. The
// registry calls it on create, teardown, rollback and recovery; the routes for GET/PUT .../network
// and the log. No HTTP here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/metrics.h"
#include "daemon/service/egress_pool.h"
#include "daemon/service/error.h"
#include "daemon/service/host_address_watch.h"
#include "daemon/service/sandbox_trust.h"
#include "daemon/service/secrets.h"
#include "net/engine/engine.h"
#include "net/policy.h"
#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"
#include "runtime/live_sandbox.h"

namespace hutch::daemon::service {

// The file in a sandbox's dir where each fake address the engine gave it is appended as
// "ADDRESS NAME\n": after a hutchd restart, a connection to an address resolved before it still
// has its name.
inline constexpr const char* kNetworkNames = "network-names";

// Whether a policy's mode routes egress through the engine (filtered, open).
bool uses_engine(const net::Policy& policy);

// Whether a running sandbox's policy may go from `current` to `next`: filtered <-> open and rule
// changes, yes; a change to or from none or loopback is a conflict (network_mode_fixed), since
// the namespace is made for the mode at create.
ServiceResult<void> check_mode_change(const net::Policy& current, const net::Policy& next);

struct NetworkOptions {
  net::Mode default_mode = net::Mode::kLoopback;  // --default-network
  // The floor's view of this host: its addresses and hutchd's TCP listener, if any.
  net::FloorConfig floor;
  // Keep floor.host_addresses current while the service runs (host_address_watch.h: read at
  // create, then at each change the kernel announces). Off: they stay as given (tests).
  bool watch_host_addresses = false;
  // Tests only (HUTCH_TEST_NET=1): upstreams are dialled from this network namespace, and names
  // resolve from this table (never the host's resolver).
  std::string upstream_netns;
  std::map<std::string, std::vector<net::Address>> static_names;
  size_t log_ring = 1000;  // decisions kept per sandbox
  // Namespaces with the egress path made ahead (daemon/service/egress_pool.h, --net-ahead), and
  // as many sandbox CAs (sandbox_trust.h, in <state_dir>/ca-ahead); 0: every create makes its own.
  size_t netns_ahead = 4;
  // hutchd's state dir ("": no CAs made ahead).
  std::string state_dir;
  // The secrets inject rules name (null: none, every rule's secret is unknown).
  std::shared_ptr<SecretStore> secrets;
  // Tests only (HUTCH_TEST_NET=1): upstreams of terminated connections are verified with this
  // PEM file's CAs instead of the host's trust store.
  std::string upstream_ca_file;
  // --net-upstream-proxy, --net-no-proxy, --net-upstream-proxy-secret (net/upstream_proxy.h).
  std::optional<net::UpstreamProxy> upstream_proxy;
  // The sandbox CAs' validity and rotation (sandbox_trust.h; --net-ca-validity).
  CaRotation ca_rotation;
};

// Every secret the policy's inject rules name is one hutchd holds: else kInvalid with code
// "unknown_secret", naming the first missing one.
ServiceResult<void> check_inject_secrets(const net::Policy& policy, const SecretStore* secrets);

// The upstream proxy of --net-upstream-proxy URL, --net-no-proxy LIST and
// --net-upstream-proxy-secret NAME (net/upstream_proxy.h); nullopt when `url` is empty. A name in
// the URL is resolved now, once (from `static_names` first: tests). The secret must be held, and
// is reserved for the proxy (no inject rule may name it).
Result<std::optional<net::UpstreamProxy>> upstream_proxy_from_options(
    const std::string& url, const std::string& no_proxy, const std::string& secret,
    SecretStore* secrets, const std::map<std::string, std::vector<net::Address>>& static_names);

// The test-only options of hutchd and hutch-egress into `options`: --net-upstream-netns,
// --net-resolve NAME=ADDR (each) and --net-upstream-ca. Refused unless HUTCH_TEST_NET=1, so that
// a stray flag cannot point a real engine at another namespace or resolver.
Result<void> set_test_network_options(NetworkOptions& options, const std::string& upstream_netns,
                                      const std::vector<std::string>& resolve,
                                      const std::string& upstream_ca);

// A decision as the log API lists it, numbered per sandbox from 1 (follow mode resumes after a
// number).
struct LoggedDecision {
  uint64_t seq = 0;
  net::ConnectionLog log;
};

struct NetworkStatus {
  net::Policy policy;
  std::optional<net::SandboxNetStats> stats;  // nullopt: mode none or loopback
  // The sandbox's CA certificate (to trust it inside; during a rotation the next CA's follows)
  // and, per secret its inject rules name, the placeholder to use in its place. Neither is
  // secret: both are what the sandbox may see.
  std::optional<std::string> ca_pem;
  std::map<std::string, std::string> placeholders;
};

class NetworkService {
 public:
  static Result<std::unique_ptr<NetworkService>> create(NetworkOptions options, Metrics& metrics);
  ~NetworkService();  // the engine closes every listener
  NetworkService(const NetworkService&) = delete;
  NetworkService& operator=(const NetworkService&) = delete;

  net::Mode default_mode() const { return options_.default_mode; }

  // A namespace made ahead for a create with egress, or nullopt when none is ready. The create
  // hands its fd to the zygote, then passes it to attach().
  std::optional<PreparedEgress> take_prepared() { return pool_.take(); }
  // Held by a create while it runs: neither pool refills meanwhile unless it is empty
  // (made_ahead.h). A create of any network: a loopback one meets the same contention.
  struct RefillHold {
    EgressPool::Hold netns;
    TrustPool::Hold trust;
  };
  [[nodiscard]] RefillHold hold_refills() { return {pool_.hold(), trust_pool_.hold()}; }
  const EgressPool& pool() const { return pool_; }
  const TrustPool& trust_pool() const { return trust_pool_; }

  // Before a sandbox with egress starts (its spec binds trust_binds(dir)): its CA and placeholder
  // key, made ahead when one is ready, kept in `dir` (sandbox_trust.h). Goes with the dir.
  Result<SandboxTrust> provision_trust(const std::string& dir) {
    return trust_pool_.provision(dir);
  }

  // At create (and for a rollback's new live sandbox): installs the egress path in the sandbox's
  // namespace, binds the listeners there and attaches them to the engine with `policy`, with no
  // names (a fresh kNetworkNames in `dir`). With `prepared` (the namespace the sandbox was
  // started in), its path and listeners are used instead; a sandbox found in another namespace
  // fails the attach. The sandbox's CA is `trust` (provision_trust's), or else the one kept in
  // `dir` (a rollback keeps its sandbox's). No-op for a mode without egress.
  Result<void> attach(const std::string& id, const std::string& dir, const LiveSandbox& live,
                      const net::Policy& policy,
                      std::optional<PreparedEgress> prepared = std::nullopt,
                      std::optional<SandboxTrust> trust = std::nullopt);
  // After a hutchd restart: the path is still in the namespace; binds the listeners again and
  // attaches with `policy`, the names kNetworkNames in `dir` holds and the CA and placeholder
  // key kept there (the sandbox trusts that CA; its processes hold those placeholders).
  Result<void> reattach(const std::string& id, const std::string& dir, const LiveSandbox& live,
                        const net::Policy& policy);
  // A recipe bake's setup.sh (RecipeService::bake): a namespace made ahead (or now, when none is
  // ready) whose listeners are attached as `id` with `policy` and a CA in memory only (nothing
  // binds it into the bake: its layer must not hold one). Returns the namespace for the bake;
  // detach(id) after it.
  Result<UniqueFd> attach_bake(const std::string& id, const net::Policy& policy);
  // A sandbox nothing re-adopts and whose CA never rotates (a bake's, `hutch run --net`'s): its
  // `listeners` (prepare_egress's) attached as `id` with `policy` and `trust`'s CA, with no
  // names file. detach(id) after it.
  Result<void> attach_unsupervised(const std::string& id, const net::Policy& policy,
                                   net::EgressListeners listeners, SandboxTrust trust) {
    return attach_listeners(id, "", policy, std::move(listeners), true, std::move(trust));
  }

  // Every teardown path: the engine closes the sandbox's listeners and connections (so nothing
  // holds its namespace), and followers of its log are told it ended. Unknown: no-op.
  void detach(const std::string& id);

  // PUT .../network for an attached sandbox (check_mode_change first): the new rules and mode
  // apply to every later query and connection. Errors: the engine's (not attached).
  ServiceResult<void> set_policy(const std::string& id, const net::Policy& next);
  NetworkStatus status(const std::string& id, const net::Policy& policy) const;

  // One look at every attached sandbox's CA (the rotation thread's, every
  // CaRotation::check_interval; tests call it with a `now` of their own): announces a next CA
  // or switches to it (sandbox_trust.h). A failure is logged and tried again at the next look.
  void rotate_cas(std::chrono::system_clock::time_point now);

  SecretStore* secrets() const { return options_.secrets.get(); }
  // The sandbox's CA certificates (PEM: the CA's, then an announced next CA's) and the
  // placeholder a process in it sees for `secret`; nullopt when the sandbox is not attached.
  std::optional<std::string> ca_pem(const std::string& id) const;
  std::optional<std::string> placeholder(const std::string& id, const std::string& secret) const;

  // The sandbox's decisions after number `after` (0: all kept), waiting up to `wait` for one
  // when there are none yet. `ended`: the sandbox is not attached (detached, or no egress).
  std::vector<LoggedDecision> decisions(const std::string& id, uint64_t after,
                                        std::chrono::milliseconds wait, bool* ended) const;

 private:
  struct Attached {
    UniqueFd names;   // kNetworkNames, O_APPEND (none for a bake)
    std::string dir;  // the sandbox's ("" for a bake: its CA is never rotated)
    // Its CA, the next one once announced, and its placeholder key (kept in the sandbox's dir,
    // sandbox_trust.h).
    std::shared_ptr<net::tls::SandboxCa> ca, next;
    net::PlaceholderKey placeholder_key{};
    std::deque<LoggedDecision> ring;
    uint64_t next_seq = 1;
  };

  NetworkService(NetworkOptions options, Metrics& metrics, UniqueFd upstream_netns);
  Result<void> attach_listeners(const std::string& id, const std::string& dir,
                                const net::Policy& policy, net::EgressListeners listeners,
                                bool fresh, SandboxTrust trust);  // dir "": no kNetworkNames
  // The engine's sinks, on its threads.
  void record(const net::ConnectionLog& log);
  void remember_name(const std::string& id, const net::Address& address, const std::string& name);

  NetworkOptions options_;
  Metrics& metrics_;
  std::unique_ptr<HostAddressWatch> host_watch_;  // when options_.watch_host_addresses
  UniqueFd upstream_netns_;  // borrowed by the engine (EngineOptions::upstream_netns_fd)
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::map<std::string, Attached> attached_;
  std::unique_ptr<net::Engine> engine_;  // its threads call back into the members above
  // Last: destroyed first, so their threads have stopped before the rest goes.
  TrustPool trust_pool_;
  EgressPool pool_;
  // The rotation thread: rotate_cas every check interval until the destructor sets stopping_.
  std::mutex rotation_mutex_;
  std::condition_variable rotation_wake_;
  bool stopping_ = false;
  std::thread rotation_thread_;
};

}  // namespace hutch::daemon::service
