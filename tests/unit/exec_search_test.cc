#include "runtime/process/exec_search.h"

#include <gtest/gtest.h>

namespace hutch {
namespace {

TEST(SplitSearchPath, KeepsOrderAndTurnsEmptyEntriesIntoDot) {
  EXPECT_EQ(split_search_path("/usr/bin:/bin"), (std::vector<std::string>{"/usr/bin", "/bin"}));
  EXPECT_EQ(split_search_path(":/bin:"), (std::vector<std::string>{".", "/bin", "."}));
  EXPECT_EQ(split_search_path(""), (std::vector<std::string>{"."}));
  EXPECT_EQ(split_search_path(kDefaultSearchPath).front(), "/usr/local/sbin");
}

TEST(ExecInPath, ReportsWhatAShellWould) {
  char arg0[] = "no-such-command-hutch";
  char* argv[] = {arg0, nullptr};
  char* envp[] = {nullptr};
  const char* dirs[] = {"/nonexistent-dir", "/usr/bin", nullptr};
  EXPECT_EQ(exec_in_path(arg0, argv, envp, dirs), ENOENT);
  // Found but not executable: a directory named like the command.
  char etc[] = "etc";
  char* etc_argv[] = {etc, nullptr};
  const char* root[] = {"/", nullptr};
  EXPECT_EQ(exec_in_path(etc, etc_argv, envp, root), EACCES);
  char missing[] = "/no/such/file";
  char* missing_argv[] = {missing, nullptr};
  EXPECT_EQ(exec_in_path(missing, missing_argv, envp, dirs), ENOENT);
}

}  // namespace
}  // namespace hutch
