// What the red team tries: bad paths, ".." and symlink escapes, /proc magic links, kernel
// filesystems, and a symlink swapped in while requests run.
#include <linux/magic.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/files/fixture.h"

namespace hutch::files::testing {
namespace {

TEST_F(FsTest, MalformedPathsAreInvalid) {
  const std::string nul("/a\0b", 4);
  const std::string too_long = "/" + std::string(4096, 'a');
  for (std::string_view bad :
       {std::string_view(""), std::string_view("relative/x"), std::string_view("x"),
        std::string_view(nul), std::string_view(too_long)}) {
    SCOPED_TRACE(std::string(bad.substr(0, 16)));
    EXPECT_EQ(code(fs().read_file(bad, 0)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().open_read(bad)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().write_file(bad, "x")), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().begin_write(bad, std::nullopt)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().stat(bad)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().list(bad)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().mkdir(bad, true)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().move(bad, "/x", true)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().move("/x", bad, true)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().remove(bad, true)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().read_lines(bad, 0, 10)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().edit(bad, "a", "b", false)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().grep("a", bad, std::nullopt, 0)), Errc::kInvalidPath);
    EXPECT_EQ(code(fs().glob("*", bad)), Errc::kInvalidPath);
  }
  EXPECT_EQ(code(fs().glob(nul, "/")), Errc::kInvalidPath);
  EXPECT_EQ(code(fs().grep("a", "/", nul, 0)), Errc::kInvalidPath);
  expect_outside_untouched();
}

TEST_F(FsTest, DotDotIsClampedAtTheRoot) {
  ASSERT_TRUE(ok(fs().write_file("/../../outside/x", "inside")));
  EXPECT_EQ(slurp_host(host("/outside/x")), "inside");
  EXPECT_EQ(code(fs().read_file("/../outside/canary", 0)), Errc::kNotFound);
  EXPECT_EQ(code(fs().remove("/a/../../outside/canary", false)), Errc::kNotFound);
  auto listed = fs().list("/..");
  ASSERT_TRUE(ok(listed));
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].path, "/outside");
  EXPECT_EQ(code(fs().remove("/..", true)), Errc::kPermissionDenied);  // that is "/"
  expect_outside_untouched();
}

TEST_F(FsTest, AbsoluteSymlinksResolveInsideTheRoot) {
  put("/etc/passwd", "sandbox passwd\n");
  ASSERT_EQ(::symlink("/etc", host("/etc-link").c_str()), 0);
  ASSERT_EQ(::symlink("/etc/passwd", host("/passwd-link").c_str()), 0);
  ASSERT_EQ(::symlink("/etc/shadow", host("/shadow-link").c_str()), 0);  // the host has one
  auto via_dir = fs().read_file("/etc-link/passwd", 0);
  ASSERT_TRUE(ok(via_dir));
  EXPECT_EQ(*via_dir, "sandbox passwd\n");
  auto via_file = fs().read_file("/passwd-link", 0);
  ASSERT_TRUE(ok(via_file));
  EXPECT_EQ(*via_file, "sandbox passwd\n");
  EXPECT_EQ(code(fs().read_file("/shadow-link", 0)), Errc::kNotFound);
  EXPECT_EQ(code(fs().read_file("/etc-link/shadow", 0)), Errc::kNotFound);
  auto grep = fs().grep("root", "/etc-link", std::nullopt, 0);
  ASSERT_TRUE(ok(grep));
  EXPECT_TRUE(grep->matches.empty());
}

