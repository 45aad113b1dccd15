#include "runtime/features.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "runtime/cgroup/layout.h"
#include "runtime/cgroup/plan.h"
#include "runtime/fs/idmap.h"
#include "runtime/ns/userns.h"
#include "runtime/process/pidfd.h"
#include "runtime/unique_fd.h"

namespace hutch {
namespace {

Feature from_errno(std::string name, int err, std::string ok_detail = "") {
  return {std::move(name), err == 0, err == 0 ? std::move(ok_detail) : std::strerror(err)};
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

bool write_text(const char* path, const char* text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text, std::strlen(text)) == static_cast<ssize_t>(std::strlen(text));
  close(fd);
  return ok;
}

int probe_overlay_in_userns() {
  return in_child([] {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return errno;
    if (!write_text("/proc/self/setgroups", "deny") || !write_text("/proc/self/uid_map", "0 0 1") ||
        !write_text("/proc/self/gid_map", "0 0 1")) {
      return errno;
    }
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return errno;
    if (mount("tmpfs", "/tmp", "tmpfs", 0, "size=1m") != 0) return errno;
    for (const char* dir : {"/tmp/l", "/tmp/u", "/tmp/w", "/tmp/m"}) {
      if (mkdir(dir, 0755) != 0) return errno;
    }
    if (mount("overlay", "/tmp/m", "overlay", 0,
              "lowerdir=/tmp/l,upperdir=/tmp/u,workdir=/tmp/w,userxattr") != 0) {
      return errno;
    }
    return 0;
  });
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

std::vector<Feature> probe_features() {
  std::vector<Feature> features;
  features.push_back(from_errno("user namespaces",
                                in_child([] { return unshare(CLONE_NEWUSER) == 0 ? 0 : errno; })));
  features.push_back(from_errno("overlayfs in a user namespace", probe_overlay_in_userns()));
  features.push_back(from_errno("idmapped mounts", probe_idmapped_mount()));

  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  UniqueFd root(static_cast<int>(syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof how)));
  features.push_back(from_errno("openat2", root ? 0 : errno));

  // clone3 with a null argument fails with EFAULT/EINVAL where it exists.
  syscall(SYS_clone3, nullptr, 0);
  features.push_back(from_errno("clone3", errno == ENOSYS ? ENOSYS : 0));

  UniqueFd self(pidfd_open_fd(getpid()));
  features.push_back(from_errno("pidfd", self ? 0 : errno));

  features.push_back(from_errno("close_range", close_range(~0U - 1, ~0U, 0) == 0 ? 0 : errno));
  features.push_back(from_errno("seccomp filters", prctl(PR_GET_SECCOMP) >= 0 ? 0 : errno));

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
    features.push_back({"cgroup layout", layout->mode() != "none", detail});
  } else {
    features.push_back({"cgroup layout", false, layout.error().message()});
  }
  // Which hierarchy enforces each limit, planned one limit at a time so each gets its answer.
  for (CgroupLimit limit :
       {CgroupLimit::kMemory, CgroupLimit::kPids, CgroupLimit::kCpus, CgroupLimit::kCpuWeight}) {
    const std::string name = "limit " + std::string(limit_name(limit));
    if (!layout) {
      features.push_back({name, false, layout.error().message()});
      continue;
    }
    CgroupLimits limits;
    if (limit == CgroupLimit::kMemory) limits.memory_bytes = 1ull << 30;
    if (limit == CgroupLimit::kPids) limits.pids = 1024;
    if (limit == CgroupLimit::kCpus) limits.cpus = 1.0;
    if (limit == CgroupLimit::kCpuWeight) limits.cpu_weight = 100;
    auto plan = plan_cgroups(*layout, limits);
    if (!plan) {
      features.push_back({name, false, plan.error().message()});
      continue;
    }
    for (const LimitEnforcement& enforced : plan->enforcement) {
      if (enforced.limit != limit) continue;
      features.push_back(
          {name, true,
           "enforced by cgroup " +
               std::string(enforced.hierarchy.version == CgroupVersion::kV2 ? "v2" : "v1") + " " +
               enforced.controller + " at " + enforced.hierarchy.mount_point});
    }
  }
  return features;
}

}  // namespace hutch
