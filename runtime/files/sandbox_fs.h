// File operations on a sandbox's tree from the host, confined to the sandbox's root.
//
// Every path is absolute inside the sandbox and resolved with openat2(RESOLVE_IN_ROOT |
// RESOLVE_NO_MAGICLINKS) from an fd of the sandbox's "/": "..", absolute and intermediate
// symlinks, /proc/<pid>/{root,fd,cwd} links, and a symlink swapped in during the call all stay
// inside. The last component is operated on through its parent's fd with no-follow semantics.
// Trees on procfs/sysfs/devpts are refused. Entries this creates are chowned to `owner` (the host
// ids of the sandbox's root), never left to host root.
//
// Every operation runs with the calling thread's fsuid/fsgid switched to `owner` and back
// (identity.h), so the sandbox root's permissions apply: a file that root could only reach through
// CAP_DAC_OVERRIDE (mode 0600 of another in-sandbox user) is kPermissionDenied. An operation whose
// switch does not take effect is refused (kIo) before it touches the tree. Other threads of the
// process keep their ids.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/unique_fd.h"

namespace hutch::files {

enum class Errc {
  kInvalidPath,       // not absolute, NUL byte, too long, "/" where a file is needed, ...
  kNotFound,          // file_not_found
  kPermissionDenied,  // EACCES/EPERM/EROFS, or a refused filesystem (/proc, /sys)
  kIsDirectory,
  kNotDirectory,
  kAlreadyExists,
  kNotEmpty,
  kNoMatch,         // edit: `old` does not occur
  kNotUnique,       // edit: `old` occurs more than once and replace_all is false
  kTooLarge,        // a size cap was hit (file too large to edit, ...)
  kNotRegularFile,  // a device, FIFO or socket where a write, edit or move needs a regular file
  kNoSpace,         // ENOSPC/EDQUOT: the sandbox's disk quota is full
  kIo,              // anything else: the message has the syscall, path and errno text
};

// Stable snake_case name of a code: "file_not_found", "permission_denied", "is_directory",
// "invalid_path", "not_a_directory", "already_exists", "not_empty", "no_match", "not_unique",
// "too_large", "not_a_regular_file", "insufficient_storage", "io_error".
std::string_view errc_name(Errc code);

struct FsError {
  Errc code;
  std::string message;  // "openat2(/etc/x): No such file or directory"
};

template <class T>
using FsResult = std::expected<T, FsError>;

struct Owner {
  uid_t uid;
  gid_t gid;
};

struct Entry {
  std::string path;  // absolute inside the sandbox
  std::string type;  // "file", "directory", "symlink", "other"
  bool is_dir = false;
  uint64_t size = 0;
  uint32_t mode = 0;                       // permission bits (07777)
  int64_t modified_ns = 0;                 // mtime, ns since the epoch
  std::optional<std::string> link_target;  // symlinks: readlink text, not followed
};

struct ReadResult {  // Deep Agents `read`: a window of lines
  std::string content;
  uint64_t total_lines = 0;
  uint64_t start_line = 0;              // 0-based index of the first returned line
  uint64_t end_line = 0;                // one past the last returned line
  std::optional<uint64_t> next_offset;  // set when more lines follow
};

struct GrepMatch {
  std::string path;
  uint64_t line = 0;  // 1-based
  std::string text;   // the line without its newline
};

struct GrepResult {
  std::vector<GrepMatch> matches;
  bool truncated = false;  // max_count (or the internal cap) was reached
};

// Writes a file atomically: an unnamed O_TMPFILE file in the target's directory (open(2)), written,
// fsync'd, fchown'd and linked or renamed over the target by commit(), so that a crash of the
// daemon leaves nothing behind. Where the filesystem has no O_TMPFILE (overlayfs before Linux 6.6)
// or HUTCH_FILES_NAMED_TEMP is set (tests of that fallback), the file is named from the start;
// to replace an existing target an unnamed file is named just before the rename. Named temp files
// live in the staging directory kStagingDir of the sandbox's "/" when the target is on the same
// mount (SandboxFs::remove_leftovers() empties it after a crash), else next to the target.
// Destroying the writer uncommitted removes the temp file. begin_write, commit() and the removal
// act as the sandbox's root, like every SandboxFs operation; write() only writes to the open file.
class AtomicWriter {
 public:
  AtomicWriter(AtomicWriter&&) noexcept;
  AtomicWriter& operator=(AtomicWriter&&) noexcept;
  ~AtomicWriter();
  FsResult<void> write(const char* data, size_t size);
  FsResult<void> commit();
  uint64_t bytes_written() const { return written_; }