TEST_F(FsTest, IntermediateSymlinksToTheHostNeverLeaveTheRoot) {
  ASSERT_EQ(::symlink(outside_.c_str(), host("/abs").c_str()), 0);
  ASSERT_EQ(::symlink("../outside", host("/rel").c_str()), 0);
  ASSERT_EQ(::symlink("../../../../../../../..", host("/up").c_str()), 0);
  const std::string outside_rel = outside_.substr(1);  // "tmp/hutch-test-…/outside"
  for (const std::string& dir : {std::string("/abs"), std::string("/rel"), "/up/" + outside_rel}) {
    SCOPED_TRACE(dir);
    EXPECT_EQ(code(fs().read_file(dir + "/canary", 0)), Errc::kNotFound);
    EXPECT_EQ(code(fs().open_read(dir + "/canary")), Errc::kNotFound);
    EXPECT_EQ(code(fs().read_lines(dir + "/canary", 0, 10)), Errc::kNotFound);
    EXPECT_EQ(code(fs().stat(dir + "/canary")), Errc::kNotFound);
    EXPECT_EQ(code(fs().list(dir)), Errc::kNotFound);
    EXPECT_EQ(code(fs().edit(dir + "/canary", "host", "pwned", true)), Errc::kNotFound);
    EXPECT_EQ(code(fs().move(dir + "/canary", "/stolen", true)), Errc::kNotFound);
    EXPECT_EQ(code(fs().remove(dir + "/canary", true)), Errc::kNotFound);
    EXPECT_EQ(code(fs().grep("canary", dir, std::nullopt, 0)), Errc::kNotFound);
    EXPECT_EQ(code(fs().glob("*", dir)), Errc::kNotFound);
    // Creating through the link: refused (the link dangles inside the root) or made inside.
    if (fs().write_file(dir + "/new", "x")) {
      EXPECT_TRUE(std::filesystem::exists(root_ + outside_ + "/new")) << dir;
    }
  }
  // A final symlink to a host file: written over (replaced), never through.
  ASSERT_EQ(::symlink((outside_ + "/canary").c_str(), host("/final").c_str()), 0);
  EXPECT_EQ(code(fs().read_file("/final", 0)), Errc::kNotFound);
  ASSERT_TRUE(ok(fs().write_file("/final", "replaced")));
  EXPECT_TRUE(S_ISREG(lstat_host(host("/final")).st_mode));
  ASSERT_TRUE(ok(fs().remove("/abs", true)));  // the link only
  EXPECT_FALSE(std::filesystem::exists(host("/abs")));
  expect_outside_untouched();
}

TEST_F(FsTest, SymlinksInsideTheRootStillWork) {
  make_dir("/usr");
  make_dir("/usr/lib");
  ASSERT_EQ(::symlink("usr/lib", host("/lib").c_str()), 0);  // merged /usr
  ASSERT_TRUE(ok(fs().write_file("/lib/libx.so", "elf")));
  EXPECT_EQ(slurp_host(host("/usr/lib/libx.so")), "elf");
  ASSERT_TRUE(ok(fs().mkdir("/lib/sub/dir", true)));
  EXPECT_TRUE(std::filesystem::is_directory(host("/usr/lib/sub/dir")));
  auto listed = fs().list("/lib");
  ASSERT_TRUE(ok(listed));
  EXPECT_EQ(listed->size(), 2u);
}

TEST_F(FsTest, SymlinkLoopsAreRefused) {
  ASSERT_EQ(::symlink("loop2", host("/loop1").c_str()), 0);
  ASSERT_EQ(::symlink("loop1", host("/loop2").c_str()), 0);
  auto result = fs().read_file("/loop1", 0);
  EXPECT_EQ(code(result), Errc::kPermissionDenied);
  EXPECT_FALSE(fs().write_file("/loop1/x", "x"));
}

TEST_F(FsTest, ProcSelfRootSymlinkWithoutProcStaysInside) {
  ASSERT_EQ(::symlink("/proc/self/root", host("/self").c_str()), 0);
  EXPECT_EQ(code(fs().read_file("/self/etc/hostname", 0)), Errc::kNotFound);
  EXPECT_EQ(code(fs().list("/self")), Errc::kNotFound);
}

// A sandbox without /sys (hutch mounts none) or with /proc unmounted: the names are refused all
// the same, and the daemon never creates them.
TEST_F(FsTest, ProcAndSysAreRefusedByNameWithoutTheirFilesystems) {
  for (const char* path : {"/sys/kernel/x", "/sys", "/proc/new", "/a/../proc/x", "//sys/x"}) {
    SCOPED_TRACE(path);
    EXPECT_EQ(code(fs().write_file(path, "x")), Errc::kPermissionDenied);
    EXPECT_EQ(code(fs().mkdir(path, true)), Errc::kPermissionDenied);
    EXPECT_EQ(code(fs().stat(path)), Errc::kPermissionDenied);
  }
  EXPECT_EQ(code(fs().move("/procfile", "/proc/x", true)), Errc::kPermissionDenied);
  EXPECT_FALSE(std::filesystem::exists(host("/sys")));
  EXPECT_FALSE(std::filesystem::exists(host("/proc")));
  // Only the top-level names: other paths that merely contain them are files like any other.
  EXPECT_TRUE(ok(fs().write_file("/procfs/x", "x")));
  EXPECT_TRUE(ok(fs().write_file("/w/sys/x", "x")));
}

