// The steps every sandbox start shares, one-shot (`hutch run`) or live (hutchd): resolve the spec
// into a plan, then create the cgroups and the namespaces and hand the child its maps and layers.
// Internal to the runtime.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"
#include "runtime/cgroup/sandbox_cgroup.h"
#include "runtime/fs/host_rootfs.h"
#include "runtime/fs/mount_plan.h"
#include "runtime/fs/overlay.h"
#include "runtime/process/child.h"
#include "runtime/spec.h"

namespace hutch {

// Neither copyable nor movable: `child` points into `spec` and `mounts` (hostname, workdir, argv,
// envp, the mount plan, the seccomp program), so a moved Prepared would leave it pointing into the
// old object (std::string's short-string buffer moves by copying its characters). Hence prepare()
// fills one in place instead of returning it.
struct Prepared {
  Prepared() = default;
  Prepared(Prepared&&) = delete;
  Prepared& operator=(Prepared&&) = delete;

  SandboxSpec spec;  // with canonical paths
  bool host_rootfs = false;
  std::vector<SkeletonEntry> skeleton;  // the host rootfs's skeleton layer, topmost
  // Set before prepare() by a caller with a SkeletonCache: used instead of planning and
  // building the skeleton.
  UniqueFd prebuilt_skeleton;
  // A network namespace made ahead with lo up (make_loopback_netns), for NetMode::kLoopback and
  // kHostOwned: the caller joins it and the child is created in it, without CLONE_NEWNET.
  UniqueFd prebuilt_netns;
  std::vector<std::string> layers;  // spec.layers, canonical: above the skeleton
  std::vector<std::string> lowers;  // host directories, below the skeleton
  MountPlan mounts;
  ChildPlan child;
  std::vector<std::string> path_dirs;
};

// Validates `input` (ids, hostname and env entries by runtime/defaults.h's rules, paths, the
// mount plan) and computes everything the child will need. Nothing on the host changes unless
// every check passed: only then is the upper dir (if any) given to the sandbox's root. A live
// sandbox has no command of its own: `needs_command` false lets argv be empty, and its init serves
// execs (ChildPlan::Mode::kLive).
Result<void> prepare(const SandboxSpec& input, Prepared& out, bool needs_command);

// The sandbox's init, seen from its parent. Until reaped, destruction kills it, and with it
// (pid namespace teardown) every process of the sandbox.
class SandboxProcess {
 public:
  SandboxProcess(pid_t pid, int pidfd) : pid_(pid), pidfd_(pidfd) {}
  SandboxProcess(SandboxProcess&&) = default;
  SandboxProcess& operator=(SandboxProcess&&) = delete;
  ~SandboxProcess();

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }
  void kill() const;
  // Reaps init (which reaped the workload) along with the resource usage of both.
  Result<siginfo_t> reap(rusage* usage);

 private:
  pid_t pid_;
  UniqueFd pidfd_;
  bool reaped_ = false;
};

// A started sandbox child, blocked until it has its layers, then building its root. Members in
// setup order: teardown kills init before it removes the cgroups.
struct Launched {
  std::optional<SandboxCgroup> cgroup;
  std::optional<SandboxProcess> init;
  UniqueFd sync;   // the parent's end of the sync socket
  UniqueFd upper;  // the overlay's upper dir (O_RDONLY), which only the parent can reach
  OverlayHelper overlay_helper;
};

// Creates the cgroups (limits written), clone3s the child into its namespaces (it joins its v1
// cgroups itself), writes its id maps, mounts the root overlay and sends it to the child. With a
// prebuilt netns the calling process joins that network namespace for good (a supervisor, which
// lives for the sandbox only). `skeleton_on_thread`: build the host rootfs's skeleton (unless
// prebuilt) on a second thread meanwhile (faster; the child must then not allocate, because
// clone3 may copy a lock that thread holds).
Result<Launched> launch_sandbox(Prepared& prepared, bool skeleton_on_thread);

}  // namespace hutch
