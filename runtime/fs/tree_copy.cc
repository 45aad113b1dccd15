#include "runtime/fs/tree_copy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <map>
#include <utility>
#include <vector>

#include "runtime/base/unique_fd.h"
#include "runtime/fs/tree_io.h"

namespace hutch {
namespace {

constexpr size_t kBufferSize = 1 << 20;

bool is_whiteout(const struct stat& st) { return S_ISCHR(st.st_mode) && st.st_rdev == 0; }

class Copier {
 public:
  Copier(int dst_root_fd, OverlayXattrs keep) : dst_root_fd_(dst_root_fd), keep_(keep) {}

  // Copies the contents of `src` into the existing, empty `dst`; `rel` names `dst` in errors and
  // hardlink paths ("" for the root).
  Result<void> copy_children(int src, int dst, const std::string& rel) {
    auto names = HUTCH_TRY(read_dir_names(src));
    for (const std::string& name : names) {
      const std::string child_rel = rel.empty() ? name : rel + "/" + name;
      auto copied = copy_entry(src, dst, name, child_rel);
      if (!copied) return copied;
    }
    return {};
  }

  // Ownership, xattrs, mode and times of a directory, once its contents are in place (creating
  // them changed its mtime).
  Result<void> finish_dir(int src, int dst, const struct stat& st, const std::string& rel) {
    if (fchown(dst, st.st_uid, st.st_gid) != 0) return sys_error("fchown", shown(rel));
    HUTCH_TRY(copy_xattrs(src, dst, ""));
    if (fchmod(dst, st.st_mode & 07777) != 0) return sys_error("fchmod", shown(rel));
    const timespec times[2] = {st.st_atim, st.st_mtim};
    if (futimens(dst, times) != 0) return sys_error("futimens", shown(rel));
    ++stats_.dirs;
    return {};
  }

  const TreeStats& stats() const { return stats_; }

 private:
  static std::string shown(const std::string& rel) { return rel.empty() ? "." : rel; }

