// The spec policy both faces share (runtime/defaults.h).
#include "runtime/defaults.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace hutch {
namespace {

TEST(DefaultsTest, HomeFollowsTheUid) {
  const auto root = default_environment(0);
  const auto user = default_environment(1000);
  EXPECT_NE(std::find(root.begin(), root.end(), "HOME=/root"), root.end());
  EXPECT_NE(std::find(user.begin(), user.end(), "HOME=/home/user"), user.end());
  EXPECT_EQ(root.front(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
}

TEST(DefaultsTest, OverridesReplaceTheirKeyAndLaterOnesWin) {
  const auto env = sandbox_environment(0, {"HOME=/work", "X=1", "X=2"});
  EXPECT_EQ(std::count(env.begin(), env.end(), "HOME=/root"), 0);
  EXPECT_EQ(std::count(env.begin(), env.end(), "HOME=/work"), 1);
  EXPECT_EQ(std::count(env.begin(), env.end(), "X=1"), 0);
  EXPECT_EQ(std::count(env.begin(), env.end(), "X=2"), 1);
}

TEST(DefaultsTest, HostnameRules) {
  EXPECT_TRUE(valid_hostname("box-1.local"));
  EXPECT_FALSE(valid_hostname(""));
  EXPECT_FALSE(valid_hostname(std::string(65, 'a')));
  EXPECT_TRUE(valid_hostname(std::string(64, 'a')));
  EXPECT_FALSE(valid_hostname("a b"));
  EXPECT_FALSE(valid_hostname("a/b"));
  const auto refused = check_hostname("bad name");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().kind, ErrorKind::kInvalid);
  EXPECT_NE(refused.error().message().find("bad name"), std::string::npos);
}

TEST(DefaultsTest, EnvRules) {
  EXPECT_TRUE(check_env_entry("_A1=x=y").has_value());
  EXPECT_TRUE(check_env_entry("A=").has_value());
  EXPECT_FALSE(check_env_entry("=x").has_value());
  EXPECT_FALSE(check_env_entry("1A=x").has_value());
  EXPECT_FALSE(check_env_entry("A-B=x").has_value());
  EXPECT_FALSE(check_env_entry("NOEQUALS").has_value());
  EXPECT_FALSE(check_env_entry(std::string("A=x\0y", 5)).has_value());
  EXPECT_FALSE(check_env_entry(std::string(257, 'K') + "=v").has_value());
  EXPECT_TRUE(check_env_entry(std::string(256, 'K') + "=v").has_value());
}

}  // namespace
}  // namespace hutch
