#include "runtime/base/run_tool.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>

extern char** environ;

namespace hutch {

Result<void> run_tool(std::vector<std::string> args, const std::string& install_hint) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return sys_error("posix_spawnp", args[0] + " (install " + install_hint + ")", err);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return sys_error("waitpid", args[0]);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string command;
    for (const std::string& arg : args) command += (command.empty() ? "" : " ") + arg;
    return plain_error(args[0], command + " failed (status " + std::to_string(status) + ")");
  }
  return {};
}

}  // namespace hutch