  Result<void> copy_entry(int src, int dst, const std::string& name, const std::string& rel) {
    struct stat st;
    if (fstatat(src, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return sys_error("fstatat", rel);
    }
    if (S_ISDIR(st.st_mode)) return copy_dir(src, dst, name, rel, st);

    // A second name of an inode already copied becomes a link to that copy. Whiteouts are
    // hardlinks too (overlayfs shares one whiteout inode since Linux 5.8).
    const std::pair<dev_t, ino_t> inode{st.st_dev, st.st_ino};
    if (st.st_nlink > 1) {
      auto first = links_.find(inode);
      if (first != links_.end()) {
        if (linkat(dst_root_fd_, first->second.c_str(), dst, name.c_str(), 0) != 0) {
          return sys_error("linkat", first->second + " -> " + rel);
        }
        if (S_ISREG(st.st_mode)) ++stats_.files;
        if (is_whiteout(st)) ++stats_.whiteouts;
        return {};
      }
    }

    Result<void> made;
    if (S_ISREG(st.st_mode)) {
      made = copy_file(src, dst, name, rel, st);
    } else if (S_ISLNK(st.st_mode)) {
      made = copy_symlink(src, dst, name, rel, st);
    } else if (is_whiteout(st) || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
      made = copy_node(src, dst, name, rel, st);
    } else {
      return plain_error("copy tree", rel + ": device node " + std::to_string(major(st.st_rdev)) +
                                          ":" + std::to_string(minor(st.st_rdev)) +
                                          " refused (only 0:0 whiteouts belong in a layer)");
    }
    if (!made) return made;
    if (st.st_nlink > 1) links_.emplace(inode, rel);
    return {};
  }

  Result<void> copy_dir(int src, int dst, const std::string& name, const std::string& rel,
                        const struct stat& st) {
    UniqueFd src_dir(
        open_noatime(src, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!src_dir) return sys_error("openat", rel);
    if (mkdirat(dst, name.c_str(), 0700) != 0) return sys_error("mkdirat", rel);
    UniqueFd dst_dir(openat(dst, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dst_dir) return sys_error("openat", rel);
    HUTCH_TRY(copy_children(src_dir.get(), dst_dir.get(), rel));
    return finish_dir(src_dir.get(), dst_dir.get(), st, rel);
  }

  Result<void> copy_file(int src, int dst, const std::string& name, const std::string& rel,
                         const struct stat& st) {
    UniqueFd in(open_noatime(src, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!in) return sys_error("openat", rel);
    UniqueFd out(
        openat(dst, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) return sys_error("openat", rel);
    HUTCH_TRY(copy_data(in.get(), out.get(), st.st_size, rel));
    // chown before chmod: chown clears setuid/setgid bits.
    if (fchown(out.get(), st.st_uid, st.st_gid) != 0) return sys_error("fchown", rel);
    HUTCH_TRY(copy_xattrs(src, dst, name));
    if (fchmod(out.get(), st.st_mode & 07777) != 0) return sys_error("fchmod", rel);
    const timespec times[2] = {st.st_atim, st.st_mtim};
    if (futimens(out.get(), times) != 0) return sys_error("futimens", rel);
    ++stats_.files;
    stats_.bytes += static_cast<uint64_t>(st.st_size);
    return {};
  }

  // Copies the data extents only, so holes stay holes; the final ftruncate restores a trailing
  // hole. copy_file_range lets the kernel move the bytes (or reflink them); filesystems or kernels
  // that refuse it (EXDEV across some filesystems, EOPNOTSUPP, ...) fall back to pread/pwrite.
  Result<void> copy_data(int in, int out, off_t size, const std::string& rel) {
    off_t offset = 0;
    while (offset < size) {
      off_t data = lseek(in, offset, SEEK_DATA);
      if (data < 0) {
        if (errno == ENXIO) break;  // only a hole is left
        return sys_error("lseek(SEEK_DATA)", rel);
      }
      off_t hole = lseek(in, data, SEEK_HOLE);
      if (hole < 0) return sys_error("lseek(SEEK_HOLE)", rel);
      HUTCH_TRY(copy_range(in, out, data, hole, rel));
      offset = hole;
    }
    if (ftruncate(out, size) != 0) return sys_error("ftruncate", rel);
    return {};
  }

  Result<void> copy_range(int in, int out, off_t begin, off_t end, const std::string& rel) {
    off_t in_offset = begin;
    off_t out_offset = begin;
    while (use_copy_file_range_ && in_offset < end) {
      ssize_t moved = copy_file_range(in, &in_offset, out, &out_offset,
                                      static_cast<size_t>(end - in_offset), 0);
      if (moved > 0) continue;
      if (moved == 0) return {};  // the source shrank under us
      if (errno == EINTR) continue;
      if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
        use_copy_file_range_ = false;
        break;
      }
      return sys_error("copy_file_range", rel);
    }
    if (buffer_.empty() && in_offset < end) buffer_.resize(kBufferSize);
    while (in_offset < end) {
      size_t want = std::min(buffer_.size(), static_cast<size_t>(end - in_offset));
      ssize_t got = pread(in, buffer_.data(), want, in_offset);
      if (got < 0) {
        if (errno == EINTR) continue;
        return sys_error("pread", rel);
      }
      if (got == 0) return {};
      for (ssize_t done = 0; done < got;) {
        ssize_t wrote =
            pwrite(out, buffer_.data() + done, static_cast<size_t>(got - done), in_offset + done);
        if (wrote < 0) {
          if (errno == EINTR) continue;
          return sys_error("pwrite", rel);
        }
        done += wrote;
      }
      in_offset += got;
    }
    return {};
  }

  Result<void> copy_symlink(int src, int dst, const std::string& name, const std::string& rel,
                            const struct stat& st) {
    std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
    ssize_t length = readlinkat(src, name.c_str(), target.data(), target.size());
    if (length < 0) return sys_error("readlinkat", rel);
    if (static_cast<size_t>(length) >= target.size()) {
      return plain_error("copy tree", rel + ": symlink changed while copying");
    }
    target.resize(static_cast<size_t>(length));
    if (symlinkat(target.c_str(), dst, name.c_str()) != 0) return sys_error("symlinkat", rel);
    return finish_node(src, dst, name, rel, st, /*chmod=*/false);
  }

  Result<void> copy_node(int src, int dst, const std::string& name, const std::string& rel,
                         const struct stat& st) {
    if (mknodat(dst, name.c_str(), (st.st_mode & S_IFMT) | 0600, st.st_rdev) != 0) {
      return sys_error("mknodat", rel);
    }
    if (is_whiteout(st)) ++stats_.whiteouts;
    return finish_node(src, dst, name, rel, st, /*chmod=*/true);
  }

  // Metadata of an entry that is not opened (symlink, whiteout, fifo, socket): by name with
  // AT_SYMLINK_NOFOLLOW. A symlink has no mode of its own to set.
  Result<void> finish_node(int src, int dst, const std::string& name, const std::string& rel,
                           const struct stat& st, bool chmod) {
    if (fchownat(dst, name.c_str(), st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return sys_error("fchownat", rel);
    }
    HUTCH_TRY(copy_xattrs(src, dst, name));
    if (chmod && fchmodat(dst, name.c_str(), st.st_mode & 07777, 0) != 0) {
      return sys_error("fchmodat", rel);
    }
    const timespec times[2] = {st.st_atim, st.st_mtim};
    if (utimensat(dst, name.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
      return sys_error("utimensat", rel);
    }
    return {};
  }

  Result<void> copy_xattrs(int src, int dst, const std::string& name) {
    auto xattrs = HUTCH_TRY(read_xattrs(src, name));
    drop_overlay_xattrs(xattrs, keep_);
    return write_xattrs(dst, name, xattrs);
  }

  int dst_root_fd_;
  OverlayXattrs keep_;
  TreeStats stats_;
  // (st_dev, st_ino) of a multiply-linked source inode -> its first copy, relative to the root.
  std::map<std::pair<dev_t, ino_t>, std::string> links_;
  bool use_copy_file_range_ = true;
  std::vector<char> buffer_;
};

Result<void> strip_entry(int dir_fd, const std::string& name, const std::string& rel,
                         OverlayXattrs keep) {
  auto xattrs = HUTCH_TRY(read_xattrs(dir_fd, name));
  for (const auto& [key, value] : xattrs) {
    if (!is_dropped_overlay_xattr(key, keep)) continue;
    HUTCH_TRY(remove_xattr(dir_fd, name, key));
  }
  struct stat st;
  if (fstatat(dir_fd, name.empty() ? "." : name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return sys_error("fstatat", rel);
  if (!S_ISDIR(st.st_mode)) return {};
  UniqueFd dir(name.empty() ? ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0)
                            : open_noatime(dir_fd, name.c_str(),
                                           O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return sys_error("openat", rel);
  auto names = HUTCH_TRY(read_dir_names(dir.get()));
  for (const std::string& child : names) {
    auto stripped = strip_entry(dir.get(), child, rel == "." ? child : rel + "/" + child, keep);
    if (!stripped) return stripped;
  }
  return {};
}

}  // namespace

Result<void> strip_overlay_xattrs(int root_fd, OverlayXattrs keep) {
  return strip_entry(root_fd, "", ".", keep);
}

Result<TreeStats> copy_tree(int src_dir_fd, int dst_parent_fd, const std::string& dst_name,
                            OverlayXattrs keep) {
  struct stat st;
  if (fstat(src_dir_fd, &st) != 0) return sys_error("fstat", "copy source");
  if (!S_ISDIR(st.st_mode)) return plain_error("copy tree", "the source is not a directory");
  if (mkdirat(dst_parent_fd, dst_name.c_str(), 0700) != 0) return sys_error("mkdirat", dst_name);
  UniqueFd dst(
      openat(dst_parent_fd, dst_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dst) return sys_error("openat", dst_name);
  Copier copier(dst.get(), keep);
  HUTCH_TRY(copier.copy_children(src_dir_fd, dst.get(), ""));
  HUTCH_TRY(copier.finish_dir(src_dir_fd, dst.get(), st, ""));
  return copier.stats();
}

}  // namespace hutch
