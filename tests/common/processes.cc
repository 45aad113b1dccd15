#include "tests/common/processes.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "tests/common/command.h"

namespace hutch::testing {
namespace {

// The ns/pid link of a process ("pid:[4026531836]"), or "" when it is gone.
std::string pid_ns_of(const std::string& proc_dir) {
  std::error_code error;
  return std::filesystem::read_symlink(proc_dir + "/ns/pid", error).string();
}

int count_with(const std::string& marker, const std::optional<std::string>& pid_ns) {
  int count = 0;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ignored)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_file_or_empty(entry.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) == std::string::npos) continue;
    if (pid_ns ? pid_ns_of(entry.path()) != *pid_ns
               : cmdline.find("hutch run") != std::string::npos)
      continue;
    ++count;
  }
  return count;
}

}  // namespace

int count_host_processes_with(const std::string& marker) { return count_with(marker, {}); }

int count_pid_ns_processes_with(pid_t member, const std::string& marker) {
  const std::string ns = pid_ns_of("/proc/" + std::to_string(member));
  if (ns.empty()) return -1;
  return count_with(marker, ns);
}

std::vector<pid_t> pid_ns_processes(pid_t member) {
  std::vector<pid_t> pids;
  const std::string ns = pid_ns_of("/proc/" + std::to_string(member));
  if (ns.empty()) return pids;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ignored)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (pid_ns_of(entry.path()) == ns) pids.push_back(std::stoi(name));
  }
  return pids;
}

int processes_in_mount_namespace(ino_t inode) {
  int count = 0;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ignored)) {
    struct stat ns {};
    if (::stat((entry.path() / "ns" / "mnt").c_str(), &ns) == 0 && ns.st_ino == inode) ++count;
  }
  return count;
}

}  // namespace hutch::testing
