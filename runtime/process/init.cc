#include "runtime/process/init.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "runtime/process/sync.h"

namespace hutch {

[[noreturn]] void run_init(int sync_fd, pid_t workload) {
  sigset_t all;
  sigfillset(&all);
  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(&all, &info);
    if (sig < 0) continue;  // EINTR
    if (sig != SIGCHLD) {
      kill(workload, sig);
      continue;
    }
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      if (pid != workload) continue;
      SyncMessage message{};
      message.kind = SyncMessage::Kind::kWorkloadExit;
      message.from = SyncMessage::From::kInit;
      message.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
      message.term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      send_sync(sync_fd, message);
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    }
  }
}

}  // namespace hutch
