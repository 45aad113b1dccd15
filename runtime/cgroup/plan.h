// Resource limits and where each is enforced: the cgroup2 controller when the v2 root offers it,
// else the v1 hierarchy that has it (hybrid hosts), else an error naming the limit. Pure: testable
// on fake layouts without root.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/cgroup/layout.h"

namespace hutch {

struct CgroupLimits {
  std::optional<uint64_t> memory_bytes;  // memory.max (v1 memory.limit_in_bytes); swap always off
  std::optional<uint64_t> pids;          // pids.max
  std::optional<double> cpus;            // cpu.max quota/period: 0.5 is half of one CPU
  std::optional<uint32_t> cpu_weight;    // cpu.weight 1..10000 (v1: cpu.shares, mapped)
};

// Limits an unconfigured sandbox gets so that it cannot take the host down: 4096 pids and
// min(4 GiB, half of RAM). CPU stays unlimited: the scheduler already shares it fairly.
CgroupLimits default_cgroup_limits(uint64_t ram_bytes);
// The host's RAM (sysinfo(2)) for default_cgroup_limits.
Result<uint64_t> host_ram_bytes();
// `limits` with every unset field taken from `defaults`.
CgroupLimits with_defaults(CgroupLimits limits, const CgroupLimits& defaults);

enum class CgroupVersion { kV1, kV2 };

struct CgroupHierarchy {
  CgroupVersion version = CgroupVersion::kV2;
  std::string mount_point;  // /sys/fs/cgroup, /sys/fs/cgroup/unified, /sys/fs/cgroup/memory
};

// The hierarchy that offers `controller` ("memory", "pids", "cpu", "cpuacct", "freezer"): cgroup2
// if its root lists it in cgroup.controllers, else the first v1 hierarchy mounted with it.
std::optional<CgroupHierarchy> locate_controller(const CgroupLayout& layout,
                                                 std::string_view controller);

enum class CgroupLimit { kMemory, kPids, kCpus, kCpuWeight };
// "memory", "pids", "cpus", "cpu-weight": how errors and `hutch info` name a limit.
std::string_view limit_name(CgroupLimit limit);

// A limit and the hierarchy enforcing it, for `hutch info` and error messages.
struct LimitEnforcement {
  CgroupLimit limit;
  std::string controller;  // "memory", "pids", "cpu"
  CgroupHierarchy hierarchy;
};

// One `<mount>/hutch/<sandbox id>` directory to create.
struct CgroupDirPlan {
  CgroupHierarchy hierarchy;
  // The controllers the sandbox uses there, for limits or accounting. Empty for a cgroup2 dir used
  // only for placement, freeze and kill (hybrid hosts: the v2 core works without controllers).
  std::vector<std::string> controllers;
};

// The parent cgroup hutch creates and owns at each hierarchy's root: `<mount>/<parent>/<id>`.
inline constexpr std::string_view kDefaultCgroupParent = "hutch";

// A parent name is one path component of [A-Za-z0-9._-], at most 64 bytes, not "." or "..".
bool valid_cgroup_parent(std::string_view name);
// The same as an Error naming the bad name.
Result<void> check_cgroup_parent(std::string_view name);

struct CgroupPlan {
  std::string parent{kDefaultCgroupParent};  // set by the caller; plan_cgroups leaves the default
  CgroupLimits limits;
  std::vector<CgroupDirPlan> dirs;  // the cgroup2 dir first, when the host has cgroup2
  // Controllers to enable in `<v2>/hutch/cgroup.subtree_control`.
  std::vector<std::string> v2_enable;
  // Of those, the ones the v2 root has not enabled yet. SandboxCgroup::create enables them in the
  // root's cgroup.subtree_control: the one write hutch makes to a cgroup it did not create (as
  // runc, crun and systemd do), limited to the controllers a requested limit needs.
  std::vector<std::string> v2_root_enable;
  std::vector<LimitEnforcement> enforcement;  // one entry per requested limit
};

// Decides, for each requested limit, the hierarchy that enforces it, and the cgroup dirs a sandbox
// needs. Memory and pids accounting (for stats) is joined where available even without a limit;
// a requested limit that no hierarchy can enforce is an Error naming it, never a silent no-op.
Result<CgroupPlan> plan_cgroups(const CgroupLayout& layout, const CgroupLimits& limits);

// The period hutch uses for cpu.max and cpu.cfs_period_us: the kernel's default, 100 ms.
inline constexpr uint64_t kCpuPeriodUsec = 100'000;
// cpu.max's quota for `cpus` CPUs per kCpuPeriodUsec (at least the kernel's 1 ms minimum).
uint64_t cpu_quota_usec(double cpus);
// cgroup2 cpu.weight (1..10000, default 100) to v1 cpu.shares (2..262144), the mapping runc and
// crun use (github.com/opencontainers/runc, libcontainer/cgroups/utils.go
// ConvertCPUSharesToCgroupV2Value, inverted).
uint64_t cpu_weight_to_shares(uint32_t weight);

}  // namespace hutch
