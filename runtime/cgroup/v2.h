// cgroup2 files of a sandbox cgroup (Documentation/admin-guide/cgroup-v2.rst): controller
// enabling, limits, freeze, kill and stats.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "runtime/cgroup/cgroup_fs.h"
#include "runtime/cgroup/plan.h"
#include "runtime/cgroup/stats.h"

namespace hutch {

// Enables those of `controllers` that `dir`'s cgroup.subtree_control lacks (no write when none).
Result<void> enable_v2_controllers(const CgroupDir& dir,
                                   const std::vector<std::string>& controllers);

// memory.max with memory.swap.max=0, pids.max, cpu.max or cpu.weight.
Result<void> write_v2_limit(const CgroupDir& dir, CgroupLimit limit, const CgroupLimits& limits);

// Writes cgroup.freeze; with a timeout, waits for cgroup.events to report the new state (tasks
// stop at their next return to user space, so "frozen 1" can lag the write).
Result<void> set_v2_frozen(const CgroupDir& dir, bool frozen,
                           std::optional<std::chrono::milliseconds> wait);

// cgroup.kill exists from Linux 5.14.
bool has_v2_kill(const CgroupDir& dir);
Result<void> write_v2_kill(const CgroupDir& dir);

Result<void> read_v2_cpu_stats(const CgroupDir& dir, CgroupStats& stats);
Result<void> read_v2_memory_stats(const CgroupDir& dir, CgroupStats& stats);

}  // namespace hutch
