#include "runtime/fs/paths.h"

namespace hutch {

bool is_normal_absolute(std::string_view path) {
  if (path.empty() || path[0] != '/') return false;
  if (path == "/") return true;
  if (path.back() == '/' || path.find('\0') != std::string_view::npos) return false;
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

std::string parent_path(std::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == 0 || slash == std::string_view::npos) return "/";
  return std::string(path.substr(0, slash));
}

std::string join_path(std::string_view base, std::string_view relative) {
  while (!relative.empty() && relative.front() == '/') relative.remove_prefix(1);
  std::string joined(base);
  if (joined.empty() || joined.back() != '/') joined += '/';
  joined += relative;
  if (joined.size() > 1 && joined.back() == '/') joined.pop_back();
  return joined;
}

}  // namespace hutch
