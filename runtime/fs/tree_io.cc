#include "runtime/fs/tree_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "runtime/base/unique_fd.h"
#include "runtime/fs/overlay_xattr.h"

namespace hutch {
namespace {

// "/proc/self/fd/<dir_fd>/<name>", or ".../." for the directory itself: an l*xattr call on the
// bare magic link would address the procfs link, not the directory it names.
std::string proc_path(int dir_fd, const std::string& name) {
  return "/proc/self/fd/" + std::to_string(dir_fd) + "/" + (name.empty() ? "." : name);
}

// llistxattr/lgetxattr with the size probe and a retry when the value grew in between (ERANGE).
template <class Call>
Result<std::string> read_sized(Call call, std::string_view step, const std::string& what) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    ssize_t size = call(nullptr, 0);
    if (size < 0) return sys_error(step, what);
    std::string buffer(static_cast<size_t>(size), '\0');
    if (size == 0) return buffer;
    ssize_t got = call(buffer.data(), buffer.size());
    if (got >= 0) {
      buffer.resize(static_cast<size_t>(got));
      return buffer;
    }
    if (errno != ERANGE) return sys_error(step, what);
  }
  return sys_error(step, what, ERANGE);
}

}  // namespace

int open_noatime(int dir_fd, const char* name, int flags) {
  int fd = openat(dir_fd, name, flags | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = openat(dir_fd, name, flags);
  return fd;
}

Result<std::vector<std::string>> read_dir_names(int dir_fd) {
  int fd = open_noatime(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sys_error("openat", "directory fd " + std::to_string(dir_fd));
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    int err = errno;
    close(fd);
    return sys_error("fdopendir", "directory fd " + std::to_string(dir_fd), err);
  }
  std::vector<std::string> names;
  while (true) {
    errno = 0;
    dirent* entry = readdir(dir);
    if (entry == nullptr) break;
    if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
    names.emplace_back(entry->d_name);
  }
  int err = errno;
  closedir(dir);
  if (err != 0) return sys_error("readdir", "directory fd " + std::to_string(dir_fd), err);
  std::sort(names.begin(), names.end());
  return names;
}

Result<Xattrs> read_xattrs(int dir_fd, const std::string& name) {
  const std::string path = proc_path(dir_fd, name);
  auto list =
      read_sized([&](char* buffer, size_t size) { return llistxattr(path.c_str(), buffer, size); },
                 "llistxattr", path);
  if (!list) {
    // A filesystem without xattr support has none to copy.
    if (list.error().err == ENOTSUP) return Xattrs{};
    return std::unexpected(list.error());
  }
  Xattrs xattrs;
  for (size_t start = 0; start < list->size();) {
    std::string key(list->c_str() + start);
    start += key.size() + 1;
    if (key.empty()) continue;
    auto value =
        read_sized([&](char* buffer,
                       size_t size) { return lgetxattr(path.c_str(), key.c_str(), buffer, size); },
                   "lgetxattr", path + " " + key);
    if (!value) {
      if (value.error().err == ENODATA) continue;  // removed since the listing
      return std::unexpected(value.error());
    }
    xattrs.emplace_back(std::move(key), std::move(*value));
  }
  std::sort(xattrs.begin(), xattrs.end());
  return xattrs;
}

Result<void> write_xattrs(int dir_fd, const std::string& name, const Xattrs& xattrs) {
  const std::string path = proc_path(dir_fd, name);
  for (const auto& [key, value] : xattrs) {
    if (lsetxattr(path.c_str(), key.c_str(), value.data(), value.size(), 0) != 0) {
      return sys_error("lsetxattr", path + " " + key);
    }
  }
  return {};
}

Result<void> remove_xattr(int dir_fd, const std::string& name, const std::string& key) {
  const std::string path = proc_path(dir_fd, name);
  if (lremovexattr(path.c_str(), key.c_str()) != 0 && errno != ENODATA) {
    return sys_error("lremovexattr", path + " " + key);
  }
  return {};
}

bool is_dropped_overlay_xattr(std::string_view key, OverlayXattrs keep) {
  if (!is_overlay_xattr(key)) return false;
  return keep == OverlayXattrs::kNone || key != kOverlayOpaqueXattr;
}

void drop_overlay_xattrs(Xattrs& xattrs, OverlayXattrs keep) {
  std::erase_if(xattrs,
                [keep](const auto& xattr) { return is_dropped_overlay_xattr(xattr.first, keep); });
}

Result<void> remove_tree(int parent_fd, const std::string& name) {
  struct stat st;
  if (fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    return sys_error("fstatat", name);
  }
  if (S_ISDIR(st.st_mode)) {
    UniqueFd dir(openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir) {
      if (errno == ENOENT) return {};
      return sys_error("openat", name);
    }
    auto names = HUTCH_TRY(read_dir_names(dir.get()));
    for (const std::string& child : names) {
      auto removed = remove_tree(dir.get(), child);
      if (!removed) {
        removed.error().detail = name + "/" + removed.error().detail;
        return removed;
      }
    }
  }
  if (unlinkat(parent_fd, name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 &&
      errno != ENOENT) {
    return sys_error("unlinkat", name);
  }
  return {};
}

Result<void> write_new_file(int dir_fd, const std::string& name, std::string_view bytes) {
  UniqueFd fd(
      openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return sys_error("openat", name);
  while (!bytes.empty()) {
    ssize_t wrote = write(fd.get(), bytes.data(), bytes.size());
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return sys_error("write", name);
    }
    bytes.remove_prefix(static_cast<size_t>(wrote));
  }
  if (fsync(fd.get()) != 0) return sys_error("fsync", name);
  return {};
}

Result<std::string> read_small_file(int dir_fd, const std::string& name) {
  UniqueFd fd(openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return sys_error("openat", name);
  std::string text;
  char buffer[4096];
  while (true) {
    ssize_t got = read(fd.get(), buffer, sizeof buffer);
    if (got < 0) {
      if (errno == EINTR) continue;
      return sys_error("read", name);
    }
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
  }
  return text;
}

}  // namespace hutch
