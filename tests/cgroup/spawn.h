// Test processes in a SandboxCgroup, placed the way the runtime places a sandbox.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/cgroup/sandbox_cgroup.h"

namespace hutch::test {

enum class Placement {
  // clone3(CLONE_INTO_CGROUP) into the cgroup2 dir, then attach() for v1 while the child waits
  // on a pipe: the child never runs outside its limits. Plain fork on hosts without cgroup2.
  kClone3IntoCgroup,
  // fork(), then attach() (writes every cgroup.procs, cgroup2 included) while the child waits.
  kForkThenAttach,
};

// Runs `body` in a child inside `cgroup`; the child _exits with body's return value.
Result<pid_t> spawn_in(SandboxCgroup& cgroup, const std::function<int()>& body,
                       Placement placement = Placement::kClone3IntoCgroup);

// waitpid(2) with a deadline: the wait status, or nullopt if `pid` is still running.
std::optional<int> wait_for_exit(pid_t pid, std::chrono::milliseconds timeout);

// Counters shared between the test and its children (MAP_SHARED anonymous memory).
class SharedCounters {
 public:
  explicit SharedCounters(size_t count);
  ~SharedCounters();
  SharedCounters(const SharedCounters&) = delete;
  SharedCounters& operator=(const SharedCounters&) = delete;
  std::atomic<uint64_t>& operator[](size_t index) { return counters_[index]; }

 private:
  std::atomic<uint64_t>* counters_;
  size_t bytes_;
};

// Every pid in `path`/cgroup.procs (empty if the file is gone).
std::vector<pid_t> procs_in(const std::string& path);
// The trimmed content of a cgroup file, or "" if unreadable.
std::string read_text(const std::string& path);

}  // namespace hutch::test
