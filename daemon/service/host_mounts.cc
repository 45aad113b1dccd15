#include "daemon/service/host_mounts.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hutch::daemon {
namespace {

using service::ServiceResult;

std::unexpected<service::ServiceError> refused(const std::string& source, const std::string& why) {
  return service::service_error(ErrorKind::kInvalid, "mount_source_refused",
                                "mount source \"" + source + "\": " + why);
}

// An O_PATH fd of `source` when it resolves beneath `root` to a directory, else why not.
std::expected<UniqueFd, std::string> open_beneath(const std::string& root,
                                                  const std::string& source) {
  std::string prefix = root.ends_with('/') ? root : root + "/";
  if (source != root && !source.starts_with(prefix)) return std::unexpected("not below " + root);
  std::string rel = source == root ? "." : source.substr(prefix.size());
  UniqueFd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd) return std::unexpected("open(" + root + "): " + std::strerror(errno));
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  UniqueFd dir(
      static_cast<int>(::syscall(SYS_openat2, root_fd.get(), rel.c_str(), &how, sizeof how)));
  if (!dir)
    return std::unexpected("openat2(" + rel + " beneath " + root +
                           ", RESOLVE_BENEATH): " + std::strerror(errno));
  return dir;
}

// The path the kernel has for `dir` now.
std::expected<std::string, std::string> path_of(const UniqueFd& dir) {
  std::string link = "/proc/self/fd/" + std::to_string(dir.get());
  char resolved[4096];
  ssize_t n = ::readlink(link.c_str(), resolved, sizeof resolved - 1);
  if (n < 0) return std::unexpected("readlink(" + link + "): " + std::strerror(errno));
  return std::string(resolved, static_cast<size_t>(n));
}

}  // namespace

std::expected<UniqueFd, std::string> open_host_mount_source(const std::string& source,
                                                            const std::vector<std::string>& roots) {
  if (roots.empty()) return std::unexpected("hutchd has no --mount-root");
  std::string why;
  for (const std::string& root : roots) {
    auto dir = open_beneath(root, source);
    if (dir) return std::move(*dir);
    why += (why.empty() ? "" : "; ") + dir.error();
  }
  return std::unexpected(why);
}

ServiceResult<SandboxConfig> resolve_host_mounts(SandboxConfig config,
                                                 const std::vector<std::string>& roots) {
  if (config.mounts.size() > kMaxMountsPerSandbox)
    return service::service_error(ErrorKind::kInvalid, "too_many_mounts",
                                  "at most " + std::to_string(kMaxMountsPerSandbox) + " mounts");
  for (HostMount& mount : config.mounts) {
    auto dir = open_host_mount_source(mount.source, roots);
    if (!dir) return refused(mount.source, dir.error());
    auto resolved = path_of(*dir);
    if (!resolved) return refused(mount.source, resolved.error());
    mount.source = *resolved;
  }
  return config;
}

Result<std::vector<UniqueFd>> open_host_mount_trees(const std::vector<HostMount>& mounts,
                                                    const std::vector<std::string>& roots) {
  std::vector<UniqueFd> trees;
  for (const HostMount& mount : mounts) {
    auto dir = open_host_mount_source(mount.source, roots);
    if (!dir) return plain_error("mount source", mount.source + ": " + dir.error());
    // A clone of a path on an attached filesystem, which Linux 6.1 allows (it refuses only a
    // clone of a detached mount: docs/design.md#kernels). AT_RECURSIVE: what is mounted below
    // the source on the host is part of what was checked, as a path bind would have shown it.
    UniqueFd tree(::open_tree(dir->get(), "",
                              OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE));
    if (!tree) return sys_error("open_tree", mount.source + " (OPEN_TREE_CLONE of its fd)");
    // The clone joins the host mount's peer group when that one is shared (the usual / of
    // systemd hosts): private, so no mount made in the sandbox beneath it reaches the host.
    mount_attr attr{};
    attr.propagation = MS_PRIVATE;
    if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) != 0)
      return sys_error("mount_setattr", mount.source + " (MS_PRIVATE)");
    trees.push_back(std::move(tree));
  }
  return trees;
}

}  // namespace hutch::daemon
