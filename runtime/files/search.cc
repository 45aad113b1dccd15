// glob and grep: walks of a sandbox's tree through directory fds, never following symlinks.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "runtime/base/error.h"
#include "runtime/files/glob.h"
#include "runtime/files/identity.h"
#include "runtime/files/resolve.h"
#include "runtime/files/sandbox_fs.h"

namespace hutch::files {

using detail::fail;
using detail::join;
using detail::parse_path;
using detail::sys_fail;

namespace {

constexpr uint64_t kGrepDefaultCap = 10000;
// Longer matching lines are cut: a minified bundle must not turn into megabytes per match.
constexpr size_t kMaxMatchText = 4096;
constexpr size_t kBinaryProbe = 8192;

// A subdirectory `name` of `dir_fd`, opened without following a symlink, on an allowed fs.
// Empty when it is not (or no longer) a plain directory we may enter.
UniqueFd open_subdir(int dir_fd, const std::string& name) {
  int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  UniqueFd out(fd);
  if (out && detail::is_refused_fs(out.get())) out.reset();
  return out;
}

FsResult<std::vector<std::string>> glob_patterns(std::string_view pattern) {
  if (pattern.empty()) return fail(Errc::kInvalidPath, "glob: empty pattern");
  if (pattern.size() > detail::kMaxPathBytes || pattern.find('\0') != std::string_view::npos) {
    return fail(Errc::kInvalidPath, "glob: pattern too long or contains a NUL byte");
  }
  auto expanded = expand_braces(pattern);
  if (!expanded) {
    return fail(Errc::kTooLarge, "glob: pattern expands to more than " +
                                     std::to_string(kMaxBraceExpansions) + " alternatives");
  }
  return *expanded;
}

class GlobWalk {
 public:
  explicit GlobWalk(std::set<std::string>& out) : out_(out) {}

  void walk(int dir_fd, const std::string& dir, const std::vector<std::string>& pat, size_t pi,
            int depth) {
    if (depth > detail::kMaxWalkDepth || pi >= pat.size()) return;
    const std::string& comp = pat[pi];
    const bool last = pi + 1 == pat.size();
    if (comp == "**") {
      if (!last) walk(dir_fd, dir, pat, pi + 1, depth);
      auto names = detail::read_dir_names(dir_fd, dir);
      if (!names) return;
      for (const std::string& name : *names) {
        if (name.starts_with(".")) continue;  // "**" does not enter (or match) dot-entries
        struct stat st {};
        if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISREG(st.st_mode) && last) out_.insert(join(dir, name));
        if (S_ISDIR(st.st_mode)) {
          if (UniqueFd sub = open_subdir(dir_fd, name)) {
            walk(sub.get(), join(dir, name), pat, pi, depth + 1);
          }
        }
      }
      return;
    }
    if (!has_wildcard(comp)) {
      visit(dir_fd, dir, unescape(comp), pat, pi, last, depth);
      return;
    }
    auto names = detail::read_dir_names(dir_fd, dir);
    if (!names) return;
    for (const std::string& name : *names) {
      if (match_name(comp, name)) visit(dir_fd, dir, name, pat, pi, last, depth);
    }
  }

 private:
  void visit(int dir_fd, const std::string& dir, const std::string& name,
             const std::vector<std::string>& pat, size_t pi, bool last, int depth) {
    struct stat st {};
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
    if (last) {
      if (S_ISREG(st.st_mode)) out_.insert(join(dir, name));
      return;
    }
    if (!S_ISDIR(st.st_mode)) return;
    if (UniqueFd sub = open_subdir(dir_fd, name)) {
      walk(sub.get(), join(dir, name), pat, pi + 1, depth + 1);
    }
  }

  std::set<std::string>& out_;
};

// File-name filter of grep: a pattern without "/" matches the base name, one with "/" the path
// relative to the searched directory.
class NameFilter {
 public:
  static FsResult<NameFilter> make(std::optional<std::string_view> glob) {
    NameFilter filter;
    if (!glob || glob->empty()) return filter;
    const std::vector<std::string> patterns = HUTCH_TRY(glob_patterns(*glob));
    for (const std::string& pattern : patterns) {
      filter.patterns_.push_back(split_pattern(pattern));
      filter.basename_only_.push_back(pattern.find('/') == std::string::npos);
    }
    filter.active_ = true;
    return filter;
  }

  bool matches(const std::vector<std::string>& rel) const {
    if (!active_) return true;
    for (size_t i = 0; i < patterns_.size(); ++i) {
      if (basename_only_[i]) {
        if (patterns_[i].size() == 1 && !rel.empty() && match_name(patterns_[i][0], rel.back())) {
          return true;
        }
      } else if (match_path(patterns_[i], rel)) {
        return true;
      }
    }
    return false;
  }

 private:
  bool active_ = false;
  std::vector<std::vector<std::string>> patterns_;
  std::vector<bool> basename_only_;
};

class GrepWalk {
 public:
  GrepWalk(std::string_view literal, uint64_t cap, const NameFilter& filter, GrepResult& out)
      : literal_(literal), cap_(cap), filter_(filter), out_(out) {}

  bool done() const { return out_.truncated; }

