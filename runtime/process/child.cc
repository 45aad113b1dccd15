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

// The id changes below are raw syscalls: glibc's wrappers broadcast them to every thread it
// knows of, and the parent may have had a second thread when clone3 copied it (the child has one).
namespace hutch {
namespace {

[[noreturn]] void die(int sync_fd, SyncMessage::From from, const ChildError& error, int status) {
  SyncMessage message{};
  message.kind = SyncMessage::Kind::kFailure;
  message.from = from;
  message.error = error;
  send_sync(sync_fd, message);
  _exit(status);
}

[[noreturn]] void die_step(int sync_fd, SyncMessage::From from, const char* step,
                           const char* detail, int err, int status = 125) {
  ChildError error;
  set_child_error(&error, step, detail, err);
  die(sync_fd, from, error, status);
}

[[noreturn]] void exec_workload(const ChildPlan& plan) {
  const char* file = plan.argv[0];
  const int exec_errno =
      exec_in_path(file, plan.argv.data(), plan.envp.data(), plan.path_dirs.data());
  // A shell's convention: 127 for "not found", 126 for "found but cannot run".
  die_step(plan.sync_fd, SyncMessage::From::kWorkload, "execve", file, exec_errno,
           exec_errno == ENOENT || exec_errno == ENOTDIR ? 127 : 126);
}

// The workload: drops what init kept (ids, capabilities) and executes the command.
// The workload: everything but the working directory and the fds is already as init left it.
[[noreturn]] void run_workload(const ChildPlan& plan) {
  constexpr auto from = SyncMessage::From::kWorkload;
  const int sync_fd = plan.sync_fd;
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (chdir(plan.workdir) != 0) die_step(sync_fd, from, "chdir", plan.workdir, errno);
  // Nothing of the runtime's may reach the workload (CVE-2024-21626): every fd above stdio is
  // closed at execve, the sync socket included.
  if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
    die_step(sync_fd, from, "close_range", "3..", errno);
  exec_workload(plan);
}

}  // namespace

[[noreturn]] void run_sandbox_child(const ChildPlan& plan) {
  constexpr auto from = SyncMessage::From::kInit;
  const int sync_fd = plan.sync_fd;
  // If hutch dies, the sandbox dies with it (armed again after the id changes below).
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
    die_step(sync_fd, from, "prctl", "PR_SET_PDEATHSIG", errno);
  // Non-dumpable: the workload (same ids) cannot open /proc/1/{mem,exe,fd} of this process,
  // which still is hutch's own binary (CVE-2019-5736).
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    die_step(sync_fd, from, "prctl", "PR_SET_DUMPABLE", errno);

  SyncMessage ready{};
  if (recv_sync(sync_fd, &ready) <= 0 || ready.kind != SyncMessage::Kind::kMapsReady) {
    _exit(125);  // the parent gave up
  }
  // cgroup v1 has no CLONE_INTO_CGROUP: this process joins its v1 dirs itself, before it runs
  // anything of the workload's. Writing "0" to `tasks` moves the calling thread (the only one)
  // without the kernel's global cgroup_threadgroup_rwsem, whose write side waits for an RCU grace
  // period (7-23 ms measured) when the parent moves the pid through cgroup.procs. The fds were
  // opened by host root, and the kernel checks the opener's credentials.
  for (int fd : plan.v1_task_fds) {
    if (write(fd, "0", 1) != 1) die_step(sync_fd, from, "write", "0 to a cgroup v1 tasks", errno);
    close(fd);
  }
  // Placed in every cgroup by now: a cgroup namespace made here is rooted at them all, so the
  // sandbox sees itself at "/" everywhere.
  if (unshare(CLONE_NEWCGROUP) != 0) die_step(sync_fd, from, "unshare", "CLONE_NEWCGROUP", errno);
  // The id maps exist now: become the namespace's root, so that files this process creates
  // get the mapped owner rather than an unmappable host root (EOVERFLOW), and shed host root's
  // supplementary groups.
  if (syscall(SYS_setresgid, 0, 0, 0) != 0)
    die_step(sync_fd, from, "setresgid", "0 in the sandbox", errno);
  if (syscall(SYS_setresuid, 0, 0, 0) != 0)
    die_step(sync_fd, from, "setresuid", "0 in the sandbox", errno);
  if (syscall(SYS_setgroups, 0, nullptr) != 0) die_step(sync_fd, from, "setgroups", "[]", errno);

  if (sethostname(plan.hostname, std::strlen(plan.hostname)) != 0) {
    die_step(sync_fd, from, "sethostname", plan.hostname, errno);
  }
  if (plan.loopback_up) {
    if (int err = bring_loopback_up()) die_step(sync_fd, from, "ioctl", "SIOCSIFFLAGS lo up", err);
  }
  // Through the host's /proc, before it is detached: most kernel exploits need a fresh userns.
  if (int err = forbid_nested_userns()) {
    die_step(sync_fd, from, "write", "/proc/sys/user/max_user_namespaces", err);
  }

  ChildError error;
  if (!enter_staging(&error)) die(sync_fd, from, error, 125);
  // The parent mounts the root overlay meanwhile.
  SyncMessage root{};
  int overlay_fd = -1;
  int fd_count = 1;
  if (recv_sync(sync_fd, &root, &overlay_fd, &fd_count) <= 0 ||
      root.kind != SyncMessage::Kind::kRoot) {
    _exit(125);
  }
  if (fd_count != 1) die_step(sync_fd, from, "recvmsg", "the root overlay's fd", EBADMSG);
  if (!attach_root_overlay(overlay_fd, &error)) die(sync_fd, from, error, 125);
  close(overlay_fd);
  if (!run_mount_ops(*plan.mounts, &error)) die(sync_fd, from, error, 125);
  if (!pivot_into_root(&error)) die(sync_fd, from, error, 125);

  rlimit no_core{0, 0};
  if (setrlimit(RLIMIT_CORE, &no_core) != 0)
    die_step(sync_fd, from, "setrlimit", "RLIMIT_CORE 0", errno);

  // Confinement, complete before the fork so that init and the workload are never seen with
  // different credentials: the sandbox's ids, no capability in any set, no_new_privs, and the
  // seccomp filter last (loaded once for both: the kernel takes ~0.1 ms to load it).
  const char* step = nullptr;
  if (int err = drop_bounding_and_lock_securebits(plan.last_cap, plan.capabilities, &step))
    die_step(sync_fd, from, step, "", err);
  if (syscall(SYS_setgroups, 0, nullptr) != 0) die_step(sync_fd, from, "setgroups", "[]", errno);
  if (syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0)
    die_step(sync_fd, from, "setresgid", "sandbox gid", errno);
  if (syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0)
    die_step(sync_fd, from, "setresuid", "sandbox uid", errno);
  // Changing the effective ids cleared the parent-death signal (prctl(2)): armed again, then the
  // parent checked, in case it died meanwhile (its end of the sync socket closed with it).
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
    die_step(sync_fd, from, "prctl", "PR_SET_PDEATHSIG (after the id change)", errno);
  pollfd parent{sync_fd, POLLIN, 0};
  if (poll(&parent, 1, 0) == 1 && (parent.revents & (POLLHUP | POLLERR))) _exit(125);
  if (int err = set_capabilities(plan.capabilities, &step)) die_step(sync_fd, from, step, "", err);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    die_step(sync_fd, from, "prctl", "PR_SET_NO_NEW_PRIVS", errno);
  if (int err = load_seccomp(*plan.seccomp)) die_step(sync_fd, from, "seccomp", "load", err);

  // Blocked before the fork so that no signal is lost between fork and init's wait loop.
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  if (plan.exec_listen_fd >= 0) {
    const int keep_low = std::min(plan.sync_fd, plan.exec_listen_fd);
    const int keep_high = std::max(plan.sync_fd, plan.exec_listen_fd);
    close_range(3, keep_low - 1, 0);
    if (keep_high > keep_low + 1) close_range(keep_low + 1, keep_high - 1, 0);
    close_range(keep_high + 1, ~0U, 0);
    run_exec_server(plan.exec_listen_fd, sync_fd);
  }
  // vfork, not fork(): no page tables to copy, and no atfork handlers taking malloc's or stdio's
  // locks (another thread of the parent may have held one when clone3 copied it). The workload
  // only makes syscalls on its own stack until execve, as vfork requires; init waits meanwhile.
  pid_t workload = vfork();
  if (workload < 0) die_step(sync_fd, from, "fork", "workload", errno);
  if (workload == 0) run_workload(plan);

  // Init keeps only the sync socket and stdio.
  if (sync_fd > 3) close_range(3, sync_fd - 1, 0);
  close_range(sync_fd + 1, ~0U, 0);
  run_init(sync_fd, workload);
}

}  // namespace hutch
