// Typed messages between the parent and the sandbox over a SOCK_SEQPACKET socketpair.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/base/child_error.h"
#include "runtime/base/passed_fds.h"

namespace hutch {

struct SyncMessage {
  enum class Kind : uint32_t {
    kMapsReady = 1,  // parent -> child: the id maps are written
    kRoot,           // parent -> child: carries the root overlay (a detached mount)
    kFailure,        // child -> parent: a step failed (error)
    kWorkloadExit,   // init -> parent: the workload ended (exit_code or term_signal)
    kServing,        // init -> parent: a live sandbox's init accepts exec requests
    // workload -> parent: execve of argv failed (error, step "execve"): the workload's start
    // failed (exit 126/127), not the runtime (youki's ExecFailed)
    kExecFailed,
  };
  enum class From : uint32_t { kParent, kInit, kWorkload };
  Kind kind;
  From from;
  int32_t exit_code;
  int32_t term_signal;
  ChildError error;
};

// One message of `size` bytes with `fd_count` fds (SCM_RIGHTS) on a SOCK_SEQPACKET socket;
// retried on EINTR. Returns 0 or errno. Async-signal-safe.
int send_with_fds(int sock, const void* data, size_t size, const int* fds, int fd_count);

// One message into data (up to size bytes) with up to *fd_count fds (O_CLOEXEC) stored in fds,
// extra fds closed; flags add to recvmsg's (MSG_DONTWAIT). Returns the byte count (0 at EOF) or
// -errno. Async-signal-safe.
long recv_with_fds(int sock, void* data, size_t size, int* fds, int* fd_count, int flags = 0);

// Both async-signal-safe. send_sync returns 0 or errno; recv_sync returns the byte count
// (0 at EOF) or -errno (-EAGAIN when nonblocking and nothing is queued), and stores up to *fd_count
// received fds (O_CLOEXEC) in fds.
int send_sync(int sock, const SyncMessage& message, const int* fds = nullptr, int fd_count = 0);
long recv_sync(int sock, SyncMessage* message, int* fds = nullptr, int* fd_count = nullptr,
               bool nonblocking = false);

}  // namespace hutch
