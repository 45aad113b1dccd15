// Idmapped mounts: a lower layer seen through the sandbox's user namespace, so host root's
// files appear owned by the sandbox's root and copy-up into the upper layer keeps that owner.
#pragma once

#include <string>

#include "runtime/error.h"
#include "runtime/unique_fd.h"

namespace hutch {

// A detached, read-only, nosuid, nodev clone of the mount at `path` (not its submounts), idmapped
// through `userns_fd`. Needs CAP_SYS_ADMIN in the initial user namespace: the parent makes it and
// the child attaches it with move_mount(2).
Result<UniqueFd> open_idmapped_tree(const std::string& path, int userns_fd);

}  // namespace hutch
