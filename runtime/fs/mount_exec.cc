#include "runtime/fs/mount_exec.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <string>
#include <utility>
#include <vector>

namespace hutch {
namespace {

constexpr const char* kStaging = "/tmp";
constexpr const char* kHostRoot = "/oldroot";
constexpr const char* kNewRoot = "/root";
// A masked dir's tmpfs takes no options. Built before main (a static), never in the child.
const std::vector<std::pair<std::string, std::string>> kNoOptions;

// An fd closed on scope exit; the child's own tiny UniqueFd, free of allocation.
struct Fd {
  int fd = -1;
  explicit Fd(int value) : fd(value) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

bool fail(ChildError* error, const char* step, const char* detail, int err = errno) {
  set_child_error(error, step, detail, err);
  return false;
}

// Opens `path` (absolute inside the sandbox) beneath root_fd, refusing every symlink and magic
// link on the way: a rootfs whose /proc is a symlink cannot send a mount elsewhere.
int open_beneath(int root_fd, const char* path, unsigned long long flags) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  while (*path == '/') ++path;
  if (*path == '\0') path = ".";
  return static_cast<int>(syscall(SYS_openat2, root_fd, path, &how, sizeof how));
}

// Splits "/a/b/c" into the parent "/a/b" (opened beneath root) and the last name "c".
int open_parent_beneath(int root_fd, const char* path, char* parent, char* name) {
  unsigned long len = 0;
  while (path[len] != '\0' && len < PATH_MAX - 1) ++len;
  unsigned long slash = len;
  while (slash > 0 && path[slash] != '/') --slash;
  unsigned long i = 0;
  for (; i < slash; ++i) parent[i] = path[i];
  parent[i] = '\0';
  unsigned long j = 0;
  for (unsigned long k = slash + 1; k < len; ++k) name[j++] = path[k];
  name[j] = '\0';
  return open_beneath(root_fd, parent, O_PATH | O_DIRECTORY);
}

bool make_dirs_beneath(int root_fd, const MountOp& op, ChildError* error) {
  const char* path = op.path.c_str();
  Fd dir(open_beneath(root_fd, "/", O_PATH | O_DIRECTORY));
  if (dir.fd < 0) return fail(error, "openat2", "/");
  char name[NAME_MAX + 1];
  while (*path != '\0') {
    while (*path == '/') ++path;
    unsigned long n = 0;
    while (path[n] != '\0' && path[n] != '/' && n < NAME_MAX) {
      name[n] = path[n];
      ++n;
    }
    name[n] = '\0';
    path += n;
    if (n == 0) break;
    bool created = mkdirat(dir.fd, name, op.mode) == 0;
    if (!created && errno != EEXIST) return fail(error, "mkdirat", op.path.c_str());
    Fd next(open_beneath(dir.fd, name, O_PATH | O_DIRECTORY));
    if (next.fd < 0) return fail(error, "openat2(no symlinks)", op.path.c_str());
    if (created && *path == '\0') {
      if (fchmodat(dir.fd, name, op.mode, 0) != 0) return fail(error, "fchmodat", op.path.c_str());
      if ((op.uid != 0 || op.gid != 0) &&
          fchownat(dir.fd, name, op.uid, op.gid, AT_SYMLINK_NOFOLLOW) != 0) {
        return fail(error, "fchownat", op.path.c_str());
      }
    }
    close(dir.fd);
    dir.fd = std::exchange(next.fd, -1);
  }
  return true;
}

bool attach(int tree_fd, int target_fd, const char* what, ChildError* error) {
  if (move_mount(tree_fd, "", target_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) !=
      0) {
    return fail(error, "move_mount", what);
  }
  return true;
}

// A new filesystem of `fstype` at `path`; a missing `path` is no error when `missing_ok`.
bool mount_fs(int root_fd, const char* path, const char* fstype,
              const std::vector<std::pair<std::string, std::string>>& options,
              unsigned long long attrs, bool missing_ok, ChildError* error) {
  Fd target(open_beneath(root_fd, path, O_PATH));
  if (target.fd < 0) {
    if (errno == ENOENT && missing_ok) return true;
    return fail(error, "openat2(no symlinks)", path);
  }
  Fd context(fsopen(fstype, FSOPEN_CLOEXEC));
  if (context.fd < 0) return fail(error, "fsopen", fstype);
  for (const auto& [key, value] : options) {
    int rc = value.empty()
                 ? fsconfig(context.fd, FSCONFIG_SET_FLAG, key.c_str(), nullptr, 0)
                 : fsconfig(context.fd, FSCONFIG_SET_STRING, key.c_str(), value.c_str(), 0);
    if (rc != 0) return fail(error, "fsconfig", key.c_str());
  }
  if (fsconfig(context.fd, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    return fail(error, "fsconfig(FSCONFIG_CMD_CREATE)", fstype);
  }
  Fd mount(fsmount(context.fd, FSMOUNT_CLOEXEC, static_cast<unsigned>(attrs)));
  if (mount.fd < 0) return fail(error, "fsmount", path);
  return attach(mount.fd, target.fd, path, error);
}

// Creates the mount point for a bind of a file or a directory, unless it exists.
int create_target(int root_fd, const char* path, bool directory) {
  int existing = open_beneath(root_fd, path, O_PATH);
  if (existing >= 0 || errno != ENOENT) return existing;
  char parent[PATH_MAX], name[NAME_MAX + 1];
  Fd dir(open_parent_beneath(root_fd, path, parent, name));
  if (dir.fd < 0) return -1;
  if (directory) {
    if (mkdirat(dir.fd, name, 0755) != 0 && errno != EEXIST) return -1;
  } else {
    int file = openat(dir.fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (file < 0 && errno != EEXIST) return -1;
    if (file >= 0) close(file);
  }
  return open_beneath(root_fd, path, O_PATH);
}

// The regular file the rootfs has at `path`, for a bind over an existing file only: symlinks
// are followed inside the root (Alpine's /etc/ssl/cert.pem is one), never onto another mount
// (RESOLVE_NO_XDEV: /proc, /dev, an earlier bind). -1 with errno 0 when there is none.
int existing_file_beneath(int root_fd, const char* path) {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  while (*path == '/') ++path;
  int fd = static_cast<int>(syscall(SYS_openat2, root_fd, path, &how, sizeof how));
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP || errno == EXDEV) errno = 0;
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    errno = 0;
    return -1;
  }
  return fd;
}

// Attaches `tree` (a detached clone) at `target` with the attributes asked for; `mount_point`
// is its target already opened, or -1 to open (or create) it.
bool attach_tree(int root_fd, int tree, int mount_point, const char* what, const char* target,
                 bool read_only, unsigned long long attrs, ChildError* error) {
  mount_attr attr{};
  attr.attr_set = attrs | (read_only ? MOUNT_ATTR_RDONLY : 0);
  if (attr.attr_set != 0 &&
      mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0) {
    return fail(error, "mount_setattr(bind attrs)", what);
  }
  Fd opened(-1);
  if (mount_point < 0) {
    struct stat st;
    if (fstat(tree, &st) != 0) return fail(error, "fstat", what);
    opened.fd = create_target(root_fd, target, S_ISDIR(st.st_mode));
    if (opened.fd < 0) return fail(error, "create bind target", target);
    mount_point = opened.fd;
  }
  return attach(tree, mount_point, target, error);
}

// A detached clone of the host's `source`, through the host's root kept at /oldroot.
int open_host_tree(const char* source) {
  char host_path[PATH_MAX] = "";
  append_cstr(host_path, sizeof host_path, kHostRoot);
  append_cstr(host_path, sizeof host_path, source);
  return open_tree(AT_FDCWD, host_path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
}

bool bind_host(int root_fd, const char* source, const char* target, bool read_only,
               unsigned long long attrs, ChildError* error) {
  Fd tree(open_host_tree(source));
  if (tree.fd < 0) return fail(error, "open_tree", source);
  return attach_tree(root_fd, tree.fd, -1, source, target, read_only, attrs, error);
}

// A plan's bind, from wherever its source is (BindFrom).
bool bind_op(int root_fd, const MountOp& op, ChildError* error) {
  const char* target = op.path.c_str();
  Fd mount_point(-1);
  if (op.existing_file_only) {
    // Looked up first: no tree is cloned for a file the rootfs does not have.
    mount_point.fd = existing_file_beneath(root_fd, target);
    if (mount_point.fd < 0) return errno == 0 ? true : fail(error, "openat2(in root)", target);
  }
  Fd tree(-1);
  switch (op.from) {
    case BindFrom::kHost:
      tree.fd = open_host_tree(op.source.c_str());
      break;
    case BindFrom::kLauncher:
      // The child's copy of the launcher's fd: closing it once attached leaves the mount.
      tree.fd = op.source_fd;
      if (tree.fd < 0) return fail(error, "bind", "no tree from the launcher", EBADF);
      break;
    case BindFrom::kSandbox: {
      Fd source(open_beneath(root_fd, op.source.c_str(), O_PATH));
      if (source.fd < 0) return fail(error, "openat2(no symlinks)", op.source.c_str());
      tree.fd = open_tree(source.fd, "",
                          OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
      break;
    }
  }
  if (tree.fd < 0) return fail(error, "open_tree", op.source.c_str());
  return attach_tree(root_fd, tree.fd, mount_point.fd, op.source.c_str(), target, op.read_only,
                     op.attrs, error);
}

// A mount the parent made (a volume's), attached at op.path; the child's copy of the fd is closed
// then: init must not keep it past the mount's life.
bool attach_mount(int root_fd, const MountOp& op, ChildError* error) {
  Fd tree(op.fd);
  Fd target(open_beneath(root_fd, op.path.c_str(), O_PATH | O_DIRECTORY));
  if (target.fd < 0) return fail(error, "openat2(no symlinks)", op.path.c_str());
  return attach(tree.fd, target.fd, op.path.c_str(), error);
}

bool make_read_only(int root_fd, const MountOp& op, ChildError* error) {
  Fd target(open_beneath(root_fd, op.path.c_str(), O_PATH));
  if (target.fd < 0)
    return errno == ENOENT ? true : fail(error, "openat2(no symlinks)", op.path.c_str());
  Fd tree(
      open_tree(target.fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE));
  if (tree.fd < 0) return fail(error, "open_tree", op.path.c_str());
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY;
  if (mount_setattr(tree.fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0) {
    return fail(error, "mount_setattr(MOUNT_ATTR_RDONLY)", op.path.c_str());
  }
  return attach(tree.fd, target.fd, op.path.c_str(), error);
}

bool write_file(int root_fd, const MountOp& op, ChildError* error) {
  char parent[PATH_MAX], name[NAME_MAX + 1];
  Fd dir(open_parent_beneath(root_fd, op.path.c_str(), parent, name));
  if (dir.fd < 0) return fail(error, "openat2(no symlinks)", parent);
  if (op.kind == MountOp::Kind::kSymlink) {
    if (symlinkat(op.source.c_str(), dir.fd, name) != 0)
      return fail(error, "symlinkat", op.path.c_str());
    return true;
  }
  Fd file(openat(dir.fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, op.mode));
  if (file.fd < 0) return fail(error, "openat", op.path.c_str());
  const char* data = op.source.data();
  size_t left = op.source.size();
  while (left > 0) {
    ssize_t n = write(file.fd, data, left);
    if (n < 0) return fail(error, "write", op.path.c_str());
    data += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

bool run_op(int root_fd, const MountOp& op, ChildError* error) {
  switch (op.kind) {
    case MountOp::Kind::kMkdir:
      return make_dirs_beneath(root_fd, op, error);
    case MountOp::Kind::kMountFs:
      return mount_fs(root_fd, op.path.c_str(), op.fstype.c_str(), op.options, op.attrs, false,
                      error);
    case MountOp::Kind::kBind:
      return bind_op(root_fd, op, error);
    case MountOp::Kind::kMaskFile: {
      Fd exists(open_beneath(root_fd, op.path.c_str(), O_PATH));
      if (exists.fd < 0)
        return errno == ENOENT ? true : fail(error, "openat2(no symlinks)", op.path.c_str());
      return bind_host(root_fd, "/dev/null", op.path.c_str(), true, 0, error);
    }
    case MountOp::Kind::kMaskDir:
      return mount_fs(root_fd, op.path.c_str(), "tmpfs", kNoOptions,
                      MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                      true, error);
    case MountOp::Kind::kReadOnly:
      return make_read_only(root_fd, op, error);
    case MountOp::Kind::kSymlink:
    case MountOp::Kind::kWriteFile:
      return write_file(root_fd, op, error);
    case MountOp::Kind::kAttach:
      return attach_mount(root_fd, op, error);
  }
  return fail(error, "mount plan", "unknown step", EINVAL);
}

}  // namespace

bool enter_staging(const ChildPlan&, ChildError* error) {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return fail(error, "mount", "MS_REC|MS_PRIVATE on /");
  }
  // Only mount points live here: the upper layer is the parent's tmpfs (runtime/fs/overlay.h).
  if (mount("tmpfs", kStaging, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k") != 0) {
    return fail(error, "mount", "tmpfs on /tmp (staging)");
  }
  if (mkdir("/tmp/oldroot", 0700) != 0) return fail(error, "mkdir", "/tmp/oldroot");
  if (chdir(kStaging) != 0) return fail(error, "chdir", kStaging);
  if (syscall(SYS_pivot_root, ".", "oldroot") != 0) return fail(error, "pivot_root", "staging");
  if (chdir("/") != 0) return fail(error, "chdir", "/");
  if (mkdir(kNewRoot, 0755) != 0) return fail(error, "mkdir", kNewRoot);
  return true;
}

bool attach_root_overlay(int overlay_fd, ChildError* error) {
  if (move_mount(overlay_fd, "", AT_FDCWD, kNewRoot, MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return fail(error, "move_mount", "the root overlay on /root");
  return true;
}

bool run_mount_ops(const ChildPlan& plan, ChildError* error) {
  Fd root(open(kNewRoot, O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root.fd < 0) return fail(error, "open", kNewRoot);
  for (const MountOp& op : plan.mounts->ops) {
    if (!run_op(root.fd, op, error)) return false;
  }
  return true;
}

bool pivot_into_root(const ChildPlan&, ChildError* error) {
  if (umount2(kHostRoot, MNT_DETACH) != 0) return fail(error, "umount2", kHostRoot);
  if (chdir(kNewRoot) != 0) return fail(error, "chdir", kNewRoot);
  // pivot_root(".", ".") stacks the old root on top of the new one at "/" (pivot_root(2)):
  // detaching "." then drops the old root and leaves the new one.
  if (syscall(SYS_pivot_root, ".", ".") != 0) return fail(error, "pivot_root", kNewRoot);
  if (umount2(".", MNT_DETACH) != 0) return fail(error, "umount2", "staging");
  if (chdir("/") != 0) return fail(error, "chdir", "/");
  return true;
}

}  // namespace hutch
