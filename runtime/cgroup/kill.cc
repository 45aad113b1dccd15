#include "runtime/cgroup/kill.h"

#include <signal.h>

#include <algorithm>
#include <thread>

#include "runtime/cgroup/v1.h"
#include "runtime/cgroup/v2.h"

namespace hutch {
namespace {

using Clock = std::chrono::steady_clock;

// After cgroup.kill the kernel is already killing everything; signalling pids ourselves only
// starts if some survive this long (a pid read from cgroup.procs of a dying process may be reused
// by the time kill(2) runs, so we avoid it while the kernel does the work).
constexpr std::chrono::milliseconds kKernelKillGrace{500};
constexpr std::chrono::milliseconds kMaxPause{20};

Result<std::vector<pid_t>> list_processes(const CgroupKillTarget& target) {
  std::vector<pid_t> pids;
  for (const CgroupDir* dir : target.dirs) {
    Result<std::vector<pid_t>> more = read_tree_procs(*dir);
    if (!more) {
      if (more.error().err == ENOENT) continue;  // already removed
      return std::unexpected(more.error());
    }
    pids.insert(pids.end(), more->begin(), more->end());
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  return pids;
}

Result<void> set_frozen(const CgroupKillTarget& target, bool frozen) {
  if (target.v2 != nullptr) return set_v2_frozen(*target.v2, frozen, std::nullopt);
  if (target.v1_freezer != nullptr) return set_v1_frozen(*target.v1_freezer, frozen, std::nullopt);
  return {};
}

// Frozen, the processes cannot fork while we walk the list. The v1 freezer holds even
// SIGKILLed tasks until the thaw, which is when they die.
Result<void> signal_each(const CgroupKillTarget& target, const std::vector<pid_t>& pids) {
  HUTCH_TRY(set_frozen(target, true));
  for (pid_t pid : pids) {
    if (kill(pid, SIGKILL) != 0 && errno != ESRCH) {
      return sys_error("kill", "SIGKILL to pid " + std::to_string(pid));
    }
  }
  return set_frozen(target, false);
}

}  // namespace

Result<void> kill_cgroup_processes(const CgroupKillTarget& target,
                                   std::chrono::milliseconds timeout) {
  const Clock::time_point start = Clock::now();
  bool kernel_kill = target.use_cgroup_kill && target.v2 != nullptr && has_v2_kill(*target.v2);
  if (kernel_kill) {
    if (auto r = write_v2_kill(*target.v2); !r) {
      if (r.error().err != ENOENT) return r;
      kernel_kill = false;  // the cgroup is gone: nothing left to kill in it
    }
  }
  for (auto pause = std::chrono::milliseconds(1);; pause = std::min(pause * 2, kMaxPause)) {
    std::vector<pid_t> pids = HUTCH_TRY(list_processes(target));
    if (pids.empty()) return {};
    const Clock::time_point now = Clock::now();
    if (now - start > timeout) {
      return plain_error("kill cgroup", std::to_string(pids.size()) + " process(es) survive in " +
                                            target.dirs.front()->path + ", e.g. pid " +
                                            std::to_string(pids.front()));
    }
    if (!kernel_kill || now - start > kKernelKillGrace) {
      HUTCH_TRY(signal_each(target, pids));
    }
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace hutch
