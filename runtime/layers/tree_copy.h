// An exact copy of a directory tree, as needed to turn an overlayfs upper directory into a
// read-only lower: overlayfs's own markers must survive bit for bit.
//
// Kept: whiteouts (character devices 0/0), opaque-directory and every other xattr (trusted.*,
// user.*, security.*), numeric ownership (host ids such as 1000000005 are copied as numbers),
// modes with setuid/setgid/sticky bits, symlinks (never followed), hardlinks (as links within the
// copy), holes of sparse files (SEEK_DATA/SEEK_HOLE), atime/mtime in nanoseconds (a directory's
// are set after its contents). Fifos and sockets are recreated with mknod. Any other device node
// is refused: a layer must not smuggle /dev/sda into a sandbox.
//
// Everything goes through directory fds (openat O_NOFOLLOW, fstatat AT_SYMLINK_NOFOLLOW, ...), so a
// symlink inside the source can never redirect the copy. Needs CAP_CHOWN/CAP_FOWNER/CAP_MKNOD and
// CAP_SYS_ADMIN for trusted.* xattrs: run as root.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/error.h"

namespace hutch::layers {

struct TreeStats {
  uint64_t files = 0;      // regular-file entries (each hardlink counts)
  uint64_t dirs = 0;       // directories, the root included
  uint64_t bytes = 0;      // file data (st_size), each inode once
  uint64_t whiteouts = 0;  // character devices 0/0
};

// Copies the directory `src_dir_fd` to a new directory `dst_name` under `dst_parent_fd` (which
// must not exist yet). On failure the partial copy is left for the caller to remove.
Result<TreeStats> copy_tree(int src_dir_fd, int dst_parent_fd, const std::string& dst_name);

}  // namespace hutch::layers
