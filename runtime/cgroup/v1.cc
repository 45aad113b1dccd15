#include "runtime/cgroup/v1.h"

namespace hutch {

Result<void> write_v1_limit(const CgroupDir& dir, CgroupLimit limit, const CgroupLimits& limits) {
  switch (limit) {
    case CgroupLimit::kMemory: {
      const std::string bytes = std::to_string(*limits.memory_bytes);
      // limit_in_bytes first: the kernel refuses a memsw limit below the memory limit.
      HUTCH_TRY(write_cgroup_file(dir, "memory.limit_in_bytes", bytes));
      // memsw = memory + swap; equal to the memory limit means no swap. Missing without swap
      // accounting (swapaccount=0).
      if (!cgroup_file_exists(dir, "memory.memsw.limit_in_bytes")) {
        return require_no_host_swap("memory.memsw.limit_in_bytes is missing in " + dir.path);
      }
      return write_cgroup_file(dir, "memory.memsw.limit_in_bytes", bytes);
    }
    case CgroupLimit::kPids:
      return write_cgroup_file(dir, "pids.max", std::to_string(*limits.pids));
    case CgroupLimit::kCpus:
      if (auto r = write_cgroup_file(dir, "cpu.cfs_period_us", std::to_string(kCpuPeriodUsec));
          !r) {
        return r;
      }
      return write_cgroup_file(dir, "cpu.cfs_quota_us",
                               std::to_string(cpu_quota_usec(*limits.cpus)));
    case CgroupLimit::kCpuWeight:
      return write_cgroup_file(dir, "cpu.shares",
                               std::to_string(cpu_weight_to_shares(*limits.cpu_weight)));
  }
  return plain_error("write cgroup limit", "unknown limit");
}

Result<void> set_v1_frozen(const CgroupDir& dir, bool frozen,
                           std::optional<std::chrono::milliseconds> wait) {
  const char* state = frozen ? "FROZEN" : "THAWED";
  HUTCH_TRY(write_cgroup_file(dir, "freezer.state", state));
  if (!wait) return {};
  return wait_for_cgroup_line(dir, "freezer.state", state, *wait);
}

Result<void> read_v1_cpuacct_stats(const CgroupDir& dir, CgroupStats& stats) {
  uint64_t nanoseconds = HUTCH_TRY(read_cgroup_number(dir, "cpuacct.usage"));
  stats.cpu_usage_usec = nanoseconds / 1000;
  return {};
}

Result<void> read_v1_memory_stats(const CgroupDir& dir, CgroupStats& stats) {
  uint64_t peak = HUTCH_TRY(read_cgroup_number(dir, "memory.max_usage_in_bytes"));
  stats.memory_peak_bytes = peak;
  // memory.oom_control's oom_kill line exists from Linux 4.13.
  std::string oom = HUTCH_TRY(read_cgroup_file(dir, "memory.oom_control"));
  stats.oom_kills = find_cgroup_key(oom, "oom_kill");
  return {};
}

}  // namespace hutch
