// copy_tree on a tree with every kind of entry an overlayfs upper holds: the copy must be exact.
#include "runtime/fs/tree_copy.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#include <algorithm>
#include <cstring>

#include "runtime/base/unique_fd.h"
#include "runtime/fs/overlay_xattr.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"
#include "tests/layers/tree_compare.h"

namespace hutch::layers {
namespace {

class TreeCopyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_FALSE(temp_.path().empty());
    src_ = temp_.path() + "/src";
    ASSERT_EQ(mkdir(src_.c_str(), 0755), 0);
  }

  Result<TreeStats> copy(const std::string& name) {
    UniqueFd src(open(src_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    UniqueFd parent(open(temp_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    return copy_tree(src.get(), parent.get(), name);
  }

  hutch::testing::TempDir temp_;
  std::string src_;
};

std::string join(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

TEST_F(TreeCopyTest, CopiesEveryKindOfEntryExactly) {
  ASSERT_EQ(hutch::testing::build_every_kind(src_), "");
  auto stats = copy("copy");
  ASSERT_TRUE(stats.has_value()) << stats.error().message();
  const std::string dst = temp_.path() + "/copy";

  auto diffs = hutch::testing::compare_trees(src_, dst);
  EXPECT_TRUE(diffs.empty()) << join(diffs);

  // Spot checks on what matters most to overlayfs, independent of the comparison helper.
  struct stat st;
  ASSERT_EQ(lstat((dst + "/etc/deleted").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(0, 0));
  char value[8] = {};
  EXPECT_EQ(getxattr((dst + "/opaque").c_str(), kOverlayOpaqueXattr, value, sizeof value), 1);
  EXPECT_EQ(value[0], 'y');
  ASSERT_EQ(lstat((dst + "/owned").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000000005u);
  EXPECT_EQ(st.st_gid, 1000000007u);
  ASSERT_EQ(lstat((dst + "/setuid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 04755u);
  struct stat a, b;
  ASSERT_EQ(lstat((dst + "/hard-a").c_str(), &a), 0);
  ASSERT_EQ(lstat((dst + "/sticky/hard-b").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  ASSERT_EQ(lstat((dst + "/sparse").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, (1L << 27) + 4096 + 4);
  EXPECT_LT(st.st_blocks * 512, 1L << 20) << "the 128 MiB hole was filled";
  ASSERT_EQ(lstat((dst + "/fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(lstat(dst.c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 1100000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 123456789);

  EXPECT_EQ(stats->whiteouts, 1u);
  EXPECT_EQ(stats->dirs, 4u);   // root, etc, opaque, sticky
  EXPECT_EQ(stats->files, 8u);  // hostname, new, xattr-file, owned, setuid, hard-a/-b, sparse
  EXPECT_EQ(stats->bytes, 6u + 3 + 1 + 4 + 12 + 12 + (1u << 27) + 4096 + 4);
}

TEST_F(TreeCopyTest, KeepsSharedWhiteoutInodesLinked) {
  // overlayfs (5.8+) hardlinks whiteouts to one shared inode.
  ASSERT_EQ(mknod((src_ + "/w1").c_str(), S_IFCHR, makedev(0, 0)), 0);
  ASSERT_EQ(link((src_ + "/w1").c_str(), (src_ + "/w2").c_str()), 0);
  auto stats = copy("copy");
  ASSERT_TRUE(stats.has_value()) << stats.error().message();
  EXPECT_EQ(stats->whiteouts, 2u);
  auto diffs = hutch::testing::compare_trees(src_, temp_.path() + "/copy");
  EXPECT_TRUE(diffs.empty()) << join(diffs);
}

TEST_F(TreeCopyTest, RefusesOtherDeviceNodes) {
  ASSERT_EQ(mkdir((src_ + "/dev").c_str(), 0755), 0);
  ASSERT_EQ(mknod((src_ + "/dev/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  auto stats = copy("copy");
  ASSERT_FALSE(stats.has_value());
  EXPECT_NE(stats.error().message().find("dev/null: device node 1:3 refused"), std::string::npos)
      << stats.error().message();
}

// The xattr names of `path` (not following a symlink), sorted.
std::vector<std::string> xattr_names(const std::string& path) {
  char list[4096];
  ssize_t size = llistxattr(path.c_str(), list, sizeof list);
  EXPECT_GE(size, 0) << path << ": " << strerror(errno);
  std::vector<std::string> names;
  for (ssize_t start = 0; start < size; start += static_cast<ssize_t>(names.back().size()) + 1)
    names.emplace_back(list + start);
  std::sort(names.begin(), names.end());
  return names;
}

// What overlayfs writes in an upper for itself, and what a hostile tree could plant to steer the
// overlay a layer becomes part of.
void plant_overlay_xattrs(const std::string& root) {
  ASSERT_EQ(mkdir((root + "/opaque").c_str(), 0755), 0);
  ASSERT_EQ(setxattr((root + "/opaque").c_str(), kOverlayOpaqueXattr, "y", 1, 0), 0);
  ASSERT_EQ(setxattr((root + "/opaque").c_str(), "trusted.overlay.impure", "y", 1, 0), 0);
  ASSERT_EQ(mkdir((root + "/legacy").c_str(), 0755), 0);
  ASSERT_EQ(setxattr((root + "/legacy").c_str(), "user.overlay.opaque", "y", 1, 0), 0);
  UniqueFd fd(open((root + "/file").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd);
  for (const char* name :
       {"trusted.overlay.origin", "trusted.overlay.redirect", "trusted.overlay.metacopy",
        "user.overlay.redirect", "user.overlay.metacopy", "user.keep"}) {
    ASSERT_EQ(setxattr((root + "/file").c_str(), name, "/elsewhere", 10, 0), 0) << name;
  }
  ASSERT_EQ(setxattr(root.c_str(), "trusted.overlay.origin", "x", 1, 0), 0);
}

TEST_F(TreeCopyTest, KeepsOnlyTheOpaqueMarkerOfOverlayXattrs) {
  plant_overlay_xattrs(src_);
  ASSERT_TRUE(copy("layer").has_value());
  const std::string layer = temp_.path() + "/layer";
  EXPECT_EQ(xattr_names(layer + "/opaque"), std::vector<std::string>{kOverlayOpaqueXattr});
  EXPECT_TRUE(xattr_names(layer + "/legacy").empty());
  EXPECT_EQ(xattr_names(layer + "/file"), std::vector<std::string>{"user.keep"});
  EXPECT_TRUE(xattr_names(layer).empty());

  UniqueFd src(open(src_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  UniqueFd parent(open(temp_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(copy_tree(src.get(), parent.get(), "outside", OverlayXattrs::kNone).has_value());
  EXPECT_TRUE(xattr_names(temp_.path() + "/outside/opaque").empty());
  EXPECT_EQ(xattr_names(temp_.path() + "/outside/file"), std::vector<std::string>{"user.keep"});
}

TEST_F(TreeCopyTest, StripRemovesOverlayXattrsInPlace) {
  plant_overlay_xattrs(src_);
  UniqueFd src(open(src_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto stripped = strip_overlay_xattrs(src.get());
  ASSERT_TRUE(stripped.has_value()) << stripped.error().message();
  EXPECT_EQ(xattr_names(src_ + "/opaque"), std::vector<std::string>{kOverlayOpaqueXattr});
  EXPECT_TRUE(xattr_names(src_ + "/legacy").empty());
  EXPECT_EQ(xattr_names(src_ + "/file"), std::vector<std::string>{"user.keep"});
  EXPECT_TRUE(xattr_names(src_).empty());
}

TEST_F(TreeCopyTest, RefusesAnExistingDestination) {
  ASSERT_EQ(mkdir((temp_.path() + "/copy").c_str(), 0700), 0);
  auto stats = copy("copy");
  ASSERT_FALSE(stats.has_value());
  EXPECT_EQ(stats.error().err, EEXIST);
}

}  // namespace
}  // namespace hutch::layers
