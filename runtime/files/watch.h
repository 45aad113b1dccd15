// File watch over a sandbox's tree from the host: inotify(7), one watch per directory.
//
// The watched directory is resolved like every path of the file API (runtime/files/sandbox_fs.h):
// openat2(root_fd, path, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), procfs/sysfs/devpts trees
// refused. The watch is then added through /proc/self/fd/N of the resolved fd, never through a
// path string, so a symlink swapped in after the resolution cannot make it watch a host directory.
// inotify is per inode, so writes made by the sandbox's processes through its overlayfs mount are
// seen by a watch on that same mount (Linux 6.1, the oldest kernel hutch supports, included;
// fanotify filesystem marks are not an option on overlayfs).
//
// Recursive mode watches every directory below the watched one, and adds a watch for every
// directory created or moved in later. A file created in a new directory before its watch was
// added would be missed by inotify alone, so the new directory is scanned once its watch is in
// place and a create event is reported for each entry found (an entry created in the small window
// between the watch and the scan may be reported twice). Subdirectories that are symlinks are
// never followed, and subtrees on refused filesystems (a /proc or /dev/pts inside) are skipped.
// Watches of deleted or moved-away directories are dropped; a directory moved within the tree
// keeps its watches under its new path. When the watched directory itself is deleted or moved,
// a delete or move event says so and the watch ends (watch_count() is 0).
//
// Single-threaded: fd() is non-blocking and close-on-exec, for the caller to poll(2);
// read_events() drains it. Every event gets a sequence number and is kept in a bounded ring, so a
// client can resume with events_since(seq). Nothing is ever dropped silently: a full kernel queue
// (IN_Q_OVERFLOW) becomes an `overflow` event, a resume point older than the ring a `reset` event,
// and a directory left unwatched because the watch budget ran out a `limit` event.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/base/unique_fd.h"
#include "runtime/files/sandbox_fs.h"

namespace hutch::files {

enum class WatchEventKind {
  kCreate,
  kModify,
  kDelete,
  kMove,
  kAttrib,
  kOverflow,  // the kernel's queue overflowed (IN_Q_OVERFLOW): events were lost, rescan
  kReset,     // events_since: the resume point is no longer in the ring (or unknown): rescan
  kLimit,  // `path` is a directory left unwatched: the watch budget (or max_user_watches) ran out
};

// Stable lower-case name: "create", "modify", "delete", "move", "attrib", "overflow", "reset",
// "limit".
std::string_view watch_event_name(WatchEventKind kind);

struct WatchEvent {
  uint64_t seq = 0;  // 1, 2, 3, ... per watcher
  WatchEventKind kind = WatchEventKind::kCreate;
  // Absolute inside the sandbox. A move's destination; empty when a move left the watched tree,
  // and for overflow and reset.
  std::string path;
  // Moves only: the source, empty when the entry came from outside the watched tree. When both
  // ends are inside, the two inotify halves are paired by their cookie into this one event.
  std::string from;
  bool is_dir = false;
};

// A number of inotify watches that several watchers draw from: give every watcher of one sandbox
// the same budget so that the sandbox cannot exhaust the host's per-uid max_user_watches, which all
// sandboxes (and hutchd) share. Thread-safe: watchers of one budget may live on different threads.
class WatchBudget {
 public:
  explicit WatchBudget(size_t limit) : limit_(limit) {}
  bool try_acquire();
  void release();
  size_t used() const { return used_.load(); }
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  std::atomic<size_t> used_{0};
};

struct WatchOptions {
  bool recursive = false;
  size_t max_watches = 4096;                   // this watcher's own budget (directories)
  std::shared_ptr<WatchBudget> shared_budget;  // optional, drawn from as well (per sandbox)
  size_t ring_capacity = 4096;                 // events kept for events_since
};

class Watcher {
 public:
  // root_fd: an fd of the sandbox's "/" (O_PATH is enough), borrowed: used again for every
  // directory added later, so it must outlive the watcher. path: a directory inside the sandbox.
  // kNotDirectory when it is not a directory, kPermissionDenied under /proc, /sys or on a refused
  // filesystem, kTooLarge when the existing tree needs more watches than the budget allows.
  static FsResult<std::unique_ptr<Watcher>> open(int root_fd, std::string_view path,
                                                 WatchOptions options);
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;
  ~Watcher();

  // The inotify fd (O_NONBLOCK | O_CLOEXEC): poll it for POLLIN, then call read_events().
  int fd() const { return inotify_.get(); }
  // Drains the inotify fd: the new events, in order (empty when nothing was pending).
  FsResult<std::vector<WatchEvent>> read_events();
  // The events after `since` still in the ring. When some of them have left the ring, or `since`
  // is past the last event (a resume point of another watcher), a `reset` event comes first: its
  // seq is the last one the client cannot get, so that resuming from it is exact.
  std::vector<WatchEvent> events_since(uint64_t since) const;
  uint64_t last_seq() const { return next_seq_ - 1; }
  size_t watch_count() const { return dirs_.size(); }
  const std::string& path() const { return root_path_; }

 private:
  Watcher(int root_fd, std::string root_path, WatchOptions options, UniqueFd inotify);

  enum class Added { kAdded, kKnown, kSkipped, kBudget };
  // Adds a watch on the open directory `dir_fd` (at `path`). kKnown: watched already at `path`;
  // kSkipped: watched already at another path (a bind mount); kBudget: out of watches.
  FsResult<Added> watch_open_dir(int dir_fd, const std::string& path);
  // Adds a watch on the directory `path`, not following a final symlink. kSkipped: gone, not a
  // directory, refused (by name or filesystem) or watched already at another path.
  Added add_watch(const std::string& path);
  // Watches the subdirectories of `path` (already watched), depth first, descending into those
  // watched already too (the rescan after an overflow); with `report`, emits a create event for
  // every entry found. Returns false when the budget ran out.
  bool scan(const std::string& path, bool report, int depth, std::vector<WatchEvent>& out);
  // Drops the watches of `path` and of every directory below it.
  void drop_tree(const std::string& path);
  // Renames the watched directories under `from` to be under `to`.
  void move_tree(const std::string& from, const std::string& to);
  void forget(int wd);
  bool charge();
  void refund();
  void emit(WatchEventKind kind, std::string path, std::string from, bool is_dir,
            std::vector<WatchEvent>& out);
  void directory_arrived(const std::string& path, std::vector<WatchEvent>& out);

  int root_fd_;
  std::string root_path_;
  WatchOptions options_;
  UniqueFd inotify_;
  std::unordered_map<int, std::string> dirs_;  // watch descriptor -> sandbox path
  std::deque<WatchEvent> ring_;
  uint64_t next_seq_ = 1;
};

}  // namespace hutch::files
