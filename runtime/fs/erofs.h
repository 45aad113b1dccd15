// Layers as erofs images. overlayfs refuses a lower directory inside another lower of the same
// mount ("overlapping lowerdir path", ELOOP), and the host rootfs's lower is the host's "/": a
// layer stored as a directory on the root filesystem cannot sit above it. An erofs image mounted
// through a loop device is its own filesystem, so it can; it is also read-only by construction.
#pragma once

#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch {

// Builds `image` from `tree` with mkfs.erofs (Debian's erofs-utils): ownership, modes, xattrs
// (overlayfs's user.overlay.opaque), whiteouts (0/0 character devices), symlinks, hardlinks and
// mtimes are kept as they are.
Result<void> make_erofs_image(const std::string& tree, const std::string& image);

// A detached, read-only, nosuid, nodev mount of `image` through a free loop device set to
// autoclear: the device is released when the last mount of it goes away (the sandbox's end), so
// nothing stays attached on the host.
Result<UniqueFd> open_erofs_tree(const std::string& image);

// The backing files of every attached loop device: the images mounted right now (by any sandbox
// of this host, hutch run or hutchd).
Result<std::vector<std::string>> attached_images();

}  // namespace hutch
