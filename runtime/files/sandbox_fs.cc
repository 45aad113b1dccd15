// SandboxFs: open, write, read, stat, list, mkdir, move and remove inside a sandbox's root.
#include "runtime/files/sandbox_fs.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/base/error.h"
#include "runtime/files/identity.h"
#include "runtime/files/resolve.h"

namespace hutch::files {

using detail::fail;
using detail::join;
using detail::OwnerIdentity;
using detail::parse_path;
using detail::SandboxPath;
using detail::sys_fail;

namespace {

// The daemon never mints set-id files or directories for a sandbox.
uint32_t safe_mode(uint32_t mode) { return mode & 07777 & ~(S_ISUID | S_ISGID); }

// A device, FIFO or socket: something a write, edit or move must never replace or take away.
bool is_special(const struct stat& st) {
  return !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode);
}

std::unexpected<FsError> not_regular(const std::string& path) {
  return fail(Errc::kNotRegularFile,
              "write(" + path + "): not a regular file (a device, FIFO or socket); left in place");
}

FsResult<std::optional<std::string>> read_link(int dir_fd, const char* name,
                                               const std::string& path) {
  std::string buf(4096, '\0');
  ssize_t n = readlinkat(dir_fd, name, buf.data(), buf.size());
  if (n < 0) return sys_fail("readlinkat", path);
  buf.resize(static_cast<size_t>(n));
  return buf;
}

// Empties the directory `dir_fd` (sandbox path `path`) without following any symlink: entries are
// re-checked through the directory fd with O_NOFOLLOW, so a swapped-in symlink is unlinked, never
// descended into.
FsResult<void> remove_tree(int dir_fd, const std::string& path, int depth) {
  if (depth > detail::kMaxWalkDepth) {
    return fail(Errc::kTooLarge, "remove(" + path + "): directory tree deeper than " +
                                     std::to_string(detail::kMaxWalkDepth) + " levels");
  }
  // A few rounds: the sandbox may add entries while we delete.
  for (int round = 0; round < 4; ++round) {
    const std::vector<std::string> names = HUTCH_TRY(detail::read_dir_names(dir_fd, path));
    if (names.empty()) return {};
    for (const std::string& name : names) {
      const std::string child = join(path, name);
      struct stat st {};
      if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        return sys_fail("fstatat", child);
      }
      if (S_ISDIR(st.st_mode)) {
        int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
          UniqueFd sub(fd);
          HUTCH_TRY(detail::check_fs(sub.get(), child));
          HUTCH_TRY(remove_tree(sub.get(), child, depth + 1));
          if (unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT &&
              errno != ENOTEMPTY) {
            return sys_fail("unlinkat", child);
          }
          continue;
        }
        if (errno == ENOENT) continue;
        if (errno != ELOOP && errno != ENOTDIR) return sys_fail("openat", child);
        // Swapped for a symlink or a file since fstatat: unlink that instead.
      }
      if (unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT && errno != EISDIR) {
        return sys_fail("unlinkat", child);
      }
    }
  }
  return {};
}

}  // namespace

// Every public operation runs under OwnerIdentity (identity.h): the sandbox root's ids, checked.

FsResult<UniqueFd> SandboxFs::open_read(std::string_view path) const {
  const SandboxPath p = HUTCH_TRY(parse_path(path));
  auto identity = HUTCH_TRY(OwnerIdentity::enter(owner_));
  return detail::open_regular(root_fd_, p.path, nullptr);
}

FsResult<AtomicWriter> SandboxFs::begin_write(std::string_view path, std::optional<uint32_t> mode,
                                              uint64_t max_bytes) const {
  const SandboxPath p = HUTCH_TRY(parse_path(path));
  if (p.is_root()) return fail(Errc::kInvalidPath, "write(/): the root is a directory");
  auto identity = HUTCH_TRY(OwnerIdentity::enter(owner_));
  UniqueFd dir = HUTCH_TRY(detail::make_dirs(root_fd_, p.parent, owner_));

  uint32_t final_mode = 0644;
  struct stat st {};
  if (fstatat(dir.get(), p.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return fail(Errc::kIsDirectory, "write(" + p.path + "): Is a directory");
    }
    if (is_special(st)) return not_regular(p.path);
    if (S_ISREG(st.st_mode)) final_mode = st.st_mode & 07777;
  } else if (errno != ENOENT) {
    return sys_fail("fstatat", p.path);
  }
  if (mode) final_mode = *mode;
  final_mode = safe_mode(final_mode);

  AtomicWriter writer;
  writer.dir_ = std::move(dir);
  writer.final_name_ = p.path;
  writer.max_bytes_ = max_bytes;
  writer.root_fd_ = root_fd_;
  writer.owner_ = owner_;
  int fd = -1;
  if (!AtomicWriter::named_temps_forced()) {
    fd = openat(writer.dir_.get(), ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    // EOPNOTSUPP: the filesystem has no O_TMPFILE (overlayfs before 6.6); EISDIR: nor the kernel.
    if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR) {
      return sys_fail("openat(O_TMPFILE)", p.parent);
    }
  }
  if (fd >= 0) {
    writer.file_.reset(fd);
  } else {
    HUTCH_TRY(writer.create_named(false));
  }
  // Owner and mode at once, on the fd: the temp file is never host root's, even if we crash.
  if (fchown(writer.file_.get(), owner_.uid, owner_.gid) != 0) {
    return sys_fail("fchown", p.path + " (temp)");
  }
  if (fchmod(writer.file_.get(), final_mode) != 0) return sys_fail("fchmod", p.path + " (temp)");
  return writer;
}

