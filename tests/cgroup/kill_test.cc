// The paths kill_all takes when the kernel has no cgroup.kill (before 5.14): freeze + SIGKILL
// each listed pid + thaw, through cgroup2's freezer, the v1 freezer, or no freezer at all; and the
// v1 freezer itself. This host and the test VM both have cgroup.kill, so these are forced.
#include "runtime/cgroup/kill.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "runtime/cgroup/stale.h"
#include "runtime/cgroup/v1.h"
#include "tests/cgroup/fixture.h"
#include "tests/cgroup/spawn.h"
#include "tests/common/wait.h"

namespace hutch::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using hutch::testing::wait_until;

enum class Freezer { kCgroup2, kV1, kNone };

// The variants this host can have: a pure cgroup2 kernel has no v1 freezer, so its tests do not
// exist there (rather than being skipped, which a must-work run would flag).
std::vector<Freezer> freezers_on_this_host() {
  std::vector<Freezer> freezers;
  Result<CgroupLayout> layout = read_cgroup_layout();
  if (layout && !layout->v2_mount.empty()) freezers.push_back(Freezer::kCgroup2);
  if (layout) {
    std::optional<CgroupHierarchy> freezer = locate_controller(*layout, "freezer");
    if (freezer && freezer->version == CgroupVersion::kV1) freezers.push_back(Freezer::kV1);
  }
  freezers.push_back(Freezer::kNone);
  return freezers;
}

std::vector<Freezer> v1_freezer_on_this_host() {
  std::vector<Freezer> freezers = freezers_on_this_host();
  return std::find(freezers.begin(), freezers.end(), Freezer::kV1) == freezers.end()
             ? std::vector<Freezer>{}
             : std::vector<Freezer>{Freezer::kV1};
}

std::string freezer_name(const ::testing::TestParamInfo<Freezer>& info) {
  switch (info.param) {
    case Freezer::kCgroup2:
      return "Cgroup2Freezer";
    case Freezer::kV1:
      return "V1Freezer";
    case Freezer::kNone:
      return "NoFreezer";
  }
  return "Unknown";
}

class KillFallbackTest : public CgroupHostTest, public ::testing::WithParamInterface<Freezer> {
 protected:
  // A sandbox cgroup that also has a dir in the v1 freezer hierarchy (hybrid and v1 hosts).
  Result<SandboxCgroup> create_with_v1_freezer() {
    Result<CgroupPlan> plan =
        plan_cgroups(layout_, CgroupLimits{64 << 20, 32, std::nullopt, std::nullopt});
    if (!plan) return std::unexpected(plan.error());
    std::optional<CgroupHierarchy> freezer = locate_controller(layout_, "freezer");
    if (freezer && freezer->version == CgroupVersion::kV1 &&
        std::none_of(plan->dirs.begin(), plan->dirs.end(), [&](const CgroupDirPlan& d) {
          return d.hierarchy.mount_point == freezer->mount_point;
        })) {
      plan->dirs.push_back({*freezer, {"freezer"}});
    }
    Result<std::string> id = make_sandbox_cgroup_id(500 + static_cast<int>(GetParam()));
    if (!id) return std::unexpected(id.error());
    return SandboxCgroup::create(*plan, *id);
  }
};

