// The daemon's sandboxes: id -> live sandbox, each persisted as <state>/sandboxes/<id>/sandbox.json
// (sandbox_record.h) so that a restarted hutchd re-adopts or deliberately destroys it. No HTTP
// here: failures are ServiceErrors, which the routes map to statuses once (daemon/errors.cc).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/json_codec.h"
#include "daemon/metrics.h"
#include "daemon/service/error.h"
#include "daemon/service/network_service.h"
#include "daemon/service/sandbox.h"
#include "daemon/service/volume_service.h"
#include "daemon/warm_pool.h"
#include "daemon/zygote.h"

namespace hutch::daemon {

struct RecoveryReport {
  int adopted = 0;
  int removed = 0;
};

// The warm-up exec each pooled sandbox runs before it is handed out: waited for at most
// kWarmUpPolls * kWarmUpPollInterval, then the sandbox is pooled anyway (the exec only moves
// costs off the client's first exec; nothing depends on it).
inline constexpr int kWarmUpPolls = 1000;
inline constexpr auto kWarmUpPollInterval = std::chrono::milliseconds(10);

// The create path's own limits on a config, past what the codec checks field by field: the
// rootfs is a directory, and env and labels fit a record (64 KiB). Errors: bad_request.
service::ServiceResult<void> check_create_config(const SandboxConfig& config);

class SandboxRegistry {
 public:
  SandboxRegistry(std::string state_dir, std::string cgroup_parent, const Zygote& zygote,
                  Metrics& metrics)
      : state_dir_(std::move(state_dir)),
        cgroup_parent_(std::move(cgroup_parent)),
        zygote_(zygote),
        metrics_(metrics) {}
  ~SandboxRegistry();  // finishes queued teardowns

  // <state>/sandboxes/<16-char id>/supervisor.sock must fit sockaddr_un (107 bytes + NUL).
  static size_t max_state_dir_length();
  std::string sandboxes_dir() const { return state_dir_ + "/sandboxes"; }
  const std::string& state_dir() const { return state_dir_; }
  const std::string& cgroup_parent() const { return cgroup_parent_; }

  // At startup: re-adopts every live sandbox under the state dir and removes the rest.
  RecoveryReport recover();
  const RecoveryReport& recovered() const { return recovered_; }

  // Warm pools (rootfs -> idle sandboxes kept), filled in the background from start_pool().
  // `spawn_config` completes a pool's config before each spawn (resolves its recipe) and returns
  // what must be held while the sandbox is made (the recipe service's pin of its layers); it may
  // throw, and the pool then logs and retries later.
  using PoolConfigHook = std::function<std::shared_ptr<void>(SandboxConfig&)>;
  void start_pool(std::map<std::string, size_t> sizes, PoolConfigHook spawn_config);
  void stop_pool();
  std::map<std::string, std::pair<size_t, size_t>> pool_status() const;

  // Creates a sandbox, from a warm pool when one matches. Errors: bad_request
  // (check_create_config), the runtime's (runtime_error, ...).
  service::ServiceResult<std::shared_ptr<Sandbox>> create(const SandboxConfig& config,
                                                          const std::string& request_id);
  std::shared_ptr<Sandbox> find(const std::string& id) const;
  // The sandbox, touched (activity). Errors: sandbox_not_found.
  service::ServiceResult<std::shared_ptr<Sandbox>> get(const std::string& id) const;
  std::vector<std::shared_ptr<Sandbox>> list() const;

  // Destroys a sandbox (teardown() below): false when the id is unknown. Fails when the runtime
  // does; the sandbox then stays registered so that the destroy can be retried.
  service::ServiceResult<bool> destroy(const std::string& id, const std::string& reason);
  // The same, but returns once init was sent SIGKILL (which kills every process of its pid
  // namespace within milliseconds) and the sandbox is gone from the registry; the supervisor's
  // teardown (reaping, cgroups) and the dir's removal finish on a background thread. Still false
  // for an unknown id.
  service::ServiceResult<bool> destroy_soon(const std::string& id, const std::string& reason);
  // Finishes every teardown destroy_soon queued (at exit).
  void drain_teardowns();
  service::ServiceResult<void> pause(Sandbox& sandbox);
  service::ServiceResult<void> resume(Sandbox& sandbox);
  service::ServiceResult<void> persist(const Sandbox& sandbox) const;

