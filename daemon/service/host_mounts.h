// Host directories mounted into a sandbox (a create's "mounts"): only from below the roots
// hutchd was started with (--mount-root DIR, repeatable). A source is resolved with
// openat2(root, rel, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) from an fd of each allowed root, so
// ".." and symlinks (absolute or relative) cannot leave the root; what it resolved to (read back
// from /proc/self/fd) is the canonical source the mount plan binds (runtime/fs/mount_plan.h:
// read-only mounts are MOUNT_ATTR_RDONLY | NOSUID | NODEV).
#pragma once

#include <string>
#include <vector>

#include "daemon/sandbox_spec.h"
#include "daemon/service/error.h"

namespace hutch::daemon {

inline constexpr size_t kMaxMountsPerSandbox = 16;

// `config` with every mount's source replaced by its canonical host path. Errors (400):
// mount_source_refused (no allowed root contains it, it escapes one, it is missing or no
// directory; with no --mount-root every mount is refused), too_many_mounts.
service::ServiceResult<SandboxConfig> resolve_host_mounts(SandboxConfig config,
                                                          const std::vector<std::string>& roots);

}  // namespace hutch::daemon
