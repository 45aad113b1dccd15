// PID 1 of the sandbox: reaps every zombie, forwards signals to the workload, and exits with
// the workload's status once it ends (the kernel then kills whatever else is left in the
// pid namespace).
#pragma once

#include <sys/types.h>

namespace hutch {

// Expects every signal blocked. Reports the workload's end to the parent on sync_fd.
[[noreturn]] void run_init(int sync_fd, pid_t workload);

}  // namespace hutch
