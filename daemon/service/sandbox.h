// A sandbox as hutchd keeps it: its config, its live supervisor, its state and activity, its
// background processes and its event log. The registry (sandboxes.h) owns them.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/exec.h"
#include "daemon/json_codec.h"
#include "daemon/service/session_table.h"
#include "runtime/base/error.h"
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
  SessionTable& sessions() { return sessions_; }
  const SessionTable& sessions() const { return sessions_; }

  // The live network policy: the config's until PUT .../network replaces it (the record and the
  // API's sandbox object show this one).
  net::Policy network() const;
  void set_network(net::Policy policy);
  // Why its egress is not served, when a restarted hutchd could not re-attach it to the engine
  // (the path's rules stay in its namespace and redirect to listeners nobody holds, so every
  // connection is refused): shown by GET .../network and the sandbox object. Empty: served.
  std::string network_error() const;
  void set_network_error(std::string error);
  // Variables every exec gets unless the config's env or the exec's own name them: where the
  // trust bundle hutchd wrote into the sandbox is, and each injected secret's placeholder.
  std::map<std::string, std::string> network_env() const;
  void set_network_env(std::map<std::string, std::string> env);

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

  // The files API on the sandbox root (opened once, cached); fails when the root cannot be
  // opened (the sandbox is gone).
  Result<files::SandboxFs> fs();
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
  SessionTable sessions_;
  std::atomic<SandboxState> state_{SandboxState::kRunning};
  std::atomic<int64_t> last_activity_;
  std::atomic<int> active_execs_{0};
  std::mutex lifecycle_;
  mutable std::mutex mutex_;  // root_, processes_, network_, network_error_, network_env_
  UniqueFd root_;
  std::map<pid_t, std::shared_ptr<BackgroundProcess>> processes_;
  net::Policy network_;
  std::string network_error_;
  std::map<std::string, std::string> network_env_;
};

std::string state_name(SandboxState state);
// {"code": "network_not_attached", "message": error}, or null for no error.
nlohmann::json network_error_json(const std::string& error);

}  // namespace hutch::daemon
