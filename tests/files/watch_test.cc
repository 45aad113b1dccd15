// File watch (runtime/files/watch.h): a plain tree on the host, and a real sandbox whose own
// processes write through its overlayfs root.
#include "runtime/files/watch.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <poll.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/live_sandbox.h"
#include "seccomp/default_program.h"
#include "tests/common/temp_dir.h"
#include "tests/common/wait.h"
#include "tests/files/fixture.h"

namespace hutch::files {
namespace {

using namespace std::chrono_literals;
using ::hutch::files::testing::code;
using ::hutch::files::testing::ok;
using Kind = WatchEventKind;

std::string show(const std::vector<WatchEvent>& events) {
  std::string text;
  for (const WatchEvent& e : events) {
    text += std::to_string(e.seq) + " " + std::string(watch_event_name(e.kind)) + " " + e.path;
    if (!e.from.empty()) text += " <- " + e.from;
    text += "\n";
  }
  return text;
}

bool has(const std::vector<WatchEvent>& events, Kind kind, const std::string& path,
         const std::string& from = "") {
  return std::any_of(events.begin(), events.end(), [&](const WatchEvent& e) {
    return e.kind == kind && e.path == path && e.from == from;
  });
}

size_t count(const std::vector<WatchEvent>& events, Kind kind) {
  return static_cast<size_t>(std::count_if(events.begin(), events.end(),
                                           [&](const WatchEvent& e) { return e.kind == kind; }));
}

// Polls the watcher's fd and drains it into `events` until `done` holds (or the timeout).
::testing::AssertionResult collect(Watcher& watcher, std::vector<WatchEvent>& events,
                                   const std::function<bool()>& done) {
  return hutch::testing::wait_until(
      [&] {
        struct pollfd pfd {
          watcher.fd(), POLLIN, 0
        };
        if (poll(&pfd, 1, 20) > 0) {
          auto got = watcher.read_events();
          EXPECT_TRUE(ok(got));
          if (got) events.insert(events.end(), got->begin(), got->end());
        }
        return done();
      },
      10s, "watch events; got:\n" + show(events));
}

std::unique_ptr<Watcher> open_watch(int root_fd, const std::string& path, WatchOptions options) {
  auto watcher = Watcher::open(root_fd, path, std::move(options));
  EXPECT_TRUE(ok(watcher));
  return watcher ? std::move(*watcher) : nullptr;
}

class WatchTest : public testing::FsTest {
 protected:
  void SetUp() override {
    FsTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_EQ(::mkdir(host("/w").c_str(), 0755), 0);
  }
  // Nothing pending: what is queued is read, and is none of it.
  static void expect_quiet(Watcher& watcher) {
    auto got = watcher.read_events();
    ASSERT_TRUE(ok(got));
    EXPECT_TRUE(got->empty()) << show(*got);
  }
};

TEST_F(WatchTest, ReportsCreateModifyAttribMoveDeleteWithSequenceNumbers) {
  auto watcher = open_watch(root_fd_.get(), "/w", {});
  ASSERT_TRUE(watcher);
  int flags = fcntl(watcher->fd(), F_GETFL);
  EXPECT_TRUE(flags & O_NONBLOCK);
  EXPECT_TRUE(fcntl(watcher->fd(), F_GETFD) & FD_CLOEXEC);
  expect_quiet(*watcher);

  put("/w/f", "one");
  ASSERT_EQ(::chmod(host("/w/f").c_str(), 0600), 0);
  ASSERT_EQ(::rename(host("/w/f").c_str(), host("/w/g").c_str()), 0);
  ASSERT_EQ(::mkdir(host("/w/d").c_str(), 0755), 0);
  ASSERT_EQ(::unlink(host("/w/g").c_str()), 0);
  std::vector<WatchEvent> events;
  ASSERT_TRUE(collect(*watcher, events, [&] { return has(events, Kind::kDelete, "/w/g"); }));
  std::vector<std::pair<Kind, std::string>> seen;
  for (const WatchEvent& e : events) seen.emplace_back(e.kind, e.path);
  const std::vector<std::pair<Kind, std::string>> expected = {
      {Kind::kCreate, "/w/f"}, {Kind::kModify, "/w/f"}, {Kind::kAttrib, "/w/f"},
      {Kind::kMove, "/w/g"},   {Kind::kCreate, "/w/d"}, {Kind::kDelete, "/w/g"}};
  EXPECT_EQ(seen, expected) << show(events);
  EXPECT_TRUE(has(events, Kind::kMove, "/w/g", "/w/f")) << show(events);
  EXPECT_TRUE(has(events, Kind::kCreate, "/w/d") && events[4].is_dir);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].seq, i + 1);
  EXPECT_EQ(watcher->last_seq(), events.size());
  // Not recursive: the new directory has no watch of its own.
  put("/w/d/inner", "x");
  EXPECT_EQ(watcher->watch_count(), 1u);
  expect_quiet(*watcher);
}

