#include "runtime/cgroup/plan.h"

#include <sys/sysinfo.h>

#include <algorithm>
#include <cmath>

namespace hutch {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
// More CPUs than any host has; keeps the quota far below the kernel's max_cfs_runtime.
constexpr double kMaxCpus = 10'000;

bool contains(const std::vector<std::string>& list, std::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

Result<void> validate(const CgroupLimits& limits) {
  if (limits.memory_bytes && *limits.memory_bytes == 0) {
    return plain_error("plan cgroups", "memory limit must be greater than 0");
  }
  if (limits.pids && *limits.pids == 0) {
    return plain_error("plan cgroups", "pids limit must be at least 1");
  }
  if (limits.cpus &&
      !(std::isfinite(*limits.cpus) && *limits.cpus > 0 && *limits.cpus <= kMaxCpus)) {
    return plain_error("plan cgroups", "cpus must be greater than 0 and at most 10000, got " +
                                           std::to_string(*limits.cpus));
  }
  if (limits.cpu_weight && (*limits.cpu_weight < 1 || *limits.cpu_weight > 10'000)) {
    return plain_error("plan cgroups", "cpu weight must be within 1..10000, got " +
                                           std::to_string(*limits.cpu_weight));
  }
  return {};
}

// What a sandbox wants from one controller: a limit (required) or accounting only (optional).
struct ControllerNeed {
  std::string controller;
  std::vector<CgroupLimit> limits;  // empty: accounting only, skipped where unavailable
};

std::vector<ControllerNeed> controller_needs(const CgroupLayout& layout, const CgroupLimits& l) {
  std::vector<ControllerNeed> needs;
  needs.push_back({"memory", {}});
  if (l.memory_bytes) needs.back().limits.push_back(CgroupLimit::kMemory);
  needs.push_back({"pids", {}});
  if (l.pids) needs.back().limits.push_back(CgroupLimit::kPids);
  std::vector<CgroupLimit> cpu_limits;
  if (l.cpus) cpu_limits.push_back(CgroupLimit::kCpus);
  if (l.cpu_weight) cpu_limits.push_back(CgroupLimit::kCpuWeight);
  if (!cpu_limits.empty()) needs.push_back({"cpu", cpu_limits});
  // Without cgroup2, CPU usage comes from v1 cpuacct and freeze from the v1 freezer; with it, both
  // are core cgroup2 files (cpu.stat, cgroup.freeze) that need no controller.
  if (layout.v2_mount.empty()) {
    needs.push_back({"cpuacct", {}});
    needs.push_back({"freezer", {}});
  }
  return needs;
}

CgroupDirPlan& dir_for(CgroupPlan& plan, const CgroupHierarchy& hierarchy) {
  for (CgroupDirPlan& dir : plan.dirs) {
    if (dir.hierarchy.mount_point == hierarchy.mount_point) return dir;
  }
  plan.dirs.push_back({hierarchy, {}});
  return plan.dirs.back();
}

}  // namespace

std::string_view limit_name(CgroupLimit limit) {
  switch (limit) {
    case CgroupLimit::kMemory:
      return "memory";
    case CgroupLimit::kPids:
      return "pids";
    case CgroupLimit::kCpus:
      return "cpus";
    case CgroupLimit::kCpuWeight:
      return "cpu-weight";
  }
  return "unknown";
}

CgroupLimits default_cgroup_limits(uint64_t ram_bytes) {
  CgroupLimits limits;
  limits.pids = 4096;
  limits.memory_bytes = std::min<uint64_t>(4 * kGiB, ram_bytes / 2);
  return limits;
}

Result<uint64_t> host_ram_bytes() {
  struct sysinfo info {};
  if (sysinfo(&info) != 0) return sys_error("sysinfo", "");
  return static_cast<uint64_t>(info.totalram) * info.mem_unit;
}

CgroupLimits with_defaults(CgroupLimits limits, const CgroupLimits& defaults) {
  if (!limits.memory_bytes) limits.memory_bytes = defaults.memory_bytes;
  if (!limits.pids) limits.pids = defaults.pids;
  if (!limits.cpus) limits.cpus = defaults.cpus;
  if (!limits.cpu_weight) limits.cpu_weight = defaults.cpu_weight;
  return limits;
}

std::optional<CgroupHierarchy> locate_controller(const CgroupLayout& layout,
                                                 std::string_view controller) {
  if (!layout.v2_mount.empty() && contains(layout.v2_controllers, controller)) {
    return CgroupHierarchy{CgroupVersion::kV2, layout.v2_mount};
  }
  for (const CgroupV1Hierarchy& hierarchy : layout.v1) {
    if (contains(hierarchy.controllers, controller)) {
      return CgroupHierarchy{CgroupVersion::kV1, hierarchy.mount_point};
    }
  }
  return std::nullopt;
}

Result<CgroupPlan> plan_cgroups(const CgroupLayout& layout, const CgroupLimits& limits) {
  HUTCH_TRY(validate(limits));
  CgroupPlan plan;
  plan.limits = limits;
  // The cgroup2 dir always comes first: placement (CLONE_INTO_CGROUP), freeze and kill use it even
  // when every limit is enforced by v1.
  if (!layout.v2_mount.empty()) dir_for(plan, {CgroupVersion::kV2, layout.v2_mount});
  for (const ControllerNeed& need : controller_needs(layout, limits)) {
    std::optional<CgroupHierarchy> hierarchy = locate_controller(layout, need.controller);
    if (!hierarchy) {
      if (need.limits.empty()) continue;
      return plain_error("plan cgroups",
                         "the " + std::string(limit_name(need.limits.front())) +
                             " limit cannot be enforced: no cgroup2 or v1 '" + need.controller +
                             "' controller on this host (cgroup mode " + layout.mode() + ")");
    }
    dir_for(plan, *hierarchy).controllers.push_back(need.controller);
    for (CgroupLimit limit : need.limits) {
      plan.enforcement.push_back({limit, need.controller, *hierarchy});
    }
    if (hierarchy->version == CgroupVersion::kV2) {
      plan.v2_enable.push_back(need.controller);
      if (!contains(layout.v2_subtree_control, need.controller)) {
        plan.v2_root_enable.push_back(need.controller);
      }
    }
  }
  return plan;
}

uint64_t cpu_quota_usec(double cpus) {
  constexpr uint64_t kMinQuotaUsec = 1000;  // kernel/sched/core.c: min_cfs_quota_period
  return std::max(kMinQuotaUsec, static_cast<uint64_t>(std::llround(cpus * kCpuPeriodUsec)));
}

uint64_t cpu_weight_to_shares(uint32_t weight) {
  return 2 + (static_cast<uint64_t>(weight) - 1) * 262'142 / 9'999;
}

bool valid_cgroup_parent(std::string_view name) {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
  return name.find_first_not_of(
             "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
         std::string_view::npos;
}

Result<void> check_cgroup_parent(std::string_view name) {
  if (valid_cgroup_parent(name)) return {};
  return plain_error("cgroup parent",
                     "\"" + std::string(name) + "\" is not one name of [A-Za-z0-9._-]");
}

}  // namespace hutch
