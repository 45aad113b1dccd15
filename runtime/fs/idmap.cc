#include "runtime/fs/idmap.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>

namespace hutch {

Result<UniqueFd> open_idmapped_tree(const std::string& path, int userns_fd, uid_t sandbox_root) {
  UniqueFd tree(open_tree(AT_FDCWD, path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree) return sys_error("open_tree", path);
  struct stat st;
  if (fstat(tree.get(), &st) != 0) return sys_error("fstat", path);
  const bool idmap = st.st_uid != sandbox_root;
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (idmap) {
    attr.attr_set |= MOUNT_ATTR_IDMAP;
    attr.userns_fd = static_cast<unsigned>(userns_fd);
  }
  if (mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) == 0) return tree;
  if (idmap && errno == EINVAL) {
    return sys_error(
        "mount_setattr",
        "MOUNT_ATTR_IDMAP on " + path +
            ": its filesystem cannot be idmapped; use one "
            "that can (ext4, xfs, btrfs, tmpfs on Linux 6.3+) or chown the rootfs to " +
            std::to_string(sandbox_root),
        EINVAL);
  }
  return sys_error("mount_setattr",
                   std::string(idmap ? "MOUNT_ATTR_IDMAP" : "MOUNT_ATTR_RDONLY") + " on " + path);
}

Result<void> idmap_mount(int mount_fd, int userns_fd, bool read_only, const std::string& what) {
  mount_attr attr{};
  attr.attr_set =
      MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (read_only ? MOUNT_ATTR_RDONLY : 0);
  attr.userns_fd = static_cast<unsigned>(userns_fd);
  if (mount_setattr(mount_fd, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
    return sys_error("mount_setattr", "MOUNT_ATTR_IDMAP on " + what);
  return {};
}

Result<UniqueFd> open_writable_tree(const std::string& dir) {
  UniqueFd tree(open_tree(AT_FDCWD, dir.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree) return sys_error("open_tree", dir);
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0)
    return sys_error("mount_setattr", "NOSUID|NODEV on " + dir);
  return tree;
}

}  // namespace hutch
