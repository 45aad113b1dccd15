// File watches for GET /v1/sandboxes/{id}/watch: one files::Watcher per (sandbox, directory,
// recursive), shared by every client watching the same, kept while the sandbox lives so that a
// client that reconnects resumes from its last sequence number. A watcher owns its own fd of the
// sandbox's "/" (the Watcher borrows it for every directory it adds later), so it never depends
// on the Sandbox object outliving it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <expected>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "daemon/service/error.h"
#include "daemon/service/sandbox.h"
#include "runtime/base/unique_fd.h"
#include "runtime/files/watch.h"

namespace hutch::daemon {

inline constexpr size_t kMaxWatchesPerSandbox = 8;

class SandboxWatch {
 public:
  SandboxWatch(std::weak_ptr<Sandbox> sandbox, UniqueFd root)
      : sandbox_(std::move(sandbox)), root_(std::move(root)) {}

  struct Batch {
    std::vector<files::WatchEvent> events;  // after the `since` given (a reset first if needed)
    uint64_t last_seq = 0;
    bool sandbox_gone = false;    // deleted: the stream ends
    bool directory_gone = false;  // the watched directory was deleted or moved: the stream ends
  };
  // Waits up to `wait` for events after `since` (an empty batch: nothing happened).
  files::FsResult<Batch> next(uint64_t since, std::chrono::milliseconds wait);
  uint64_t last_seq() const;
  bool sandbox_alive() const { return !sandbox_.expired(); }

 private:
  friend class WatchService;
  std::weak_ptr<Sandbox> sandbox_;
  UniqueFd root_;             // before watcher_: the watcher borrows it
  mutable std::mutex mutex_;  // watcher_ (single-threaded)
  std::unique_ptr<files::Watcher> watcher_;
  int inotify_fd_ = -1;  // watcher_->fd(), set once before the watch is shared
  std::atomic<bool> directory_gone_{false};
};

class WatchService {
 public:
  using OpenError = std::variant<service::ServiceError, files::FsError>;
  // Errors: too_many_watches (409, kMaxWatchesPerSandbox directories per sandbox), the runtime's
  // (the sandbox's root), and the watcher's (not a directory, refused filesystem, too large).
  std::expected<std::shared_ptr<SandboxWatch>, OpenError> open(
      const std::shared_ptr<Sandbox>& sandbox, const std::string& path, bool recursive);

 private:
  using Key = std::tuple<std::string, std::string, bool>;  // sandbox id, path, recursive
  std::mutex mutex_;
  std::map<Key, std::shared_ptr<SandboxWatch>> watches_;
};

}  // namespace hutch::daemon