TEST_F(WatchTest, MovesInAndOutOfTheTreeAreReportedUnpaired) {
  put("/elsewhere", "x");
  auto watcher = open_watch(root_fd_.get(), "/w", {});
  ASSERT_TRUE(watcher);
  ASSERT_EQ(::rename(host("/elsewhere").c_str(), host("/w/in").c_str()), 0);
  ASSERT_EQ(::rename(host("/w/in").c_str(), host("/away").c_str()), 0);
  std::vector<WatchEvent> events;
  ASSERT_TRUE(collect(*watcher, events, [&] { return events.size() >= 2; }));
  EXPECT_TRUE(has(events, Kind::kMove, "/w/in", "")) << show(events);
  EXPECT_TRUE(has(events, Kind::kMove, "", "/w/in")) << show(events);
  EXPECT_EQ(events.size(), 2u) << show(events);

  // The watched directory itself moved away: said so, and the watch ends.
  events.clear();
  ASSERT_EQ(::rename(host("/w").c_str(), host("/w2").c_str()), 0);
  ASSERT_TRUE(collect(*watcher, events, [&] { return has(events, Kind::kMove, "", "/w"); }));
  EXPECT_EQ(watcher->watch_count(), 0u);
  put("/w2/later", "x");
  expect_quiet(*watcher);
}

TEST_F(WatchTest, DeletingTheWatchedDirectoryEndsTheWatch) {
  WatchOptions options;
  options.recursive = true;
  auto watcher = open_watch(root_fd_.get(), "/w", options);
  ASSERT_TRUE(watcher);
  ASSERT_EQ(::rmdir(host("/w").c_str()), 0);
  std::vector<WatchEvent> events;
  ASSERT_TRUE(collect(*watcher, events, [&] { return watcher->watch_count() == 0u; }));
  EXPECT_TRUE(has(events, Kind::kDelete, "/w")) << show(events);
}

TEST_F(WatchTest, RecursiveWatchesNewDirectoriesAndReportsWhatTheyHeldAlready) {
  ASSERT_EQ(::mkdir(host("/w/old").c_str(), 0755), 0);
  WatchOptions options;
  options.recursive = true;
  auto watcher = open_watch(root_fd_.get(), "/w", options);
  ASSERT_TRUE(watcher);
  EXPECT_EQ(watcher->watch_count(), 2u);
  // mkdir -p then a file in the deepest one, all before the watcher reads anything: only the
  // create of "a" reaches inotify, the rest is found by the scan of the new directory.
  std::filesystem::create_directories(host("/w/a/b/c"));
  put("/w/a/b/c/file", "x");
  put("/w/old/file", "y");
  std::vector<WatchEvent> events;
  ASSERT_TRUE(collect(*watcher, events, [&] {
    return has(events, Kind::kCreate, "/w/a/b/c/file") && has(events, Kind::kCreate, "/w/old/file");
  }));
  EXPECT_TRUE(has(events, Kind::kCreate, "/w/a"));
  EXPECT_TRUE(has(events, Kind::kCreate, "/w/a/b"));
  EXPECT_TRUE(has(events, Kind::kCreate, "/w/a/b/c"));
  EXPECT_EQ(watcher->watch_count(), 5u);
  // The new deepest directory is watched itself now.
  events.clear();
  put("/w/a/b/c/file", "changed");
  ASSERT_TRUE(
      collect(*watcher, events, [&] { return has(events, Kind::kModify, "/w/a/b/c/file"); }));

  // Moved within the tree: its watches follow it under the new path.
  events.clear();
  ASSERT_EQ(::rename(host("/w/a").c_str(), host("/w/z").c_str()), 0);
  put("/w/z/b/c/after", "x");
  ASSERT_TRUE(
      collect(*watcher, events, [&] { return has(events, Kind::kCreate, "/w/z/b/c/after"); }));
  EXPECT_TRUE(has(events, Kind::kMove, "/w/z", "/w/a")) << show(events);
  EXPECT_EQ(watcher->watch_count(), 5u);

  // Moved out: its three watches are dropped and nothing more is heard from it.
  events.clear();
  ASSERT_EQ(::rename(host("/w/z").c_str(), host("/gone").c_str()), 0);
  ASSERT_TRUE(collect(*watcher, events, [&] { return has(events, Kind::kMove, "", "/w/z"); }));
  EXPECT_EQ(watcher->watch_count(), 2u);
  put("/gone/b/c/late", "x");
  expect_quiet(*watcher);

  // Deleted: its watch goes with it.
  std::filesystem::remove_all(host("/w/old"));
  events.clear();
  ASSERT_TRUE(collect(*watcher, events, [&] { return watcher->watch_count() == 1u; }));
  EXPECT_TRUE(has(events, Kind::kDelete, "/w/old/file"));
  EXPECT_TRUE(has(events, Kind::kDelete, "/w/old"));
}

