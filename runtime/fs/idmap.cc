#include "runtime/fs/idmap.h"

#include <fcntl.h>
#include <sys/mount.h>

namespace hutch {

Result<UniqueFd> open_idmapped_tree(const std::string& path, int userns_fd) {
  UniqueFd tree(open_tree(AT_FDCWD, path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree) return sys_error("open_tree", path);
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  attr.userns_fd = static_cast<unsigned>(userns_fd);
  if (mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    return sys_error("mount_setattr", "MOUNT_ATTR_IDMAP on " + path);
  }
  return tree;
}

}  // namespace hutch
