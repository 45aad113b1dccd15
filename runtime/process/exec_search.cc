#include "runtime/process/exec_search.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "runtime/base/child_error.h"

namespace hutch {

std::vector<std::string> split_search_path(std::string_view path) {
  std::vector<std::string> dirs;
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find(':', start);
    if (end == std::string_view::npos) end = path.size();
    std::string dir(path.substr(start, end - start));
    dirs.push_back(dir.empty() ? "." : dir);
    start = end + 1;
  }
  return dirs;
}

int exec_in_path(const char* file, char* const* argv, char* const* envp, const char* const* dirs) {
  if (std::strchr(file, '/') != nullptr) {
    execve(file, argv, envp);
    return errno;
  }
  bool saw_eacces = false;
  for (; *dirs != nullptr; ++dirs) {
    char path[PATH_MAX] = "";
    append_cstr(path, sizeof path, *dirs);
    append_cstr(path, sizeof path, "/");
    append_cstr(path, sizeof path, file);
    execve(path, argv, envp);
    if (errno == EACCES) saw_eacces = true;
    if (errno != ENOENT && errno != ENOTDIR && errno != EACCES) return errno;
  }
  return saw_eacces ? EACCES : ENOENT;
}

}  // namespace hutch
