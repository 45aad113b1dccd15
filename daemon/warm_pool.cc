#include "daemon/warm_pool.h"

#include <spdlog/spdlog.h>

namespace hutch::daemon {
namespace {

constexpr auto kRefillDelay = std::chrono::milliseconds(20);

}  // namespace

WarmPool::WarmPool(std::map<std::string, size_t> sizes, Spawn spawn, Discard discard)
    : sizes_(std::move(sizes)), spawn_(std::move(spawn)), discard_(std::move(discard)) {}

WarmPool::~WarmPool() { stop(); }

void WarmPool::start() {
  if (sizes_.empty() || thread_.joinable()) return;
  thread_ = std::thread([this] { refill(); });
}

void WarmPool::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::map<std::string, std::deque<SpawnedSandbox>> idle;
  {
    std::lock_guard lock(mutex_);
    idle.swap(idle_);
  }
  for (auto& [rootfs, sandboxes] : idle) {
    for (SpawnedSandbox& sandbox : sandboxes) discard_(sandbox);
  }
}

bool WarmPool::poolable(const SandboxConfig& config) {
  const SandboxConfig defaults;
  return !config.limits.memory_bytes && !config.limits.pids && !config.limits.cpus &&
         !config.limits.cpu_weight && !config.limits.disk_bytes &&
         config.network == defaults.network && config.hostname == defaults.hostname &&
         config.workdir == defaults.workdir;
}

std::string WarmPool::key(const SandboxConfig& config) {
  return config.recipe.empty() ? config.rootfs : "recipe:" + config.recipe;
}

std::optional<SpawnedSandbox> WarmPool::take(const SandboxConfig& config) {
  if (!poolable(config)) return std::nullopt;
  std::optional<SpawnedSandbox> taken;
  std::vector<SpawnedSandbox> unusable;
  {
    std::lock_guard lock(mutex_);
    auto it = idle_.find(key(config));
    while (it != idle_.end() && !it->second.empty() && !taken) {
      SpawnedSandbox candidate = std::move(it->second.front());
      it->second.pop_front();
      // Dead while idle (killed from outside), or built from an older version of the recipe.
      if (candidate.live.alive() && candidate.layer_digests == config.layer_digests) {
        taken.emplace(std::move(candidate));
      } else {
        spdlog::info("warm pool {}: dropping idle sandbox {} ({})", key(config), candidate.id,
                     candidate.live.alive() ? "built from an older recipe" : "its init died");
        unusable.push_back(std::move(candidate));
      }
    }
  }
  for (SpawnedSandbox& sandbox : unusable) discard_(sandbox);
  wake_.notify_all();
  return taken;
}

std::map<std::string, std::pair<size_t, size_t>> WarmPool::status() const {
  std::lock_guard lock(mutex_);
  std::map<std::string, std::pair<size_t, size_t>> out;
  for (const auto& [rootfs, size] : sizes_) {
    auto it = idle_.find(rootfs);
    out[rootfs] = {size, it == idle_.end() ? 0 : it->second.size()};
  }
  return out;
}

void WarmPool::refill() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    std::optional<std::string> short_pool;
    for (const auto& [rootfs, size] : sizes_) {
      if (idle_[rootfs].size() < size) short_pool = rootfs;
    }
    if (!short_pool) {
      wake_.wait(lock);
      continue;
    }
    // A moment's delay: the client that just took a sandbox is about to use it, and a refill
    // competes with its first exec for the CPU (a sandbox build costs a few ms of it).
    wake_.wait_for(lock, kRefillDelay, [this] { return stopping_; });
    if (stopping_) break;
    SandboxConfig config;
    if (short_pool->starts_with("recipe:")) {
      config.recipe = short_pool->substr(7);
    } else {
      config.rootfs = *short_pool;
    }
    lock.unlock();
    std::optional<SpawnedSandbox> spawned = spawn_(config);
    lock.lock();
    if (!spawned) {
      // Logged by spawn_; retried after a pause rather than in a tight loop.
      wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; });
      continue;
    }
    if (stopping_) {
      lock.unlock();
      discard_(*spawned);
      lock.lock();
      continue;
    }
    idle_[*short_pool].push_back(std::move(*spawned));
  }
}

}  // namespace hutch::daemon