FsResult<uint64_t> SandboxFs::write_file(std::string_view path, std::string_view content,
                                         std::optional<uint32_t> mode) const {
  AtomicWriter writer = HUTCH_TRY(begin_write(path, mode, 0));
  HUTCH_TRY(writer.write(content.data(), content.size()));
  HUTCH_TRY(writer.commit());
  return writer.bytes_written();
}

FsResult<std::string> SandboxFs::read_file(std::string_view path, uint64_t max_bytes) const {
  const SandboxPath p = HUTCH_TRY(parse_path(path));
  auto identity = HUTCH_TRY(OwnerIdentity::enter(owner_));
  struct stat st {};
  const UniqueFd fd = HUTCH_TRY(detail::open_regular(root_fd_, p.path, &st));
  const auto too_large = [&] {
    return fail(Errc::kTooLarge,
                "read(" + p.path + "): larger than " + std::to_string(max_bytes) + " bytes");
  };
  if (max_bytes != 0 && static_cast<uint64_t>(st.st_size) > max_bytes) return too_large();
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  HUTCH_TRY(detail::read_chunks(fd.get(), p.path, [&](std::string_view chunk) -> FsResult<void> {
    if (max_bytes != 0 && out.size() + chunk.size() > max_bytes) return too_large();
    out.append(chunk);
    return {};
  }));
  return out;
}

