// hutchd's spec policy: a sandbox config becomes a SandboxSpec.
#include "daemon/sandbox_spec.h"

#include <algorithm>
#include <string_view>

#include "runtime/defaults.h"

namespace hutch::daemon {
namespace {

// hutchd runs a sandbox's init and every exec as the sandbox's root (SandboxSpec::uid, gid).
constexpr uid_t kSandboxRoot = 0;

}  // namespace

NetMode net_mode_for(net::Mode mode) {
  switch (mode) {
    case net::Mode::kNone:
      return NetMode::kNone;
    case net::Mode::kLoopback:
      return NetMode::kLoopback;
    case net::Mode::kFiltered:
    case net::Mode::kOpen:
      return NetMode::kHostOwned;
  }
  return NetMode::kNone;
}

IdMap sandbox_id_map(const SandboxConfig&) {
  // Every hutchd sandbox gets the default map: recipe layers and snapshots are captured upper
  // directories owned by these host ids already (SandboxSpec::layers), so they stack only onto
  // a sandbox with the same map.
  return IdMap{};
}

files::Owner sandbox_root_owner(const SandboxConfig& config) {
  const IdMap ids = sandbox_id_map(config);
  // The sandbox's uid and gid 0 are the first ids of the map (runtime/ns/userns.cc).
  return files::Owner{ids.host_base, ids.host_base};
}

SandboxSpec build_spec(const SandboxConfig& config, const std::string& state_dir) {
  SandboxSpec spec;
  if (config.rootfs != "host") spec.lower_dirs = {config.rootfs};
  spec.layers = config.layer_images;
  spec.uid = kSandboxRoot;
  spec.gid = kSandboxRoot;
  spec.ids = sandbox_id_map(config);
  spec.env = exec_environment(config.env, {});
  // First in binds, by path: whoever starts the sandbox puts in the trees it opened beneath the
  // mount roots (SandboxRegistry::start_live, daemon/service/host_mounts.h).
  for (const HostMount& mount : config.mounts)
    spec.binds.push_back({mount.source, mount.target, mount.read_only});
  // Their mounts are opened by whoever starts the sandbox (SandboxRegistry::start_live).
  for (const SandboxVolume& volume : config.volumes)
    spec.volumes.push_back({-1, volume.target, volume.read_only});
  spec.workdir = config.workdir;
  spec.hostname = config.hostname;
  spec.net = net_mode_for(config.network.mode);
  if (config.limits.disk_bytes) spec.disk_bytes = *config.limits.disk_bytes;
  spec.limits.memory_bytes = config.limits.memory_bytes;
  spec.limits.pids = config.limits.pids;
  spec.limits.cpus = config.limits.cpus;
  spec.limits.cpu_weight = config.limits.cpu_weight;
  spec.state_dir = state_dir;
  // SandboxRegistry::sweep_stale_cgroups does it at start and then every minute.
  spec.sweep_stale_cgroups = false;
  return spec;
}

std::vector<std::string> exec_environment(const std::map<std::string, std::string>& sandbox_env,
                                          const std::map<std::string, std::string>& request_env) {
  std::vector<std::string> overrides;
  overrides.reserve(sandbox_env.size() + request_env.size());
  for (const auto& [key, value] : sandbox_env) overrides.push_back(key + "=" + value);
  for (const auto& [key, value] : request_env) overrides.push_back(key + "=" + value);
  std::vector<std::string> env = sandbox_environment(kSandboxRoot, overrides);
  // Sorted by key: the order hutchd's processes have always been given (a merge by std::map).
  std::sort(env.begin(), env.end(), [](const std::string& a, const std::string& b) {
    return std::string_view(a).substr(0, a.find('=')) < std::string_view(b).substr(0, b.find('='));
  });
  return env;
}

}  // namespace hutch::daemon
