// Idmapped mounts: a lower layer seen through the sandbox's user namespace, so host root's
// files appear owned by the sandbox's root and copy-up into the upper layer keeps that owner.
#pragma once

#include <sys/types.h>

#include <string>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch {

// A detached, read-only, nosuid, nodev clone of the mount at `path` (not its submounts), idmapped
// through `userns_fd`. Needs CAP_SYS_ADMIN in the initial user namespace: the parent makes it and
// the child attaches it with move_mount(2).
// A layer whose root is already owned by `sandbox_root` (the host id of the sandbox's root: a
// tree prepared for this id range, such as a sandbox's own upper layer) is cloned as it is: an
// idmapping would shift its ids out of the range. Any other layer is idmapped, and refused with
// an error saying so where its filesystem cannot be (tmpfs before Linux 6.3, NFS, ...).
Result<UniqueFd> open_idmapped_tree(const std::string& path, int userns_fd, uid_t sandbox_root);

// Idmaps `mount_fd`, a detached mount never attached (fsmount(2)), through `userns_fd`, and sets
// nosuid, nodev and, when `read_only`, read-only on it: a volume's mount (runtime/spec.h
// VolumeMount), whose files are uid 0 on disk. `what` names it in errors.
Result<void> idmap_mount(int mount_fd, int userns_fd, bool read_only, const std::string& what);

// A detached clone of `dir`, writable, nosuid and nodev, not idmapped: a host upper dir, whose
// files get the sandbox's host ids as they are created.
Result<UniqueFd> open_writable_tree(const std::string& dir);

}  // namespace hutch
