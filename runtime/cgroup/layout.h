// Which cgroup hierarchies the host has: pure v2, hybrid (v1 controllers plus a cgroup2 mount),
// or v1 only. Read from /proc/self/mountinfo and the cgroup2 root's cgroup.controllers.
#pragma once

#include <string>
#include <vector>

#include "runtime/error.h"

namespace hutch {

struct CgroupV1Hierarchy {
  std::string mount_point;               // /sys/fs/cgroup/memory
  std::vector<std::string> controllers;  // memory (or cpu,cpuacct when co-mounted)
};

struct CgroupLayout {
  std::string v2_mount;                     // empty when there is no cgroup2 mount
  std::vector<std::string> v2_controllers;  // what the cgroup2 root offers
  std::vector<CgroupV1Hierarchy> v1;
  std::string mode() const;  // "v2", "hybrid", "v1" or "none"
};

// Pure: parses mountinfo text; v2 controllers are filled in by read_cgroup_layout.
CgroupLayout parse_cgroup_mounts(const std::string& mountinfo);

Result<CgroupLayout> read_cgroup_layout();

}  // namespace hutch