TEST_F(WatchTest, SymlinksAndDotDotStayInsideTheRoot) {
  // A link to the host directory (absolute host path, and relative past the root): neither is
  // watched, and neither resolves to the host directory when named as the watched path.
  ASSERT_EQ(::symlink(outside_.c_str(), host("/w/abs").c_str()), 0);
  ASSERT_EQ(::symlink("../../outside", host("/w/rel").c_str()), 0);
  WatchOptions options;
  options.recursive = true;
  auto watcher = open_watch(root_fd_.get(), "/w", options);
  ASSERT_TRUE(watcher);
  EXPECT_EQ(watcher->watch_count(), 1u);
  put_host(outside_ + "/new", "x");
  ASSERT_EQ(::chmod((outside_ + "/canary").c_str(), 0644), 0);
  expect_quiet(*watcher);
  ASSERT_EQ(::unlink((outside_ + "/new").c_str()), 0);

  EXPECT_EQ(code(Watcher::open(root_fd_.get(), "/w/abs", {})), Errc::kNotFound);
  EXPECT_EQ(code(Watcher::open(root_fd_.get(), "/w/rel", {})), Errc::kNotFound);
  EXPECT_EQ(code(Watcher::open(root_fd_.get(), "/../outside", {})), Errc::kNotFound);
  EXPECT_EQ(code(Watcher::open(root_fd_.get(), "/w/../../../outside", {})), Errc::kNotFound);
  // A link inside the tree is followed inside it, as the file API does.
  ASSERT_EQ(::symlink("/w", host("/link").c_str()), 0);
  auto through = open_watch(root_fd_.get(), "/link", {});
  ASSERT_TRUE(through);
  put("/w/via", "x");
  std::vector<WatchEvent> events;
  ASSERT_TRUE(collect(*through, events, [&] { return has(events, Kind::kCreate, "/link/via"); }));
  expect_outside_untouched();
}

TEST_F(WatchTest, ASymlinkSwappedInNeverGetsAHostDirectoryWatched) {
  // /w/x flips between a directory and a link leading out of the root (relative, so on the host
  // it really does reach the outside directory) while watchers are opened on it and a recursive
  // watcher of /w keeps adding watches for the directories moving in.
  ASSERT_EQ(::mkdir(host("/w/x").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("../../outside", host("/w/y").c_str()), 0);
  WatchOptions options;
  options.recursive = true;
  auto parent = open_watch(root_fd_.get(), "/w", options);
  ASSERT_TRUE(parent);
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    while (!stop.load()) {
      ::renameat2(AT_FDCWD, host("/w/x").c_str(), AT_FDCWD, host("/w/y").c_str(), RENAME_EXCHANGE);
    }
  });
  std::vector<std::unique_ptr<Watcher>> opened;
  size_t refused = 0;
  for (int i = 0; i < 400 && opened.size() < 16; ++i) {
    auto watcher = Watcher::open(root_fd_.get(), "/w/x", options);
    if (watcher) {
      opened.push_back(std::move(*watcher));
    } else {
      ++refused;
    }
    auto drained = parent->read_events();
    ASSERT_TRUE(ok(drained));
  }
  stop = true;
  swapper.join();
  EXPECT_FALSE(opened.empty()) << refused << " refused";
  opened.push_back(std::move(parent));

  put_host(outside_ + "/new", "x");
  for (auto& watcher : opened) {
    auto got = watcher->read_events();
    ASSERT_TRUE(ok(got));
    for (const WatchEvent& e : *got) {
      EXPECT_FALSE(e.path.ends_with("/new")) << "a host directory is watched: " << show(*got);
    }
  }
  ASSERT_EQ(::unlink((outside_ + "/new").c_str()), 0);
  expect_outside_untouched();
}

