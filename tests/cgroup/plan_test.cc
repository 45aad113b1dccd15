// plan_cgroups on fake layouts (pure cgroup2, this hybrid host, v1 only, none): which hierarchy
// enforces each limit, which dirs a sandbox needs, what is enabled where. Pure, no root.
#include "runtime/cgroup/plan.h"

#include <gtest/gtest.h>

#include "runtime/cgroup/cgroup_fs.h"

namespace hutch {
namespace {

using Strings = std::vector<std::string>;

CgroupLayout pure_v2(Strings root_enabled = {"cpu", "memory", "pids"}) {
  CgroupLayout layout;
  layout.v2_mount = "/sys/fs/cgroup";
  layout.v2_controllers = {"cpuset", "cpu", "io", "memory", "hugetlb", "pids"};
  layout.v2_subtree_control = std::move(root_enabled);
  return layout;
}

std::vector<CgroupV1Hierarchy> v1_hierarchies() {
  return {{"/sys/fs/cgroup/cpu", {"cpu"}},
          {"/sys/fs/cgroup/cpuacct", {"cpuacct"}},
          {"/sys/fs/cgroup/memory", {"memory"}},
          {"/sys/fs/cgroup/freezer", {"freezer"}},
          {"/sys/fs/cgroup/pids", {"pids"}}};
}

// This development host: v1 controllers, cgroup2 with hugetlb only.
CgroupLayout hybrid() {
  CgroupLayout layout;
  layout.v2_mount = "/sys/fs/cgroup/unified";
  layout.v2_controllers = {"hugetlb"};
  layout.v1 = v1_hierarchies();
  return layout;
}

CgroupLayout v1_only() {
  CgroupLayout layout;
  layout.v1 = v1_hierarchies();
  return layout;
}

CgroupLimits all_limits() {
  CgroupLimits limits;
  limits.memory_bytes = 64 << 20;
  limits.pids = 32;
  limits.cpus = 0.5;
  limits.cpu_weight = 200;
  return limits;
}

std::string enforcer(const CgroupPlan& plan, CgroupLimit limit) {
  for (const LimitEnforcement& e : plan.enforcement) {
    if (e.limit == limit) {
      return (e.hierarchy.version == CgroupVersion::kV2 ? "v2:" : "v1:") + e.hierarchy.mount_point;
    }
  }
  return "none";
}

TEST(PlanCgroups, PureV2EnforcesEverythingInOneDir) {
  Result<CgroupPlan> plan = plan_cgroups(pure_v2(), all_limits());
  ASSERT_TRUE(plan) << plan.error().message();
  ASSERT_EQ(plan->dirs.size(), 1u);
  EXPECT_EQ(plan->dirs[0].hierarchy.mount_point, "/sys/fs/cgroup");
  EXPECT_EQ(plan->dirs[0].controllers, (Strings{"memory", "pids", "cpu"}));
  EXPECT_EQ(plan->v2_enable, (Strings{"memory", "pids", "cpu"}));
  EXPECT_TRUE(plan->v2_root_enable.empty());
  EXPECT_EQ(enforcer(*plan, CgroupLimit::kMemory), "v2:/sys/fs/cgroup");
  EXPECT_EQ(enforcer(*plan, CgroupLimit::kPids), "v2:/sys/fs/cgroup");
  EXPECT_EQ(enforcer(*plan, CgroupLimit::kCpus), "v2:/sys/fs/cgroup");
  EXPECT_EQ(enforcer(*plan, CgroupLimit::kCpuWeight), "v2:/sys/fs/cgroup");
}

TEST(PlanCgroups, PureV2NamesOnlyTheMissingRootControllers) {
  Result<CgroupPlan> plan = plan_cgroups(pure_v2({"memory"}), all_limits());
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->v2_root_enable, (Strings{"pids", "cpu"}));
}

TEST(PlanCgroups, PureV2WithoutCpuLimitsLeavesCpuAlone) {
  CgroupLimits limits;
  limits.pids = 10;
  Result<CgroupPlan> plan = plan_cgroups(pure_v2({}), limits);
  ASSERT_TRUE(plan) << plan.error().message();
  // memory joins for accounting (peak, OOM kills) even without a limit.
  EXPECT_EQ(plan->v2_enable, (Strings{"memory", "pids"}));
  EXPECT_EQ(plan->enforcement.size(), 1u);
}

TEST(PlanCgroups, HybridPlacesInCgroup2AndLimitsThroughV1) {
  Result<CgroupPlan> plan = plan_cgroups(hybrid(), all_limits());
  ASSERT_TRUE(plan) << plan.error().message();
  ASSERT_EQ(plan->dirs.size(), 4u);
  EXPECT_EQ(plan->dirs[0].hierarchy.version, CgroupVersion::kV2);
  EXPECT_EQ(plan->dirs[0].hierarchy.mount_point, "/sys/fs/cgroup/unified");
  EXPECT_TRUE(plan->dirs[0].controllers.empty());
  EXPECT_TRUE(plan->v2_enable.empty());
  EXPECT_TRUE(plan->v2_root_enable.empty());
  EXPECT_EQ(enforcer(*plan, CgroupLimit::kMemory), "v1:/sys/fs/cgroup/memory");
  EXPECT_EQ(enforcer(*plan, CgroupLimit::kPids), "v1:/sys/fs/cgroup/pids");
  EXPECT_EQ(enforcer(*plan, CgroupLimit::kCpus), "v1:/sys/fs/cgroup/cpu");
  EXPECT_EQ(enforcer(*plan, CgroupLimit::kCpuWeight), "v1:/sys/fs/cgroup/cpu");
  // cpu usage and freeze come from cgroup2's core files: no cpuacct or freezer dirs.
  for (const CgroupDirPlan& dir : plan->dirs) {
    EXPECT_NE(dir.hierarchy.mount_point, "/sys/fs/cgroup/cpuacct");
    EXPECT_NE(dir.hierarchy.mount_point, "/sys/fs/cgroup/freezer");
  }
}

TEST(PlanCgroups, V1OnlyAddsCpuacctAndFreezer) {
  Result<CgroupPlan> plan = plan_cgroups(v1_only(), all_limits());
  ASSERT_TRUE(plan) << plan.error().message();
  Strings mounts;
  for (const CgroupDirPlan& dir : plan->dirs) {
    EXPECT_EQ(dir.hierarchy.version, CgroupVersion::kV1);
    mounts.push_back(dir.hierarchy.mount_point);
  }
  EXPECT_EQ(mounts, (Strings{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu",
                             "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/freezer"}));
}

TEST(PlanCgroups, CoMountedCpuAndCpuacctShareADir) {
  CgroupLayout layout;
  layout.v1 = {{"/sys/fs/cgroup/cpu,cpuacct", {"cpu", "cpuacct"}}};
  CgroupLimits limits;
  limits.cpus = 1;
  Result<CgroupPlan> plan = plan_cgroups(layout, limits);
  ASSERT_TRUE(plan) << plan.error().message();
  ASSERT_EQ(plan->dirs.size(), 1u);
  EXPECT_EQ(plan->dirs[0].controllers, (Strings{"cpu", "cpuacct"}));
}

TEST(PlanCgroups, UnenforceableLimitIsAnErrorNamingIt) {
  CgroupLayout layout = hybrid();
  layout.v1.erase(layout.v1.begin() + 4);  // no pids hierarchy
  Result<CgroupPlan> plan = plan_cgroups(layout, all_limits());
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.error().message().find("pids limit cannot be enforced"), std::string::npos)
      << plan.error().message();
}

