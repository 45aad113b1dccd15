#include "runtime/process/child.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "runtime/fs/mount_exec.h"
#include "runtime/ns/net.h"
#include "runtime/ns/userns.h"
#include "runtime/process/exec_search.h"
#include "runtime/process/exec_server.h"
#include "runtime/process/init.h"
#include "runtime/process/sync.h"
#include "runtime/security/caps.h"
#include "runtime/security/seccomp.h"

// The id changes below are raw syscalls: glibc's wrappers broadcast them to every thread it
// knows of, and the parent may have had a second thread when clone3 copied it (the child has one).
namespace hutch {
namespace {

[[noreturn]] void die(int sync_fd, SyncMessage::Kind kind, SyncMessage::From from,
                      const ChildError& error, int status) {
  SyncMessage message{};
  message.kind = kind;
  message.from = from;
  message.error = error;
  send_sync(sync_fd, message);
  _exit(status);
}

// Closes every fd from 3 up but `keep` and `also_keep` (-1: none), in the ranges between them.
bool close_fds_except(int keep, int also_keep, ChildError* error) {
  const int low = also_keep < 0 ? keep : std::min(keep, also_keep);
  const int high = std::max(keep, also_keep);
  unsigned first = 3;
  for (int kept : {low, high}) {
    if (kept < static_cast<int>(first)) continue;
    if (kept > static_cast<int>(first) &&
        close_range(first, static_cast<unsigned>(kept) - 1, 0) != 0)
      return child_failure(error, "close_range", "below a kept fd", errno);
    first = static_cast<unsigned>(kept) + 1;
  }
  if (close_range(first, ~0U, 0) != 0)
    return child_failure(error, "close_range", "above the kept fds", errno);
  return true;
}

// Handshake: the parent's go, the cgroups and the namespace's root identity.

// If hutch dies, the sandbox dies with it (armed again after the id changes: see
// rearm_parent_death_signal).
bool arm_parent_death_signal(const ChildPlan&, ChildError* error) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
    return child_failure(error, "prctl", "PR_SET_PDEATHSIG", errno);
  return true;
}

// Non-dumpable: the workload (same ids) cannot open /proc/1/{mem,exe,fd} of this process, which
// still is hutch's own binary (CVE-2019-5736).
bool become_undumpable(const ChildPlan&, ChildError* error) {
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    return child_failure(error, "prctl", "PR_SET_DUMPABLE", errno);
  return true;
}

bool await_id_maps(const ChildPlan& plan, ChildError*) {
  SyncMessage ready{};
  if (recv_sync(plan.sync_fd, &ready) <= 0 || ready.kind != SyncMessage::Kind::kMapsReady)
    _exit(125);  // the parent gave up: nobody is left to tell
  return true;
}

// cgroup v1 has no CLONE_INTO_CGROUP: this process joins its v1 dirs itself, before it runs
// anything of the workload's. Writing "0" to `tasks` moves the calling thread (the only one)
// without the kernel's global cgroup_threadgroup_rwsem, whose write side waits for an RCU grace
// period (7-23 ms measured) when the parent moves the pid through cgroup.procs. The fds were
// opened by host root, and the kernel checks the opener's credentials.
bool join_v1_cgroups(const ChildPlan& plan, ChildError* error) {
  for (int fd : plan.v1_task_fds) {
    if (write(fd, "0", 1) != 1)
      return child_failure(error, "write", "0 to a cgroup v1 tasks", errno);
    close(fd);
  }
  return true;
}

// After join_v1_cgroups: placed in every cgroup by now, a cgroup namespace made here is rooted at
// them all, so the sandbox sees itself at "/" everywhere.
bool unshare_cgroup_ns(const ChildPlan&, ChildError* error) {
  if (unshare(CLONE_NEWCGROUP) != 0)
    return child_failure(error, "unshare", "CLONE_NEWCGROUP", errno);
  return true;
}

// The id maps exist now: become the namespace's root, so that files this process creates get the
// mapped owner rather than an unmappable host root (EOVERFLOW), and shed host root's
// supplementary groups.
bool become_namespace_root(const ChildPlan&, ChildError* error) {
  if (syscall(SYS_setresgid, 0, 0, 0) != 0)
    return child_failure(error, "setresgid", "0 in the sandbox", errno);
  if (syscall(SYS_setresuid, 0, 0, 0) != 0)
    return child_failure(error, "setresuid", "0 in the sandbox", errno);
  if (syscall(SYS_setgroups, 0, nullptr) != 0)
    return child_failure(error, "setgroups", "[]", errno);
  return true;
}

bool handshake(const ChildPlan& plan, ChildError* error) {
  return arm_parent_death_signal(plan, error) && become_undumpable(plan, error) &&
         await_id_maps(plan, error) && join_v1_cgroups(plan, error) &&
         unshare_cgroup_ns(plan, error) && become_namespace_root(plan, error);
}

// Namespaces: the UTS, network and user namespaces' own settings.

bool set_hostname(const ChildPlan& plan, ChildError* error) {
  if (sethostname(plan.hostname, std::strlen(plan.hostname)) != 0)
    return child_failure(error, "sethostname", plan.hostname, errno);
  return true;
}

bool set_up_namespaces(const ChildPlan& plan, ChildError* error) {
  // forbid_nested_userns writes through the host's /proc: before build_root detaches it.
  return set_hostname(plan, error) && bring_loopback_up(plan, error) &&
         forbid_nested_userns(plan, error);
}

// Root: staging, the parent's overlay, the mount plan, the pivot.

// The parent mounts the root overlay while the child stages.
bool take_root_overlay(const ChildPlan& plan, ChildError* error) {
  SyncMessage root{};
  int overlay_fd = -1;
  int fd_count = 1;
  if (recv_sync(plan.sync_fd, &root, &overlay_fd, &fd_count) <= 0 ||
      root.kind != SyncMessage::Kind::kRoot) {
    _exit(125);  // the parent gave up
  }
  if (fd_count != 1) return child_failure(error, "recvmsg", "the root overlay's fd", EBADMSG);
  const bool attached = attach_root_overlay(overlay_fd, error);
  close(overlay_fd);
  return attached;
}

bool build_root(const ChildPlan& plan, ChildError* error) {
  return enter_staging(plan, error) && take_root_overlay(plan, error) &&
         run_mount_ops(plan, error) && pivot_into_root(plan, error);
}

// Confinement: complete before the tail so that init and the workload are never seen with
// different credentials.

bool disable_core_dumps(const ChildPlan&, ChildError* error) {
  const rlimit no_core{0, 0};
  if (setrlimit(RLIMIT_CORE, &no_core) != 0)
    return child_failure(error, "setrlimit", "RLIMIT_CORE 0", errno);
  return true;
}

bool take_sandbox_ids(const ChildPlan& plan, ChildError* error) {
  if (syscall(SYS_setgroups, 0, nullptr) != 0)
    return child_failure(error, "setgroups", "[]", errno);
  if (syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0)
    return child_failure(error, "setresgid", "sandbox gid", errno);
  if (syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0)
    return child_failure(error, "setresuid", "sandbox uid", errno);
  return true;
}

// Changing the effective ids cleared the parent-death signal (prctl(2)): armed again, then the
// parent checked, in case it died meanwhile (its end of the sync socket closed with it).
bool rearm_parent_death_signal(const ChildPlan& plan, ChildError* error) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
    return child_failure(error, "prctl", "PR_SET_PDEATHSIG (after the id change)", errno);
  pollfd parent{plan.sync_fd, POLLIN, 0};
  if (poll(&parent, 1, 0) == 1 && (parent.revents & (POLLHUP | POLLERR))) _exit(125);
  return true;
}

