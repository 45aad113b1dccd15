// Which cgroup hierarchies the host has: pure v2, hybrid (v1 controllers plus a cgroup2 mount),
// or v1 only. Read from /proc/self/mountinfo and the cgroup2 root's cgroup.controllers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"

namespace hutch {

struct CgroupV1Hierarchy {
  std::string mount_point;               // /sys/fs/cgroup/memory
  std::vector<std::string> controllers;  // memory (or cpu,cpuacct when co-mounted)
};

struct CgroupLayout {
  std::string v2_mount;                         // empty when there is no cgroup2 mount
  std::vector<std::string> v2_controllers;      // what the cgroup2 root offers (cgroup.controllers)
  std::vector<std::string> v2_subtree_control;  // what the root has enabled for its children
  // Only hierarchies with at least one controller: a named hierarchy (name=systemd) has none.
  std::vector<CgroupV1Hierarchy> v1;
  std::string mode() const;  // "v2", "hybrid", "v1" or "none"
};

// Pure: parses mountinfo text; v2 controllers are filled in by read_cgroup_layout.
CgroupLayout parse_cgroup_mounts(const std::string& mountinfo);

Result<CgroupLayout> read_cgroup_layout();

// One line of /proc/<pid>/cgroup: "4:memory:/process_api/67db" or "0::/" (cgroups(7)).
struct CgroupMembership {
  std::vector<std::string> controllers;  // empty for the cgroup2 line (and for name=… lines)
  bool v2 = false;                       // hierarchy id 0
  std::string path;                      // relative to the hierarchy's root
};

// Pure: parses /proc/<pid>/cgroup text.
std::vector<CgroupMembership> parse_proc_cgroup(const std::string& text);

// Reads and parses `path`: "/proc/self/cgroup", "/proc/42/cgroup".
Result<std::vector<CgroupMembership>> read_proc_cgroups(const std::string& path);
Result<std::vector<CgroupMembership>> read_own_cgroups();

// The cgroup `memberships` put the process in on the hierarchy holding `controllers` (or on cgroup2
// when `v2`), or "" when the process has no line for it.
std::string cgroup_path_in(const std::vector<CgroupMembership>& memberships, bool v2,
                           const std::vector<std::string>& controllers);

}  // namespace hutch
