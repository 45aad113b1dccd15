// Counting processes from the host's /proc: what is left of a sandbox's workload after a timeout,
// a kill or an exit.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace hutch::testing {

// Host processes whose command line contains `marker`, not counting the `hutch run` launchers
// (their command line names the workload too).
int count_host_processes_with(const std::string& marker);

// Processes in the pid namespace of `member` (a sandbox's init: `init_pid` of the API) whose
// command line contains `marker`: the sandbox's own, whatever other sandboxes run meanwhile.
int count_pid_ns_processes_with(pid_t member, const std::string& marker);

// Every process in the pid namespace of `member` (host pids), `member` included; none when it is
// gone.
std::vector<pid_t> pid_ns_processes(pid_t member);

// Host processes in the mount namespace with this inode (what a sandbox leaves behind).
int processes_in_mount_namespace(ino_t inode);

}  // namespace hutch::testing
