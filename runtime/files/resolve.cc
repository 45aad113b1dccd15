#include "runtime/files/resolve.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/base/error.h"

namespace hutch::files {

std::string_view errc_name(Errc code) {
  switch (code) {
    case Errc::kInvalidPath:
      return "invalid_path";
    case Errc::kNotFound:
      return "file_not_found";
    case Errc::kPermissionDenied:
      return "permission_denied";
    case Errc::kIsDirectory:
      return "is_directory";
    case Errc::kNotDirectory:
      return "not_a_directory";
    case Errc::kAlreadyExists:
      return "already_exists";
    case Errc::kNotEmpty:
      return "not_empty";
    case Errc::kNoMatch:
      return "no_match";
    case Errc::kNotUnique:
      return "not_unique";
    case Errc::kTooLarge:
      return "too_large";
    case Errc::kNotRegularFile:
      return "not_a_regular_file";
    case Errc::kNoSpace:
      return "insufficient_storage";
    case Errc::kIo:
      return "io_error";
  }
  return "io_error";
}

namespace detail {
namespace {

// Not all of these are in <linux/magic.h> on every kernel header version.
constexpr long kConfigfsMagic = 0x62656570;
constexpr long kFusectlMagic = 0x65735543;

Errc code_of(std::string_view syscall, int err) {
  switch (err) {
    case ENOENT:
      return Errc::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return Errc::kPermissionDenied;
    case EISDIR:
      return Errc::kIsDirectory;
    case ENOTDIR:
      return Errc::kNotDirectory;
    case EEXIST:
      return Errc::kAlreadyExists;
    case ENOTEMPTY:
      return Errc::kNotEmpty;
    case EFBIG:
      return Errc::kTooLarge;
    case ENOSPC:
    case EDQUOT:
      return Errc::kNoSpace;
    case ENXIO:  // open(2) of a socket, or of a device without a driver
      return Errc::kNotRegularFile;
    case ENAMETOOLONG:
      return Errc::kInvalidPath;
    case ELOOP:
    case EXDEV:
      // From openat2 these mean a refused resolution (a magic link, a symlink loop, a crossing);
      // from rename, EXDEV is a plain cross-mount move.
      return syscall == "openat2" || syscall == "openat" ? Errc::kPermissionDenied : Errc::kIo;
    default:
      return Errc::kIo;
  }
}

}  // namespace

std::unexpected<FsError> fail(Errc code, std::string message) {
  return std::unexpected(FsError{code, std::move(message)});
}

std::unexpected<FsError> sys_fail(std::string_view syscall, std::string_view path, int err) {
  std::string message = std::string(syscall) + "(" + std::string(path) + "): " + std::strerror(err);
  if ((err == ELOOP || err == EXDEV) && syscall == "openat2") {
    message += " (refused: symlink loop, /proc magic link or a path leaving the sandbox)";
  }
  return fail(code_of(syscall, err), std::move(message));
}

std::string join(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (out.empty() || out.back() != '/') out += '/';
  out += name;
  return out;
}

FsResult<SandboxPath> parse_path(std::string_view raw) {
  if (raw.empty()) return fail(Errc::kInvalidPath, "path is empty");
  if (raw.size() > kMaxPathBytes) {
    return fail(Errc::kInvalidPath, "path is longer than 4096 bytes");
  }
  if (raw.find('\0') != std::string_view::npos) {
    return fail(Errc::kInvalidPath, "path contains a NUL byte");
  }
  if (raw.front() != '/') {
    return fail(Errc::kInvalidPath, "path is not absolute: " + std::string(raw));
  }
  std::vector<std::string_view> parts;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t end = raw.find('/', pos);
    if (end == std::string_view::npos) end = raw.size();
    std::string_view part = raw.substr(pos, end - pos);
    pos = end + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  SandboxPath out;
  out.parent = "/";
  if (parts.empty()) {
    out.path = "/";
    return out;
  }
  // By name too, not only by filesystem (check_fs): a sandbox without /sys (or with /proc
  // unmounted) must not get a directory of that name from the daemon either.
  if (parts.front() == "proc" || parts.front() == "sys") {
    return fail(Errc::kPermissionDenied,
                "/" + std::string(parts.front()) + ": paths under /proc and /sys are refused");
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) out.parent = join(out.parent, parts[i]);
  out.name = std::string(parts.back());
  out.path = join(out.parent, out.name);
  return out;
}

bool is_refused_fs(int fd) {
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0) return true;
  switch (static_cast<long>(fs.f_type)) {
    case PROC_SUPER_MAGIC:
    case SYSFS_MAGIC:
    case DEVPTS_SUPER_MAGIC:
    case CGROUP_SUPER_MAGIC:
    case CGROUP2_SUPER_MAGIC:
    case SECURITYFS_MAGIC:
    case DEBUGFS_MAGIC:
    case TRACEFS_MAGIC:
    case BPF_FS_MAGIC:
    case EFIVARFS_MAGIC:
    case BINFMTFS_MAGIC:
    case PSTOREFS_MAGIC:
    case NSFS_MAGIC:
    case kConfigfsMagic:
    case kFusectlMagic:
      return true;
    default:
      return false;
  }
}

FsResult<void> check_fs(int fd, std::string_view path) {
  if (is_refused_fs(fd)) {
    return fail(Errc::kPermissionDenied,
                "fstatfs(" + std::string(path) +
                    "): refused: procfs, sysfs, devpts, cgroupfs and other kernel filesystems are "
                    "not served by the file API");
  }
  return {};
}

FsResult<UniqueFd> open_in_root(int root_fd, const std::string& path, int flags) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  const char* rel = path == "/" ? "." : path.c_str() + 1;
  int fd = -1;
  // EAGAIN: a concurrent rename or mount raced the ".." checks of RESOLVE_IN_ROOT (openat2(2)).
  for (int attempt = 0; attempt < 64; ++attempt) {
    fd = static_cast<int>(syscall(SYS_openat2, root_fd, rel, &how, sizeof how));
    if (fd >= 0 || (errno != EAGAIN && errno != EINTR)) break;
  }
  if (fd < 0) return sys_fail("openat2", path);
  UniqueFd out(fd);
  HUTCH_TRY(check_fs(out.get(), path));
  return out;
}

