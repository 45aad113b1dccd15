#include "tests/cgroup/spawn.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "tests/common/wait.h"

namespace hutch::test {

Result<pid_t> spawn_in(SandboxCgroup& cgroup, const std::function<int()>& body,
                       Placement placement) {
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0) return sys_error("pipe2", "");
  pid_t pid;
  if (placement == Placement::kClone3IntoCgroup && cgroup.v2_dir_fd() >= 0) {
    clone_args args{};
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = static_cast<uint64_t>(cgroup.v2_dir_fd());
    pid = static_cast<pid_t>(syscall(SYS_clone3, &args, sizeof args));
    if (pid < 0) {
      int err = errno;
      close(go[0]);
      close(go[1]);
      return sys_error("clone3", "CLONE_INTO_CGROUP " + cgroup.paths().front(), err);
    }
  } else {
    pid = fork();
    if (pid < 0) return sys_error("fork", "");
  }
  if (pid == 0) {
    close(go[1]);
    char byte;
    if (read(go[0], &byte, 1) != 1) _exit(120);  // the parent gave up
    close(go[0]);
    _exit(body());
  }
  close(go[0]);
  if (auto attached = cgroup.attach(pid); !attached) {
    close(go[1]);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return std::unexpected(attached.error());
  }
  if (write(go[1], "g", 1) != 1) {
    int err = errno;
    close(go[1]);
    return sys_error("write", "go pipe", err);
  }
  close(go[1]);
  return pid;
}

std::optional<int> wait_for_exit(pid_t pid, std::chrono::milliseconds timeout) {
  std::optional<int> exited;
  bool failed = false;
  (void)hutch::testing::wait_until(
      [&] {
        int status = 0;
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid) exited = status;
        failed = done < 0 && errno != EINTR;
        return exited || failed;
      },
      timeout, "pid " + std::to_string(pid) + " to exit", std::chrono::milliseconds(2));
  return exited;
}

SharedCounters::SharedCounters(size_t count) : bytes_(count * sizeof(std::atomic<uint64_t>)) {
  void* memory = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) std::abort();
  counters_ = new (memory) std::atomic<uint64_t>[count]();
}

SharedCounters::~SharedCounters() { munmap(counters_, bytes_); }

std::vector<pid_t> procs_in(const std::string& path) {
  std::ifstream file(path + "/cgroup.procs");
  std::vector<pid_t> pids;
  for (pid_t pid; file >> pid;) pids.push_back(pid);
  return pids;
}

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace hutch::test
