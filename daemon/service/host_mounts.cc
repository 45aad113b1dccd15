#include "daemon/service/host_mounts.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/base/unique_fd.h"

namespace hutch::daemon {
namespace {

using service::ServiceResult;

std::unexpected<service::ServiceError> refused(const std::string& source, const std::string& why) {
  return service::service_error(ErrorKind::kInvalid, "mount_source_refused",
                                "mount source \"" + source + "\": " + why);
}

// The canonical path of `source` when it resolves beneath `root` to a directory, else why not.
std::expected<std::string, std::string> resolve_beneath(const std::string& root,
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
  std::string link = "/proc/self/fd/" + std::to_string(dir.get());
  char resolved[4096];
  ssize_t n = ::readlink(link.c_str(), resolved, sizeof resolved - 1);
  if (n < 0) return std::unexpected("readlink(" + link + "): " + std::strerror(errno));
  return std::string(resolved, static_cast<size_t>(n));
}

}  // namespace

ServiceResult<SandboxConfig> resolve_host_mounts(SandboxConfig config,
                                                 const std::vector<std::string>& roots) {
  if (config.mounts.size() > kMaxMountsPerSandbox)
    return service::service_error(ErrorKind::kInvalid, "too_many_mounts",
                                  "at most " + std::to_string(kMaxMountsPerSandbox) + " mounts");
  for (HostMount& mount : config.mounts) {
    if (roots.empty()) return refused(mount.source, "hutchd has no --mount-root");
    std::string why;
    bool found = false;
    for (const std::string& root : roots) {
      auto resolved = resolve_beneath(root, mount.source);
      if (resolved) {
        mount.source = *resolved;
        found = true;
        break;
      }
      why += (why.empty() ? "" : "; ") + resolved.error();
    }
    if (!found) return refused(mount.source, why);
  }
  return config;
}

}  // namespace hutch::daemon