bool set_no_new_privs(const ChildPlan&, ChildError* error) {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return child_failure(error, "prctl", "PR_SET_NO_NEW_PRIVS", errno);
  return true;
}

// The sandbox's ids, no capability in any set, no_new_privs, and the seccomp filter last: it need
// not allow the setup's syscalls (loaded once for init and the workload: the kernel takes ~0.1 ms
// to load it). The bounding set goes first, while the ids still hold CAP_SETPCAP.
bool confine(const ChildPlan& plan, ChildError* error) {
  return disable_core_dumps(plan, error) && drop_bounding_and_lock_securebits(plan, error) &&
         take_sandbox_ids(plan, error) && rearm_parent_death_signal(plan, error) &&
         set_capabilities(plan, error) && set_no_new_privs(plan, error) &&
         load_seccomp(plan, error);
}

// The tails, by plan.mode.

[[noreturn]] void exec_workload(const ChildPlan& plan) {
  const char* file = plan.argv[0];
  const int exec_errno =
      exec_in_path(file, plan.argv.data(), plan.envp.data(), plan.path_dirs.data());
  ChildError error;
  set_child_error(&error, "execve", file, exec_errno);
  // A shell's convention: 127 for "not found", 126 for "found but cannot run".
  die(plan.sync_fd, SyncMessage::Kind::kExecFailed, SyncMessage::From::kWorkload, error,
      exec_errno == ENOENT || exec_errno == ENOTDIR ? 127 : 126);
}