// /proc and /sys of the host bind-mounted into the sandbox root, in a private mount namespace of
// this test process so nothing leaks to the host.
class KernelFsTest : public FsTest {
 protected:
  // The host's cgroup2 hierarchy: /sys/fs/cgroup itself, or /sys/fs/cgroup/unified (hybrid).
  static std::string cgroup2() {
    struct statfs fs {};
    if (::statfs("/sys/fs/cgroup", &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC) {
      return "/sys/fs/cgroup";
    }
    return "/sys/fs/cgroup/unified";
  }

  void SetUp() override {
    FsTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    HUTCH_REQUIRE(::unshare(CLONE_NEWNS) == 0,
                  std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno));
    HUTCH_REQUIRE(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0,
                  std::string("mount(/, MS_PRIVATE): ") + std::strerror(errno));
    // Not recursive for /sys: the host may have a tmpfs at /sys/fs/cgroup (cgroup v1 layout),
    // which a real sandbox's fresh sysfs never has. cgroup2 gets its own mount point.
    const std::string cgroup = cgroup2();
    const struct {
      const char* source;
      const char* target;
      unsigned long flags;
    } binds[] = {{"/proc", "/proc", MS_BIND | MS_REC},
                 {"/sys", "/sys", MS_BIND},
                 {cgroup.c_str(), "/cg", MS_BIND}};
    for (const auto& bind : binds) {
      const std::string target = host(bind.target);
      ASSERT_EQ(::mkdir(target.c_str(), 0755), 0);
      HUTCH_REQUIRE(::mount(bind.source, target.c_str(), nullptr, bind.flags, nullptr) == 0,
                    "bind mount " + std::string(bind.source) + ": " + std::strerror(errno));
      mounted_.push_back(target);
    }
    // The fixture's root fd names the mount of the namespace we left: reopen it in this one.
    root_fd_.reset(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_fd_);
    fs_.emplace(root_fd_.get(), kOwner);
  }
  void TearDown() override {
    // Before TempDir's recursive removal: never let it walk the real /proc or /sys.
    for (const std::string& target : mounted_) ::umount2(target.c_str(), MNT_DETACH);
  }
  std::vector<std::string> mounted_;
};

TEST_F(KernelFsTest, ProcAndSysAreRefused) {
  ASSERT_TRUE(std::filesystem::exists(host("/proc/self/status")));  // the mount is real
  EXPECT_EQ(code(fs().read_file("/proc/self/status", 0)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().open_read("/proc/self/status")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().read_lines("/proc/self/status", 0, 10)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().list("/proc")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().list("/proc/self")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().stat("/proc/self/root")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().stat("/proc")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().write_file("/proc/hutch-test", "x")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().write_file("/proc/sys/kernel/hostname", "x")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().mkdir("/proc/x", true)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().edit("/proc/self/comm", "a", "b", true)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().remove("/proc", true)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().remove("/proc/self/fd/0", false)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().grep("Name:", "/proc/self", std::nullopt, 0)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().glob("*", "/proc")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().list("/sys")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().list("/sys/fs")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().list("/cg")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().mkdir("/cg/hutch-evil", false)), Errc::kPermissionDenied);
  EXPECT_FALSE(std::filesystem::exists(cgroup2() + "/hutch-evil"));
  EXPECT_EQ(code(fs().write_file("/cg/cgroup.procs", "1")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().remove("/cg", true)), Errc::kPermissionDenied);
  EXPECT_TRUE(std::filesystem::exists(host("/proc/self/status")));
}

TEST_F(KernelFsTest, MagicLinksAreRefused) {
  ASSERT_EQ(::symlink("/proc/self/root", host("/self").c_str()), 0);
  ASSERT_EQ(::symlink("/proc/1/cwd", host("/cwd").c_str()), 0);
  const std::string through_root = "/self" + outside_;  // the host's outside dir via the link
  auto read = fs().read_file(through_root + "/canary", 0);
  EXPECT_EQ(code(read), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().write_file(through_root + "/pwned", "x")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().remove(through_root + "/canary", false)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().list(through_root)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().read_file("/proc/self/root" + outside_ + "/canary", 0)),
            Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().list("/cwd")), Errc::kPermissionDenied);
  // The walks do not descend into /proc or /sys either.
  put("/home/status", "Name: sandbox\n");
  auto found = fs().glob("status", "/");
  ASSERT_TRUE(ok(found));
  EXPECT_EQ(*found, std::vector<std::string>{"/home/status"});
  auto grep = fs().grep("Name:", "/", std::nullopt, 0);
  ASSERT_TRUE(ok(grep));
  ASSERT_EQ(grep->matches.size(), 1u);
  EXPECT_EQ(grep->matches[0].path, "/home/status");
  expect_outside_untouched();
}