 private:
  friend class SandboxFs;
  AtomicWriter() = default;
  static bool named_temps_forced();
  // Gives the file a temp name (link_file: links the open O_TMPFILE file; else creates file_) in
  // the staging directory when it is on dir_'s mount, else in dir_; temp_dir_ is where it lives.
  FsResult<void> create_named(bool link_file);
  void remove_staging();
  UniqueFd dir_;
  UniqueFd file_;
  UniqueFd root_dir_;  // the sandbox's "/" while the staging directory is in use
  UniqueFd temp_dir_;  // where temp_name_ lives; empty while the file is unnamed
  std::string temp_name_;
  int root_fd_ = -1;  // borrowed from the SandboxFs
  Owner owner_{};
  std::string final_name_;
  uint64_t written_ = 0;
  uint64_t max_bytes_ = 0;
  bool committed_ = false;
};

// The directory of named temp files in the sandbox's "/" (reserved: see AtomicWriter).
inline constexpr std::string_view kStagingDir = ".hutch-tmp";

class SandboxFs {
 public:
  // root_fd: O_PATH|O_DIRECTORY fd of the sandbox's "/", borrowed (must outlive this object).
  // owner: the host ids of the sandbox's root, from the id map the sandbox was created with.
  SandboxFs(int root_fd, Owner owner) : root_fd_(root_fd), owner_(owner) {}

  // A regular file, opened O_RDONLY (for streaming it out).
  FsResult<UniqueFd> open_read(std::string_view path) const;
  // Parents are created when missing (owned by `owner`, mode 0755). mode: of a new file (an
  // existing file's mode is kept unless given). max_bytes: 0 = no cap, else write() fails
  // kTooLarge. An existing target that is not a regular file or a symlink (a device, FIFO or
  // socket) is refused with kNotRegularFile and left in place; so are "/" and directories
  // (kIsDirectory).
  FsResult<AtomicWriter> begin_write(std::string_view path, std::optional<uint32_t> mode,
                                     uint64_t max_bytes = 0) const;
  FsResult<uint64_t> write_file(std::string_view path, std::string_view content,
                                std::optional<uint32_t> mode = std::nullopt) const;
  FsResult<std::string> read_file(std::string_view path, uint64_t max_bytes) const;

  FsResult<Entry> stat(std::string_view path) const;  // does not follow a final symlink
  FsResult<std::vector<Entry>> list(std::string_view path) const;  // sorted by name
  FsResult<void> mkdir(std::string_view path, bool parents, uint32_t mode = 0755) const;
  // Renames; `to`'s parents are created. Refuses to replace an existing `to` unless overwrite.
  // Neither `from` nor `to` may be a device, FIFO or socket (kNotRegularFile): a move never takes
  // away a node the sandbox relies on, e.g. /dev/null.
  FsResult<void> move(std::string_view from, std::string_view to, bool overwrite) const;
  // Recursive; never follows symlinks (a symlink is removed, not its target). "/" is refused.
  FsResult<void> remove(std::string_view path, bool recursive) const;
  // Removes the staging directory of named temp files (and what a crashed writer left in it).
  // For adoption after a daemon crash, before any request is served.
  FsResult<void> remove_leftovers() const;

  // Deep Agents semantics (see ../shared/PROTOCOLS.md).
  FsResult<ReadResult> read_lines(std::string_view path, uint64_t offset, uint64_t limit) const;
  // Returns the number of occurrences replaced.
  FsResult<uint64_t> edit(std::string_view path, std::string_view old_text,
                          std::string_view new_text, bool replace_all) const;
  // Regular files only, sorted paths. No "/" in pattern: basenames at any depth. "**" does not
  // enter dot-dirs. "{a,b}" expands. Symlinks are not followed.
  FsResult<std::vector<std::string>> glob(std::string_view pattern,
                                          std::string_view base = "/") const;
  // Literal substring search under path (a file or a directory, recursive), optional glob filter
  // on file names, at most max_count matches (0: internal cap 10000).
  FsResult<GrepResult> grep(std::string_view literal, std::string_view path,
                            std::optional<std::string_view> glob_filter, uint64_t max_count) const;

 private:
  int root_fd_;
  Owner owner_;
};

}  // namespace hutch::files