TEST(PlanCgroups, NoCgroupsAtAllFailsOnTheFirstLimit) {
  Result<CgroupPlan> plan = plan_cgroups(CgroupLayout{}, all_limits());
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.error().message().find("memory limit cannot be enforced"), std::string::npos);
  EXPECT_NE(plan.error().message().find("cgroup mode none"), std::string::npos);
}

TEST(PlanCgroups, NoLimitsOnANoCgroupHostIsAnEmptyPlan) {
  Result<CgroupPlan> plan = plan_cgroups(CgroupLayout{}, CgroupLimits{});
  ASSERT_TRUE(plan);
  EXPECT_TRUE(plan->dirs.empty());
}

TEST(PlanCgroups, RejectsNonsenseLimits) {
  CgroupLimits zero_cpus;
  zero_cpus.cpus = 0;
  EXPECT_FALSE(plan_cgroups(pure_v2(), zero_cpus));
  CgroupLimits nan_cpus;
  nan_cpus.cpus = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(plan_cgroups(pure_v2(), nan_cpus));
  CgroupLimits weight;
  weight.cpu_weight = 10'001;
  EXPECT_FALSE(plan_cgroups(pure_v2(), weight));
  CgroupLimits pids;
  pids.pids = 0;
  EXPECT_FALSE(plan_cgroups(pure_v2(), pids));
  CgroupLimits memory;
  memory.memory_bytes = 0;
  EXPECT_FALSE(plan_cgroups(pure_v2(), memory));
}

