#include "daemon/service/reaper.h"

#include <spdlog/spdlog.h>

#include "runtime/cgroup/stale.h"

namespace hutch::daemon {

std::optional<std::string> reap_reason(const SandboxConfig& config, const ReapFacts& facts) {
  if (!facts.alive) return "init exited";
  if (config.max_lifetime_seconds &&
      facts.age >= std::chrono::seconds(*config.max_lifetime_seconds))
    return "max lifetime reached";
  if (config.idle_ttl_seconds > 0 && facts.active_execs == 0 &&
      facts.idle_for >= std::chrono::seconds(config.idle_ttl_seconds) && !facts.has_running_process)
    return "idle for " + std::to_string(config.idle_ttl_seconds) + " s";
  return std::nullopt;
}

Reaper::~Reaper() { stop(); }

void Reaper::start() {
  thread_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      lock.unlock();
      pass();
      lock.lock();
      wake_.wait_for(lock, kReapInterval, [this] { return stopping_; });
    }
  });
}

void Reaper::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Reaper::pass() {
  const auto steady_now = std::chrono::steady_clock::now();
  if (!last_cgroup_sweep_ || steady_now - *last_cgroup_sweep_ >= kCgroupSweepInterval) {
    last_cgroup_sweep_ = steady_now;
    auto removed = sweep_stale_cgroups(registry_.cgroup_parent());
    if (!removed) {
      spdlog::error("cgroup sweep: {}", removed.error().message());
    } else if (*removed > 0) {
      spdlog::info("cgroup sweep: removed {} cgroups of crashed sandboxes", *removed);
    }
  }
  const auto now = std::chrono::system_clock::now();
  for (const auto& sandbox : registry_.list()) {
    ReapFacts facts{sandbox->live().alive(), now - sandbox->created_at(), sandbox->idle_for(),
                    sandbox->active_execs(), sandbox->has_running_process()};
    auto reason = reap_reason(sandbox->config(), facts);
    if (!reason) continue;
    if (auto done = registry_.destroy(sandbox->id(), *reason); !done)
      spdlog::error("sandbox={} reaper: {}", sandbox->id(), done.error().message);
  }
}

}  // namespace hutch::daemon
