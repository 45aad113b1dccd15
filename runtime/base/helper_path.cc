#include "runtime/base/helper_path.h"

#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace hutch {

Result<std::string> helper_path(std::string_view name) {
  std::error_code error;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return sys_error("readlink", "/proc/self/exe", error.value());
  std::filesystem::path beside = self.parent_path() / name;
  std::filesystem::path installed = self.parent_path().parent_path() / "libexec/hutch" / name;
  int err = ENOENT;  // the more telling errno: EACCES on a helper that is there
  for (const std::filesystem::path& candidate : {beside, installed}) {
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    if (errno != ENOENT) err = errno;
  }
  return sys_error("access",
                   std::string(name) + " at " + beside.string() + " or " + installed.string(), err);
}

}  // namespace hutch
