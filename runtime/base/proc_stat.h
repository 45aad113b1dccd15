// A process's identity as /proc/<pid>/stat tells it: its state, parent and start time. The start
// time (clock ticks since boot) tells a reused pid apart from the process it once named.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "runtime/base/error.h"

namespace hutch {

struct ProcState {
  char state = '?';         // field 3: R, S, D, Z (zombie), X (dead), ...
  pid_t parent = 0;         // field 4
  uint64_t start_time = 0;  // field 22
};

Result<ProcState> read_proc_state(pid_t pid);

}  // namespace hutch
