#include "runtime/fs/erofs.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

#include "runtime/base/run_tool.h"
#include "runtime/base/text_file.h"
#include "runtime/fs/loop_device.h"

namespace hutch {

Result<void> make_erofs_image(const std::string& tree, const std::string& image) {
  // --chunksize: holes of sparse files stay holes (else they are written out as zeros).
  auto made =
      run_tool({"mkfs.erofs", "--quiet", "--preserve-mtime", "--chunksize=4096", image, tree},
               "Debian's erofs-utils: scripts/setup.sh does");
  if (!made)
    return plain_error("mkfs.erofs", image + " from " + tree + ": " + made.error().message());
  return {};
}

Result<UniqueFd> open_erofs_tree(const std::string& image) {
  UniqueFd backing(open(image.c_str(), O_RDONLY | O_CLOEXEC));
  if (!backing) return sys_error("open", image);
  LoopDevice loop = HUTCH_TRY(attach_loop_device(backing.get(), image, true));
  const std::string& device = loop.path;
  UniqueFd context(fsopen("erofs", FSOPEN_CLOEXEC));
  if (!context) return sys_error("fsopen", "erofs");
  if (fsconfig(context.get(), FSCONFIG_SET_STRING, "source", device.c_str(), 0) != 0)
    return sys_error("fsconfig", "erofs source " + device);
  // A read-only superblock: else the kernel opens the (read-only) loop device for writing.
  if (fsconfig(context.get(), FSCONFIG_SET_FLAG, "ro", nullptr, 0) != 0)
    return sys_error("fsconfig", "erofs ro");
  if (fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
    return sys_error("fsconfig", "FSCONFIG_CMD_CREATE erofs on " + device + " (" + image + ")");
  UniqueFd tree(fsmount(context.get(), FSMOUNT_CLOEXEC,
                        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  if (!tree) return sys_error("fsmount", "erofs " + image);
  // The mount holds the device now; closing `loop` lets autoclear detach it after the last umount.
  // Returned as it is: Linux 6.1 refuses OPEN_TREE_CLONE of a detached mount (EINVAL).
  return tree;
}

Result<std::vector<std::string>> attached_images() {
  std::vector<std::string> images;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/block", error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("loop")) continue;
    auto backing = read_text_file(entry.path().string() + "/loop/backing_file");
    if (!backing) continue;  // not attached
    std::string path = *backing;
    while (!path.empty() && path.back() == '\n') path.pop_back();
    images.push_back(path);
  }
  if (error) return sys_error("opendir", "/sys/block", error.value());
  return images;
}

}  // namespace hutch
