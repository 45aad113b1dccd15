// Killing every process of one sandbox, spread over its cgroup dirs in several hierarchies:
// cgroup.kill where the kernel has it, else freeze + SIGKILL each listed pid + thaw, until every
// cgroup.procs (sub-cgroups included) is empty. Setsid'd, double-forked and stopped processes
// are all in the cgroup, so none survives.
#pragma once

#include <chrono>
#include <vector>

#include "runtime/cgroup/cgroup_fs.h"

namespace hutch {

struct CgroupKillTarget {
  const CgroupDir* v2 = nullptr;          // cgroup.kill and cgroup.freeze, when there is cgroup2
  const CgroupDir* v1_freezer = nullptr;  // freezer.state, used when there is no cgroup2
  std::vector<const CgroupDir*> dirs;     // every dir whose tree must end up empty
  // false forces the freeze + SIGKILL path that kernels before 5.14 take (for its tests).
  bool use_cgroup_kill = true;
};

// Fails (naming a survivor) if processes remain after `timeout`: a task stuck in
// uninterruptible sleep cannot be killed.
Result<void> kill_cgroup_processes(const CgroupKillTarget& target,
                                   std::chrono::milliseconds timeout);

}  // namespace hutch
