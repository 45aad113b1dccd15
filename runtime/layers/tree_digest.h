// A content digest of a directory tree: the same tree (as overlayfs sees it) gives the same
// digest wherever and whenever it was copied.
//
// Covered, entry by entry in a fixed order (depth first, each directory's names sorted bytewise):
// relative path, type, mode (with setuid/sticky bits), uid, gid, a regular file's size and
// content sha256, a symlink's target, a device's rdev, all xattrs sorted by name (but overlayfs's
// control xattrs other than the opaque marker, which a layer never keeps: tree_copy.h), and
// hardlink identity (a second name of an inode is recorded as "link to <first path>"). Not covered:
// timestamps, inode numbers, link counts, a directory's st_size, where holes are — so a copy, or
// the same content built twice, digests the same.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/base/error.h"

namespace hutch::layers {

struct TreeDigest {
  std::string digest;  // "sha256:<hex>"
  uint64_t bytes = 0;  // regular-file data, each inode once
};

// "sha256:<hex>" of the tree under `dir_fd`.
Result<std::string> digest_tree(int dir_fd);
// The same digest, plus the data size the walk saw on the way.
Result<TreeDigest> digest_tree_with_size(int dir_fd);

}  // namespace hutch::layers
