#include "tests/common/upstream_netns.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include "tests/common/command.h"

extern char** environ;

namespace hutch::testing {

UpstreamNetns::UpstreamNetns(const std::string& dir) : dir_(dir) {
  const std::string script =
      "ip link set lo up && ip addr add 198.51.100.10/32 dev lo && "
      "ip addr add 169.254.169.254/32 dev lo && "
      "exec python3 -m http.server --bind 0.0.0.0 --directory " +
      dir + " 80";
  std::vector<std::string> args = {"/usr/bin/unshare", "-n", "/bin/sh", "-c", script};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, (dir + "/upstream.log").c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&actions);
}

UpstreamNetns::~UpstreamNetns() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

bool UpstreamNetns::serving() const {
  std::ifstream tcp("/proc/" + std::to_string(pid_) + "/net/tcp");
  std::string line;
  while (std::getline(tcp, line)) {
    if (line.find("00000000:0050 00000000:0000 0A") != std::string::npos) return true;
  }
  return false;
}

std::string UpstreamNetns::log() const { return read_file_or_empty(dir_ + "/upstream.log"); }

}  // namespace hutch::testing
