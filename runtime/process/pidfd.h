// pidfd calls through syscall(2): glibc 2.36's <sys/pidfd.h> lacks C++ linkage guards.
#pragma once

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace hutch {

inline int pidfd_open_fd(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

inline int pidfd_signal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

}  // namespace hutch
