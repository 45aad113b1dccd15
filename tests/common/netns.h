// A new network namespace for a test, made on a thread of its own (unshare(CLONE_NEWNET) changes
// only the calling thread's namespace, so the test's threads stay where they were).
#pragma once

#include <fcntl.h>
#include <sched.h>

#include <thread>

#include "runtime/base/unique_fd.h"

namespace hutch::testing {

// The namespace's fd, or an empty one when unshare failed.
inline UniqueFd new_netns() {
  UniqueFd fd;
  std::thread([&] {
    if (unshare(CLONE_NEWNET) == 0)
      fd.reset(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  }).join();
  return fd;
}

}  // namespace hutch::testing
