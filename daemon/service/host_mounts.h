// Host directories mounted into a sandbox (a create's "mounts"): only from below the roots
// hutchd was started with (--mount-root DIR, repeatable). A source is resolved with
// openat2(root, rel, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) from an fd of each allowed root, so
// ".." and symlinks (absolute or relative) cannot leave the root. At create, what it resolved to
// (read back from /proc/self/fd) is the canonical source the config records; whenever the
// sandbox starts (create, rollback), hutchd resolves it again the same way and clones the tree
// from that very fd (open_tree(fd, "", OPEN_TREE_CLONE)): the sandbox binds the tree, never the
// path, so a component swapped for a symlink between the check and the bind changes nothing
// (runtime/spec.h BindMount::tree_fd; read-only mounts are MOUNT_ATTR_RDONLY | NOSUID | NODEV).
#pragma once

#include <string>
#include <vector>

#include "daemon/sandbox_spec.h"
#include "daemon/service/error.h"
#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch::daemon {

inline constexpr size_t kMaxMountsPerSandbox = 16;

// `config` with every mount's source replaced by its canonical host path. Errors (400):
// mount_source_refused (no allowed root contains it, it escapes one, it is missing or no
// directory; with no --mount-root every mount is refused), too_many_mounts.
service::ServiceResult<SandboxConfig> resolve_host_mounts(SandboxConfig config,
                                                          const std::vector<std::string>& roots);

// An O_PATH fd of the directory `source` names beneath one of `roots` (resolved as above), or
// why not (every root's reason).
std::expected<UniqueFd, std::string> open_host_mount_source(const std::string& source,
                                                            const std::vector<std::string>& roots);

// One detached tree per mount, in order: a recursive clone of the directory open_host_mount_source
// opened, made private (nothing mounted beneath it in the sandbox propagates to the host's peer
// group, nor the host's into it). A refused source is an Error naming it.
Result<std::vector<UniqueFd>> open_host_mount_trees(const std::vector<HostMount>& mounts,
                                                    const std::vector<std::string>& roots);

}  // namespace hutch::daemon
