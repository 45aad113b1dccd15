// The state file a session command's EXIT trap writes, parsed as hostile input (pure logic).
#include <gtest/gtest.h>

#include <string>

#include "daemon/service/session_service.h"

namespace hutch::daemon {
namespace {

using namespace std::string_literals;

TEST(SessionStateParse, KeepsCwdAndExportedEnvironment) {
  auto state = parse_session_state("/tmp/x\n\0A=1\0B=two=2\0EMPTY=\0"s, {});
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->cwd, "/tmp/x");
  EXPECT_EQ(state->env,
            (std::map<std::string, std::string>{{"A", "1"}, {"B", "two=2"}, {"EMPTY", ""}}));
  EXPECT_TRUE(state->unset.empty());
}

TEST(SessionStateParse, DropsShellVariablesAndBadEntriesAndListsUnset) {
  auto state = parse_session_state(
      "/\n\0PWD=/\0OLDPWD=/a\0SHLVL=1\0_=/bin/env\0no-equals\0=x\0"
      "1A=bad\0A-B=bad\0"
      "HOME=/root\0MULTI=line1\nline2\0"s,
      {"HOME", "PATH", "PWD", "LANG"});
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->env,
            (std::map<std::string, std::string>{{"HOME", "/root"}, {"MULTI", "line1\nline2"}}));
  EXPECT_EQ(state->unset, (std::vector<std::string>{"LANG", "PATH"}));
}

TEST(SessionStateParse, RefusesMalformedFiles) {
  for (const std::string& text : {""s, "/tmp"s, "/tmp\n"s, "relative\n\0A=1"s, "\n\0A=1"s,
                                  "/a\nb\n\0"s, "\0A=1"s, std::string(1000, 'x')}) {
    EXPECT_FALSE(parse_session_state(text, {}).has_value()) << text.substr(0, 40);
  }
  auto no_env = parse_session_state("/w\n\0"s, {"PATH"});
  ASSERT_TRUE(no_env.has_value());
  EXPECT_TRUE(no_env->env.empty());
  EXPECT_EQ(no_env->unset, std::vector<std::string>{"PATH"});
}

}  // namespace
}  // namespace hutch::daemon
