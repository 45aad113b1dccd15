// The daemon's sandboxes: id → live sandbox, each persisted as <state>/sandboxes/<id>/sandbox.json
// (written atomically) so that a restarted hutchd re-adopts or deliberately destroys it.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/exec.h"
#include "daemon/json_codec.h"
#include "daemon/metrics.h"
#include "daemon/warm_pool.h"
#include "daemon/zygote.h"
#include "runtime/files/sandbox_fs.h"
#include "runtime/live_sandbox.h"

namespace hutch::daemon {

// A bounded in-memory ring of a sandbox's events (GET /v1/sandboxes/{id}/logs).
class EventLog {
 public:
  void add(nlohmann::json event);  // stamps "time"
  std::vector<nlohmann::json> snapshot() const;

 private:
  static constexpr size_t kMaxEvents = 1000;
  mutable std::mutex mutex_;
  std::deque<nlohmann::json> events_;
};

enum class SandboxState { kRunning, kPaused };

class Sandbox {
 public:
  Sandbox(std::string id, SandboxConfig config, std::chrono::system_clock::time_point created_at,
          LiveSandbox live, std::string dir);

  const std::string& id() const { return id_; }
  const SandboxConfig& config() const { return config_; }
  const LiveSandbox& live() const { return live_; }
  const std::string& dir() const { return dir_; }
  std::chrono::system_clock::time_point created_at() const { return created_at_; }
  EventLog& log() { return log_; }

  SandboxState state() const { return state_.load(); }
  void set_state(SandboxState state) { state_.store(state); }

