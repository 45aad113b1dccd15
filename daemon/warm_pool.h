// Warm pools: sandboxes created ahead of time and kept idle, so that a create request matching a
// pool returns at once; each one taken is replaced in the background. Pools are keyed by rootfs
// ("host", "recipe:NAME", a directory) and hold sandboxes of the default config for it: a request
// that changes anything the sandbox is built with (limits, network, hostname, workdir) is not
// served from a pool. Labels, env, TTLs and timeouts are the request's own (env applies per exec).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/json_codec.h"
#include "daemon/service/sandbox_trust.h"
#include "runtime/live_sandbox.h"

namespace hutch::daemon {

// A live sandbox not yet registered: its id, its dir under the state dir, and the sandbox.
struct SpawnedSandbox {
  std::string id;
  std::string dir;
  LiveSandbox live;
  std::vector<std::string> layer_digests;  // its recipe's layers when it was built
  // A sandbox with egress: its CA, kept in `dir` and bound into it (service/sandbox_trust.h).
  std::optional<service::SandboxTrust> trust;
};

class WarmPool {
 public:
  using Spawn = std::function<std::optional<SpawnedSandbox>(SandboxConfig)>;
  using Discard = std::function<void(SpawnedSandbox&)>;

  // sizes: rootfs -> how many idle sandboxes to keep.
  WarmPool(std::map<std::string, size_t> sizes, Spawn spawn, Discard discard);
  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;
  ~WarmPool();  // stop()

  void start();  // the refill thread
  void stop();   // joins it and discards every idle sandbox

  // An idle sandbox built like `config` would be, if the pool for its rootfs has one. `config`
  // comes resolved (its recipe's current layer digests): sandboxes of an older build of the
  // recipe are destroyed, never handed out.
  std::optional<SpawnedSandbox> take(const SandboxConfig& config);

  // The pool a config belongs to: "recipe:NAME" or its rootfs.
  static std::string key(const SandboxConfig& config);

  // rootfs -> {size, idle}, for GET /v1/pools and metrics.
  std::map<std::string, std::pair<size_t, size_t>> status() const;

 private:
  void refill();
  static bool poolable(const SandboxConfig& config);

  std::map<std::string, size_t> sizes_;
  Spawn spawn_;
  Discard discard_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, std::deque<SpawnedSandbox>> idle_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hutch::daemon
