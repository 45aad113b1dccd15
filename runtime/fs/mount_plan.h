// The sandbox's mounts as a plan: built and validated in the parent (pure, unit-tested without
// root), executed mechanically by the child (mount_exec.h).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/spec.h"

namespace hutch {

// One step inside the new root. Paths are absolute inside the sandbox and are resolved beneath
// its root without following any symlink, so a hostile rootfs cannot redirect a mount.
struct MountOp {
  enum class Kind {
    kMkdir,      // mkdir -p path (mode); a created last component is chowned to uid:gid
    kMountFs,    // a new filesystem of fstype at path, with options and MOUNT_ATTR_* attrs
    kBind,       // source (BindFrom) at path, recursively, with attrs; read-only when read_only
    kMaskFile,   // /dev/null over path, when path exists
    kMaskDir,    // an empty read-only tmpfs over path, when path exists
    kReadOnly,   // path and everything below it read-only, when path exists
    kSymlink,    // path -> source
    kWriteFile,  // path with contents = source, mode
    kAttach,     // the detached mount `fd` (inherited from the parent) at path, then fd closed
  };
  Kind kind;
  std::string path;
  std::string source;
  std::string fstype;
  std::vector<std::pair<std::string, std::string>> options;  // fsconfig key, value ("" = flag)
  unsigned long long attrs = 0;                              // MOUNT_ATTR_* for kMountFs and kBind
  mode_t mode = 0755;
  uid_t uid = 0;
  gid_t gid = 0;
  bool read_only = true;
  BindFrom from = BindFrom::kHost;  // kBind
  bool existing_file_only = false;  // kBind: over a regular file the rootfs has, else skipped
  // kBind with BindFrom::kLauncher: the detached tree the launcher opened (launch.cc), or the
  // caller's own (BindMount::tree_fd), inherited by the child through clone3.
  int source_fd = -1;
  int fd = -1;  // kAttach
};

struct MountPlan {
  std::vector<MountOp> ops;
};

// Pure. The steps run beneath the root overlay (runtime/fs/overlay.h). Bind sources must already
// be canonical host paths.
Result<MountPlan> build_mount_plan(const SandboxSpec& spec);

// The generated /etc files, pure so tests can read them.
std::string generate_passwd(uid_t uid, gid_t gid);
std::string generate_group(gid_t gid);
std::string generate_hosts(const std::string& hostname);

// Runc's masked paths (SECURITY.md): files get /dev/null, directories an empty read-only tmpfs.
extern const std::vector<std::string> kMaskedProcFiles;
extern const std::vector<std::string> kMaskedProcDirs;
extern const std::vector<std::string> kReadOnlyProcPaths;

}  // namespace hutch
