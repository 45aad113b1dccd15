#include "runtime/fs/overlay.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>

#include "runtime/base/passed_fds.h"

namespace hutch {
namespace {

// Where the helper attaches the layers, in its own mount namespace only. Short names keep the
// lowerdir option under fsconfig's 256-byte string limit for every layer count allowed.
constexpr const char* kScratch = "/tmp";
constexpr size_t kHelperStack = 64 * 1024;

std::string fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

// Everything the helper needs, formatted before the clone: the helper shares this process's
// memory (CLONE_VM) and must not allocate (another thread may hold malloc's lock).
struct OverlayJob {
  const int* lowers = nullptr;
  size_t lower_count = 0;
  int upper_fs = -1;
  char lower_paths[kMaxPassedFds][32] = {};
  char lowerdir[kMaxPassedFds * sizeof lower_paths[0]] = {};  // each path and its ":"
  int overlay = -1;                                           // the result, in the shared fd table
  const char* step = nullptr;
  const char* detail = nullptr;
  int err = 0;
};

// fsopen/fsconfig/fsmount of the overlay (nosuid, nodev); the fd, or -1 with errno and *step set.
// Only syscalls: the helper runs it too.
int make_overlay(const char* lowerdir, const char* upperdir, const char* workdir,
                 const char** step) {
  const int context = fsopen("overlay", FSOPEN_CLOEXEC);
  if (context < 0) {
    *step = "fsopen";
    return -1;
  }
  int overlay = -1;
  if (fsconfig(context, FSCONFIG_SET_STRING, "lowerdir", lowerdir, 0) != 0 ||
      fsconfig(context, FSCONFIG_SET_STRING, "upperdir", upperdir, 0) != 0 ||
      fsconfig(context, FSCONFIG_SET_STRING, "workdir", workdir, 0) != 0) {
    *step = "fsconfig";
  } else if (fsconfig(context, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    *step = "fsconfig(FSCONFIG_CMD_CREATE)";
  } else {
    overlay = fsmount(context, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
    if (overlay < 0) *step = "fsmount";
  }
  const int err = errno;
  close(context);
  errno = err;
  return overlay;
}

// Whether overlayfs takes detached mounts as layers (newer kernels; 6.1 refuses them): learnt at
// the first overlay of this process, so each start pays for at most one refused attempt.
std::atomic<bool> layers_must_be_attached{false};

int fail(OverlayJob* job, const char* step, const char* detail) {
  job->step = step;
  job->detail = detail;
  job->err = errno;
  return 1;
}

int attach_and_mount(void* arg) {
  auto* job = static_cast<OverlayJob*>(arg);
  // Private first: a mount on a shared mount would propagate back to the host's namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return fail(job, "mount", "MS_REC|MS_PRIVATE on / (overlay helper's namespace)");
  if (mount("tmpfs", kScratch, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700,size=64k") !=
      0) {
    return fail(job, "mount", "tmpfs on /tmp (overlay helper's namespace)");
  }
  for (size_t i = 0; i < job->lower_count; ++i) {
    if (mkdir(job->lower_paths[i], 0700) != 0) return fail(job, "mkdir", job->lower_paths[i]);
    if (move_mount(job->lowers[i], "", AT_FDCWD, job->lower_paths[i], MOVE_MOUNT_F_EMPTY_PATH) != 0)
      return fail(job, "move_mount", "a lower layer (overlay helper)");
  }
  if (mkdir("/tmp/u", 0700) != 0) return fail(job, "mkdir", "/tmp/u");
  if (move_mount(job->upper_fs, "", AT_FDCWD, "/tmp/u", MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return fail(job, "move_mount", "the upper layer (overlay helper)");

  job->overlay = make_overlay(job->lowerdir, "/tmp/u/upper", "/tmp/u/work", &job->step);
  if (job->overlay < 0)
    return fail(job, job->step, "the root overlay (see dmesg for overlayfs's reason)");
  return job->overlay < 0 ? 1 : 0;
}

}  // namespace

Result<UniqueFd> make_upper_tmpfs(uint64_t bytes, uid_t owner) {
  UniqueFd context(fsopen("tmpfs", FSOPEN_CLOEXEC));
  if (!context) return sys_error("fsopen", "tmpfs (upper layer)");
  const std::string id = std::to_string(owner);
  const std::string size = std::to_string(bytes);
  for (auto [key, value] : {std::pair{"mode", "0755"},
                            {"size", size.c_str()},
                            {"uid", id.c_str()},
                            {"gid", id.c_str()}}) {
    if (fsconfig(context.get(), FSCONFIG_SET_STRING, key, value, 0) != 0)
      return sys_error("fsconfig", std::string("tmpfs (upper layer) ") + key + "=" + value);
  }
  if (fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
    return sys_error("fsconfig", "FSCONFIG_CMD_CREATE tmpfs (upper layer)");
  UniqueFd root(fsmount(context.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  if (!root) return sys_error("fsmount", "tmpfs (upper layer)");
  for (const char* name : {"upper", "work"}) {
    if (mkdirat(root.get(), name, 0755) != 0) return sys_error("mkdirat", name);
    if (fchownat(root.get(), name, owner, owner, AT_SYMLINK_NOFOLLOW) != 0)
      return sys_error("fchownat", std::string(name) + " to " + id);
  }
  return root;
}

OverlayHelper& OverlayHelper::operator=(OverlayHelper&& other) noexcept {
  if (this != &other) {
    reap();
    pid_ = std::exchange(other.pid_, -1);
  }
  return *this;
}

void OverlayHelper::reap() {
  if (pid_ <= 0) return;
  while (waitpid(pid_, nullptr, __WALL) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

Result<MountedOverlay> mount_overlay(std::span<const int> lowers, int upper_fs) {
  if (lowers.empty() || lowers.size() > kMaxPassedFds)
    return plain_error("overlay", "between 1 and " + std::to_string(kMaxPassedFds) +
                                      " lower layers, not " + std::to_string(lowers.size()));
  if (!layers_must_be_attached.load(std::memory_order_relaxed)) {
    // The layers as they are, through this process's fds: no helper, no mount namespace.
    std::string lowerdir;
    for (int fd : lowers) lowerdir += (lowerdir.empty() ? "" : ":") + fd_path(fd);
    const std::string upper = fd_path(upper_fs);
    const char* step = nullptr;
    UniqueFd overlay(make_overlay(lowerdir.c_str(), (upper + "/upper").c_str(),
                                  (upper + "/work").c_str(), &step));
    if (overlay) return MountedOverlay{std::move(overlay), OverlayHelper()};
    if (errno != EINVAL)
      return sys_error(step, "the root overlay (see dmesg for overlayfs's reason)");
    layers_must_be_attached.store(true, std::memory_order_relaxed);
  }
  OverlayJob job;
  job.lowers = lowers.data();
  job.lower_count = lowers.size();
  job.upper_fs = upper_fs;
  size_t used = 0;
  for (size_t i = 0; i < lowers.size(); ++i) {
    std::snprintf(job.lower_paths[i], sizeof job.lower_paths[i], "%s/%zu", kScratch, i);
    used += static_cast<size_t>(std::snprintf(job.lowerdir + used, sizeof job.lowerdir - used,
                                              "%s%s", i ? ":" : "", job.lower_paths[i]));
  }

  void* stack = mmap(nullptr, kHelperStack, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return sys_error("mmap", "overlay helper stack");
  // CLONE_VFORK: this thread goes on once the helper has released the shared memory (at its
  // exit, before its namespaces are torn down), so the job and the stack are done with.
  // CLONE_FILES: the overlay's fd lands in this process's table. CLONE_NEWNS without CLONE_FS is
  // allowed in a threaded process.
  const pid_t pid = clone(attach_and_mount, static_cast<char*>(stack) + kHelperStack,
                          CLONE_VM | CLONE_VFORK | CLONE_FILES | CLONE_NEWNS | SIGCHLD, &job);
  const int clone_errno = errno;
  munmap(stack, kHelperStack);
  if (pid < 0) return sys_error("clone", "CLONE_NEWNS overlay helper", clone_errno);
  MountedOverlay mounted{UniqueFd(job.overlay), OverlayHelper(pid)};
  if (!mounted.mount) {
    if (job.step == nullptr) return plain_error("overlay", "the overlay helper died");
    return sys_error(job.step, job.detail, job.err);
  }
  return mounted;
}

}  // namespace hutch
