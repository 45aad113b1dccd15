// Small fd-relative helpers the tree copy, digest and store share: directory listing, xattrs of an
// entry that may be a symlink or a fifo, and whole-tree removal.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/base/error.h"

namespace hutch {

// openat(dir_fd, name, flags | O_NOATIME), retried without O_NOATIME when not permitted (it needs
// ownership or CAP_FOWNER): copying or digesting a tree must not change the atimes it records.
int open_noatime(int dir_fd, const char* name, int flags);

// The names in a directory (without "." and ".."), sorted bytewise.
Result<std::vector<std::string>> read_dir_names(int dir_fd);

// An entry's extended attributes, sorted by name. `name` empty means `dir_fd` itself. Entries are
// addressed as /proc/self/fd/<dir_fd>/<name> with the l*xattr calls: that works for symlinks
// (which cannot be opened for f*xattr) and fifos (which would block open) alike.
using Xattrs = std::vector<std::pair<std::string, std::string>>;
Result<Xattrs> read_xattrs(int dir_fd, const std::string& name);
Result<void> write_xattrs(int dir_fd, const std::string& name, const Xattrs& xattrs);
// lremovexattr of `key` on the entry; an xattr already gone counts as removed.
Result<void> remove_xattr(int dir_fd, const std::string& name, const std::string& key);

// Which of overlayfs's control xattrs (runtime/fs/overlay_xattr.h) a tree may keep.
enum class OverlayXattrs {
  kOpaqueOnly,  // a layer: only the opaque marker hutch writes (kOverlayOpaqueXattr)
  kNone,        // a tree from outside (an imported rootfs, an archive's members)
};
// Whether `key` is an overlay control xattr that `keep` does not allow.
bool is_dropped_overlay_xattr(std::string_view key, OverlayXattrs keep);
// Removes those entries from `xattrs`.
void drop_overlay_xattrs(Xattrs& xattrs, OverlayXattrs keep);

// Removes `name` under `parent_fd` and everything below it, without following symlinks. Missing
// entries count as removed, so an interrupted removal can simply be run again.
Result<void> remove_tree(int parent_fd, const std::string& name);

// Writes all of `bytes` to a new file `name` under `dir_fd` (mode 0600, O_EXCL) and fsyncs it.
Result<void> write_new_file(int dir_fd, const std::string& name, std::string_view bytes);
// The whole content of `name` under `dir_fd` (not following a final symlink).
Result<std::string> read_small_file(int dir_fd, const std::string& name);

}  // namespace hutch
