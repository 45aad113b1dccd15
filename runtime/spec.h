// What a sandbox is asked to be (SandboxSpec) and what its workload did (RunResult).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cgroup/plan.h"
#include "runtime/security/seccomp.h"

namespace hutch {

// Host ids that the sandbox's ids 0..count-1 map to. Never includes host id 0.
struct IdMap {
  uint32_t host_base = 1'000'000'000;
  uint32_t count = 65536;
};

// Who opens a bind's source.
enum class BindFrom {
  // The sandbox's child, by host path: the sandbox's host ids must be able to reach it.
  kHost,
  // The launcher, by host path, as host root before clone3: a source in a directory the
  // sandbox's ids cannot search (hutchd's state, mode 0700). The child gets the detached tree.
  // With BindMount::tree_fd, the caller opened the tree already and `source` only names it.
  kLauncher,
  // The child, by a path inside the sandbox that an earlier bind mounted: a second view of it.
  kSandbox,
};

struct BindMount {
  std::string source;  // host path (kHost, kLauncher) or a path inside the sandbox (kSandbox)
  std::string target;  // absolute path inside the sandbox
  bool read_only = true;
  BindFrom from = BindFrom::kHost;
  // Bound only over a regular file the rootfs has at `target` (symlinks followed inside the
  // root, never out of its filesystem), else skipped; nothing is created for it.
  bool existing_file_only = false;
  // BindFrom::kLauncher only: a detached tree of the source (open_tree(OPEN_TREE_CLONE)) that the
  // caller opened itself, bound instead of whatever `source` names by then: a source the caller
  // resolved through fds (hutchd's host mounts, beneath --mount-root) stays what was checked,
  // whatever is renamed or replaced by a symlink on the host meanwhile. Borrowed: it must stay
  // open until the launch returns. -1: the launcher opens `source`.
  int tree_fd = -1;
};

// A mounted filesystem (a persistent volume, runtime/volumes/volume_store.h) attached at `target`:
// a detached mount the caller made (fsmount(2)), nosuid, nodev and read-only as it must be, not
// yet idmapped. The launch idmaps it through the sandbox's user namespace (its files, uid 0 on
// disk, are the sandbox root's) and the child attaches it. `mount_fd` is borrowed: it must stay
// open until the launch returns. Snapshots never include it: it is a mount above the upper layer.
struct VolumeMount {
  int mount_fd = -1;
  std::string target;  // absolute path inside the sandbox, below /
  bool read_only = false;
};

// kNone: a namespace with lo down. kLoopback: lo up, in a namespace made ahead (then owned by the
// caller's user namespace) or else by clone3 (then owned by the sandbox's). kHostOwned: lo up,
// always in a namespace owned by the caller's user namespace, made ahead or by the launcher,
// never by clone3: the network engine installs routes and nftables rules in it, which the
// sandbox's root then cannot change (it has no CAP_NET_ADMIN over that namespace).
enum class NetMode { kNone, kLoopback, kHostOwned };

// chown, chmod and setuid within the sandbox's own ids, as package managers need (dpkg, apt's
// _apt user): CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID, CAP_SETGID, CAP_SETUID.
inline constexpr uint64_t kFileOwnershipCapabilities =
    (1ull << 0) | (1ull << 1) | (1ull << 3) | (1ull << 4) | (1ull << 6) | (1ull << 7);

struct SandboxSpec {
  // Read-only lower directories, topmost first; empty means the embedded host rootfs.
  std::vector<std::string> lower_dirs;
  // Read-only layers stacked above the rootfs, topmost first: captured upper directories (recipes,
  // snapshots), owned by the sandbox's host ids already, so never idmapped. A path ending in
  // ".erofs" is an image (runtime/fs/erofs.h), mounted through a loop device; else a directory.
  std::vector<std::string> layers;
  // Empty: the writable layer is a tmpfs of disk_bytes that vanishes with the sandbox. Else a host
  // directory on a filesystem with user xattrs (ext4, xfs, tmpfs 6.6+): hutch gives it (mode 0700)
  // to the sandbox's root and creates `upper` and `work` in it, which stay after the sandbox (a
  // bake captures `upper`). disk_bytes then caps only /tmp.
  std::string upper_dir;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // complete environment, "K=V"
  std::string workdir = "/";
  std::string hostname = "hutch";
  NetMode net = NetMode::kLoopback;
  std::vector<BindMount> binds;
  std::vector<VolumeMount> volumes;  // attached after the binds
  uid_t uid = 0;                     // inside the sandbox
  gid_t gid = 0;
  IdMap ids;
  uint64_t disk_bytes = 1ull << 30;  // cap of the writable upper layer and of /tmp
  std::optional<std::chrono::milliseconds> timeout;
  CgroupLimits limits;  // unset fields get default_cgroup_limits()
  bool cgroup = true;   // false: no cgroup at all (no limits, no cgroup stats): trusted work only
  std::string cgroup_parent{kDefaultCgroupParent};  // <hierarchy>/<this>/<sandbox id>
  // Remove crashed runs' cgroups under cgroup_parent before creating this one. Its cost grows
  // with the number of live sandboxes; hutchd, which runs many, turns it off and sweeps
  // periodically (sweep_stale_cgroups in runtime/cgroup/stale.h).
  bool sweep_stale_cgroups = true;
  std::string state_dir = "/var/lib/hutch";
  // Capabilities every process keeps (a bit per CAP_* number), in the sandbox's user namespace
  // only. 0, the default: none at all. A recipe bake keeps kFileOwnershipCapabilities.
  uint64_t capabilities = 0;
  SeccompProgram seccomp;
};

// What the workload did. Runtime failures are an Error instead, never a RunResult.
struct RunResult {
  int exit_code = 0;       // the workload's exit status, or 0 when it was killed
  int term_signal = 0;     // the signal that killed the workload, 0 if it exited
  bool timed_out = false;  // hutch killed the sandbox because the timeout fired
  // The workload never started: which pre-exec step failed inside the sandbox, and errno.
  std::optional<std::string> start_failure;
  int start_errno = 0;
  bool start_failed_at_exec = false;  // the failing step was execve itself (126/127 territory)
  bool oom_killed = false;  // the memory limit's OOM killer killed a process of the sandbox
  std::chrono::microseconds duration{0};
  std::chrono::microseconds cpu_user{0};  // of reaped processes (wait4 rusage)
  std::chrono::microseconds cpu_system{0};
  std::optional<std::chrono::microseconds> cpu_total;  // the sandbox cgroup's own usage
  uint64_t peak_memory_bytes = 0;  // the cgroup's peak, else the largest resident set
  std::optional<uint64_t> peak_pids;
};

}  // namespace hutch