  // Activity (any request naming the sandbox) holds the idle reaper off.
  void touch() {
    last_activity_.store(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  std::chrono::steady_clock::duration idle_for() const;

  // Counts a running buffered/streamed exec for the idle reaper while alive.
  class ExecGuard {
   public:
    explicit ExecGuard(Sandbox& sandbox) : sandbox_(&sandbox) { ++sandbox.active_execs_; }
    ExecGuard(const ExecGuard&) = delete;
    ExecGuard& operator=(const ExecGuard&) = delete;
    ~ExecGuard() {
      sandbox_->touch();
      --sandbox_->active_execs_;
    }

   private:
    Sandbox* sandbox_;
  };
  int active_execs() const { return active_execs_.load(); }

  // The files API on the sandbox root (opened once, cached); throws ApiError when the root
  // cannot be opened (the sandbox is gone).
  files::SandboxFs fs();
  files::Owner owner() const;

  void add_process(std::shared_ptr<BackgroundProcess> process);
  // Takes over `from`'s background processes (a rollback's new sandbox reports the old one's).
  void inherit_processes(Sandbox& from);
  std::shared_ptr<BackgroundProcess> process(pid_t pid) const;
  std::vector<std::shared_ptr<BackgroundProcess>> processes() const;
  bool has_running_process() const;

  // Serializes pause/resume/destroy of this sandbox.
  std::mutex& lifecycle_mutex() { return lifecycle_; }

  nlohmann::json to_json() const;  // the API's sandbox object
  nlohmann::json record() const;   // sandbox.json

 private:
  std::string id_;
  SandboxConfig config_;
  std::chrono::system_clock::time_point created_at_;
  LiveSandbox live_;
  std::string dir_;
  EventLog log_;
  std::atomic<SandboxState> state_{SandboxState::kRunning};
  std::atomic<int64_t> last_activity_;
  std::atomic<int> active_execs_{0};
  std::mutex lifecycle_;
  mutable std::mutex mutex_;  // root_, processes_
  UniqueFd root_;
  std::map<pid_t, std::shared_ptr<BackgroundProcess>> processes_;
};

struct RecoveryReport {
  int adopted = 0;
  int removed = 0;
};

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

  // At startup: re-adopts every live sandbox under the state dir and removes the rest.
  RecoveryReport recover();
  const RecoveryReport& recovered() const { return recovered_; }

  // Warm pools (rootfs -> idle sandboxes kept), filled in the background from start_pool().
  // `spawn_config` completes a pool's config before each spawn (resolves its recipe) and returns
  // what must be held while the sandbox is made (the recipe service's pin of its layers).
  using PoolConfigHook = std::function<std::shared_ptr<void>(SandboxConfig&)>;
  void start_pool(std::map<std::string, size_t> sizes, PoolConfigHook spawn_config);
  void stop_pool();
  std::map<std::string, std::pair<size_t, size_t>> pool_status() const;

  // Creates a sandbox, from a warm pool when one matches (throws ApiError: 500 runtime_error when
  // the runtime fails).
  std::shared_ptr<Sandbox> create(const SandboxConfig& config, const std::string& request_id);
  std::shared_ptr<Sandbox> find(const std::string& id) const;
  // The sandbox, touched (activity); throws 404 sandbox_not_found.
  std::shared_ptr<Sandbox> get(const std::string& id) const;
  std::vector<std::shared_ptr<Sandbox>> list() const;

  // Destroys a sandbox: false when the id is unknown. Throws ApiError when the runtime fails
  // (the sandbox stays registered so that the destroy can be retried).
  bool destroy(const std::string& id, const std::string& reason);
  // The same, but returns once every process of the sandbox is killed and it is gone from the
  // registry; the supervisor's teardown (reaping, cgroups) and the dir's removal finish on a
  // background thread. Still false for an unknown id.
  bool destroy_soon(const std::string& id, const std::string& reason);
  // Finishes every teardown destroy_soon queued (at exit).
  void drain_teardowns();
  void pause(Sandbox& sandbox);
  void resume(Sandbox& sandbox);
  void persist(const Sandbox& sandbox) const;

  // Rollback: destroys `old`'s live sandbox (its processes are killed and reported exited) and
  // starts a new one from `config` with the same id, dir and creation time, which replaces it in
  // the registry and its record. A paused sandbox comes back running. Throws ApiError; when the
  // new sandbox cannot start, the id is gone (the old one was destroyed already).
  std::shared_ptr<Sandbox> replace(const std::shared_ptr<Sandbox>& old, SandboxConfig config,
                                   const std::string& request_id);
  // Called with the id after every destroy (main.cc: the recipe service drops the sandbox's tags).
  void set_on_destroyed(std::function<void(const std::string&)> hook) {
    on_destroyed_ = std::move(hook);
  }

  // The reaper's pass: sandboxes idle past their TTL, past max lifetime, or whose init died;
  // and, at the first pass and then every minute, crashed runs' cgroups (the sandboxes hutchd
  // creates skip that sweep: its cost grows with the number of live sandboxes).
  void reap();
  // --destroy-on-exit.
  void destroy_all();

 private:
  std::string new_id() const;
  void remove_dir(const std::string& dir) const;
  bool recover_one(const std::string& id, const std::string& dir);
  // A new live sandbox with its dir and its record ("creating" until registered, "pooled" for a
  // warm pool's); throws ApiError.
  SpawnedSandbox spawn(const SandboxConfig& config, const std::string& request_id, bool pooled);
  void discard(SpawnedSandbox& spawned);
  void finish_teardown(const std::shared_ptr<Sandbox>& sandbox, const std::string& reason);
  void teardown_loop();

  std::string state_dir_;
  std::string cgroup_parent_;
  const Zygote& zygote_;
  Metrics& metrics_;
  RecoveryReport recovered_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  std::function<void(const std::string&)> on_destroyed_;  // set before serving
  std::unique_ptr<WarmPool> pool_;
  // destroy_soon's queue: sandboxes whose processes are dead and whose teardown is pending.
  std::mutex teardown_mutex_;
  std::condition_variable teardown_wake_;
  std::deque<std::pair<std::shared_ptr<Sandbox>, std::string>> teardowns_;
  bool teardown_stopping_ = false;
  std::thread teardown_thread_;
  std::optional<std::chrono::steady_clock::time_point> last_cgroup_sweep_;  // reaper thread only
};

}  // namespace hutch::daemon
