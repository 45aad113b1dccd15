// Test helpers: a tree with every kind of entry an overlayfs upper directory can hold, and a
// full comparison of two trees that checks every attribute a layer must keep.
#pragma once

#include <string>
#include <vector>

namespace hutch::testing {

// Builds under `root` (an existing empty directory): a whiteout, an opaque directory, user and
// trusted xattrs, a file owned by 1000000005, a setuid file, a sticky directory, relative and
// absolute symlinks, a hardlink pair, a 128 MiB-hole sparse file, a fifo, with fixed timestamps.
// Returns an empty string on success, else what failed.
std::string build_every_kind(const std::string& root);

// Every difference between the trees at `a` and `b` (type, mode, owner, size, content, symlink
// target, rdev, xattrs, atime/mtime in ns, link count and hardlink identity), one line each.
// with_atime false: atimes are not compared (a tree something has read since, like mkfs.erofs).
std::vector<std::string> compare_trees(const std::string& a, const std::string& b,
                                       bool with_atime = true);

// Sets atime and mtime of `path` (not following symlinks) to `seconds`.123456789.
void set_times(const std::string& path, long seconds);

}  // namespace hutch::testing