TEST(CgroupLimitsDefaults, CapMemoryAtHalfOfRamOrFourGiB) {
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  EXPECT_EQ(default_cgroup_limits(24 * kGiB).memory_bytes, 4 * kGiB);
  EXPECT_EQ(default_cgroup_limits(2 * kGiB).memory_bytes, 1 * kGiB);
  EXPECT_EQ(default_cgroup_limits(2 * kGiB).pids, 4096u);
  EXPECT_FALSE(default_cgroup_limits(2 * kGiB).cpus);
  CgroupLimits asked;
  asked.pids = 10;
  CgroupLimits merged = with_defaults(asked, default_cgroup_limits(2 * kGiB));
  EXPECT_EQ(merged.pids, 10u);
  EXPECT_EQ(merged.memory_bytes, 1 * kGiB);
}

TEST(CgroupValues, CpuQuotaAndShares) {
  EXPECT_EQ(cpu_quota_usec(0.2), 20'000u);
  EXPECT_EQ(cpu_quota_usec(2), 200'000u);
  EXPECT_EQ(cpu_quota_usec(0.001), 1'000u);  // the kernel's minimum quota
  EXPECT_EQ(cpu_weight_to_shares(1), 2u);
  EXPECT_EQ(cpu_weight_to_shares(10'000), 262'144u);
  EXPECT_EQ(cpu_weight_to_shares(100), 2'597u);
}

TEST(CgroupValues, FindsKeysInKeyValueFiles) {
  const std::string events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n";
  EXPECT_EQ(find_cgroup_key(events, "oom_kill"), 1u);
  EXPECT_EQ(find_cgroup_key(events, "oom"), 2u);
  EXPECT_EQ(find_cgroup_key(events, "max"), 12u);
  EXPECT_FALSE(find_cgroup_key(events, "oom_kil"));
  EXPECT_EQ(find_cgroup_key("usage_usec 123456\nuser_usec 1", "usage_usec"), 123'456u);
}

TEST(CgroupParent, OnlyOneSafeNameIsValid) {
  EXPECT_TRUE(valid_cgroup_parent("hutch"));
  EXPECT_TRUE(valid_cgroup_parent("hutch-ci_2.slice"));
  for (std::string_view bad : {"", ".", "..", "a/b", "/hutch", "x y", "a\nb"}) {
    EXPECT_FALSE(valid_cgroup_parent(bad)) << bad;
  }
  EXPECT_FALSE(valid_cgroup_parent(std::string(65, 'a')));
  EXPECT_EQ(CgroupPlan{}.parent, "hutch");
}

}  // namespace
}  // namespace hutch
