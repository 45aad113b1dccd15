// A directory tree to and from a tar stream (libarchive), through directory fds.
//
// Writing keeps numeric uid/gid, modes (setuid/setgid/sticky), mtimes in nanoseconds, symlinks,
// hardlinks (a second name of an inode is a tar hardlink) and every xattr (pax records), and turns
// overlayfs's markers into the OCI layer convention: a whiteout (character device 0/0) becomes an
// empty file `.wh.<name>` carrying the whiteout's owner and mode; an opaque directory (xattr
// kOverlayOpaqueXattr = "y") loses that xattr and gains a member `.wh..wh..opq`; no other overlay
// xattr is written. Holes are not recorded (the data is written in full); reading makes holes of
// all-zero 4 KiB blocks again.
//
// Reading refuses absolute names, `..` components, paths through symlinks and hardlinks whose
// target is outside the tree. It drops what would make an archive steer overlayfs or the host:
// every trusted.overlay.* and user.overlay.* xattr of a member (only the `.wh.*` members below
// become overlay metadata) and device nodes, a character device 0/0 included (a note on stderr
// names each). FIFOs are kept (a named pipe is no device; a sandbox can make one itself), and so
// are setuid/setgid bits: sandboxes mount every layer and their root nosuid,nodev and run with
// no_new_privs, so neither bit nor device grants anything there.
#pragma once

#include <string>

#include "runtime/base/error.h"

struct archive;

namespace hutch::image {

// What reading does with OCI whiteout members.
enum class Whiteouts {
  kToOverlay,  // a layer: `.wh.x` becomes a whiteout x, `.wh..wh..opq` kOverlayOpaqueXattr="y"
  kApply,      // flattening layers into one tree: `.wh.x` deletes x, `.wh..wh..opq` empties the dir
  kAsFiles,    // plain files (an image archive's own members, a plain rootfs tar)
};

// Writes the tree under `root_fd` (its root as "./") to `out`, which is open for writing.
Result<void> write_tree(int root_fd, archive* out);

// Extracts every member of `in` (open for reading, before its first header) under `root_fd`.
// `what` names the stream in errors.
Result<void> extract_tree(archive* in, int root_fd, Whiteouts whiteouts, const std::string& what);

// archive_error_string() as an Error of `step`.
hutch::Error archive_error(std::string_view step, archive* a, const std::string& what);

}  // namespace hutch::image
