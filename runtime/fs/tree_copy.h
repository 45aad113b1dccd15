// An exact copy of a directory tree, as needed to turn an overlayfs upper directory into a
// read-only lower: overlayfs's own markers must survive bit for bit.
//
// Kept: whiteouts (character devices 0/0), the opaque-directory xattr (kOverlayOpaqueXattr) and
// every xattr that is not overlayfs's (trusted.*, user.*, security.*), numeric ownership (host ids
// such as 1000000005 are copied as numbers), modes with setuid/setgid/sticky bits, symlinks (never
// followed), hardlinks (as links within the copy), holes of sparse files (SEEK_DATA/SEEK_HOLE),
// atime/mtime in nanoseconds (a directory's are set after its contents). Fifos and sockets are
// recreated with mknod. Any other device node is refused: a layer must not smuggle /dev/sda into a
// sandbox.
//
// Dropped: overlayfs's other control xattrs (redirect, metacopy, origin, impure, nlink, ... under
// trusted.overlay.* or user.overlay.*). overlayfs writes them in an upper directory for its own
// bookkeeping; in a lower they would steer lookups (a redirect names another lower path, a
// metacopy file takes its data from elsewhere), so a layer never carries them.
//
// Everything goes through directory fds (openat O_NOFOLLOW, fstatat AT_SYMLINK_NOFOLLOW, ...), so a
// symlink inside the source can never redirect the copy. Needs CAP_CHOWN/CAP_FOWNER/CAP_MKNOD and
// CAP_SYS_ADMIN for trusted.* xattrs: run as root.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/error.h"
#include "runtime/fs/tree_io.h"

namespace hutch {

struct TreeStats {
  uint64_t files = 0;      // regular-file entries (each hardlink counts)
  uint64_t dirs = 0;       // directories, the root included
  uint64_t bytes = 0;      // file data (st_size), each inode once
  uint64_t whiteouts = 0;  // character devices 0/0
};

// Copies the directory `src_dir_fd` to a new directory `dst_name` under `dst_parent_fd` (which
// must not exist yet), keeping only the overlay xattrs `keep` allows. On failure the partial copy
// is left for the caller to remove.
Result<TreeStats> copy_tree(int src_dir_fd, int dst_parent_fd, const std::string& dst_name,
                            OverlayXattrs keep = OverlayXattrs::kOpaqueOnly);

// Removes, in place, every overlay xattr of the tree under `root_fd` (root included) that `keep`
// does not allow: for a tree moved into the store rather than copied.
Result<void> strip_overlay_xattrs(int root_fd, OverlayXattrs keep = OverlayXattrs::kOpaqueOnly);

}  // namespace hutch
