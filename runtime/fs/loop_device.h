// Loop devices: a file seen as a block device, so that the kernel mounts the filesystem in it
// (erofs layer images, ext4 volume images).
#pragma once

#include <string>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch {

struct LoopDevice {
  UniqueFd fd;       // open: the device stays bound while this fd or a mount holds it
  std::string path;  // /dev/loopN
};

// Binds `backing_fd` (the image, opened O_RDONLY or O_RDWR to match `read_only`) to a free loop
// device set to autoclear: the kernel unbinds it when its last opener (this fd, a mounted
// superblock) lets go, so nothing stays attached once the mounts of it are gone.
Result<LoopDevice> attach_loop_device(int backing_fd, const std::string& image, bool read_only);

// The loop device bound to `image` right now, if any (opened: it cannot be unbound while held),
// checked by the backing file's device and inode, not only by its path. Empty when none is.
Result<LoopDevice> find_loop_device(const std::string& image);

}  // namespace hutch