// The workload: everything but the working directory, the signal mask and the fds is already as
// init left it.
[[noreturn]] void run_workload(const ChildPlan& plan) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  ChildError error;
  if (chdir(plan.workdir) != 0) {
    child_failure(&error, "chdir", plan.workdir, errno);
    die(plan.sync_fd, SyncMessage::Kind::kFailure, SyncMessage::From::kWorkload, error, 125);
  }
  // Nothing of the runtime's may reach the workload (CVE-2024-21626): every fd above stdio is
  // closed at execve, the sync socket included.
  if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
    child_failure(&error, "close_range", "3..", errno);
    die(plan.sync_fd, SyncMessage::Kind::kFailure, SyncMessage::From::kWorkload, error, 125);
  }
  exec_workload(plan);
}

// kOneShot: the workload runs argv, and this process stays as its init.
[[noreturn]] void fork_workload(const ChildPlan& plan) {
  ChildError error;
  // vfork, not fork(): no page tables to copy, and no atfork handlers taking malloc's or stdio's
  // locks (another thread of the parent may have held one when clone3 copied it). The workload
  // only makes syscalls on its own stack until execve, as vfork requires; init waits meanwhile.
  const pid_t workload = vfork();
  if (workload < 0) {
    child_failure(&error, "fork", "workload", errno);
    die(plan.sync_fd, SyncMessage::Kind::kFailure, SyncMessage::From::kInit, error, 125);
  }
  if (workload == 0) run_workload(plan);
  // Init keeps only the sync socket and stdio.
  if (!close_fds_except(plan.sync_fd, -1, &error))
    die(plan.sync_fd, SyncMessage::Kind::kFailure, SyncMessage::From::kInit, error, 125);
  run_init(plan.sync_fd, workload);
}

// kLive: init serves exec requests; it keeps only the sync socket, the listener and stdio.
[[noreturn]] void serve_execs(const ChildPlan& plan) {
  ChildError error;
  if (!close_fds_except(plan.sync_fd, plan.exec_listen_fd, &error))
    die(plan.sync_fd, SyncMessage::Kind::kFailure, SyncMessage::From::kInit, error, 125);
  run_exec_server(plan.exec_listen_fd, plan.sync_fd);
}

}  // namespace

[[noreturn]] void run_sandbox_child(const ChildPlan& plan) {
  ChildError error;
  // Namespaces after the handshake: the maps make this process root of its user namespace. The
  // root before confinement: building it needs the capabilities confinement drops.
  if (!handshake(plan, &error) || !set_up_namespaces(plan, &error) || !build_root(plan, &error) ||
      !confine(plan, &error)) {
    die(plan.sync_fd, SyncMessage::Kind::kFailure, SyncMessage::From::kInit, error, 125);
  }
  // Blocked before either tail forks, so that no signal is lost between a fork and init's (or
  // the exec server's) wait loop.
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  switch (plan.mode) {
    case ChildPlan::Mode::kOneShot:
      fork_workload(plan);
    case ChildPlan::Mode::kLive:
      serve_execs(plan);
  }
  _exit(125);  // a value outside Mode: the enum's storage can hold one
}

}  // namespace hutch