  void walk(int dir_fd, const std::string& dir, std::vector<std::string>& rel, int depth) {
    if (depth > detail::kMaxWalkDepth) return;
    auto names = detail::read_dir_names(dir_fd, dir);
    if (!names) return;
    for (const std::string& name : *names) {
      if (done()) return;
      struct stat st {};
      if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      rel.push_back(name);
      if (S_ISDIR(st.st_mode)) {
        if (UniqueFd sub = open_subdir(dir_fd, name)) {
          walk(sub.get(), join(dir, name), rel, depth + 1);
        }
      } else if (S_ISREG(st.st_mode) && filter_.matches(rel)) {
        int fd =
            openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        UniqueFd file(fd);
        struct stat fst {};
        if (file && fstat(file.get(), &fst) == 0 && S_ISREG(fst.st_mode)) {
          search(file.get(), join(dir, name));
        }
      }
      rel.pop_back();
    }
  }

  // Streams the file: memory stays bounded by the chunk, the kept line prefix and the tail
  // that carries a match across chunk boundaries. Files with a NUL byte in their first 8 KiB
  // are binary and skipped (as grep -I and ripgrep do).
  void search(int fd, const std::string& path) {
    const size_t keep = literal_.empty() ? 0 : literal_.size() - 1;
    std::string text;  // the current line, up to kMaxMatchText bytes
    std::string tail;  // its last `keep` bytes
    bool matched = literal_.empty();
    bool pending = false;  // bytes seen since the last '\n'
    uint64_t line = 1;
    bool first_chunk = true;
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (first_chunk &&
          std::memchr(buf, '\0', std::min(static_cast<size_t>(n), kBinaryProbe)) != nullptr) {
        return;
      }
      first_chunk = false;
      const char* pos = buf;
      const char* end = buf + n;
      while (pos < end) {
        const char* nl = static_cast<const char*>(std::memchr(pos, '\n', end - pos));
        std::string_view seg(pos, (nl != nullptr ? nl : end) - pos);
        if (!matched) {
          if (seg.find(literal_) != std::string_view::npos) {
            matched = true;
          } else if (!tail.empty()) {
            std::string joint = tail;
            joint.append(seg.substr(0, std::min(seg.size(), keep)));
            matched = joint.find(literal_) != std::string::npos;
          }
          if (keep != 0) {
            tail.append(seg.substr(seg.size() > keep ? seg.size() - keep : 0));
            if (tail.size() > keep) tail.erase(0, tail.size() - keep);
          }
        }
        if (text.size() < kMaxMatchText) {
          text.append(seg.substr(0, kMaxMatchText - text.size()));
        }
        pending = true;
        if (nl == nullptr) break;
        if (!finish_line(path, line, text, matched)) return;
        tail.clear();
        matched = literal_.empty();
        pending = false;
        ++line;
        pos = nl + 1;
      }
    }
    if (pending) finish_line(path, line, text, matched);
  }

 private:
  // false once the cap is passed.
  bool finish_line(const std::string& path, uint64_t line, std::string& text, bool matched) {
    if (matched) {
      if (out_.matches.size() >= cap_) {
        out_.truncated = true;
        return false;
      }
      out_.matches.push_back(GrepMatch{path, line, text});
    }
    text.clear();
    return true;
  }

  std::string_view literal_;
  uint64_t cap_;
  const NameFilter& filter_;
  GrepResult& out_;
};

}  // namespace

FsResult<std::vector<std::string>> SandboxFs::glob(std::string_view pattern,
                                                   std::string_view base) const {
  const std::vector<std::string> patterns = HUTCH_TRY(glob_patterns(pattern));
  const detail::SandboxPath base_path = HUTCH_TRY(parse_path(base));
  auto identity = HUTCH_TRY(detail::OwnerIdentity::enter(owner_));

  std::set<std::string> found;
  GlobWalk walker(found);
  for (const std::string& one : patterns) {
    // An absolute pattern is anchored at the sandbox's "/", whatever `base` says.
    const bool absolute = one.starts_with("/");
    std::vector<std::string> parts = split_pattern(one);
    if (std::find(parts.begin(), parts.end(), "..") != parts.end()) {
      return fail(Errc::kInvalidPath, "glob(" + std::string(pattern) + "): \"..\" is not allowed");
    }
    if (parts.empty()) continue;
    // No "/": base names at any depth.
    if (one.find('/') == std::string::npos) parts.insert(parts.begin(), "**");
    const std::string start = absolute ? "/" : base_path.path;
    const UniqueFd dir = HUTCH_TRY(detail::open_dir(root_fd_, start));
    walker.walk(dir.get(), start, parts, 0, 0);
  }
  return std::vector<std::string>(found.begin(), found.end());
}

FsResult<GrepResult> SandboxFs::grep(std::string_view literal, std::string_view path,
                                     std::optional<std::string_view> glob_filter,
                                     uint64_t max_count) const {
  const detail::SandboxPath p = HUTCH_TRY(parse_path(path));
  const NameFilter filter = HUTCH_TRY(NameFilter::make(glob_filter));
  auto identity = HUTCH_TRY(detail::OwnerIdentity::enter(owner_));
  const UniqueFd fd =
      HUTCH_TRY(detail::open_in_root(root_fd_, p.path, O_RDONLY | O_NONBLOCK | O_NOCTTY));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return sys_fail("fstat", p.path);

  GrepResult out;
  GrepWalk walker(literal, max_count != 0 ? max_count : kGrepDefaultCap, filter, out);
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> rel;
    walker.walk(fd.get(), p.path, rel, 0);
  } else if (S_ISREG(st.st_mode)) {
    if (filter.matches({p.name})) walker.search(fd.get(), p.path);
  } else {
    return fail(Errc::kInvalidPath, "grep(" + p.path + "): not a regular file or directory");
  }
  return out;
}

}  // namespace hutch::files
