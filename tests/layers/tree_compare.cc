#include "tests/layers/tree_compare.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <utility>

#include "runtime/base/unique_fd.h"
#include "runtime/fs/overlay_xattr.h"
#include "runtime/fs/tree_io.h"
#include "runtime/layers/sha256.h"

namespace hutch::testing {
namespace {

struct Entry {
  struct stat st;
  std::string content;  // sha256 of file data, or symlink target
  Xattrs xattrs;
  std::string link_to;  // first path of the same inode, if any earlier
};

// sha256 of a file's bytes; holes are hashed as zeros without reading them, so a large hole
// costs no I/O.
Result<std::string> content_sha256(int fd, off_t size) {
  auto hasher = layers::Sha256::create();
  if (!hasher) return std::unexpected(hasher.error());
  static const std::string zeros(1 << 20, '\0');
  std::string buffer(1 << 20, '\0');
  off_t offset = 0;
  while (offset < size) {
    off_t data = lseek(fd, offset, SEEK_DATA);
    if (data < 0) data = size;  // ENXIO: a hole to the end
    for (; offset < data; offset += std::min<off_t>(data - offset, zeros.size())) {
      hasher->update(
          std::string_view(zeros).substr(0, std::min<off_t>(data - offset, zeros.size())));
    }
    if (offset >= size) break;
    off_t hole = lseek(fd, offset, SEEK_HOLE);
    if (hole < 0) return sys_error("lseek", "SEEK_HOLE");
    while (offset < hole) {
      ssize_t got = pread(fd, buffer.data(), std::min<off_t>(hole - offset, buffer.size()), offset);
      if (got <= 0) return sys_error("pread", "content");
      hasher->update(std::string_view(buffer.data(), got));
      offset += got;
    }
  }
  return hasher->finish_hex();
}

std::string check(bool ok, const std::string& what) { return ok ? "" : what + "; "; }

// Path -> entry, read without changing atimes (O_NOATIME) so comparing twice gives one answer.
std::string scan(int dir_fd, const std::string& rel, std::map<std::string, Entry>& out,
                 std::map<std::pair<dev_t, ino_t>, std::string>& inodes) {
  auto names = read_dir_names(dir_fd);
  if (!names) return names.error().message();
  for (const std::string& name : *names) {
    const std::string path = rel + "/" + name;
    Entry entry;
    if (fstatat(dir_fd, name.c_str(), &entry.st, AT_SYMLINK_NOFOLLOW) != 0) return "stat " + path;
    auto xattrs = read_xattrs(dir_fd, name);
    if (!xattrs) return xattrs.error().message();
    entry.xattrs = *xattrs;
    if (!S_ISDIR(entry.st.st_mode)) {
      auto [first, inserted] =
          inodes.emplace(std::make_pair(entry.st.st_dev, entry.st.st_ino), path);
      if (!inserted) entry.link_to = first->second;
    }
    if (S_ISREG(entry.st.st_mode)) {
      UniqueFd fd(open_noatime(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
      if (!fd) return "open " + path;
      auto content = content_sha256(fd.get(), entry.st.st_size);
      if (!content) return path + ": " + content.error().message();
      entry.content = *content;
    } else if (S_ISLNK(entry.st.st_mode)) {
      char target[4096];
      ssize_t got = readlinkat(dir_fd, name.c_str(), target, sizeof target);
      if (got < 0) return "readlink " + path;
      entry.content.assign(target, got);
    }
    out.emplace(path, std::move(entry));
    if (S_ISDIR(out[path].st.st_mode)) {
      UniqueFd child(
          open_noatime(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!child) return "open " + path;
      if (auto failed = scan(child.get(), path, out, inodes); !failed.empty()) return failed;
    }
  }
  return "";
}

std::string scan_root(const std::string& root, std::map<std::string, Entry>& out) {
  UniqueFd fd(open_noatime(AT_FDCWD, root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return "open " + root;
  Entry entry;
  if (fstat(fd.get(), &entry.st) != 0) return "stat " + root;
  auto xattrs = read_xattrs(fd.get(), "");
  if (!xattrs) return xattrs.error().message();
  entry.xattrs = *xattrs;
  out.emplace(".", std::move(entry));
  std::map<std::pair<dev_t, ino_t>, std::string> inodes;
  return scan(fd.get(), ".", out, inodes);
}

std::string differences(const Entry& a, const Entry& b, bool with_atime) {
  std::string diff;
  diff += check((a.st.st_mode & S_IFMT) == (b.st.st_mode & S_IFMT), "type");
  diff += check(a.st.st_mode == b.st.st_mode, "mode");
  diff += check(a.st.st_uid == b.st.st_uid, "uid");
  diff += check(a.st.st_gid == b.st.st_gid, "gid");
  diff += check(a.st.st_rdev == b.st.st_rdev, "rdev");
  diff += check(a.st.st_nlink == b.st.st_nlink || S_ISDIR(a.st.st_mode), "nlink");
  if (!S_ISDIR(a.st.st_mode)) diff += check(a.st.st_size == b.st.st_size, "size");
  diff += check(a.content == b.content, "content");
  diff += check(a.xattrs == b.xattrs, "xattrs");
  diff += check(a.link_to == b.link_to, "hardlink identity");
  diff += check(
      a.st.st_mtim.tv_sec == b.st.st_mtim.tv_sec && a.st.st_mtim.tv_nsec == b.st.st_mtim.tv_nsec,
      "mtime");
  // readlink(2) updates a symlink's atime (there is no O_NOATIME for it), so copying a symlink
  // moves its source's atime; the copy carries the value from before.
  if (with_atime && !S_ISLNK(a.st.st_mode)) {
    diff += check(
        a.st.st_atim.tv_sec == b.st.st_atim.tv_sec && a.st.st_atim.tv_nsec == b.st.st_atim.tv_nsec,
        "atime");
  }
  return diff;
}

}  // namespace

void set_times(const std::string& path, long seconds) {
  const timespec times[2] = {{seconds, 123456789}, {seconds, 123456789}};
  utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW);
}

std::vector<std::string> compare_trees(const std::string& a, const std::string& b,
                                       bool with_atime) {
  std::map<std::string, Entry> left, right;
  if (auto failed = scan_root(a, left); !failed.empty()) return {failed};
  if (auto failed = scan_root(b, right); !failed.empty()) return {failed};
  std::vector<std::string> diffs;
  for (const auto& [path, entry] : left) {
    auto other = right.find(path);
    if (other == right.end()) {
      diffs.push_back(path + ": only in " + a);
      continue;
    }
    if (auto diff = differences(entry, other->second, with_atime); !diff.empty()) {
      diffs.push_back(path + ": " + diff);
    }
  }
  for (const auto& [path, entry] : right) {
    if (!left.contains(path)) diffs.push_back(path + ": only in " + b);
  }
  return diffs;
}

std::string build_every_kind(const std::string& root) {
  auto path = [&](const char* rel) { return root + "/" + rel; };
  auto write_file = [](const std::string& file, std::string_view text) {
    UniqueFd fd(open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    return fd && write(fd.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
  };
  if (mkdir(path("etc").c_str(), 0755) != 0) return "mkdir etc";
  if (!write_file(path("etc/hostname"), "baked\n")) return "write hostname";
  // A deleted lower file: overlayfs's whiteout is a character device 0/0.
  if (mknod(path("etc/deleted").c_str(), S_IFCHR | 0000, makedev(0, 0)) != 0) return "mknod";
  // An opaque directory (rm -rf dir; mkdir dir in the upper).
  if (mkdir(path("opaque").c_str(), 0750) != 0) return "mkdir opaque";
  if (setxattr(path("opaque").c_str(), kOverlayOpaqueXattr, "y", 1, 0) != 0) return "opaque";
  if (!write_file(path("opaque/new"), "new")) return "write opaque/new";
  if (!write_file(path("xattr-file"), "x")) return "write xattr-file";
  if (setxattr(path("xattr-file").c_str(), "user.comment", "hello\0bin", 9, 0) != 0) {
    return "user xattr";
  }
  if (!write_file(path("owned"), "mine")) return "write owned";
  if (chown(path("owned").c_str(), 1000000005, 1000000007) != 0) return "chown owned";
  if (!write_file(path("setuid"), "#!/bin/true\n")) return "write setuid";
  if (chmod(path("setuid").c_str(), 04755) != 0) return "chmod setuid";
  if (mkdir(path("sticky").c_str(), 01777) != 0 || chmod(path("sticky").c_str(), 01777) != 0) {
    return "sticky";
  }
  if (symlink("../etc/hostname", path("opaque/relative").c_str()) != 0) return "symlink";
  if (symlink("/etc/passwd", path("absolute").c_str()) != 0) return "symlink absolute";
  if (lchown(path("absolute").c_str(), 1000000001, 1000000001) != 0) return "lchown";
  // user.* xattrs are not allowed on symlinks; trusted.* are (overlayfs puts its own there).
  if (lsetxattr(path("absolute").c_str(), "trusted.note", "on a link", 9, 0) != 0) {
    return "symlink xattr";
  }
  if (!write_file(path("hard-a"), "shared inode")) return "write hard-a";
  if (link(path("hard-a").c_str(), path("sticky/hard-b").c_str()) != 0) return "link";
  {
    UniqueFd fd(open(path("sparse").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    if (!fd || pwrite(fd.get(), "head", 4, 0) != 4) return "sparse head";
    if (pwrite(fd.get(), "tail", 4, (1L << 27) + 4096) != 4) return "sparse tail";
  }
  if (mkfifo(path("fifo").c_str(), 0640) != 0) return "mkfifo";
  // Timestamps last, children before their directories.
  for (const char* rel :
       {"etc/hostname", "etc/deleted", "opaque/new", "opaque/relative", "xattr-file", "owned",
        "setuid", "absolute", "hard-a", "sparse", "fifo", "etc", "opaque", "sticky"}) {
    set_times(path(rel), 1000000000);
  }
  set_times(root, 1100000000);
  return "";
}

}  // namespace hutch::testing
