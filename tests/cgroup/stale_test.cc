// remove_stale_cgroups on the real kernel, as root: what a crashed run leaves under
// `<mount>/<parent>/` is killed and removed at the next start; live sandboxes and the caller's own
// cgroup are left alone.
#include "runtime/cgroup/stale.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "tests/cgroup/fixture.h"
#include "tests/cgroup/spawn.h"

namespace hutch::test {
namespace {

using namespace std::chrono_literals;

bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

bool place(pid_t pid, const std::string& dir) {
  std::ofstream procs(dir + "/cgroup.procs");
  procs << pid;
  procs.flush();
  return static_cast<bool>(procs);
}

pid_t sleeper() {
  pid_t pid = fork();
  if (pid == 0) {
    for (;;) pause();
  }
  return pid;
}

class StaleCgroupTest : public CgroupHostTest {
 protected:
  void TearDown() override {
    for (const std::string& mount : mounts()) rmdir((mount + "/" + parent_).c_str());
    CgroupHostTest::TearDown();
  }

  // The leftovers' parent, this process's own: sandboxes that other tests start meanwhile sweep
  // <mount>/hutch, where a dead owner's leftover would be theirs to kill and remove.
  const std::string parent_ = "hutch-stale-test-" + std::to_string(getpid());

  Result<int> remove_stale(const std::function<bool(std::string_view id)>& is_live) {
    return remove_stale_cgroups(layout_, is_live, parent_);
  }

  // An id in hutch's format whose owner is gone: a reaped child of ours.
  std::string dead_owner_id() {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, nullptr, 0);
    std::optional<CgroupOwner> owner = parse_sandbox_cgroup_id(id_prefix_ + "0");
    owner->pid = pid;
    return format_sandbox_cgroup_id(*owner);
  }

  // What a crashed run leaves: `<mount>/<parent>/<id>` in each hierarchy a sandbox uses.
  std::vector<std::string> make_leftover(const std::string& id) {
    std::vector<std::string> dirs;
    Result<CgroupPlan> plan =
        plan_cgroups(layout_, CgroupLimits{64 << 20, 16, std::nullopt, std::nullopt});
    EXPECT_TRUE(plan);
    if (!plan) return dirs;
    for (const CgroupDirPlan& dir : plan->dirs) {
      const std::string parent = dir.hierarchy.mount_point + "/" + parent_;
      mkdir(parent.c_str(), 0755);
      const std::string path = parent + "/" + id;
      EXPECT_EQ(mkdir(path.c_str(), 0755), 0) << path << ": " << strerror(errno);
      dirs.push_back(path);
    }
    return dirs;
  }
};

TEST_F(StaleCgroupTest, LeftoversOfADeadOwnerAreKilledAndRemovedLiveOnesStay) {
  const std::string stale_id = dead_owner_id();
  const std::string live_id = id_prefix_ + "777";
  const std::vector<std::string> stale_dirs = make_leftover(stale_id);
  const std::vector<std::string> live_dirs = make_leftover(live_id);
  ASSERT_FALSE(stale_dirs.empty());
  // A surviving workload in every dir, and one in a sub-cgroup (a per-exec cgroup).
  pid_t workload = sleeper();
  for (const std::string& dir : stale_dirs) ASSERT_TRUE(place(workload, dir)) << dir;
  const std::string sub = stale_dirs.front() + "/exec-0";
  ASSERT_EQ(mkdir(sub.c_str(), 0755), 0);
  pid_t exec_workload = sleeper();
  ASSERT_TRUE(place(exec_workload, sub));

  // Judge only this test's ids (other runs' leftovers on the machine are not ours to count).
  auto ours_judged = [&](std::string_view id) {
    if (id != stale_id && id != live_id) return true;
    return cgroup_owner_alive(id);
  };
  Result<int> none = remove_stale([](std::string_view) { return true; });
  ASSERT_TRUE(none) << none.error().message();
  EXPECT_EQ(*none, 0);
  for (const std::string& dir : stale_dirs) EXPECT_TRUE(exists(dir)) << dir;

  Result<int> removed = remove_stale(ours_judged);
  ASSERT_TRUE(removed) << removed.error().message();
  EXPECT_EQ(*removed, 1);
  for (const std::string& dir : stale_dirs) EXPECT_FALSE(exists(dir)) << dir;
  for (const std::string& dir : live_dirs) EXPECT_TRUE(exists(dir)) << dir;
  for (pid_t pid : {workload, exec_workload}) {
    std::optional<int> status = wait_for_exit(pid, 5s);
    ASSERT_TRUE(status) << "pid " << pid << " survived the cleanup";
    EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
  }
  for (const std::string& dir : live_dirs) EXPECT_EQ(rmdir(dir.c_str()), 0) << dir;
}

TEST_F(StaleCgroupTest, ALeftoverHoldingTheCallerIsSkipped) {
  const std::string stale_id = dead_owner_id();
  const std::vector<std::string> dirs = make_leftover(stale_id);
  ASSERT_FALSE(dirs.empty());
  auto only_ours_stale = [&](std::string_view id) { return id != stale_id; };
  // The caller (a child, so that the test process never leaves its own cgroups) sits inside.
  pid_t caller = fork();
  if (caller == 0) {
    for (const std::string& dir : dirs) {
      if (!place(getpid(), dir)) _exit(10);
    }
    Result<int> removed = remove_stale(only_ours_stale);
    if (!removed) _exit(11);
    _exit(*removed == 0 && exists(dirs.front()) ? 0 : 12);
  }
  std::optional<int> status = wait_for_exit(caller, 10s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << "exit " << WEXITSTATUS(*status) << " (10: place, 11: error, 12: removed its own cgroup)";
  // With the caller gone, the leftover goes.
  Result<int> removed = remove_stale(only_ours_stale);
  ASSERT_TRUE(removed) << removed.error().message();
  EXPECT_EQ(*removed, 1);
  for (const std::string& dir : dirs) EXPECT_FALSE(exists(dir)) << dir;
}

}  // namespace
}  // namespace hutch::test
