#include "runtime/features.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>

#include "runtime/base/unique_fd.h"
#include "runtime/cgroup/layout.h"
#include "runtime/cgroup/plan.h"
#include "runtime/fs/idmap.h"
#include "runtime/fs/overlay.h"
#include "runtime/fs/overlay_xattr.h"
#include "runtime/ns/userns.h"
#include "runtime/process/pidfd.h"

namespace hutch {
namespace {

Feature from_errno(std::string name, int err, std::string needed_for) {
  return {std::move(name), err == 0, err == 0 ? "" : std::strerror(err), std::move(needed_for)};
}

// Runs `probe` in a forked child (which may change namespaces freely); returns its errno.
int in_child(const std::function<int()>& probe) {
  pid_t pid = fork();
  if (pid < 0) return errno;
  if (pid == 0) _exit(probe());
  int status;
  if (waitpid(pid, &status, 0) < 0) return errno;
  return WIFEXITED(status) ? WEXITSTATUS(status) : EFAULT;
}

// The root overlay as sandboxes get it (runtime/fs/overlay.h): mounted from the host's user
// namespace by the helper, over a tmpfs lower with an opaque directory (trusted.overlay.*) and an
// upper tmpfs.
int probe_root_overlay() {
  auto lower = make_upper_tmpfs(1 << 20, 0);
  if (!lower) return lower.error().err ? lower.error().err : EINVAL;
  UniqueFd dir(openat(lower->get(), "upper", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir || fsetxattr(dir.get(), kOverlayOpaqueXattr, "y", 1, 0) != 0) return errno;
  auto upper = make_upper_tmpfs(1 << 20, 0);
  if (!upper) return upper.error().err ? upper.error().err : EINVAL;
  const int lowers[] = {lower->get()};
  auto overlay = mount_overlay(lowers, upper->get());
  if (!overlay) return overlay.error().err ? overlay.error().err : EINVAL;
  return 0;
}

int probe_idmapped_mount() {
  // The child makes a user namespace and waits (EOF on `release`) while the parent maps it and
  // tries an idmapped mount with it.
  int ready[2], release[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return errno;
  if (pipe2(release, O_CLOEXEC) != 0) return errno;
  pid_t pid = fork();
  if (pid < 0) return errno;
  if (pid == 0) {
    close(ready[0]);
    close(release[1]);
    char byte = unshare(CLONE_NEWUSER) == 0 ? 0 : static_cast<char>(errno);
    if (write(ready[1], &byte, 1) != 1) _exit(1);
    if (read(release[0], &byte, 1) < 0) _exit(1);
    _exit(0);
  }
  close(ready[1]);
  close(release[0]);
  char byte = 0;
  int err = read(ready[0], &byte, 1) == 1 ? byte : ECHILD;
  if (err == 0) {
    if (auto maps = write_id_maps(pid, IdMap{}); !maps) err = maps.error().err;
  }
  if (err == 0) {
    auto userns = open_userns(pid);
    auto tree = userns ? open_idmapped_tree("/", userns->get(), IdMap{}.host_base)
                       : std::unexpected(userns.error());
    if (!tree) err = tree.error().err ? tree.error().err : EINVAL;
  }
  close(release[1]);
  close(ready[0]);
  waitpid(pid, nullptr, 0);
  return err;
}

}  // namespace

std::pair<int, int> kernel_version(const std::string& release) {
  int major = 0, minor = 0;
  if (std::sscanf(release.c_str(), "%d.%d", &major, &minor) != 2) return {0, 0};
  return {major, minor};
}

std::vector<Feature> probe_features() {
  std::vector<Feature> features;
  utsname host{};
  uname(&host);
  const auto [major, minor] = kernel_version(host.release);
  const std::string floor =
      std::to_string(kMinimumKernel[0]) + "." + std::to_string(kMinimumKernel[1]);
  features.push_back(
      {"kernel",
       major > kMinimumKernel[0] || (major == kMinimumKernel[0] && minor >= kMinimumKernel[1]),
       std::string("Linux ") + host.release + "; minimum " + floor,
       "every guarantee is tested on Linux " + floor +
           " and later; older kernels lack the facilities below"});
  features.push_back(from_errno("user namespaces",
                                in_child([] { return unshare(CLONE_NEWUSER) == 0 ? 0 : errno; }),
                                "every sandbox (3.8; unprivileged mapping of host ids)"));
  features.push_back(from_errno("overlayfs (trusted xattrs on tmpfs)", probe_root_overlay(),
                                "every sandbox's root: layers, the host rootfs's skeleton, the "
                                "writable tmpfs layer (overlay over idmapped layers: 5.19)"));
  features.push_back(from_errno("idmapped mounts", probe_idmapped_mount(),
                                "the host rootfs and --rootfs DIR owned by host root (5.12 for "
                                "ext4/xfs/btrfs, 6.3 for tmpfs; never 9p): without it only a "
                                "rootfs owned by the sandbox's root host id works"));

  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  UniqueFd root(static_cast<int>(syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof how)));
  features.push_back(from_errno("openat2", root ? 0 : errno,
                                "mount targets and hutchd's file API resolved inside the "
                                "sandbox's root (5.6)"));

  // clone3 with a null argument fails with EFAULT/EINVAL where it exists.
  syscall(SYS_clone3, nullptr, 0);
  features.push_back(from_errno("clone3", errno == ENOSYS ? ENOSYS : 0,
                                "creating every sandbox, placed into its cgroup at birth (5.7)"));

  UniqueFd self(pidfd_open_fd(getpid()));
  features.push_back(from_errno("pidfd", self ? 0 : errno,
                                "waiting for and signalling sandboxes without pid reuse (5.4)"));

  features.push_back(from_errno("close_range", close_range(~0U - 1, ~0U, 0) == 0 ? 0 : errno,
                                "keeping hutch's fds out of the workload (5.11: CLOEXEC)"));
  features.push_back(from_errno("seccomp filters", prctl(PR_GET_SECCOMP) >= 0 ? 0 : errno,
                                "the syscall allowlist of every sandbox"));

  auto layout = read_cgroup_layout();
  if (layout) {
    std::string detail = layout->mode();
    if (!layout->v2_mount.empty()) {
      detail += "; cgroup2 at " + layout->v2_mount + " controllers:";
      for (const std::string& c : layout->v2_controllers) detail += " " + c;
    }
    if (!layout->v1.empty()) {
      detail += "; v1:";
      for (const CgroupV1Hierarchy& h : layout->v1) detail += " " + h.mount_point;
    }
    features.push_back({"cgroup layout", layout->mode() != "none", detail, "every limit"});
  } else {
    features.push_back({"cgroup layout", false, layout.error().message(), "every limit"});
  }
  // Which hierarchy enforces each limit, planned one limit at a time so each gets its answer.
  for (CgroupLimit limit :
       {CgroupLimit::kMemory, CgroupLimit::kPids, CgroupLimit::kCpus, CgroupLimit::kCpuWeight}) {
    const std::string name = "limit " + std::string(limit_name(limit));
    if (!layout) {
      features.push_back({name, false, layout.error().message(), "this limit"});
      continue;
    }
    CgroupLimits limits;
    if (limit == CgroupLimit::kMemory) limits.memory_bytes = 1ull << 30;
    if (limit == CgroupLimit::kPids) limits.pids = 1024;
    if (limit == CgroupLimit::kCpus) limits.cpus = 1.0;
    if (limit == CgroupLimit::kCpuWeight) limits.cpu_weight = 100;
    auto plan = plan_cgroups(*layout, limits);
    if (!plan) {
      features.push_back({name, false, plan.error().message(), "this limit"});
      continue;
    }
    for (const LimitEnforcement& enforced : plan->enforcement) {
      if (enforced.limit != limit) continue;
      features.push_back(
          {name, true,
           "enforced by cgroup " +
               std::string(enforced.hierarchy.version == CgroupVersion::kV2 ? "v2" : "v1") + " " +
               enforced.controller + " at " + enforced.hierarchy.mount_point,
           "this limit"});
    }
  }
  return features;
}

}  // namespace hutch
