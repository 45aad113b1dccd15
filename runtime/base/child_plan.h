// The sandbox child's plan: everything the child needs between clone3 and execve, computed by the
// parent before clone3 so that the child only executes it. Every child step of every facility
// (runtime/fs/mount_exec.h, runtime/ns/, runtime/security/) has the one signature ChildStep.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "runtime/base/child_error.h"

namespace hutch {

struct MountPlan;
struct SeccompProgram;

struct ChildPlan {
  // What init does once the sandbox is confined, chosen by the parent.
  enum class Mode {
    kOneShot,  // fork the workload (argv) and stay as its init
    kLive,     // serve exec requests on exec_listen_fd
  };
  Mode mode = Mode::kOneShot;
  int sync_fd = -1;
  // The `tasks` files of the sandbox's cgroup v1 dirs, opened by the parent (host root): the
  // child writes "0" to each to join them itself (see run_sandbox_child).
  std::vector<int> v1_task_fds;
  // kLive: the listening socket init serves exec requests on.
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

// A step of the child: async-signal-safe (syscalls and fixed buffers only, no allocation: the
// parent may have had a second thread holding malloc's lock when clone3 copied it). Returns
// false after filling *error.
using ChildStep = bool (*)(const ChildPlan& plan, ChildError* error);

}  // namespace hutch
