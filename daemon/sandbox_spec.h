// Spec policy of hutchd: what a sandbox's config (POST /v1/sandboxes, normalized) is, and how it
// becomes a runtime SandboxSpec: the id map, the ids the sandbox's processes run as, and their
// environment (runtime/defaults.h, the policy the CLI applies too). No JSON here.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "net/policy.h"
#include "runtime/files/sandbox_fs.h"
#include "runtime/spec.h"

namespace hutch::daemon {

struct SandboxLimits {
  std::optional<uint64_t> memory_bytes;
  std::optional<uint64_t> pids;
  std::optional<double> cpus;
  std::optional<uint32_t> cpu_weight;
  std::optional<uint64_t> disk_bytes;
};

// What a client asked for in POST /v1/sandboxes, normalized (defaults filled in).
// A host directory bound into the sandbox (daemon/service/host_mounts.h resolves `source`).
struct HostMount {
  std::string source;
  std::string target;  // normalized absolute, below /
  bool read_only = true;
};

// A persistent volume mounted into the sandbox (a create's "volumes";
// daemon/service/volume_service.h decides who may mount which).
struct SandboxVolume {
  std::string name;
  std::string target;  // normalized absolute, below /
  bool read_only = false;
  // Read-write beside other read-write attachments that asked for sharing too; without it, a
  // read-write attachment is the volume's only one of its kind.
  bool shared = false;
};

struct SandboxConfig {
  // "host" or an absolute host directory (a read-only lower layer); with a recipe, the recipe's
  // base (a request's "rootfs": "recipe:NAME" is moved to `recipe`).
  std::string rootfs = "host";
  // The recipe or snapshot tag the sandbox was created from ("" when none), and the layer ids
  // of its stack, topmost first, as resolved at creation (or at a rollback).
  std::string recipe;
  std::vector<std::string> layer_digests;
  // The erofs images of layer_digests (SandboxSpec::layers), filled in from the layer store by
  // whoever resolves `recipe`; not part of the JSON (a record keeps the digests only).
  std::vector<std::string> layer_images;
  SandboxLimits limits;
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> labels;
  uint64_t idle_ttl_seconds = 600;
  std::optional<uint64_t> max_lifetime_seconds;
  uint64_t default_timeout_seconds = 600;
  // none and loopback: no traffic leaves; filtered and open: egress through hutchd's network
  // engine by these rules (a sandbox in a host-owned namespace). The live policy of a running
  // sandbox is Sandbox::network(), which PUT .../network replaces.
  net::Policy network;
  std::string hostname = "hutch";
  std::string workdir = "/";
  std::vector<HostMount> mounts;
  std::vector<SandboxVolume> volumes;
};

// The host id map of a sandbox created from `config`.
IdMap sandbox_id_map(const SandboxConfig& config);
// The host ids of that sandbox's root (uid and gid 0 inside): whom the file API acts as.
files::Owner sandbox_root_owner(const SandboxConfig& config);

// The runtime's network namespace for a policy mode: filtered and open need one the sandbox's
// root cannot administer (the engine's rules live in it).
NetMode net_mode_for(net::Mode mode);

// The runtime spec for a sandbox (seccomp excluded: the zygote loads the built-in program).
SandboxSpec build_spec(const SandboxConfig& config, const std::string& state_dir);

// A command's complete environment: runtime/defaults.h's for the sandbox's root, then the
// sandbox's, then the request's, sorted by key.
std::vector<std::string> exec_environment(const std::map<std::string, std::string>& sandbox_env,
                                          const std::map<std::string, std::string>& request_env);

}  // namespace hutch::daemon
