// SkeletonCache, as root on the real kernel: hutchd's zygote hands every host-rootfs sandbox a
// clone of one skeleton, and must build it again whenever a host directory it lists changes,
// or a file added to the host's /etc would show in new sandboxes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "runtime/fs/host_rootfs.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"

namespace hutch {
namespace {

constexpr uid_t kOwner = 1000000000;

bool is_whiteout(int tree, const char* path) {
  struct stat st {};
  return fstatat(tree, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISCHR(st.st_mode) &&
         st.st_rdev == makedev(0, 0);
}

bool absent(int tree, const char* path) {
  struct stat st {};
  return fstatat(tree, path, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT;
}

class SkeletonCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_FALSE(dir_.path().empty());
    ASSERT_EQ(mkdir((dir_.path() + "/etc").c_str(), 0755), 0);
    for (const char* name : {"/etc/shown", "/etc/hidden"}) std::ofstream(dir_.path() + name) << "x";
    age("/etc", 60);
    age("/", 60);
  }

  // Sets a directory's mtime `seconds` in the past (a stable, settled directory).
  void age(const std::string& path, int seconds) {
    timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= seconds;
    times[1] = times[0];
    ASSERT_EQ(utimensat(AT_FDCWD, (dir_.path() + path).c_str(), times, 0), 0);
  }

  SkeletonCache cache() {
    auto rules = parse_host_rootfs_list("show /etc/shown\nempty /home 0755\n");
    EXPECT_TRUE(rules);
    return SkeletonCache(*rules, dir_.path());
  }

  testing::TempDir dir_;
};

TEST_F(SkeletonCacheTest, ClonesOneBuildUntilAListedDirectoryChanges) {
  SkeletonCache skeletons = cache();
  auto first = skeletons.take(kOwner);
  ASSERT_TRUE(first) << first.error().message();
  if (!*first) {
    // Linux 6.1 refuses OPEN_TREE_CLONE of a detached mount (EINVAL): the cache steps aside for
    // good and every supervisor builds its own skeleton (daemon/zygote.cc), as `hutch run` does.
    auto again = skeletons.take(kOwner);
    ASSERT_TRUE(again);
    EXPECT_FALSE(*again);
    EXPECT_EQ(skeletons.builds(), 1u);
    std::printf("[ measured ] OPEN_TREE_CLONE of a detached mount: refused; no skeleton cache\n");
    return;
  }
  EXPECT_TRUE(is_whiteout(first->get(), "etc/hidden"));
  EXPECT_TRUE(absent(first->get(), "etc/shown"));  // shown: the host's file shows through
  struct stat home {};
  ASSERT_EQ(fstatat(first->get(), "home", &home, 0), 0);
  EXPECT_EQ(home.st_uid, kOwner);

  auto second = skeletons.take(kOwner);
  ASSERT_TRUE(second && *second);
  EXPECT_NE(first->get(), second->get());
  EXPECT_TRUE(is_whiteout(second->get(), "etc/hidden"));
  EXPECT_EQ(skeletons.builds(), 1u);

  // A file added to the host's /etc is hidden in the next sandbox.
  std::ofstream(dir_.path() + "/etc/added") << "secret";
  age("/etc", 30);
  auto third = skeletons.take(kOwner);
  ASSERT_TRUE(third && *third);
  EXPECT_EQ(skeletons.builds(), 2u);
  EXPECT_TRUE(is_whiteout(third->get(), "etc/added"));
  EXPECT_FALSE(is_whiteout(first->get(), "etc/added"));  // clones already handed out stay

  // Another owner gets its own build.
  auto other = skeletons.take(kOwner + 65536);
  ASSERT_TRUE(other && *other);
  EXPECT_EQ(skeletons.builds(), 3u);
}

TEST_F(SkeletonCacheTest, ABuildFromADirectoryModifiedJustNowServesOnce) {
  SkeletonCache skeletons = cache();
  std::ofstream(dir_.path() + "/etc/fresh") << "x";  // /etc's mtime is now
  auto first = skeletons.take(kOwner);
  ASSERT_TRUE(first);
  if (!*first) {
    EXPECT_EQ(skeletons.builds(), 1u);  // no cache on this kernel (see above)
    return;
  }
  EXPECT_TRUE(is_whiteout(first->get(), "etc/fresh"));
  // Within the same clock tick another change would leave the mtime as it was: not trusted.
  auto second = skeletons.take(kOwner);
  ASSERT_TRUE(second && *second);
  EXPECT_EQ(skeletons.builds(), 2u);
}

}  // namespace
}  // namespace hutch
