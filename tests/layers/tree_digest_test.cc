// digest_tree: equal for a copy, changed by any byte, mode, xattr or owner, blind to timestamps.
#include "runtime/layers/tree_digest.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <functional>

#include "runtime/base/unique_fd.h"
#include "runtime/fs/overlay_xattr.h"
#include "runtime/fs/tree_copy.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"
#include "tests/layers/tree_compare.h"

namespace hutch::layers {
namespace {

class TreeDigestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_FALSE(temp_.path().empty());
    src_ = temp_.path() + "/src";
    ASSERT_EQ(mkdir(src_.c_str(), 0755), 0);
  }

  std::string digest(const std::string& path) {
    UniqueFd fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto digest = digest_tree(fd.get());
    EXPECT_TRUE(digest.has_value()) << digest.error().message();
    return digest.value_or("");
  }

  void write(const std::string& rel, std::string_view text) {
    UniqueFd fd(open((src_ + "/" + rel).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    ASSERT_TRUE(fd);
    ASSERT_EQ(::write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }

  hutch::testing::TempDir temp_;
  std::string src_;
};

TEST_F(TreeDigestTest, CopyDigestsLikeItsSource) {
  ASSERT_EQ(hutch::testing::build_every_kind(src_), "");
  UniqueFd src(open(src_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  UniqueFd parent(open(temp_.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(copy_tree(src.get(), parent.get(), "copy").has_value());
  const std::string source_digest = digest(src_);
  EXPECT_TRUE(source_digest.starts_with("sha256:"));
  EXPECT_EQ(source_digest.size(), 7u + 64u);
  EXPECT_EQ(digest(temp_.path() + "/copy"), source_digest);
  EXPECT_EQ(digest(src_), source_digest) << "not deterministic";
}

TEST_F(TreeDigestTest, EachChangeShowsAndRevertingRestores) {
  ASSERT_EQ(mkdir((src_ + "/dir").c_str(), 0755), 0);
  write("dir/file", "hello");
  ASSERT_EQ(symlink("file", (src_ + "/dir/link").c_str()), 0);
  const std::string base = digest(src_);
  const std::string file = src_ + "/dir/file";

  struct Change {
    const char* what;
    std::function<void()> apply, revert;
  };
  const Change changes[] = {
      {"one byte", [&] { write("dir/file", "hellp"); }, [&] { write("dir/file", "hello"); }},
      {"mode", [&] { chmod(file.c_str(), 0755); }, [&] { chmod(file.c_str(), 0644); }},
      {"setuid", [&] { chmod(file.c_str(), 04644); }, [&] { chmod(file.c_str(), 0644); }},
      {"xattr", [&] { setxattr(file.c_str(), "user.x", "1", 1, 0); },
       [&] { removexattr(file.c_str(), "user.x"); }},
      {"owner", [&] { chown(file.c_str(), 1000000005, 0); }, [&] { chown(file.c_str(), 0, 0); }},
      {"dir mode", [&] { chmod((src_ + "/dir").c_str(), 0700); },
       [&] { chmod((src_ + "/dir").c_str(), 0755); }},
      {"symlink target",
       [&] {
         unlink((src_ + "/dir/link").c_str());
         symlink("other", (src_ + "/dir/link").c_str());
       },
       [&] {
         unlink((src_ + "/dir/link").c_str());
         symlink("file", (src_ + "/dir/link").c_str());
       }},
      {"rename", [&] { rename(file.c_str(), (src_ + "/dir/filf").c_str()); },
       [&] { rename((src_ + "/dir/filf").c_str(), file.c_str()); }},
  };
  for (const Change& change : changes) {
    change.apply();
    EXPECT_NE(digest(src_), base) << change.what;
    change.revert();
    EXPECT_EQ(digest(src_), base) << "after reverting " << change.what;
  }

  hutch::testing::set_times(file, 12345);
  hutch::testing::set_times(src_ + "/dir", 12345);
  EXPECT_EQ(digest(src_), base) << "timestamps must not count";
}

TEST_F(TreeDigestTest, HardlinkIsNotTwoCopies) {
  write("a", "same");
  write("b", "same");
  const std::string two_files = digest(src_);
  ASSERT_EQ(unlink((src_ + "/b").c_str()), 0);
  ASSERT_EQ(link((src_ + "/a").c_str(), (src_ + "/b").c_str()), 0);
  EXPECT_NE(digest(src_), two_files);
}

// overlayfs's bookkeeping in a bake's upper is left out of the layer (tree_copy.h), so the digest
// of the upper is the digest of its copy; the opaque marker is part of the layer.
TEST_F(TreeDigestTest, CountsTheOpaqueMarkerOnlyOfOverlayXattrs) {
  ASSERT_EQ(mkdir((src_ + "/dir").c_str(), 0755), 0);
  write("dir/file", "x");
  const std::string plain = digest(src_);
  for (const char* name : {"trusted.overlay.origin", "trusted.overlay.redirect",
                           "user.overlay.metacopy", "user.overlay.opaque"}) {
    ASSERT_EQ(setxattr((src_ + "/dir/file").c_str(), name, "v", 1, 0), 0) << name;
  }
  ASSERT_EQ(setxattr((src_ + "/dir").c_str(), "user.overlay.opaque", "y", 1, 0), 0);
  EXPECT_EQ(digest(src_), plain);
  ASSERT_EQ(setxattr((src_ + "/dir").c_str(), kOverlayOpaqueXattr, "y", 1, 0), 0);
  EXPECT_NE(digest(src_), plain);
}

}  // namespace
}  // namespace hutch::layers
