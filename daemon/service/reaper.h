// The reaper: a thread that, every kReapInterval, destroys the sandboxes that are done (idle past
// their TTL, past their max lifetime, or whose init died) and, at its first pass and then every
// kCgroupSweepInterval, removes crashed runs' cgroups (the sandboxes hutchd creates skip that
// sweep at their start: its cost grows with the number of live sandboxes).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "daemon/json_codec.h"
#include "daemon/service/sandbox_registry.h"

namespace hutch::daemon {

inline constexpr auto kReapInterval = std::chrono::milliseconds(250);
inline constexpr auto kCgroupSweepInterval = std::chrono::minutes(1);

// What the reaper knows of one sandbox.
struct ReapFacts {
  bool alive = true;                               // its init runs
  std::chrono::system_clock::duration age{};       // since its creation
  std::chrono::steady_clock::duration idle_for{};  // since its last activity
  int active_execs = 0;
  bool has_running_process = false;  // a background process
};

// Why the sandbox is to be destroyed now, or nullopt. A running exec or background process
// holds the idle TTL off; nothing holds off the max lifetime.
std::optional<std::string> reap_reason(const SandboxConfig& config, const ReapFacts& facts);

class Reaper {
 public:
  explicit Reaper(SandboxRegistry& registry) : registry_(registry) {}
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;
  ~Reaper();  // stop()

  void start();
  // Ends the thread after its current pass.
  void stop();
  // One pass (the thread's; tests call it directly).
  void pass();

 private:
  SandboxRegistry& registry_;
  std::optional<std::chrono::steady_clock::time_point> last_cgroup_sweep_;  // pass() only
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hutch::daemon