TEST_F(WatchTest, RefusesWhatTheFileApiRefuses) {
  put("/w/file", "x");
  EXPECT_EQ(code(Watcher::open(root_fd_.get(), "/w/file", {})), Errc::kNotDirectory);
  EXPECT_EQ(code(Watcher::open(root_fd_.get(), "/nope", {})), Errc::kNotFound);
  EXPECT_EQ(code(Watcher::open(root_fd_.get(), "relative", {})), Errc::kInvalidPath);
  ASSERT_EQ(::mkdir(host("/proc").c_str(), 0755), 0);
  EXPECT_EQ(code(Watcher::open(root_fd_.get(), "/proc", {})), Errc::kPermissionDenied);
  EXPECT_EQ(code(Watcher::open(root_fd_.get(), "/sys/kernel", {})), Errc::kPermissionDenied);
  // A recursive watch of "/" skips /proc by name.
  WatchOptions options;
  options.recursive = true;
  auto watcher = open_watch(root_fd_.get(), "/", options);
  ASSERT_TRUE(watcher);
  EXPECT_EQ(watcher->watch_count(), 2u);  // "/" and /w
}

TEST_F(WatchTest, QueueOverflowIsAnExplicitEventAndWatchingGoesOn) {
  ASSERT_EQ(::mkdir(host("/w/deep").c_str(), 0755), 0);
  WatchOptions options;
  options.recursive = true;
  // Exactly enough for the four directories: the rescan meets the watched ones again without
  // charging them twice.
  options.max_watches = 4;
  auto watcher = open_watch(root_fd_.get(), "/w", options);
  ASSERT_TRUE(watcher);
  // More events than the kernel queues for one instance (fs.inotify.max_queued_events).
  const size_t queue =
      std::stoul(testing::FsTest::slurp_host("/proc/sys/fs/inotify/max_queued_events"));
  const size_t files = queue / 2 + 64;
  for (size_t i = 0; i < files; ++i) {
    const std::string name = host("/w/f" + std::to_string(i));
    int fd = ::open(name.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ::close(fd);
    ASSERT_EQ(::unlink(name.c_str()), 0);
  }
  // Directories created during the gap, at any depth, are found by the rescan after the overflow.
  ASSERT_EQ(::mkdir(host("/w/late").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(host("/w/deep/late").c_str(), 0755), 0);
  std::vector<WatchEvent> events;
  ASSERT_TRUE(collect(*watcher, events, [&] { return count(events, Kind::kOverflow) == 1; }));
  EXPECT_EQ(watcher->watch_count(), 4u);
  EXPECT_EQ(count(events, Kind::kLimit), 0u) << show(events);
  events.clear();
  put("/w/late/after", "x");
  put("/w/deep/late/after", "x");
  ASSERT_TRUE(collect(*watcher, events, [&] {
    return has(events, Kind::kCreate, "/w/late/after") &&
           has(events, Kind::kCreate, "/w/deep/late/after");
  }));
}

TEST_F(WatchTest, BudgetIsEnforcedPerWatcherAndSharedAcrossWatchers) {
  ASSERT_EQ(::mkdir(host("/w/a").c_str(), 0755), 0);
  WatchOptions options;
  options.recursive = true;
  options.max_watches = 1;
  EXPECT_EQ(code(Watcher::open(root_fd_.get(), "/w", options)), Errc::kTooLarge);

  // Within budget at first; a directory beyond it is an explicit limit event, not a gap.
  options.max_watches = 2;
  auto watcher = open_watch(root_fd_.get(), "/w", options);
  ASSERT_TRUE(watcher);
  ASSERT_EQ(::mkdir(host("/w/b").c_str(), 0755), 0);
  std::vector<WatchEvent> events;
  ASSERT_TRUE(collect(*watcher, events, [&] { return has(events, Kind::kLimit, "/w/b"); }));
  EXPECT_TRUE(has(events, Kind::kCreate, "/w/b"));
  EXPECT_EQ(watcher->watch_count(), 2u);
  watcher.reset();

  // One budget for a sandbox: the second watcher gets what the first left over.
  auto shared = std::make_shared<WatchBudget>(3);
  options.max_watches = 100;
  options.shared_budget = shared;
  auto first = open_watch(root_fd_.get(), "/w", options);  // /w, /w/a, /w/b
  ASSERT_TRUE(first);
  EXPECT_EQ(shared->used(), 3u);
  EXPECT_EQ(code(Watcher::open(root_fd_.get(), "/w/a", options)), Errc::kTooLarge);
  EXPECT_EQ(shared->used(), 3u);
  first.reset();
  EXPECT_EQ(shared->used(), 0u);
  auto second = open_watch(root_fd_.get(), "/w/a", options);
  ASSERT_TRUE(second);
  EXPECT_EQ(shared->used(), 1u);
}

TEST_F(WatchTest, ResumesWithSinceAndResetsWhenTheRingMovedOn) {
  WatchOptions options;
  options.ring_capacity = 4;
  auto watcher = open_watch(root_fd_.get(), "/w", options);
  ASSERT_TRUE(watcher);
  for (int i = 0; i < 6; ++i) ASSERT_EQ(::mkdir(host("/w/d" + std::to_string(i)).c_str(), 0755), 0);
  std::vector<WatchEvent> events;
  ASSERT_TRUE(collect(*watcher, events, [&] { return events.size() == 6; }));
  EXPECT_EQ(watcher->last_seq(), 6u);

  auto resumed = watcher->events_since(4);
  ASSERT_EQ(resumed.size(), 2u) << show(resumed);
  EXPECT_EQ(resumed[0].seq, 5u);
  EXPECT_EQ(resumed[0].path, "/w/d4");
  EXPECT_EQ(resumed[1].path, "/w/d5");
  EXPECT_TRUE(watcher->events_since(6).empty());
  // The ring holds 3..6: from 2 on nothing is lost yet, from 1 on event 2 is.
  EXPECT_EQ(watcher->events_since(2).size(), 4u);
  auto lost = watcher->events_since(1);
  ASSERT_EQ(lost.size(), 5u) << show(lost);
  EXPECT_EQ(lost[0].kind, Kind::kReset);
  EXPECT_EQ(lost[0].seq, 2u);
  EXPECT_EQ(lost[1].seq, 3u);
  // A resume point this watcher never handed out.
  auto future = watcher->events_since(99);
  ASSERT_EQ(future.size(), 1u);
  EXPECT_EQ(future[0].kind, Kind::kReset);
  EXPECT_EQ(future[0].seq, 6u);
}

// A real sandbox: its processes write through its overlayfs root, the watcher uses the fd the
// daemon uses (LiveSandbox::open_root, an O_PATH fd of /proc/<init>/root).
class SandboxWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_FALSE(dir_.path().empty());
    SandboxSpec spec;
    spec.seccomp = default_seccomp_program();
    spec.limits.pids = 64;
    const std::string exec_socket = dir_.path() + "/exec.sock";
    const std::string supervisor_socket = dir_.path() + "/supervisor.sock";
    int ready[2];
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
    supervisor_ = fork();
    ASSERT_GE(supervisor_, 0);
    if (supervisor_ == 0) {
      close(ready[0]);
      _exit(serve_sandbox(spec, exec_socket, supervisor_socket, ready[1]));
    }
    close(ready[1]);
    auto ref = read_serve_ready(ready[0], 10s, exec_socket, supervisor_socket);
    close(ready[0]);
    ASSERT_TRUE(ref) << ref.error().message();
    auto connected = LiveSandbox::connect(*ref);
    ASSERT_TRUE(connected) << connected.error().message();
    sandbox_.emplace(std::move(*connected));
    auto root = sandbox_->open_root();
    ASSERT_TRUE(root) << root.error().message();
    root_ = std::move(*root);
  }

  void TearDown() override {
    root_.reset();
    if (sandbox_) {
      auto destroyed = sandbox_->destroy();
      EXPECT_TRUE(destroyed) << destroyed.error().message();
    }
    if (supervisor_ > 0) {
      int status = 0;
      EXPECT_EQ(waitpid(supervisor_, &status, 0), supervisor_);
    }
  }

  // Runs `script` with sh inside the sandbox; its exit code.
  int sh(const std::string& script) {
    ExecRequest request;
    request.argv = {"sh", "-c", script};
    request.env = {"PATH=/usr/bin:/bin", "HOME=/root"};
    UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
    request.stdin_fd = null.get();
    request.stdout_fd = null.get();
    request.stderr_fd = null.get();
    auto process = sandbox_->exec(request);
    EXPECT_TRUE(process) << process.error().message();
    if (!process) return -1;
    for (;;) {
      struct pollfd pfd {
        process->fd(), POLLIN, 0
      };
      poll(&pfd, 1, 10'000);
      auto exit = process->poll_exit();
      EXPECT_TRUE(exit) << exit.error().message();
      if (!exit) return -1;
      if (*exit) return (*exit)->exit_code;
    }
  }

  hutch::testing::TempDir dir_;
  pid_t supervisor_ = -1;
  std::optional<LiveSandbox> sandbox_;
  UniqueFd root_;
};

TEST_F(SandboxWatchTest, SeesWritesOfTheSandboxsProcessesThroughItsOverlayRoot) {
  ASSERT_EQ(sh("mkdir /watched"), 0);
  WatchOptions options;
  options.recursive = true;
  auto watcher = open_watch(root_.get(), "/watched", options);
  ASSERT_TRUE(watcher);
  {
    UniqueFd dir(openat(root_.get(), "watched", O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(dir);
    struct statfs fs {};
    ASSERT_EQ(fstatfs(dir.get(), &fs), 0);
    EXPECT_EQ(static_cast<long>(fs.f_type), OVERLAYFS_SUPER_MAGIC) << "not on the overlay root";
  }
  ASSERT_EQ(sh("cd /watched && echo a > f && echo b >> f && chmod 600 f && mv f g && "
               "mkdir -p a/b/c && echo x > a/b/c/file && ln -s /etc etc && rm g"),
            0);
  std::vector<WatchEvent> events;
  ASSERT_TRUE(collect(*watcher, events, [&] {
    return has(events, Kind::kDelete, "/watched/g") &&
           has(events, Kind::kCreate, "/watched/a/b/c/file");
  }));
  EXPECT_TRUE(has(events, Kind::kCreate, "/watched/f")) << show(events);
  EXPECT_TRUE(has(events, Kind::kModify, "/watched/f")) << show(events);
  EXPECT_TRUE(has(events, Kind::kAttrib, "/watched/f")) << show(events);
  EXPECT_TRUE(has(events, Kind::kMove, "/watched/g", "/watched/f")) << show(events);
  EXPECT_TRUE(has(events, Kind::kCreate, "/watched/a/b/c")) << show(events);
  EXPECT_TRUE(has(events, Kind::kCreate, "/watched/etc")) << show(events);
  EXPECT_EQ(watcher->watch_count(), 4u);  // the link to /etc is not a directory to watch

  // The new deepest directory is watched: a write in it by the sandbox is seen.
  events.clear();
  ASSERT_EQ(sh("echo y >> /watched/a/b/c/file && touch /etc/hostname"), 0);
  ASSERT_TRUE(
      collect(*watcher, events, [&] { return has(events, Kind::kModify, "/watched/a/b/c/file"); }));
  for (const WatchEvent& e : events) EXPECT_TRUE(e.path.starts_with("/watched/")) << show(events);
}

TEST_F(SandboxWatchTest, RefusesTheSandboxsKernelFilesystems) {
  EXPECT_EQ(code(Watcher::open(root_.get(), "/proc", {})), Errc::kPermissionDenied);
  EXPECT_EQ(code(Watcher::open(root_.get(), "/proc/self", {})), Errc::kPermissionDenied);
  // The sandbox's own devpts (runtime/fs/mount_plan.cc mounts one in every sandbox).
  EXPECT_EQ(code(Watcher::open(root_.get(), "/dev/pts", {})), Errc::kPermissionDenied);
}

}  // namespace
}  // namespace hutch::files
