#include "runtime/fs/erofs.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "runtime/base/text_file.h"

extern char** environ;

namespace hutch {
namespace {

constexpr int kLoopAttempts = 16;  // another process may take the free device we were offered

}  // namespace

Result<void> make_erofs_image(const std::string& tree, const std::string& image) {
  // --chunksize: holes of sparse files stay holes (else they are written out as zeros).
  std::vector<std::string> args = {"mkfs.erofs",       "--quiet", "--preserve-mtime",
                                   "--chunksize=4096", image,     tree};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid;
  int err = posix_spawnp(&pid, "mkfs.erofs", nullptr, nullptr, argv.data(), environ);
  if (err != 0) {
    return sys_error("posix_spawnp",
                     "mkfs.erofs (install Debian's erofs-utils: scripts/setup.sh does)", err);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return sys_error("waitpid", "mkfs.erofs");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return plain_error("mkfs.erofs",
                       image + " from " + tree + " failed (status " + std::to_string(status) + ")");
  }
  return {};
}

Result<UniqueFd> open_erofs_tree(const std::string& image) {
  UniqueFd backing(open(image.c_str(), O_RDONLY | O_CLOEXEC));
  if (!backing) return sys_error("open", image);
  UniqueFd control(open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return sys_error("open", "/dev/loop-control");
  UniqueFd loop;
  std::string device;
  for (int attempt = 0; !loop; ++attempt) {
    int number = ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (number < 0) return sys_error("ioctl", "LOOP_CTL_GET_FREE");
    device = "/dev/loop" + std::to_string(number);
    UniqueFd candidate(open(device.c_str(), O_RDONLY | O_CLOEXEC));
    if (!candidate) return sys_error("open", device);
    loop_config config{};
    config.fd = static_cast<uint32_t>(backing.get());
    config.info.lo_flags = LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR;
    if (ioctl(candidate.get(), LOOP_CONFIGURE, &config) == 0) {
      loop = std::move(candidate);
    } else if (errno != EBUSY || attempt + 1 == kLoopAttempts) {
      return sys_error("ioctl", "LOOP_CONFIGURE " + device + " with " + image);
    }
  }
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
