#include "cli/image/tar_tree.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "runtime/base/unique_fd.h"
#include "runtime/fs/overlay_xattr.h"
#include "runtime/fs/tree_io.h"

namespace hutch::image {
namespace {

constexpr std::string_view kWhiteoutPrefix = ".wh.";
constexpr std::string_view kOpaqueMarker = ".wh..wh..opq";
constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

struct EntryDeleter {
  void operator()(archive_entry* entry) const { archive_entry_free(entry); }
};
using Entry = std::unique_ptr<archive_entry, EntryDeleter>;

bool is_opaque_xattr(const std::pair<std::string, std::string>& xattr) {
  return xattr.first == kOverlayOpaqueXattr && xattr.second == "y";
}

// What an exported member carries: the opaque marker becomes a `.wh..wh..opq` member instead, and
// no other overlay xattr leaves the store (a layer keeps none: tree_copy.h).
void drop_export_xattrs(Xattrs& xattrs) { drop_overlay_xattrs(xattrs, OverlayXattrs::kNone); }

// ---- writing ----

struct TreeWriter {
  archive* out;
  std::map<std::pair<dev_t, ino_t>, std::string> first_names;  // hardlinks

  Result<void> header(archive_entry* entry, const std::string& path) {
    if (archive_write_header(out, entry) != ARCHIVE_OK)
      return std::unexpected(archive_error("archive_write_header", out, path));
    return {};
  }

  Entry new_entry(const std::string& path, const struct stat& st, const Xattrs& xattrs) {
    Entry entry(archive_entry_new());
    archive_entry_set_pathname(entry.get(), path.c_str());
    archive_entry_set_uid(entry.get(), st.st_uid);
    archive_entry_set_gid(entry.get(), st.st_gid);
    archive_entry_set_mode(entry.get(), st.st_mode);
    archive_entry_set_mtime(entry.get(), st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    for (const auto& [name, value] : xattrs) {
      archive_entry_xattr_add_entry(entry.get(), name.c_str(), value.data(), value.size());
    }
    return entry;
  }

  Result<void> file_data(int dir_fd, const std::string& name, const std::string& path) {
    UniqueFd fd(open_noatime(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return sys_error("open", path);
    std::vector<char> buffer(1 << 16);
    while (true) {
      ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return sys_error("read", path);
      if (n == 0) return {};
      if (archive_write_data(out, buffer.data(), static_cast<size_t>(n)) != n)
        return std::unexpected(archive_error("archive_write_data", out, path));
    }
  }

  // The directory `dir_fd` as `path` ("./" or "a/b/"), then its contents.
  Result<void> directory(int dir_fd, const std::string& path, const struct stat& st,
                         Xattrs xattrs) {
    bool opaque = std::ranges::any_of(xattrs, is_opaque_xattr);
    drop_export_xattrs(xattrs);
    Entry entry = new_entry(path, st, xattrs);
    if (auto wrote = header(entry.get(), path); !wrote) return wrote;
    if (opaque) {
      struct stat marker = st;
      marker.st_mode = S_IFREG | 0600;
      Entry opq = new_entry(path + std::string(kOpaqueMarker), marker, {});
      archive_entry_set_size(opq.get(), 0);
      if (auto wrote = header(opq.get(), path); !wrote) return wrote;
    }
    auto names = read_dir_names(dir_fd);
    if (!names) return std::unexpected(names.error());
    for (const std::string& name : *names) {
      if (auto wrote = child(dir_fd, path, name); !wrote) return wrote;
    }
    return {};
  }

  Result<void> child(int dir_fd, const std::string& dir_path, const std::string& name) {
    const std::string path = dir_path + name;
    if (name.starts_with(kWhiteoutPrefix)) {
      return plain_error("export", path + ": a file named .wh.* cannot be told from a whiteout");
    }
    struct stat st;
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return sys_error("fstatat", path);
    auto xattrs = read_xattrs(dir_fd, name);
    if (!xattrs) return std::unexpected(xattrs.error());

    if (S_ISDIR(st.st_mode)) {
      UniqueFd sub(open_noatime(dir_fd, name.c_str(), kDirFlags));
      if (!sub) return sys_error("open", path);
      return directory(sub.get(), path + "/", st, std::move(*xattrs));
    }
    drop_export_xattrs(*xattrs);
    if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
      struct stat whiteout = st;
      whiteout.st_mode = S_IFREG | (st.st_mode & 07777);
      Entry entry = new_entry(dir_path + std::string(kWhiteoutPrefix) + name, whiteout, *xattrs);
      archive_entry_set_size(entry.get(), 0);
      return header(entry.get(), path);
    }
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) {
      return plain_error("export", path + ": device nodes and sockets are not exported");
    }
    Entry entry = new_entry(path, st, *xattrs);
    if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
      ssize_t n = readlinkat(dir_fd, name.c_str(), target.data(), target.size());
      if (n < 0) return sys_error("readlinkat", path);
      target.resize(static_cast<size_t>(n));
      archive_entry_set_symlink(entry.get(), target.c_str());
      return header(entry.get(), path);
    }
    if (S_ISFIFO(st.st_mode)) return header(entry.get(), path);
    // A regular file: a second name of an inode is a hardlink member.
    if (st.st_nlink > 1) {
      auto [it, first] = first_names.try_emplace({st.st_dev, st.st_ino}, path);
      if (!first) {
        archive_entry_set_hardlink(entry.get(), it->second.c_str());
        archive_entry_set_size(entry.get(), 0);
        return header(entry.get(), path);
      }
    }
    archive_entry_set_size(entry.get(), st.st_size);
    if (auto wrote = header(entry.get(), path); !wrote) return wrote;
    return file_data(dir_fd, name, path);
  }
};

// ---- reading ----

// A member's name as components: "./a//b/" is {"a", "b"}; "" or "." is the root, {}.
Result<std::vector<std::string>> split_member_path(std::string_view path, const std::string& what) {
  if (path.starts_with("/")) {
    return plain_error("extract",
                       what + ": absolute member name \"" + std::string(path) + "\" refused");
  }
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part == "..") {
      return plain_error("extract", what + ": member name \"" + std::string(path) +
                                        "\" has a .. component, refused");
    }
    if (!part.empty() && part != ".") parts.emplace_back(part);
    start = end + 1;
  }
  return parts;
}

