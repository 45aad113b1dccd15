// cgroup v1 files of a sandbox cgroup (Documentation/admin-guide/cgroup-v1/): limits on hybrid and
// v1-only hosts, the v1 freezer where there is no cgroup2, and stats.
#pragma once

#include <chrono>
#include <optional>

#include "runtime/cgroup/cgroup_fs.h"
#include "runtime/cgroup/plan.h"
#include "runtime/cgroup/stats.h"

namespace hutch {

// memory.limit_in_bytes with memory.memsw.limit_in_bytes equal (no swap), pids.max,
// cpu.cfs_period_us + cpu.cfs_quota_us, or cpu.shares (mapped from the weight).
Result<void> write_v1_limit(const CgroupDir& dir, CgroupLimit limit, const CgroupLimits& limits);

// Writes freezer.state; with a timeout, waits until it reads FROZEN (or THAWED): the kernel reports
// FREEZING while tasks are still on their way.
Result<void> set_v1_frozen(const CgroupDir& dir, bool frozen,
                           std::optional<std::chrono::milliseconds> wait);

Result<void> read_v1_cpuacct_stats(const CgroupDir& dir, CgroupStats& stats);
Result<void> read_v1_memory_stats(const CgroupDir& dir, CgroupStats& stats);

}  // namespace hutch
