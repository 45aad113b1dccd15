// Private helpers of the file API: path validation, errno mapping and confined resolution.
#pragma once

#include <sys/stat.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/unique_fd.h"
#include "runtime/files/sandbox_fs.h"

namespace hutch::files::detail {

inline constexpr size_t kMaxPathBytes = 4096;
// Directory depth the recursive walks (remove, glob, grep) descend to: each level holds one fd.
inline constexpr int kMaxWalkDepth = 256;
// Files edit() rewrites and read_lines() windows are held in memory: capped.
inline constexpr uint64_t kMaxEditBytes = 64ull << 20;

// A validated, lexically normalized sandbox path: "/a/b/c" (no ".", "..", "//", trailing "/").
// ".." is resolved lexically and clamped at "/", as RESOLVE_IN_ROOT clamps it.
struct SandboxPath {
  std::string path;    // "/a/b/c", or "/"
  std::string parent;  // "/a/b" ("/" for a top-level entry and for "/" itself)
  std::string name;    // "c"; empty for "/"
  bool is_root() const { return name.empty(); }
};

// kInvalidPath unless `raw` is non-empty, absolute, at most 4096 bytes and free of NUL bytes;
// kPermissionDenied for /proc, /sys and anything under them (after normalization).
FsResult<SandboxPath> parse_path(std::string_view raw);
// "/a" + "b" -> "/a/b"; "/" + "b" -> "/b".
std::string join(std::string_view dir, std::string_view name);

std::unexpected<FsError> fail(Errc code, std::string message);
// "<syscall>(<path>): <strerror>", coded from errno (or `err`).
std::unexpected<FsError> sys_fail(std::string_view syscall, std::string_view path, int err = errno);

// kPermissionDenied when `fd` is on procfs, sysfs, devpts, cgroupfs or another kernel interface
// filesystem: writing there from the host as root would reach the host kernel, not the sandbox.
FsResult<void> check_fs(int fd, std::string_view path);
bool is_refused_fs(int fd);

// openat2(root_fd, path, flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), then check_fs. A final
// symlink is followed (inside the root) unless flags has O_NOFOLLOW. Retries EAGAIN/EINTR.
FsResult<UniqueFd> open_in_root(int root_fd, const std::string& path, int flags);
// A directory of the sandbox, O_RDONLY|O_DIRECTORY (usable for *at calls, getdents and fsync).
FsResult<UniqueFd> open_dir(int root_fd, const std::string& path);
// Like open_dir, creating missing directories (mode 0755, owned by `owner`) on the way.
FsResult<UniqueFd> make_dirs(int root_fd, const std::string& path, Owner owner);

// `name` in `dir_fd`, not following a final symlink: O_PATH|O_NOFOLLOW, then check_fs.
FsResult<UniqueFd> open_entry_nofollow(int dir_fd, const std::string& name,
                                       const std::string& path);
// A regular file opened O_RDONLY: O_NONBLOCK|O_NOCTTY while opening (a FIFO must not hang the
// daemon), refused unless S_ISREG.
FsResult<UniqueFd> open_regular(int root_fd, const std::string& path, struct stat* st);

// Reads `fd` to its end in chunks of up to 64 KiB, handing each to `each`; an error `each`
// returns stops the reading and is returned. A read error is reported against `path`.
FsResult<void> read_chunks(int fd, std::string_view path,
                           const std::function<FsResult<void>(std::string_view)>& each);

// Entry names of an open directory (not "." or ".."), sorted.
FsResult<std::vector<std::string>> read_dir_names(int dir_fd, const std::string& path);

Entry make_entry(std::string path, const struct stat& st);

}  // namespace hutch::files::detail
