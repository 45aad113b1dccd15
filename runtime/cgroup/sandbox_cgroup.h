// One sandbox's cgroups: `<mount>/hutch/<sandbox id>` in the cgroup2 hierarchy (placement, freeze,
// kill, cpu usage; on hybrid hosts too) and in each v1 hierarchy the plan needs (limits and
// accounting where cgroup2 lacks the controller). Created with the limits written, before any
// process enters; destroyed, processes killed first, on every path (RAII).
//
// Ownership: hutch creates `<mount>/hutch` on first use and never writes to a cgroup it did not
// create, with one exception the plan names (CgroupPlan::v2_root_enable). It never touches this
// process's own cgroups. Directories and files stay owned by host root: the sandbox, in its own
// cgroup namespace and user namespace, cannot write them (no raising its limits, no release_agent).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "runtime/cgroup/cgroup_fs.h"
#include "runtime/cgroup/plan.h"
#include "runtime/cgroup/stats.h"

namespace hutch {

class SandboxCgroup {
 public:
  // Creates the dirs and writes every limit of `plan`. `sandbox_id` names the dirs: it must be
  // fresh (an existing dir is an error: the 6.18 kernel SIGKILLs CLONE_INTO_CGROUP children of a
  // cgroup that once received cgroup.kill, see PLATFORM.md) and a single path component; use
  // make_sandbox_cgroup_id (stale.h) so that a crashed run's leftovers can be told apart.
  static Result<SandboxCgroup> create(const CgroupPlan& plan, std::string_view sandbox_id);

  SandboxCgroup(SandboxCgroup&& other) noexcept;
  SandboxCgroup& operator=(SandboxCgroup&& other) noexcept;
  SandboxCgroup(const SandboxCgroup&) = delete;
  SandboxCgroup& operator=(const SandboxCgroup&) = delete;
  ~SandboxCgroup();  // destroy(), its error dropped: call destroy() to see it

  const std::string& id() const { return id_; }

  // O_PATH|O_DIRECTORY fd of the cgroup2 dir, for clone3's CLONE_INTO_CGROUP; -1 without cgroup2
  // (v1-only hosts: the process joins through open_v1_task_files, or attach() moves it).
  int v2_dir_fd() const;

  // Moves `pid` (its whole thread group) into every dir of this sandbox (cgroup2: unless it is
  // already in the sandbox's cgroup2 dir or one of its sub-cgroups), for a process that cannot
  // join by itself; it must not run anything untrusted until this returns. Children it forks
  // later inherit the cgroups. Each v1 move by pid pays the kernel's global threadgroup lock (an
  // RCU grace period): sandboxes join through open_v1_task_files instead.
  Result<void> attach(pid_t pid);

  // The `tasks` file of every v1 dir, opened for writing: a process holding them (a child that
  // inherited them) joins the v1 cgroups by writing "0" to each, which moves only the calling
  // thread and so skips the kernel's global threadgroup lock that attach() pays for (an RCU grace
  // period). Empty on pure cgroup2 hosts, where CLONE_INTO_CGROUP places the child.
  Result<std::vector<UniqueFd>> open_v1_task_files() const;

  // cgroup.freeze (v1 freezer without cgroup2); returns once the kernel reports every task frozen
  // (thawed).
  Result<void> freeze();
  Result<void> thaw();

  // Kills every process in the sandbox's cgroups and their sub-cgroups and waits until all
  // cgroup.procs are empty. After cgroup.kill the cgroup cannot host new processes (kernel 6.18).
  Result<void> kill_all();

  // Read before destroy(): the numbers go away with the cgroups.
  Result<CgroupStats> stats();
  // The file that counts OOM kills (v2 memory.events, v1 memory.oom_control), opened read-only
  // for read_oom_counter; an empty fd without a memory controller. The fd can be handed to
  // another process, which then reads the count without asking the cgroup's owner.
  Result<UniqueFd> open_oom_counter() const;

  // kill_all, then rmdir every dir this object created (sub-cgroups first; EBUSY retried for a
  // few hundred ms; ENOENT is success). Idempotent: a second call, or one after a partial failure,
  // retries what is left. `<mount>/hutch` goes too when no other sandbox is left in it.
  Result<void> destroy();

  // The sandbox dirs still owned, cgroup2 first: for tests and `hutch info`.
  std::vector<std::string> paths() const;

 private:
  struct Dir {
    CgroupHierarchy hierarchy;
    std::vector<std::string> controllers;
    CgroupDir parent;  // <mount>/hutch
    CgroupDir self;    // <mount>/hutch/<id>
  };

  SandboxCgroup() = default;
  Result<void> add_dir(const CgroupPlan& plan, const CgroupDirPlan& dir_plan);
  const Dir* v2() const;
  const Dir* with_controller(std::string_view controller) const;
  const Dir* in_hierarchy(const CgroupHierarchy& hierarchy) const;
  static Result<bool> in_v2_tree(const Dir& dir, pid_t pid);

  std::string id_;
  std::vector<Dir> dirs_;             // in creation order; destroy() removes them
  uint64_t sampled_memory_peak_ = 0;  // for kernels without memory.peak / pids.peak
  uint64_t sampled_pids_peak_ = 0;
};

// The OOM kill count from an open_oom_counter fd (pread from 0: the kernel regenerates the text);
// empty when the kernel does not report it (v1 before Linux 4.13).
Result<std::optional<uint64_t>> read_oom_counter(int fd);

}  // namespace hutch
