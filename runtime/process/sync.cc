#include "runtime/process/sync.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hutch {

int send_sync(int sock, const SyncMessage& message, const int* fds, int fd_count) {
  return send_with_fds(sock, &message, sizeof message, fds, fd_count);
}

int send_with_fds(int sock, const void* data, size_t size, const int* fds, int fd_count) {
  if (fd_count > kMaxPassedFds) return EINVAL;
  iovec iov{const_cast<void*>(data), size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (fd_count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fd_count);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fd_count);
    std::memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * fd_count);
  }
  while (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

long recv_with_fds(int sock, void* data, size_t size, int* fds, int* fd_count, int flags) {
  iovec iov{data, size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  while ((n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | flags)) < 0) {
    if (errno != EINTR) return -errno;
  }
  int received = 0;
  for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
    if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
    int count = static_cast<int>((cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cmsg) + i * sizeof(int), sizeof fd);
      if (fds != nullptr && fd_count != nullptr && received < *fd_count) {
        fds[received++] = fd;
      } else {
        close(fd);  // more than the caller asked for: never keep an fd nobody owns
      }
    }
  }
  if (fd_count != nullptr) *fd_count = received;
  return n;
}

long recv_sync(int sock, SyncMessage* message, int* fds, int* fd_count, bool nonblocking) {
  long n =
      recv_with_fds(sock, message, sizeof *message, fds, fd_count, nonblocking ? MSG_DONTWAIT : 0);
  if (n > 0 && n != static_cast<long>(sizeof *message)) return -EBADMSG;
  return n;
}

}  // namespace hutch
