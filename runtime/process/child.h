// The sandbox child: everything between clone3 and the workload's execve.
#pragma once

#include <sys/types.h>

#include <vector>

#include "runtime/fs/mount_plan.h"
#include "runtime/security/seccomp.h"
#include "runtime/spec.h"

namespace hutch {

// Everything the child needs, computed by the parent before clone3 so that the child only
// executes (it must not allocate: see STYLE.md "two error regimes").
struct ChildPlan {
  int sync_fd = -1;
  // The `tasks` files of the sandbox's cgroup v1 dirs, opened by the parent (host root): the
  // child writes "0" to each to join them itself (see run_sandbox_child).
  std::vector<int> v1_task_fds;
  // A live sandbox: init serves exec requests on this listening socket instead of running argv.
  int exec_listen_fd = -1;
  const MountPlan* mounts = nullptr;
  const SeccompProgram* seccomp = nullptr;
  const char* hostname = nullptr;
  bool loopback_up = true;
  uid_t uid = 0;
  gid_t gid = 0;
  const char* workdir = "/";
  int last_cap = 40;
  uint64_t capabilities = 0;           // SandboxSpec::capabilities
  std::vector<char*> argv;             // null-terminated
  std::vector<char*> envp;             // null-terminated
  std::vector<const char*> path_dirs;  // from the sandbox's PATH, null-terminated
};

// Runs as the new namespaces' first process (pid 1 of the sandbox): waits for the parent's go,
// builds the root, forks the workload and stays as its init (or, in a live sandbox, serves exec
// requests). Never returns.
[[noreturn]] void run_sandbox_child(const ChildPlan& plan);

}  // namespace hutch