  // Rollback: destroys `old`'s live sandbox (its processes are killed and reported exited) and
  // starts a new one from `config` with the same id, dir and creation time, which replaces it in
  // the registry and its record. A paused sandbox comes back running. When the new sandbox cannot
  // start, the id is gone (the old one was destroyed already). Errors: sandbox_not_found (it was
  // destroyed meanwhile), the runtime's.
  service::ServiceResult<std::shared_ptr<Sandbox>> replace(const std::shared_ptr<Sandbox>& old,
                                                           SandboxConfig config,
                                                           const std::string& request_id);
  // The observer of teardowns: called with the id at the end of every one, once the sandbox's
  // dir is gone (the layer side drops the sandbox's checkpoint tags). Set before serving.
  void set_on_destroyed(std::function<void(const std::string&)> hook) {
    on_destroyed_ = std::move(hook);
  }

  // hutchd's networking, set before recover() and serving. Without it (service tests), a
  // filtered or open create is refused.
  void set_network(service::NetworkService* network) { network_ = network; }
  // The host directories a create's "mounts" may come from (daemon/service/host_mounts.h).
  void set_mount_roots(std::vector<std::string> roots) { mount_roots_ = std::move(roots); }
  service::NetworkService* network() const { return network_; }
  // hutchd's persistent volumes, set before recover() and serving. Without it, a create with
  // volumes is refused (unsupported).
  void set_volumes(service::VolumeService* volumes) { volumes_ = volumes; }
  service::VolumeService* volumes() const { return volumes_; }
  // PUT .../network: the engine's policy, then the sandbox's and its record. Errors:
  // service::NetworkService::set_policy's, the record's.
  service::ServiceResult<void> set_network_policy(Sandbox& sandbox, const net::Policy& policy);

  // --destroy-on-exit.
  void destroy_all();

 private:
  std::string new_id() const;
  void remove_dir(const std::string& dir) const;
  bool recover_one(const std::string& id, const std::string& dir);
  // A new live sandbox with its dir and its record ("creating" until registered, "pooled" for a
  // warm pool's).
  // `netns_fd` (>= 0): the network namespace made ahead it joins (service::PreparedEgress).
  // `id`: the one reserved for it (its volumes are), else a new one.
  Result<SpawnedSandbox> spawn(const SandboxConfig& config, bool pooled, int netns_fd = -1,
                               std::string id = "");
  // A supervisor started from `config` in `dir`, connected, with its volumes mounted.
  Result<LiveSandbox> start_live(const SandboxConfig& config, const std::string& dir,
                                 int netns_fd = -1) const;
  void warm_up(const LiveSandbox& live) const;
  // The network engine for a new live sandbox (create, rollback) with `policy` and `trust` (none:
  // the CA kept in `dir`).
  Result<void> attach_network(const std::string& id, const std::string& dir,
                              const LiveSandbox& live, const net::Policy& policy,
                              std::optional<service::PreparedEgress> prepared = std::nullopt,
                              std::optional<service::SandboxTrust> trust = std::nullopt) const;
  void discard(SpawnedSandbox& spawned);
  // The sandbox's side of credential injection, after its network is attached: the variables
  // that name its trust files and its placeholders (Sandbox::network_env).
  void install_trust(Sandbox& sandbox) const;
  // The one teardown sequence: stop_processes(), then unregister, remove the dir, tell the
  // on-destroyed hook, log. Fails only where stop_processes() does, before anything is removed.
  Result<void> teardown(const std::shared_ptr<Sandbox>& sandbox, const std::string& reason);
  // Its first half, which a rollback also needs: thaw when paused (a frozen cgroup v1 task takes
  // SIGKILL only once thawed), destroy the live sandbox, close its network listeners (its
  // namespace is freed), then let each background process's output pump finish (their exits
  // are reported).
  Result<void> stop_processes(Sandbox& sandbox) const;
  // Its second half: the id leaves the registry (if it still names `sandbox`), the dir goes,
  // the hook is told.
  void forget(const std::shared_ptr<Sandbox>& sandbox);
  void teardown_loop();

  std::string state_dir_;
  std::string cgroup_parent_;
  const Zygote& zygote_;
  Metrics& metrics_;
  RecoveryReport recovered_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  std::function<void(const std::string&)> on_destroyed_;  // set before serving
  service::NetworkService* network_ = nullptr;            // set before serving
  service::VolumeService* volumes_ = nullptr;             // set before serving
  std::vector<std::string> mount_roots_;
  std::unique_ptr<WarmPool> pool_;
  // destroy_soon's queue: sandboxes whose processes are dead and whose teardown is pending.
  std::mutex teardown_mutex_;
  std::condition_variable teardown_wake_;
  std::deque<std::pair<std::shared_ptr<Sandbox>, std::string>> teardowns_;
  bool teardown_stopping_ = false;
  std::thread teardown_thread_;
};

}  // namespace hutch::daemon