TEST_F(FsTest, AtomicWriterStaysInTheDirectoryItOpened) {
  ASSERT_TRUE(ok(fs().mkdir("/d", false)));
  auto writer = fs().begin_write("/d/x", std::nullopt);
  ASSERT_TRUE(ok(writer));
  // The sandbox swaps /d for a symlink to a host directory between begin and commit.
  ASSERT_EQ(::rename(host("/d").c_str(), host("/d2").c_str()), 0);
  ASSERT_EQ(::symlink(outside_.c_str(), host("/d").c_str()), 0);
  ASSERT_TRUE(ok(writer->write("data", 4)));
  ASSERT_TRUE(ok(writer->commit()));
  EXPECT_EQ(slurp_host(host("/d2/x")), "data");
  expect_outside_untouched();
}

// Every entry under `dir` (host path) is owned by the sandbox's root.
void expect_all_owned(const std::string& dir) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    struct stat st {};
    ASSERT_EQ(::lstat(entry.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kOwner.uid) << entry.path();
    EXPECT_EQ(st.st_gid, kOwner.gid) << entry.path();
  }
}

// One thread exchanges /d (a real directory) and /swap (a symlink to a host directory outside the
// root) in a tight loop; the test thread runs every operation through /d meanwhile.
class RaceTest : public FsTest {
 protected:
  void race(const std::string& link_target);
};

void RaceTest::race(const std::string& link_target) {
  SandboxFs& fs = this->fs();
  ASSERT_TRUE(ok(fs.mkdir("/d", false)));
  ASSERT_TRUE(ok(fs.write_file("/d/f", "inside")));
  const std::string d = host("/d");
  const std::string swap = host("/swap");
  ASSERT_EQ(::symlink(link_target.c_str(), swap.c_str()), 0);
  ASSERT_EQ(::lchown(swap.c_str(), kOwner.uid, kOwner.gid), 0);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> swaps{0};
  std::thread swapper([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      if (::renameat2(AT_FDCWD, d.c_str(), AT_FDCWD, swap.c_str(), RENAME_EXCHANGE) == 0) {
        swaps.fetch_add(1, std::memory_order_relaxed);
      }
    }
  });
  uint64_t succeeded = 0;
  for (int i = 0; i < 2000; ++i) {
    bool good = false;
    switch (i % 8) {
      case 0:
        good = fs.write_file("/d/f", "inside").has_value();
        break;
      case 1:
        good = fs.write_file("/d/new-" + std::to_string(i), "x").has_value();
        break;
      case 2: {
        auto got = fs.read_file("/d/canary", 0);
        EXPECT_FALSE(got) << "read a host file through the swapped symlink";
        auto mine = fs.read_file("/d/f", 0);
        if (mine) {
          EXPECT_EQ(*mine, "inside");
        }
        good = mine.has_value();
        break;
      }
      case 3: {
        EXPECT_FALSE(fs.remove("/d/canary", true)) << "removed a host file";
        good = fs.remove("/d/new-" + std::to_string(i - 2), false).has_value();
        break;
      }
      case 4: {
        auto listed = fs.list("/d");
        if (listed) {
          for (const Entry& e : *listed) EXPECT_NE(e.path, "/d/canary") << "listed the host dir";
        }
        good = listed.has_value();
        break;
      }
      case 5:
        good = fs.mkdir("/d/sub/deeper", true).has_value();
        break;
      case 6: {
        good = fs.remove("/d/sub", true).has_value();
        EXPECT_FALSE(fs.stat("/d/canary")) << "stat a host file";
        break;
      }
      case 7: {
        auto edited = fs.edit("/d/canary", "host", "pwned", true);
        EXPECT_FALSE(edited) << "edited a host file";
        good = fs.move("/d/f", "/d/f", false).has_value();
        break;
      }
    }
    if (good) ++succeeded;
  }
  stop = true;
  swapper.join();
  EXPECT_GT(swaps.load(), 100u) << "the race did not really run";
  EXPECT_GT(succeeded, 0u);
  expect_outside_untouched();
  expect_all_owned(root_);
}

TEST_F(RaceTest, SwappedAbsoluteSymlinkNeverEscapes) { race(outside_); }
TEST_F(RaceTest, SwappedRelativeSymlinkNeverEscapes) { race("../outside"); }
}  // namespace
}  // namespace hutch::files::testing
