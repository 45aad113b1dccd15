#include "runtime/ns/userns.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace hutch {
namespace {

Result<void> write_file(const std::string& path, const std::string& content) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return sys_error("open", path);
  if (write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    return sys_error("write", path + " \"" + content.substr(0, content.size() - 1) + "\"");
  }
  return {};
}

}  // namespace

Result<void> validate_id_map(const IdMap& ids) {
  if (ids.count == 0) return plain_error("id map", "count must be at least 1");
  if (ids.host_base == 0) return plain_error("id map", "host base 0 would map root to host root");
  if (uint64_t{ids.host_base} + ids.count > UINT32_MAX) {
    return plain_error("id map", "host range " + std::to_string(ids.host_base) + "+" +
                                     std::to_string(ids.count) + " exceeds 2^32-1");
  }
  return {};
}

Result<void> write_id_maps(pid_t pid, const IdMap& ids) {
  const std::string map =
      "0 " + std::to_string(ids.host_base) + " " + std::to_string(ids.count) + "\n";
  const std::string proc = "/proc/" + std::to_string(pid);
  HUTCH_TRY(write_file(proc + "/uid_map", map));
  return write_file(proc + "/gid_map", map);
}

Result<UniqueFd> open_userns(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/user";
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_error("open", path);
  return fd;
}

bool forbid_nested_userns(const ChildPlan&, ChildError* error) {
  constexpr const char* kPath = "/proc/sys/user/max_user_namespaces";
  int fd = open(kPath, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return child_failure(error, "write", kPath, errno);
  const int err = write(fd, "0\n", 2) == 2 ? 0 : errno;
  close(fd);
  if (err != 0) return child_failure(error, "write", kPath, err);
  return true;
}

}  // namespace hutch
