#include "daemon/service/watch_service.h"

#include <poll.h>

#include <cerrno>
#include <cstring>

namespace hutch::daemon {

files::FsResult<SandboxWatch::Batch> SandboxWatch::next(uint64_t since,
                                                        std::chrono::milliseconds wait) {
  Batch batch;
  batch.sandbox_gone = sandbox_.expired();
  // Polled without the lock (the fd lives as long as this object), so that clients of the same
  // watch, and WatchService::open, are not held up by a waiting one.
  if (!batch.sandbox_gone && since >= last_seq() && !directory_gone_.load()) {
    pollfd ready{.fd = inotify_fd_, .events = POLLIN, .revents = 0};
    if (::poll(&ready, 1, static_cast<int>(wait.count())) < 0 && errno != EINTR)
      return std::unexpected(files::FsError{
          files::Errc::kIo, std::string("poll(inotify fd): ") + std::strerror(errno)});
  }
  std::lock_guard lock(mutex_);
  auto drained = watcher_->read_events();
  if (!drained) return std::unexpected(drained.error());
  batch.events = watcher_->events_since(since);
  batch.last_seq = watcher_->last_seq();
  batch.directory_gone = watcher_->watch_count() == 0;
  directory_gone_.store(batch.directory_gone);
  return batch;
}

uint64_t SandboxWatch::last_seq() const {
  std::lock_guard lock(mutex_);
  return watcher_->last_seq();
}

std::expected<std::shared_ptr<SandboxWatch>, WatchService::OpenError> WatchService::open(
    const std::shared_ptr<Sandbox>& sandbox, const std::string& path, bool recursive) {
  std::lock_guard lock(mutex_);
  // Watches of deleted sandboxes, and of directories that went away, are dropped here.
  std::erase_if(watches_, [](const auto& entry) {
    return entry.second->sandbox_.expired() || entry.second->directory_gone_.load();
  });
  Key key{sandbox->id(), path, recursive};
  if (auto found = watches_.find(key); found != watches_.end()) return found->second;
  size_t of_sandbox = 0;
  for (const auto& [other, watch] : watches_) of_sandbox += std::get<0>(other) == sandbox->id();
  if (of_sandbox >= kMaxWatchesPerSandbox)
    return std::unexpected(service::ServiceError{ErrorKind::kConflict, "too_many_watches",
                                                 "sandbox " + sandbox->id() + " has " +
                                                     std::to_string(kMaxWatchesPerSandbox) +
                                                     " watched directories already"});
  auto root = sandbox->live().open_root();
  if (!root) return std::unexpected(service::from_runtime(root.error()));
  auto watch = std::make_shared<SandboxWatch>(sandbox, std::move(*root));
  files::WatchOptions options;
  options.recursive = recursive;
  auto watcher = files::Watcher::open(watch->root_.get(), path, options);
  if (!watcher) return std::unexpected(watcher.error());
  watch->watcher_ = std::move(*watcher);
  watch->inotify_fd_ = watch->watcher_->fd();
  watches_.emplace(key, watch);
  return watch;
}

}  // namespace hutch::daemon
