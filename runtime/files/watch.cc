#include "runtime/files/watch.h"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/files/resolve.h"

namespace hutch::files {
namespace {

// IN_EXCL_UNLINK: an unlinked file still open somewhere must not keep reporting events.
constexpr uint32_t kWatchMask = IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR |
                                IN_EXCL_UNLINK;

// The prefix every path strictly below `dir` starts with.
std::string below(const std::string& dir) { return dir == "/" ? dir : dir + "/"; }

bool within(const std::string& path, const std::string& dir) {
  return path == dir || path.starts_with(below(dir));
}

}  // namespace

std::string_view watch_event_name(WatchEventKind kind) {
  switch (kind) {
    case WatchEventKind::kCreate:
      return "create";
    case WatchEventKind::kModify:
      return "modify";
    case WatchEventKind::kDelete:
      return "delete";
    case WatchEventKind::kMove:
      return "move";
    case WatchEventKind::kAttrib:
      return "attrib";
    case WatchEventKind::kOverflow:
      return "overflow";
    case WatchEventKind::kReset:
      return "reset";
    case WatchEventKind::kLimit:
      return "limit";
  }
  return "reset";
}

bool WatchBudget::try_acquire() {
  size_t used = used_.load();
  do {
    if (used >= limit_) return false;
  } while (!used_.compare_exchange_weak(used, used + 1));
  return true;
}

void WatchBudget::release() { used_.fetch_sub(1); }

Watcher::Watcher(int root_fd, std::string root_path, WatchOptions options, UniqueFd inotify)
    : root_fd_(root_fd),
      root_path_(std::move(root_path)),
      options_(std::move(options)),
      inotify_(std::move(inotify)) {
  options_.ring_capacity = std::max<size_t>(options_.ring_capacity, 1);
}

Watcher::~Watcher() {
  // Closing the inotify fd removes the watches themselves; only the shared budget needs giving
  // back.
  for (size_t i = 0; i < dirs_.size(); ++i) refund();
}

FsResult<std::unique_ptr<Watcher>> Watcher::open(int root_fd, std::string_view path,
                                                 WatchOptions options) {
  const detail::SandboxPath parsed = HUTCH_TRY(detail::parse_path(path));
  UniqueFd dir = HUTCH_TRY(detail::open_dir(root_fd, parsed.path));
  UniqueFd inotify(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!inotify) return detail::sys_fail("inotify_init1", parsed.path);
  std::unique_ptr<Watcher> watcher(
      new Watcher(root_fd, parsed.path, std::move(options), std::move(inotify)));
  const auto too_many = [&] {
    return detail::fail(Errc::kTooLarge, "watch(" + parsed.path +
                                             "): more directories than the watch budget (" +
                                             std::to_string(watcher->options_.max_watches) +
                                             " per watch, or the sandbox's shared budget) allows");
  };
  if (HUTCH_TRY(watcher->watch_open_dir(dir.get(), parsed.path)) != Added::kAdded) {
    return too_many();
  }
  if (watcher->options_.recursive) {
    std::vector<WatchEvent> unused;
    if (!watcher->scan(parsed.path, /*report=*/false, 1, unused)) return too_many();
  }
  return watcher;
}

bool Watcher::charge() {
  if (dirs_.size() >= options_.max_watches) return false;
  return !options_.shared_budget || options_.shared_budget->try_acquire();
}

void Watcher::refund() {
  if (options_.shared_budget) options_.shared_budget->release();
}

void Watcher::forget(int wd) {
  if (dirs_.erase(wd) != 0) refund();
}

FsResult<Watcher::Added> Watcher::watch_open_dir(int dir_fd, const std::string& path) {
  // Through the fd's magic link, not `path`: the inode watched is the one openat2 confined.
  const std::string link = "/proc/self/fd/" + std::to_string(dir_fd);
  const int wd = inotify_add_watch(inotify_.get(), link.c_str(), kWatchMask);
  if (wd < 0) {
    // ENOSPC: the host's max_user_watches, shared by every sandbox, is exhausted.
    if (errno == ENOSPC) return Added::kBudget;
    return detail::sys_fail("inotify_add_watch", path);
  }
  // inotify returned a watch this watcher has already: a rescan met it again (kKnown), or the same
  // inode was reached by a second path (a bind mount inside the tree), which keeps its first path.
  // Charged only once known to be new, so that a rescan with the budget used up is no failure.
  if (const auto known = dirs_.find(wd); known != dirs_.end()) {
    return known->second == path ? Added::kKnown : Added::kSkipped;
  }
  if (!charge()) {
    // Its IN_IGNORED finds no watch of that number and is skipped.
    inotify_rm_watch(inotify_.get(), wd);
    return Added::kBudget;
  }
  dirs_.emplace(wd, path);
  return Added::kAdded;
}

Watcher::Added Watcher::add_watch(const std::string& path) {
  // By name too, as the file API refuses them: parse_path rejects /proc and /sys.
  if (!detail::parse_path(path)) return Added::kSkipped;
  // O_NOFOLLOW: a subdirectory that is a symlink is an entry, never a directory to watch.
  auto dir = detail::open_in_root(root_fd_, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  if (!dir) return Added::kSkipped;  // gone already (its delete event follows), or refused
  auto added = watch_open_dir(dir->get(), path);
  return added ? *added : Added::kSkipped;
}

bool Watcher::scan(const std::string& path, bool report, int depth, std::vector<WatchEvent>& out) {
  auto dir = detail::open_in_root(root_fd_, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  if (!dir) return true;
  auto names = detail::read_dir_names(dir->get(), path);
  if (!names) return true;
  bool complete = true;
  for (const std::string& name : *names) {
    const std::string child = detail::join(path, name);
    struct stat st {};
    if (fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    const bool is_dir = S_ISDIR(st.st_mode);
    if (report) emit(WatchEventKind::kCreate, child, "", is_dir, out);
    if (!is_dir || depth >= detail::kMaxWalkDepth) continue;
    switch (add_watch(child)) {
      case Added::kAdded:
      case Added::kKnown:
        complete = scan(child, report, depth + 1, out) && complete;
        break;
      case Added::kBudget:
        emit(WatchEventKind::kLimit, child, "", true, out);
        complete = false;
        break;
      case Added::kSkipped:
        break;
    }
  }
  return complete;
}

void Watcher::directory_arrived(const std::string& path, std::vector<WatchEvent>& out) {
  switch (add_watch(path)) {
    case Added::kAdded:
      scan(path, /*report=*/true, 1, out);
      break;
    case Added::kBudget:
      emit(WatchEventKind::kLimit, path, "", true, out);
      break;
    case Added::kKnown:
    case Added::kSkipped:
      break;
  }
}

void Watcher::drop_tree(const std::string& path) {
  std::vector<int> gone;
  for (const auto& [wd, dir] : dirs_) {
    if (within(dir, path)) gone.push_back(wd);
  }
  for (int wd : gone) {
    // The IN_IGNORED this queues finds the watch forgotten already.
    inotify_rm_watch(inotify_.get(), wd);
    forget(wd);
  }
}

void Watcher::move_tree(const std::string& from, const std::string& to) {
  for (auto& [wd, dir] : dirs_) {
    if (within(dir, from)) dir = to + dir.substr(from.size());
  }
}

void Watcher::emit(WatchEventKind kind, std::string path, std::string from, bool is_dir,
                   std::vector<WatchEvent>& out) {
  WatchEvent event{next_seq_++, kind, std::move(path), std::move(from), is_dir};
  ring_.push_back(event);
  if (ring_.size() > options_.ring_capacity) ring_.pop_front();
  out.push_back(std::move(event));
}

FsResult<std::vector<WatchEvent>> Watcher::read_events() {
  std::vector<WatchEvent> out;
  // The IN_MOVED_FROM half of a move, until the next event says whether its IN_MOVED_TO half
  // follows (inotify queues the two back to back, with one cookie).
  struct PendingMove {
    uint32_t cookie = 0;
    std::string path;
    bool is_dir = false;
  };
  std::optional<PendingMove> pending;
  const auto moved_out = [&] {
    if (!pending) return;
    emit(WatchEventKind::kMove, "", pending->path, pending->is_dir, out);
    if (pending->is_dir) drop_tree(pending->path);
    pending.reset();
  };

  alignas(struct inotify_event) char buf[65536];
  for (;;) {
    const ssize_t n = ::read(inotify_.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) break;
      return detail::sys_fail("read", "inotify of " + root_path_);
    }
    if (n == 0) break;
    for (ssize_t off = 0; off < n;) {
      const auto* ev = reinterpret_cast<const struct inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(struct inotify_event) + ev->len);
      const bool pairs = (ev->mask & IN_MOVED_TO) != 0 && pending && pending->cookie == ev->cookie;
      if (!pairs) moved_out();

      if ((ev->mask & IN_Q_OVERFLOW) != 0) {
        emit(WatchEventKind::kOverflow, "", "", false, out);
        // Directories created during the gap have no watch yet: add them (no creates: the client
        // rescans after an overflow anyway).
        if (options_.recursive) scan(root_path_, /*report=*/false, 1, out);
        continue;
      }
      const auto dir = dirs_.find(ev->wd);
      if (dir == dirs_.end()) continue;  // a watch dropped already
      if ((ev->mask & IN_IGNORED) != 0) {
        forget(ev->wd);
        continue;
      }
      if ((ev->mask & IN_DELETE_SELF) != 0) {
        // Below the root, the parent's watch reported the delete; the root has no watched parent.
        if (dir->second == root_path_) emit(WatchEventKind::kDelete, root_path_, "", true, out);
        continue;
      }
      if ((ev->mask & IN_MOVE_SELF) != 0) {
        // Below the root, the parent's watch reported the move. The root itself moved: its new
        // place is unknown (its parent is not watched), so the watch ends rather than report
        // paths that are no longer true.
        if (dir->second == root_path_) {
          emit(WatchEventKind::kMove, "", root_path_, true, out);
          drop_tree(root_path_);
        }
        continue;
      }
      if (ev->len == 0) continue;
      const std::string path = detail::join(dir->second, ev->name);
      const bool is_dir = (ev->mask & IN_ISDIR) != 0;
      if ((ev->mask & IN_CREATE) != 0) {
        emit(WatchEventKind::kCreate, path, "", is_dir, out);
        if (is_dir && options_.recursive) directory_arrived(path, out);
      } else if ((ev->mask & IN_MODIFY) != 0) {
        emit(WatchEventKind::kModify, path, "", is_dir, out);
      } else if ((ev->mask & IN_ATTRIB) != 0) {
        emit(WatchEventKind::kAttrib, path, "", is_dir, out);
      } else if ((ev->mask & IN_DELETE) != 0) {
        emit(WatchEventKind::kDelete, path, "", is_dir, out);
      } else if ((ev->mask & IN_MOVED_FROM) != 0) {
        pending = PendingMove{ev->cookie, path, is_dir};
      } else if ((ev->mask & IN_MOVED_TO) != 0) {
        if (pairs) {
          std::string from = std::move(pending->path);
          pending.reset();
          if (is_dir) move_tree(from, path);
          emit(WatchEventKind::kMove, path, std::move(from), is_dir, out);
        } else {
          emit(WatchEventKind::kMove, path, "", is_dir, out);
          if (is_dir && options_.recursive) directory_arrived(path, out);
        }
      }
    }
  }
  // Drained: a lone IN_MOVED_FROM left the watched tree.
  moved_out();
  return out;
}

std::vector<WatchEvent> Watcher::events_since(uint64_t since) const {
  std::vector<WatchEvent> out;
  const uint64_t last = last_seq();
  const uint64_t oldest = ring_.empty() ? next_seq_ : ring_.front().seq;
  if (since > last || since + 1 < oldest) {
    WatchEvent reset;
    reset.kind = WatchEventKind::kReset;
    reset.seq = since > last ? last : oldest - 1;
    since = reset.seq;
    out.push_back(std::move(reset));
  }
  for (const WatchEvent& event : ring_) {
    if (event.seq > since) out.push_back(event);
  }
  return out;
}

}  // namespace hutch::files
