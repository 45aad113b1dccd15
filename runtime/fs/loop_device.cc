#include "runtime/fs/loop_device.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "runtime/base/text_file.h"

namespace hutch {
namespace {

constexpr int kLoopAttempts = 16;  // another process may take the free device we were offered

}  // namespace

Result<LoopDevice> attach_loop_device(int backing_fd, const std::string& image, bool read_only) {
  UniqueFd control(open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return sys_error("open", "/dev/loop-control");
  for (int attempt = 0;; ++attempt) {
    int number = ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (number < 0) return sys_error("ioctl", "LOOP_CTL_GET_FREE");
    LoopDevice device;
    device.path = "/dev/loop" + std::to_string(number);
    device.fd.reset(open(device.path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
    if (!device.fd) return sys_error("open", device.path);
    loop_config config{};
    config.fd = static_cast<uint32_t>(backing_fd);
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR | (read_only ? LO_FLAGS_READ_ONLY : 0);
    if (ioctl(device.fd.get(), LOOP_CONFIGURE, &config) == 0) return device;
    if (errno != EBUSY || attempt + 1 == kLoopAttempts)
      return sys_error("ioctl", "LOOP_CONFIGURE " + device.path + " with " + image);
  }
}

Result<LoopDevice> find_loop_device(const std::string& image) {
  struct stat st;
  if (stat(image.c_str(), &st) != 0) return sys_error("stat", image);
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/block", error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("loop")) continue;
    auto backing = read_text_file(entry.path().string() + "/loop/backing_file");
    if (!backing) continue;  // not bound
    std::string path = *backing;
    while (!path.empty() && path.back() == '\n') path.pop_back();
    if (path != image) continue;
    LoopDevice device;
    device.path = "/dev/" + name;
    device.fd.reset(open(device.path.c_str(), O_RDWR | O_CLOEXEC));
    if (!device.fd) continue;  // gone meanwhile
    // Held open now: the binding read below cannot change until the fd closes.
    loop_info64 info{};
    if (ioctl(device.fd.get(), LOOP_GET_STATUS64, &info) != 0) continue;  // unbound meanwhile
    if (info.lo_inode == st.st_ino && info.lo_device == st.st_dev) return device;
  }
  if (error) return sys_error("opendir", "/sys/block", error.value());
  return LoopDevice{};
}

}  // namespace hutch
