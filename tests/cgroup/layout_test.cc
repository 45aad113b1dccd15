// Parsing /proc/self/mountinfo and /proc/<pid>/cgroup: pure, no root.
#include "runtime/cgroup/layout.h"

#include <gtest/gtest.h>

namespace hutch {
namespace {

using Strings = std::vector<std::string>;

// This development host's cgroup mounts (hybrid), verbatim.
constexpr const char* kHybridMountinfo =
    R"(31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
)";

TEST(CgroupLayout, HybridHostHasV1ControllersAndCgroup2) {
  CgroupLayout layout = parse_cgroup_mounts(kHybridMountinfo);
  EXPECT_EQ(layout.mode(), "hybrid");
  EXPECT_EQ(layout.v2_mount, "/sys/fs/cgroup/unified");
  ASSERT_EQ(layout.v1.size(), 5u);
  EXPECT_EQ(layout.v1[0].mount_point, "/sys/fs/cgroup/cpu");
  EXPECT_EQ(layout.v1[0].controllers, Strings{"cpu"});
  EXPECT_EQ(layout.v1[2].controllers, Strings{"memory"});
}

TEST(CgroupLayout, NamedHierarchyIsNotAController) {
  // systemd's named hierarchy next to a pure cgroup2 mount: still a v2 host.
  CgroupLayout layout = parse_cgroup_mounts(
      "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
      "40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"
      "41 31 0:38 / /mnt/named rw - cgroup none rw,none,name=hutchtest\n");
  EXPECT_EQ(layout.mode(), "v2");
  EXPECT_TRUE(layout.v1.empty());
}

TEST(CgroupLayout, CoMountedControllersShareOneHierarchy) {
  CgroupLayout layout = parse_cgroup_mounts(
      "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
      "33 31 0:30 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset,clone_children,"
      "release_agent=/sbin/agent\n");
  EXPECT_EQ(layout.mode(), "v1");
  ASSERT_EQ(layout.v1.size(), 2u);
  EXPECT_EQ(layout.v1[0].controllers, (Strings{"cpu", "cpuacct"}));
  EXPECT_EQ(layout.v1[1].controllers, Strings{"cpuset"});
}

TEST(CgroupLayout, MountPointEscapesAreDecoded) {
  CgroupLayout layout =
      parse_cgroup_mounts("41 31 0:38 / /mnt/with\\040space rw - cgroup2 cgroup2 rw\n");
  EXPECT_EQ(layout.v2_mount, "/mnt/with space");
}

TEST(CgroupLayout, NoCgroupMounts) {
  CgroupLayout layout = parse_cgroup_mounts("22 1 0:5 / /proc rw - proc proc rw\n");
  EXPECT_EQ(layout.mode(), "none");
}

TEST(ProcCgroup, ParsesEveryLineAndFindsOwnPaths) {
  std::vector<CgroupMembership> own = parse_proc_cgroup(
      "9:name=systemd:/\n4:memory:/process_api/67db\n2:cpu,cpuacct:/\n0::/user.slice\n");
  ASSERT_EQ(own.size(), 4u);
  EXPECT_TRUE(own[0].controllers.empty());
  EXPECT_TRUE(own[3].v2);
  EXPECT_EQ(cgroup_path_in(own, false, {"memory"}), "/process_api/67db");
  EXPECT_EQ(cgroup_path_in(own, false, {"cpuacct", "cpu"}), "/");
  EXPECT_EQ(cgroup_path_in(own, true, {}), "/user.slice");
  EXPECT_EQ(cgroup_path_in(own, false, {"pids"}), "");
}

}  // namespace
}  // namespace hutch