std::string join(const std::vector<std::string>& parts) {
  std::string path;
  for (const std::string& part : parts) path += (path.empty() ? "" : "/") + part;
  return path;
}

struct TreeReader {
  int root_fd;
  Whiteouts whiteouts;
  std::string what;
  std::set<std::string> created;  // paths this stream made (a whiteout spares them)
  std::vector<std::pair<std::string, timespec>> dir_times;

  // The directory holding parts[0..n-1], walked without following symlinks; missing directories
  // are created (tars need not list every parent).
  Result<UniqueFd> open_parent(const std::vector<std::string>& parts, size_t n) {
    UniqueFd dir(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
    if (!dir) return sys_error("fcntl", "F_DUPFD_CLOEXEC");
    for (size_t i = 0; i < n; ++i) {
      UniqueFd next(openat(dir.get(), parts[i].c_str(), kDirFlags));
      if (!next && errno == ENOENT) {
        if (mkdirat(dir.get(), parts[i].c_str(), 0755) != 0 && errno != EEXIST)
          return sys_error("mkdirat", what + ": " + parts[i]);
        next = UniqueFd(openat(dir.get(), parts[i].c_str(), kDirFlags));
      }
      if (!next) {
        return sys_error("openat", what + ": " + join(parts) + " (a parent is not a directory)");
      }
      dir = std::move(next);
    }
    return dir;
  }

  // Removes whatever is at `name` so a later layer's member can replace it; a directory stays
  // when `keep_dir` (a directory member over a directory only updates its metadata).
  Result<void> clear(int parent_fd, const std::string& name, bool keep_dir) {
    struct stat st;
    if (fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) return {};
      return sys_error("fstatat", what + ": " + name);
    }
    if (keep_dir && S_ISDIR(st.st_mode)) return {};
    return remove_tree(parent_fd, name);
  }

  Result<void> metadata(int parent_fd, const std::string& name, archive_entry* entry,
                        const std::string& path, bool is_dir) {
    const char* target = name.empty() ? "" : name.c_str();
    const int at = name.empty() ? AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW : AT_SYMLINK_NOFOLLOW;
    if (fchownat(parent_fd, target, static_cast<uid_t>(archive_entry_uid(entry)),
                 static_cast<gid_t>(archive_entry_gid(entry)), at) != 0) {
      return sys_error("fchownat", path);
    }
    // After chown, which clears setuid/setgid. Symlinks have no mode of their own.
    if (archive_entry_filetype(entry) != AE_IFLNK) {
      UniqueFd fd(name.empty() ? ::fcntl(parent_fd, F_DUPFD_CLOEXEC, 0)
                               : openat(parent_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
      if (!fd) return sys_error("openat", path);
      const std::string proc = "/proc/self/fd/" + std::to_string(fd.get());
      if (::chmod(proc.c_str(), archive_entry_perm(entry)) != 0) return sys_error("chmod", path);
    }
    Xattrs xattrs;
    archive_entry_xattr_reset(entry);
    const char* xname;
    const void* value;
    size_t size;
    while (archive_entry_xattr_next(entry, &xname, &value, &size) == ARCHIVE_OK) {
      xattrs.emplace_back(xname, std::string(static_cast<const char*>(value), size));
    }
    // Overlay control metadata never comes from an archive: only the `.wh.*` members hutch
    // translates itself become whiteouts and opaque markers. A redirect or metacopy xattr in a
    // lower would make overlayfs look up, or take data from, a path the archive chose.
    drop_overlay_xattrs(xattrs, OverlayXattrs::kNone);
    if (!xattrs.empty()) {
      if (auto wrote = write_xattrs(parent_fd, name, xattrs); !wrote) return wrote;
    }
    timespec times[2] = {{archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)},
                         {archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)}};
    if (is_dir) {
      // A directory's mtime changes as its contents are made: set it at the end.
      dir_times.emplace_back(path, times[1]);
      return {};
    }
    if (utimensat(parent_fd, target, times, at & ~AT_EMPTY_PATH) != 0 &&
        !(name.empty() && errno == ENOENT)) {
      return sys_error("utimensat", path);
    }
    return {};
  }