FsResult<Entry> SandboxFs::stat(std::string_view path) const {
  const SandboxPath p = HUTCH_TRY(parse_path(path));
  auto identity = HUTCH_TRY(OwnerIdentity::enter(owner_));
  UniqueFd fd;
  if (p.is_root()) {
    fd = HUTCH_TRY(detail::open_in_root(root_fd_, "/", O_PATH | O_DIRECTORY));
  } else {
    const UniqueFd dir = HUTCH_TRY(detail::open_in_root(root_fd_, p.parent, O_PATH | O_DIRECTORY));
    fd = HUTCH_TRY(detail::open_entry_nofollow(dir.get(), p.name, p.path));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return sys_fail("fstat", p.path);
  Entry out = detail::make_entry(p.path, st);
  if (S_ISLNK(st.st_mode)) {
    // readlinkat(fd, "") reads the link an O_PATH|O_NOFOLLOW fd refers to (readlink(2)).
    out.link_target = HUTCH_TRY(read_link(fd.get(), "", p.path));
  }
  return out;
}

FsResult<std::vector<Entry>> SandboxFs::list(std::string_view path) const {
  const SandboxPath p = HUTCH_TRY(parse_path(path));
  auto identity = HUTCH_TRY(OwnerIdentity::enter(owner_));
  const UniqueFd dir = HUTCH_TRY(detail::open_dir(root_fd_, p.path));
  const std::vector<std::string> names = HUTCH_TRY(detail::read_dir_names(dir.get(), p.path));
  std::vector<Entry> out;
  out.reserve(names.size());
  for (const std::string& name : names) {
    std::string child = join(p.path, name);
    struct stat st {};
    if (fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed since getdents
      return sys_fail("fstatat", child);
    }
    Entry entry = detail::make_entry(std::move(child), st);
    if (S_ISLNK(st.st_mode)) {
      if (auto target = read_link(dir.get(), name.c_str(), entry.path)) {
        entry.link_target = std::move(*target);
      }
    }
    out.push_back(std::move(entry));
  }
  return out;
}

FsResult<void> SandboxFs::mkdir(std::string_view path, bool parents, uint32_t mode) const {
  const SandboxPath p = HUTCH_TRY(parse_path(path));
  if (p.is_root()) {
    if (parents) return {};
    return fail(Errc::kAlreadyExists, "mkdirat(/): File exists");
  }
  auto identity = HUTCH_TRY(OwnerIdentity::enter(owner_));
  const UniqueFd dir = HUTCH_TRY(parents ? detail::make_dirs(root_fd_, p.parent, owner_)
                                         : detail::open_dir(root_fd_, p.parent));
  if (mkdirat(dir.get(), p.name.c_str(), 0700) != 0) {
    if (errno == EEXIST && parents) {
      // mkdir -p: fine when it is a directory (or a symlink to one, inside the root).
      auto existing = detail::open_dir(root_fd_, p.path);
      if (existing) return {};
      if (existing.error().code == Errc::kNotFound) {
        return fail(Errc::kAlreadyExists, "mkdirat(" + p.path + "): exists, not a directory");
      }
      return std::unexpected(existing.error());
    }
    return sys_fail("mkdirat", p.path);
  }
  int fd = openat(dir.get(), p.name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return sys_fail("openat", p.path);
  UniqueFd made(fd);
  if (fchown(made.get(), owner_.uid, owner_.gid) != 0) return sys_fail("fchown", p.path);
  if (fchmod(made.get(), safe_mode(mode)) != 0) return sys_fail("fchmod", p.path);
  return {};
}

FsResult<void> SandboxFs::move(std::string_view from, std::string_view to, bool overwrite) const {
  const SandboxPath src = HUTCH_TRY(parse_path(from));
  const SandboxPath dst = HUTCH_TRY(parse_path(to));
  if (src.is_root() || dst.is_root()) {
    return fail(Errc::kInvalidPath, "move(" + src.path + " -> " + dst.path + "): cannot move /");
  }
  if (dst.path.starts_with(src.path + "/")) {
    return fail(Errc::kInvalidPath,
                "move(" + src.path + " -> " + dst.path + "): cannot move into itself");
  }
  auto identity = HUTCH_TRY(OwnerIdentity::enter(owner_));
  const UniqueFd src_dir = HUTCH_TRY(detail::open_dir(root_fd_, src.parent));
  struct stat st {};
  if (fstatat(src_dir.get(), src.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return sys_fail("fstatat", src.path);
  }
  const std::string detail_text = src.path + " -> " + dst.path;
  if (is_special(st)) {
    return fail(Errc::kNotRegularFile, "move(" + detail_text + "): " + src.path +
                                           " is a device, FIFO or socket; left in place");
  }
  if (src.path == dst.path) return {};
  const UniqueFd dst_dir = HUTCH_TRY(detail::make_dirs(root_fd_, dst.parent, owner_));
  if (fstatat(dst_dir.get(), dst.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && is_special(st)) {
    return fail(Errc::kNotRegularFile, "move(" + detail_text + "): " + dst.path +
                                           " is a device, FIFO or socket; left in place");
  }
  unsigned flags = overwrite ? 0 : RENAME_NOREPLACE;
  if (renameat2(src_dir.get(), src.name.c_str(), dst_dir.get(), dst.name.c_str(), flags) == 0) {
    return {};
  }
  if (errno != EINVAL || overwrite) return sys_fail("renameat2", detail_text);
  // EINVAL: this filesystem has no RENAME_NOREPLACE (or a real EINVAL, which renameat repeats).
  if (fstatat(dst_dir.get(), dst.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    return fail(Errc::kAlreadyExists, "renameat2(" + detail_text + "): File exists");
  }
  if (renameat(src_dir.get(), src.name.c_str(), dst_dir.get(), dst.name.c_str()) != 0) {
    return sys_fail("renameat", detail_text);
  }
  return {};
}

FsResult<void> SandboxFs::remove(std::string_view path, bool recursive) const {
  const SandboxPath p = HUTCH_TRY(parse_path(path));
  if (p.is_root()) return fail(Errc::kPermissionDenied, "remove(/): refusing to remove the root");
  auto identity = HUTCH_TRY(OwnerIdentity::enter(owner_));
  const UniqueFd dir = HUTCH_TRY(detail::open_dir(root_fd_, p.parent));
  const char* name = p.name.c_str();
  struct stat st {};
  if (fstatat(dir.get(), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return sys_fail("fstatat", p.path);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(dir.get(), name, 0) != 0) return sys_fail("unlinkat", p.path);
    return {};
  }
  if (recursive) {
    int fd = openat(dir.get(), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno != ELOOP && errno != ENOTDIR) return sys_fail("openat", p.path);
      // Swapped for a symlink since fstatat: remove the link, never what it points to.
      if (unlinkat(dir.get(), name, 0) != 0) return sys_fail("unlinkat", p.path);
      return {};
    }
    UniqueFd sub(fd);
    HUTCH_TRY(detail::check_fs(sub.get(), p.path));
    HUTCH_TRY(remove_tree(sub.get(), p.path, 1));
  }
  if (unlinkat(dir.get(), name, AT_REMOVEDIR) != 0) return sys_fail("unlinkat", p.path);
  return {};
}

FsResult<void> SandboxFs::remove_leftovers() const {
  auto removed = remove("/" + std::string(kStagingDir), true);
  if (!removed && removed.error().code == Errc::kNotFound) return {};
  return removed;
}

}  // namespace hutch::files