// A fork bomb, a stopped process and a setsid'd orphan: everything must die without cgroup.kill.
TEST_P(KillFallbackTest, FreezeAndSignalLeaveNoProcess) {
  std::optional<CgroupHierarchy> v1_freezer = locate_controller(layout_, "freezer");
  Result<SandboxCgroup> cgroup = create_with_v1_freezer();
  ASSERT_TRUE(cgroup) << cgroup.error().message();
  Result<pid_t> top = spawn_in(*cgroup, [] {
    if (fork() == 0) {
      setsid();
      if (fork() == 0) {
        for (;;) pause();
      }
      _exit(0);
    }
    if (fork() == 0) {
      raise(SIGSTOP);
      _exit(0);
    }
    for (;;) {
      if (fork() < 0) usleep(1000);
    }
    return 0;
  });
  ASSERT_TRUE(top) << top.error().message();
  const std::string pids_dir = dir_with("pids", *cgroup);
  ASSERT_TRUE(wait_until(
      [&] {
        return std::stoull("0" + read_text(pids_dir + "/pids.current")) >=
               std::stoull("0" + read_text(pids_dir + "/pids.max"));
      },
      10s, "the bomb to fill pids.max"));

  std::vector<CgroupDir> dirs;
  for (const std::string& path : cgroup->paths()) {
    Result<CgroupDir> dir = open_cgroup_dir(path);
    ASSERT_TRUE(dir) << dir.error().message();
    dirs.push_back(std::move(*dir));
  }
  CgroupKillTarget target;
  target.use_cgroup_kill = false;
  for (CgroupDir& dir : dirs) {
    target.dirs.push_back(&dir);
    const bool in_v2 = dir.path.starts_with(layout_.v2_mount + "/") && !layout_.v2_mount.empty();
    if (GetParam() == Freezer::kCgroup2 && in_v2) target.v2 = &dir;
    if (GetParam() == Freezer::kV1 && dir.path.starts_with(v1_freezer->mount_point + "/")) {
      target.v1_freezer = &dir;
    }
  }
  const Clock::time_point start = Clock::now();
  Result<void> killed = kill_cgroup_processes(target, 10s);
  ASSERT_TRUE(killed) << killed.error().message();
  std::printf(
      "[ measured ] fallback kill took %lld ms\n",
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()));
  for (const std::string& path : cgroup->paths()) EXPECT_TRUE(procs_in(path).empty()) << path;
  if (target.v2 != nullptr) {
    EXPECT_NE(read_text(target.v2->path + "/cgroup.events").find("frozen 0"), std::string::npos)
        << "left frozen";
  }
  if (target.v1_freezer != nullptr) {
    EXPECT_EQ(read_text(target.v1_freezer->path + "/freezer.state"), "THAWED");
  }
  EXPECT_TRUE(cgroup->destroy());
}

INSTANTIATE_TEST_SUITE_P(Freezers, KillFallbackTest, ::testing::ValuesIn(freezers_on_this_host()),
                         freezer_name);

class V1FreezerTest : public KillFallbackTest {};

// The freezer v1-only hosts use for freeze()/thaw(): progress stops and resumes.
TEST_P(V1FreezerTest, StopsAndResumesProgress) {
  std::optional<CgroupHierarchy> v1_freezer = locate_controller(layout_, "freezer");
  ASSERT_TRUE(v1_freezer);
  Result<SandboxCgroup> cgroup = create_with_v1_freezer();
  ASSERT_TRUE(cgroup) << cgroup.error().message();
  SharedCounters counter(1);
  Result<pid_t> spinner = spawn_in(*cgroup, [&counter]() -> int {
    for (;;) counter[0].fetch_add(1, std::memory_order_relaxed);
  });
  ASSERT_TRUE(spinner) << spinner.error().message();
  ASSERT_TRUE(wait_until([&] { return counter[0].load() > 0; }, 5s, "the spinner to count", 1ms));
  Result<CgroupDir> dir = open_cgroup_dir(v1_freezer->mount_point + "/hutch/" + cgroup->id());
  ASSERT_TRUE(dir) << dir.error().message();
  Result<void> frozen = set_v1_frozen(*dir, true, 5000ms);
  ASSERT_TRUE(frozen) << frozen.error().message();
  const uint64_t at = counter[0].load();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(counter[0].load(), at);
  ASSERT_TRUE(set_v1_frozen(*dir, false, 5000ms));
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(counter[0].load(), at);
  EXPECT_TRUE(cgroup->destroy());
}

INSTANTIATE_TEST_SUITE_P(V1, V1FreezerTest, ::testing::ValuesIn(v1_freezer_on_this_host()),
                         freezer_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(V1FreezerTest);  // none on pure cgroup2

}  // namespace
}  // namespace hutch::test
