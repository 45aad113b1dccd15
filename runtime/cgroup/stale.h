// Sandbox cgroup ids that name their owner, and the removal of crashed runs' leftovers.
//
// Id format: "run-<pid ns inode>-<owner pid>-<owner start time>-<sequence>". The owner is the
// hutch process that created the cgroup (a `hutch run`, or the daemon); its start time is field 22
// of /proc/<pid>/stat (clock ticks since boot), so a reused pid does not pass for the owner, and
// cgroupfs does not survive a reboot, so ticks since boot suffice. The pid namespace inode
// (/proc/self/ns/pid) says whether this process can look the owner's pid up at all.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/error.h"
#include "runtime/cgroup/layout.h"
#include "runtime/cgroup/plan.h"

namespace hutch {

struct CgroupOwner {
  uint64_t pid_namespace = 0;  // inode of the owner's /proc/self/ns/pid
  pid_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22
  uint64_t sequence = 0;    // the owner's n-th sandbox
};

std::string format_sandbox_cgroup_id(const CgroupOwner& owner);
// Pure: std::nullopt unless `id` is exactly in the format above.
std::optional<CgroupOwner> parse_sandbox_cgroup_id(std::string_view id);

// An id owned by this process; `sequence` must differ between its sandboxes.
Result<std::string> make_sandbox_cgroup_id(uint64_t sequence);

// False only when `id` is in the format above, its owner ran in this pid namespace, and that
// process is gone (no /proc/<pid>, a different start time, or a zombie). Anything else counts as
// live: hutch removes only what it can prove abandoned.
bool cgroup_owner_alive(std::string_view id);

// For every `<mount>/<parent>/<id>` in every hierarchy of `layout` with !is_live(id): kills its
// processes and removes it with its sub-cgroups. Skips any id holding this process. Returns how
// many ids were removed; on a failure the other ids are still tried and the first error returned.
Result<int> remove_stale_cgroups(const CgroupLayout& layout,
                                 const std::function<bool(std::string_view id)>& is_live,
                                 std::string_view parent = kDefaultCgroupParent);

// remove_stale_cgroups on this host's layout with cgroup_owner_alive: what a sandbox's creation
// does first unless its spec says sweep_stale_cgroups = false (hutchd sweeps on its own
// schedule instead: each sweep reads /proc once per live sandbox).
Result<int> sweep_stale_cgroups(std::string_view parent = kDefaultCgroupParent);

}  // namespace hutch
