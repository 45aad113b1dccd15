// File operations on cgroup directories through O_PATH directory fds: the shared ground of the v1
// and v2 code. Every failure names the syscall, the file and errno.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch {

// A cgroup directory: its path (for messages) and an O_PATH|O_DIRECTORY fd (for the *at calls).
struct CgroupDir {
  std::string path;
  UniqueFd fd;
};

Result<CgroupDir> open_cgroup_dir(std::string path);
// Opens `name` under `parent`, refusing symlinks (cgroupfs has none; a planted one is not ours).
Result<CgroupDir> open_cgroup_subdir(const CgroupDir& parent, const std::string& name);
// mkdir(2) of `name` under `parent` (mode 0755, owned by the caller: host root). EEXIST is success
// only when `may_exist`.
Result<void> make_cgroup_subdir(const CgroupDir& parent, const std::string& name, bool may_exist);

bool cgroup_file_exists(const CgroupDir& dir, const char* name);
Result<void> write_cgroup_file(const CgroupDir& dir, const char* name, std::string_view value);
Result<std::string> read_cgroup_file(const CgroupDir& dir, const char* name);
// A file holding one number ("memory.peak", "pids.current"); "max" is an error.
Result<uint64_t> read_cgroup_number(const CgroupDir& dir, const char* name);

// The value of `key` in "key value" lines (cpu.stat, memory.events, memory.oom_control).
std::optional<uint64_t> find_cgroup_key(std::string_view text, std::string_view key);

// Names of the sub-cgroups of `dir` (its subdirectories).
Result<std::vector<std::string>> list_cgroup_subdirs(const CgroupDir& dir);
// Every process in `dir` and its sub-cgroups (cgroup.procs of each).
Result<std::vector<pid_t>> read_tree_procs(const CgroupDir& dir);

// Waits until file `name` of `dir` holds the line `line` ("frozen 1" in cgroup.events, "FROZEN" in
// freezer.state), woken by the kernel's poll notification on cgroup.events or by a short sleep.
Result<void> wait_for_cgroup_line(const CgroupDir& dir, const char* name, std::string_view line,
                                  std::chrono::milliseconds timeout);

// rmdir(2) of `name` under `parent` and of its sub-cgroups first. EBUSY (the kernel still
// releasing exited tasks) is retried with short sleeps for up to `patience`; ENOENT is success.
Result<void> remove_cgroup_tree(const CgroupDir& parent, const std::string& name,
                                std::chrono::milliseconds patience);

// Fails unless the host has no swap: used where swap cannot be turned off for a cgroup
// (memory.swap.max or memory.memsw.limit_in_bytes missing), so that a memory limit never
// silently spills into swap.
Result<void> require_no_host_swap(const std::string& why);

}  // namespace hutch