  Result<void> file_data(archive* in, int fd, const std::string& path, int64_t size) {
    static constexpr size_t kBlock = 4096;
    const void* buffer;
    size_t length;
    la_int64_t offset;
    while (true) {
      int r = archive_read_data_block(in, &buffer, &length, &offset);
      if (r == ARCHIVE_EOF) break;
      if (r != ARCHIVE_OK) return std::unexpected(archive_error("archive_read_data", in, path));
      const char* data = static_cast<const char*>(buffer);
      // All-zero blocks become holes: a sparse file stays sparse through export and load.
      for (size_t done = 0; done < length;) {
        size_t chunk = std::min(kBlock, length - done);
        bool zero = std::all_of(data + done, data + done + chunk, [](char c) { return c == 0; });
        if (!zero && pwrite(fd, data + done, chunk, offset + static_cast<off_t>(done)) !=
                         static_cast<ssize_t>(chunk)) {
          return sys_error("pwrite", path);
        }
        done += chunk;
      }
    }
    if (ftruncate(fd, size) != 0) return sys_error("ftruncate", path);
    return {};
  }

  Result<void> member(archive* in, archive_entry* entry) {
    auto parts = split_member_path(archive_entry_pathname(entry), what);
    if (!parts) return std::unexpected(parts.error());
    const std::string path = join(*parts);
    const mode_t type = archive_entry_filetype(entry);
    if (parts->empty()) {  // the tree's root
      if (type != AE_IFDIR) return plain_error("extract", what + ": the root is not a directory");
      return metadata(root_fd, "", entry, ".", true);
    }
    auto parent = open_parent(*parts, parts->size() - 1);
    if (!parent) return std::unexpected(parent.error());
    const std::string& leaf = parts->back();
    const std::string dir_path = path.substr(0, path.size() - leaf.size());

    if (whiteouts != Whiteouts::kAsFiles && leaf.starts_with(kWhiteoutPrefix)) {
      if (leaf == kOpaqueMarker) {
        if (whiteouts == Whiteouts::kToOverlay) {
          if (fsetxattr(parent->get(), kOverlayOpaqueXattr, "y", 1, 0) != 0) {
            return sys_error("fsetxattr",
                             std::string(kOverlayOpaqueXattr) + " on " + what + ": " + path);
          }
          return {};
        }
        auto names = read_dir_names(parent->get());
        if (!names) return std::unexpected(names.error());
        for (const std::string& name : *names) {
          if (created.contains(dir_path + name)) continue;
          if (auto removed = remove_tree(parent->get(), name); !removed) return removed;
        }
        return {};
      }
      const std::string hidden = leaf.substr(kWhiteoutPrefix.size());
      if (hidden.empty() || hidden == "." || hidden == "..")
        return plain_error("extract", what + ": bad whiteout " + path);
      if (whiteouts == Whiteouts::kApply) {
        if (created.contains(dir_path + hidden)) return {};
        return remove_tree(parent->get(), hidden);
      }
      if (auto cleared = clear(parent->get(), hidden, false); !cleared) return cleared;
      if (mknodat(parent->get(), hidden.c_str(), S_IFCHR | 0600, makedev(0, 0)) != 0)
        return sys_error("mknodat", "whiteout " + what + ": " + dir_path + hidden);
      created.insert(dir_path + hidden);
      return metadata(parent->get(), hidden, entry, dir_path + hidden, false);
    }

    created.insert(path);
    if (const char* link = archive_entry_hardlink(entry); link != nullptr) {
      auto target = split_member_path(link, what);
      if (!target) return std::unexpected(target.error());
      if (target->empty()) return plain_error("extract", what + ": hardlink " + path + " to /");
      auto target_parent = open_parent(*target, target->size() - 1);
      if (!target_parent) return std::unexpected(target_parent.error());
      if (auto cleared = clear(parent->get(), leaf, false); !cleared) return cleared;
      if (linkat(target_parent->get(), target->back().c_str(), parent->get(), leaf.c_str(), 0) !=
          0) {
        return sys_error("linkat", what + ": " + path + " to " + join(*target));
      }
      return {};
    }
    switch (type) {
      case AE_IFDIR:
        if (auto cleared = clear(parent->get(), leaf, true); !cleared) return cleared;
        if (mkdirat(parent->get(), leaf.c_str(), 0700) != 0 && errno != EEXIST)
          return sys_error("mkdirat", what + ": " + path);
        return metadata(parent->get(), leaf, entry, path, true);
      case AE_IFREG: {
        if (auto cleared = clear(parent->get(), leaf, false); !cleared) return cleared;
        UniqueFd fd(openat(parent->get(), leaf.c_str(),
                           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!fd) return sys_error("openat", what + ": " + path);
        if (auto wrote = file_data(in, fd.get(), path, archive_entry_size(entry)); !wrote)
          return wrote;
        return metadata(parent->get(), leaf, entry, path, false);
      }
      case AE_IFLNK: {
        if (auto cleared = clear(parent->get(), leaf, false); !cleared) return cleared;
        const char* target = archive_entry_symlink(entry);
        // The target is only data: it is resolved inside the sandbox, at run time.
        if (symlinkat(target == nullptr ? "" : target, parent->get(), leaf.c_str()) != 0)
          return sys_error("symlinkat", what + ": " + path);
        return metadata(parent->get(), leaf, entry, path, false);
      }
      case AE_IFIFO:
        if (auto cleared = clear(parent->get(), leaf, false); !cleared) return cleared;
        if (mknodat(parent->get(), leaf.c_str(), S_IFIFO | 0600, 0) != 0)
          return sys_error("mknodat", what + ": " + path);
        return metadata(parent->get(), leaf, entry, path, false);
      default:
        // A device node (a character device 0/0 too: only `.wh.NAME` members make whiteouts) is
        // dropped, not refused: images exported from old containers carry /dev entries, and a
        // rootfs must not bring its own devices. The edge says so on stderr.
        std::fprintf(stderr, "hutch image: %s: %s: device node dropped\n", what.c_str(),
                     path.c_str());
        return {};
    }
  }

  Result<void> finish_dir_times() {
    // Deepest first, so setting a child's times does not disturb its parent's afterwards.
    std::ranges::sort(dir_times, [](const auto& a, const auto& b) {
      return std::ranges::count(a.first, '/') > std::ranges::count(b.first, '/');
    });
    for (const auto& [path, time] : dir_times) {
      timespec times[2] = {time, time};
      if (path == ".") {
        if (futimens(root_fd, times) != 0) return sys_error("futimens", what + ": .");
        continue;
      }
      // Without following symlinks: a later member may have replaced a directory on the way
      // with a symlink out of the tree (fuzz/corpus/tar_fuzzer/regress_dir_times_*). Then, or
      // when it replaced the directory itself, its times no longer apply.
      // O_PATH: a directory of mode 0 still gets its times, as metadata() sets its mode.
      open_how how{};
      how.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
      how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS;
      UniqueFd dir(static_cast<int>(syscall(SYS_openat2, root_fd, path.c_str(), &how, sizeof how)));
      if (!dir && (errno == ELOOP || errno == ENOTDIR || errno == ENOENT)) continue;
      if (!dir) return sys_error("openat2", what + ": " + path);
      const std::string proc = "/proc/self/fd/" + std::to_string(dir.get());
      if (utimensat(AT_FDCWD, proc.c_str(), times, 0) != 0)
        return sys_error("utimensat", what + ": " + path);
    }
    return {};
  }
};

}  // namespace

hutch::Error archive_error(std::string_view step, archive* a, const std::string& what) {
  const char* message = archive_error_string(a);
  return Error{std::string(step), what + ": " + (message ? message : "unknown libarchive error"),
               archive_errno(a) > 0 ? archive_errno(a) : 0};
}

Result<void> write_tree(int root_fd, archive* out) {
  struct stat st;
  if (fstat(root_fd, &st) != 0) return sys_error("fstat", "tree root");
  auto xattrs = read_xattrs(root_fd, "");
  if (!xattrs) return std::unexpected(xattrs.error());
  TreeWriter writer{out, {}};
  return writer.directory(root_fd, "./", st, std::move(*xattrs));
}

Result<void> extract_tree(archive* in, int root_fd, Whiteouts whiteouts, const std::string& what) {
  TreeReader reader{root_fd, whiteouts, what, {}, {}};
  archive_entry* entry;
  while (true) {
    int r = archive_read_next_header(in, &entry);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
      return std::unexpected(archive_error("archive_read_next_header", in, what));
    if (auto done = reader.member(in, entry); !done) return done;
  }
  return reader.finish_dir_times();
}

}  // namespace hutch::image
