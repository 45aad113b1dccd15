#include "runtime/fs/paths.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace hutch {
namespace {

TEST(IsNormalAbsolute, AcceptsRootAndPlainPaths) {
  EXPECT_TRUE(is_normal_absolute("/"));
  EXPECT_TRUE(is_normal_absolute("/a"));
  EXPECT_TRUE(is_normal_absolute("/usr/lib/x86_64-linux-gnu"));
}

TEST(IsNormalAbsolute, AcceptsNamesThatOnlyStartWithDots) {
  EXPECT_TRUE(is_normal_absolute("/.bashrc"));
  EXPECT_TRUE(is_normal_absolute("/..."));
  EXPECT_TRUE(is_normal_absolute("/a/..b"));
  EXPECT_TRUE(is_normal_absolute("/a/b.."));
}

TEST(IsNormalAbsolute, RejectsRelativeAndEmpty) {
  EXPECT_FALSE(is_normal_absolute(""));
  EXPECT_FALSE(is_normal_absolute("a"));
  EXPECT_FALSE(is_normal_absolute("a/b"));
  EXPECT_FALSE(is_normal_absolute("./a"));
  EXPECT_FALSE(is_normal_absolute("../a"));
  EXPECT_FALSE(is_normal_absolute(" /a"));
}

TEST(IsNormalAbsolute, RejectsEmptyComponentsAndTrailingSlash) {
  EXPECT_FALSE(is_normal_absolute("//"));
  EXPECT_FALSE(is_normal_absolute("//a"));
  EXPECT_FALSE(is_normal_absolute("/a//b"));
  EXPECT_FALSE(is_normal_absolute("/a/"));
  EXPECT_FALSE(is_normal_absolute("/a/b/"));
}

TEST(IsNormalAbsolute, RejectsDotAndDotDotComponents) {
  EXPECT_FALSE(is_normal_absolute("/."));
  EXPECT_FALSE(is_normal_absolute("/.."));
  EXPECT_FALSE(is_normal_absolute("/./a"));
  EXPECT_FALSE(is_normal_absolute("/a/."));
  EXPECT_FALSE(is_normal_absolute("/a/.."));
  EXPECT_FALSE(is_normal_absolute("/a/../b"));
  EXPECT_FALSE(is_normal_absolute("/a/./b"));
}

TEST(IsNormalAbsolute, RejectsEmbeddedNul) {
  // A C API would see "/a" and the check would have judged a different path.
  EXPECT_FALSE(is_normal_absolute(std::string("/a\0b", 4)));
  EXPECT_FALSE(is_normal_absolute(std::string("/a\0", 3)));
  EXPECT_FALSE(is_normal_absolute(std::string("/\0", 2)));
  EXPECT_FALSE(is_normal_absolute(std::string("/a/\0/b", 6)));
}

TEST(ParentPath, DropsTheLastComponent) {
  EXPECT_EQ(parent_path("/a/b"), "/a");
  EXPECT_EQ(parent_path("/a/b/c"), "/a/b");
  EXPECT_EQ(parent_path("/a"), "/");
}

TEST(ParentPath, ParentOfRootIsRoot) { EXPECT_EQ(parent_path("/"), "/"); }

TEST(JoinPath, JoinsWithOneSlash) {
  EXPECT_EQ(join_path("/a", "b"), "/a/b");
  EXPECT_EQ(join_path("/a/", "b"), "/a/b");
  EXPECT_EQ(join_path("/", "b"), "/b");
  EXPECT_EQ(join_path("/a", "b/c"), "/a/b/c");
}

TEST(JoinPath, AbsoluteRelativeStaysBelowBase) {
  EXPECT_EQ(join_path("/r", "/x"), "/r/x");
  EXPECT_EQ(join_path("/r", "//x"), "/r/x");
  EXPECT_EQ(join_path("/", "/x"), "/x");
}

TEST(JoinPath, DropsTrailingSlashAndEmptyRelative) {
  EXPECT_EQ(join_path("/r", "x/"), "/r/x");
  EXPECT_EQ(join_path("/r", ""), "/r");
  EXPECT_EQ(join_path("/", ""), "/");
  EXPECT_EQ(join_path("/", "/"), "/");
}

TEST(JoinPath, DoesNotResolveDotDotSoCallersMustValidate) {
  const std::string joined = join_path("/r", "../x");
  EXPECT_EQ(joined, "/r/../x");
  EXPECT_FALSE(is_normal_absolute(joined));
}

}  // namespace
}  // namespace hutch