FsResult<UniqueFd> open_dir(int root_fd, const std::string& path) {
  return open_in_root(root_fd, path, O_RDONLY | O_DIRECTORY);
}

FsResult<UniqueFd> make_dirs(int root_fd, const std::string& path, Owner owner) {
  auto whole = open_dir(root_fd, path);
  if (whole || whole.error().code != Errc::kNotFound) return whole;

  auto cur = open_dir(root_fd, "/");
  if (!cur) return cur;
  const SandboxPath parsed = HUTCH_TRY(parse_path(path));
  std::string prefix = "/";
  size_t pos = 1;
  const std::string& full = parsed.path;
  while (pos < full.size()) {
    size_t end = full.find('/', pos);
    if (end == std::string::npos) end = full.size();
    const std::string name = full.substr(pos, end - pos);
    pos = end + 1;
    const std::string next = join(prefix, name);
    prefix = next;
    auto opened = open_dir(root_fd, next);
    if (opened) {
      cur = std::move(opened);
      continue;
    }
    if (opened.error().code != Errc::kNotFound) return opened;
    if (mkdirat(cur->get(), name.c_str(), 0755) != 0) {
      if (errno != EEXIST) return sys_fail("mkdirat", next);
      // Exists now: created concurrently (retry the open once), or a dangling symlink.
      opened = open_dir(root_fd, next);
      if (opened) {
        cur = std::move(opened);
        continue;
      }
      if (opened.error().code == Errc::kNotFound) {
        return fail(Errc::kAlreadyExists,
                    "mkdirat(" + next + "): exists but is not a directory (a dangling symlink?)");
      }
      return opened;
    }
    // The directory we just made, opened without following: if it was swapped for a symlink in
    // between, O_NOFOLLOW fails instead of chowning what the link points to.
    int fd = openat(cur->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return sys_fail("openat", next);
    UniqueFd made(fd);
    if (fchown(made.get(), owner.uid, owner.gid) != 0) return sys_fail("fchown", next);
    if (fchmod(made.get(), 0755) != 0) return sys_fail("fchmod", next);
    cur = std::move(made);
  }
  return cur;
}

FsResult<UniqueFd> open_entry_nofollow(int dir_fd, const std::string& name,
                                       const std::string& path) {
  int fd = openat(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return sys_fail("openat", path);
  UniqueFd out(fd);
  HUTCH_TRY(check_fs(out.get(), path));
  return out;
}

FsResult<UniqueFd> open_regular(int root_fd, const std::string& path, struct stat* st) {
  auto fd = open_in_root(root_fd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (!fd) return fd;
  struct stat local {};
  struct stat* s = st != nullptr ? st : &local;
  if (fstat(fd->get(), s) != 0) return sys_fail("fstat", path);
  if (S_ISDIR(s->st_mode)) return fail(Errc::kIsDirectory, "open(" + path + "): Is a directory");
  if (!S_ISREG(s->st_mode)) {
    return fail(Errc::kNotRegularFile, "open(" + path + "): not a regular file");
  }
  int fl = fcntl(fd->get(), F_GETFL);
  if (fl < 0 || fcntl(fd->get(), F_SETFL, fl & ~O_NONBLOCK) != 0) return sys_fail("fcntl", path);
  return fd;
}

FsResult<void> read_chunks(int fd, std::string_view path,
                           const std::function<FsResult<void>(std::string_view)>& each) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_fail("read", path);
    }
    if (n == 0) return {};
    if (auto handled = each(std::string_view(buf, static_cast<size_t>(n))); !handled)
      return handled;
  }
}

FsResult<std::vector<std::string>> read_dir_names(int dir_fd, const std::string& path) {
  std::vector<std::string> names;
  if (lseek(dir_fd, 0, SEEK_SET) < 0) return sys_fail("lseek", path);
  alignas(8) char buf[32768];
  for (;;) {
    long n = syscall(SYS_getdents64, dir_fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_fail("getdents64", path);
    }
    if (n == 0) break;
    for (long off = 0; off < n;) {
      // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2), d_type (1), d_name.
      unsigned short reclen = 0;
      std::memcpy(&reclen, buf + off + 16, sizeof reclen);
      const char* name = buf + off + 19;
      if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0) names.emplace_back(name);
      off += reclen;
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

Entry make_entry(std::string path, const struct stat& st) {
  Entry e;
  e.path = std::move(path);
  if (S_ISREG(st.st_mode)) {
    e.type = "file";
  } else if (S_ISDIR(st.st_mode)) {
    e.type = "directory";
  } else if (S_ISLNK(st.st_mode)) {
    e.type = "symlink";
  } else {
    e.type = "other";
  }
  e.is_dir = S_ISDIR(st.st_mode);
  e.size = static_cast<uint64_t>(st.st_size);
  e.mode = st.st_mode & 07777;
  e.modified_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return e;
}

}  // namespace detail
}  // namespace hutch::files
