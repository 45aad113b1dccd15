#include "runtime/cgroup/v2.h"

#include <algorithm>
#include <sstream>

namespace hutch {

Result<void> enable_v2_controllers(const CgroupDir& dir,
                                   const std::vector<std::string>& controllers) {
  std::string enabled = HUTCH_TRY(read_cgroup_file(dir, "cgroup.subtree_control"));
  std::vector<std::string> have;
  std::istringstream words(enabled);
  for (std::string word; words >> word;) have.push_back(word);
  std::string change;
  for (const std::string& controller : controllers) {
    if (std::find(have.begin(), have.end(), controller) != have.end()) continue;
    change += (change.empty() ? "+" : " +") + controller;
  }
  if (change.empty()) return {};
  return write_cgroup_file(dir, "cgroup.subtree_control", change);
}

Result<void> write_v2_limit(const CgroupDir& dir, CgroupLimit limit, const CgroupLimits& limits) {
  switch (limit) {
    case CgroupLimit::kMemory: {
      HUTCH_TRY(write_cgroup_file(dir, "memory.max", std::to_string(*limits.memory_bytes)));
      // Swap off, or the limit only bounds RAM and the rest spills into swap. memory.swap.max is
      // missing when the kernel does not account swap (CONFIG_MEMCG_SWAP, swapaccount=0).
      if (!cgroup_file_exists(dir, "memory.swap.max")) {
        return require_no_host_swap("memory.swap.max is missing in " + dir.path);
      }
      return write_cgroup_file(dir, "memory.swap.max", "0");
    }
    case CgroupLimit::kPids:
      return write_cgroup_file(dir, "pids.max", std::to_string(*limits.pids));
    case CgroupLimit::kCpus:
      return write_cgroup_file(
          dir, "cpu.max",
          std::to_string(cpu_quota_usec(*limits.cpus)) + " " + std::to_string(kCpuPeriodUsec));
    case CgroupLimit::kCpuWeight:
      return write_cgroup_file(dir, "cpu.weight", std::to_string(*limits.cpu_weight));
  }
  return plain_error("write cgroup limit", "unknown limit");
}

Result<void> set_v2_frozen(const CgroupDir& dir, bool frozen,
                           std::optional<std::chrono::milliseconds> wait) {
  HUTCH_TRY(write_cgroup_file(dir, "cgroup.freeze", frozen ? "1" : "0"));
  if (!wait) return {};
  return wait_for_cgroup_line(dir, "cgroup.events", frozen ? "frozen 1" : "frozen 0", *wait);
}

bool has_v2_kill(const CgroupDir& dir) { return cgroup_file_exists(dir, "cgroup.kill"); }

Result<void> write_v2_kill(const CgroupDir& dir) {
  return write_cgroup_file(dir, "cgroup.kill", "1");
}

Result<void> read_v2_cpu_stats(const CgroupDir& dir, CgroupStats& stats) {
  // cpu.stat's usage_usec is core cgroup2 (no cpu controller needed), so hybrid hosts have it.
  std::string text = HUTCH_TRY(read_cgroup_file(dir, "cpu.stat"));
  stats.cpu_usage_usec = find_cgroup_key(text, "usage_usec");
  return {};
}

Result<void> read_v2_memory_stats(const CgroupDir& dir, CgroupStats& stats) {
  const char* peak_file = cgroup_file_exists(dir, "memory.peak") ? "memory.peak" : "memory.current";
  uint64_t peak = HUTCH_TRY(read_cgroup_number(dir, peak_file));
  stats.memory_peak_bytes = peak;
  std::string events = HUTCH_TRY(read_cgroup_file(dir, "memory.events"));
  stats.oom_kills = find_cgroup_key(events, "oom_kill");
  return {};
}

}  // namespace hutch
