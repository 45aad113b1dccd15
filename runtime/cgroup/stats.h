// What a sandbox's cgroups report about its run: for the result record (cpu usage, peak memory,
// peak pids, OOM kills). A field is empty when the host cannot tell.
#pragma once

#include <cstdint>
#include <optional>

#include "runtime/cgroup/cgroup_fs.h"

namespace hutch {

struct CgroupStats {
  std::optional<uint64_t> cpu_usage_usec;  // v2 cpu.stat usage_usec; v1 cpuacct.usage / 1000
  // v2 memory.peak (kernel 5.19+), v1 memory.max_usage_in_bytes; else the highest memory.current
  // that stats() sampled.
  std::optional<uint64_t> memory_peak_bytes;
  std::optional<uint64_t> pids_current;  // pids.current
  std::optional<uint64_t> pids_peak;     // pids.peak where the kernel has it, else sampled
  std::optional<uint64_t> oom_kills;     // v2 memory.events oom_kill; v1 memory.oom_control
};

// pids.current and pids.peak: the same files in v1 and v2.
Result<void> read_pids_stats(const CgroupDir& dir, CgroupStats& stats);

}  // namespace hutch
