#include "runtime/layers/tree_digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "runtime/base/unique_fd.h"
#include "runtime/fs/tree_io.h"
#include "runtime/layers/sha256.h"

namespace hutch::layers {
namespace {

char type_letter(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return 'f';
    case S_IFDIR:
      return 'd';
    case S_IFLNK:
      return 'l';
    case S_IFCHR:
      return 'c';
    case S_IFBLK:
      return 'b';
    case S_IFIFO:
      return 'p';
    case S_IFSOCK:
      return 's';
  }
  return '?';
}

class Digester {
 public:
  explicit Digester(Sha256 hasher) : hasher_(std::move(hasher)) {}

  // Every value goes in as "<length>:<bytes>", so no choice of names can make two different
  // trees produce the same byte stream.
  void field(std::string_view value) {
    hasher_.update(std::to_string(value.size()));
    hasher_.update(":");
    hasher_.update(value);
  }

  Result<void> walk(int dir_fd, const std::string& rel) {
    auto names = HUTCH_TRY(read_dir_names(dir_fd));
    for (const std::string& name : names) {
      const std::string child_rel = rel.empty() ? name : rel + "/" + name;
      struct stat st;
      if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return sys_error("fstatat", child_rel);
      }
      HUTCH_TRY(record(dir_fd, name, child_rel, st));
      if (S_ISDIR(st.st_mode)) {
        UniqueFd child(
            open_noatime(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!child) return sys_error("openat", child_rel);
        HUTCH_TRY(walk(child.get(), child_rel));
      }
    }
    return {};
  }

  // One entry's record. `name` is empty for the root, which is `dir_fd` itself.
  Result<void> record(int dir_fd, const std::string& name, const std::string& rel,
                      const struct stat& st) {
    field(rel);
    if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) {
      auto [first, inserted] = links_.emplace(std::make_pair(st.st_dev, st.st_ino), rel);
      if (!inserted) {
        field("link");
        field(first->second);
        return {};
      }
    }
    field(std::string(1, type_letter(st.st_mode)));
    field(std::to_string(st.st_mode & 07777));
    field(std::to_string(st.st_uid));
    field(std::to_string(st.st_gid));
    if (S_ISREG(st.st_mode)) {
      field(std::to_string(st.st_size));
      auto content = HUTCH_TRY(hash_content(dir_fd, name, rel));
      field(content);
      bytes_ += static_cast<uint64_t>(st.st_size);
    } else if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
      ssize_t length = readlinkat(dir_fd, name.c_str(), target.data(), target.size());
      if (length < 0) return sys_error("readlinkat", rel);
      target.resize(static_cast<size_t>(length));
      field(target);
    } else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
      field(std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev)));
    }
    auto xattrs = HUTCH_TRY(read_xattrs(dir_fd, name));
    // What a copy into the store keeps (tree_copy.h), so a bake's upper digests as its copy does.
    drop_overlay_xattrs(xattrs, OverlayXattrs::kOpaqueOnly);
    field(std::to_string(xattrs.size()));
    for (const auto& [key, value] : xattrs) {
      field(key);
      field(value);
    }
    return {};
  }

  std::string finish() { return "sha256:" + hasher_.finish_hex(); }
  uint64_t bytes() const { return bytes_; }

 private:
  Result<std::string> hash_content(int dir_fd, const std::string& name, const std::string& rel) {
    UniqueFd fd(open_noatime(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return sys_error("openat", rel);
    auto content = HUTCH_TRY(Sha256::create());
    if (buffer_.empty()) buffer_.resize(1 << 20);
    // Holes hash as the zeros they read as, without reading them (SEEK_DATA/SEEK_HOLE).
    static const std::string kZeros(1 << 20, '\0');
    off_t offset = 0;
    while (true) {
      off_t data = lseek(fd.get(), offset, SEEK_DATA);
      if (data < 0) {
        if (errno != ENXIO) return sys_error("lseek(SEEK_DATA)", rel);
        data = lseek(fd.get(), 0, SEEK_END);  // a hole up to the end
        if (data < 0) return sys_error("lseek(SEEK_END)", rel);
      }
      while (offset < data) {
        size_t chunk = static_cast<size_t>(std::min<off_t>(data - offset, kZeros.size()));
        content.update(std::string_view(kZeros.data(), chunk));
        offset += static_cast<off_t>(chunk);
      }
      ssize_t got = pread(fd.get(), buffer_.data(), buffer_.size(), offset);
      if (got < 0) {
        if (errno == EINTR) continue;
        return sys_error("pread", rel);
      }
      if (got == 0) break;
      content.update(std::string_view(buffer_.data(), static_cast<size_t>(got)));
      offset += got;
    }
    return content.finish_hex();
  }

  Sha256 hasher_;
  std::map<std::pair<dev_t, ino_t>, std::string> links_;
  uint64_t bytes_ = 0;
  std::vector<char> buffer_;
};

}  // namespace

Result<TreeDigest> digest_tree_with_size(int dir_fd) {
  struct stat st;
  if (fstat(dir_fd, &st) != 0) return sys_error("fstat", "digest root");
  if (!S_ISDIR(st.st_mode)) return plain_error("digest tree", "the root is not a directory");
  auto hasher = HUTCH_TRY(Sha256::create());
  Digester digester(std::move(hasher));
  digester.field("hutch-tree-v1");
  HUTCH_TRY(digester.record(dir_fd, "", ".", st));
  HUTCH_TRY(digester.walk(dir_fd, ""));
  return TreeDigest{digester.finish(), digester.bytes()};
}

Result<std::string> digest_tree(int dir_fd) {
  auto digest = HUTCH_TRY(digest_tree_with_size(dir_fd));
  return std::move(digest.digest);
}

}  // namespace hutch::layers
