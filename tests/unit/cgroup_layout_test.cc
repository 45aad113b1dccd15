#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/cgroup/layout.h"

namespace hutch {
namespace {

using Controllers = std::vector<std::string>;

// mountinfo(5) lines as a host shows them.
constexpr char kRootfs[] = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n";
constexpr char kV2[] =
    "30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";
constexpr char kHybridUnified[] =
    "34 25 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 "
    "cgroup2 rw\n";
constexpr char kSystemd[] =
    "33 25 0:28 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:9 - cgroup "
    "cgroup rw,xattr,name=systemd\n";
constexpr char kMemory[] =
    "35 25 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup "
    "cgroup rw,memory\n";
constexpr char kCpuCpuacct[] =
    "36 25 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:16 - cgroup "
    "cgroup rw,cpu,cpuacct\n";
constexpr char kPids[] =
    "37 25 0:32 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup "
    "rw,pids\n";
constexpr char kCgroupTmpfs[] =
    "25 22 0:24 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755\n";

std::string join(std::initializer_list<const char*> lines) {
  std::string text;
  for (const char* line : lines) text += line;
  return text;
}

TEST(ParseCgroupMounts, PureV2Host) {
  CgroupLayout layout = parse_cgroup_mounts(join({kRootfs, kV2}));
  EXPECT_EQ(layout.v2_mount, "/sys/fs/cgroup");
  EXPECT_TRUE(layout.v1.empty());
  EXPECT_TRUE(layout.v2_controllers.empty()) << "filled in by read_cgroup_layout only";
  EXPECT_EQ(layout.mode(), "v2");
}

TEST(ParseCgroupMounts, HybridHost) {
  CgroupLayout layout = parse_cgroup_mounts(
      join({kRootfs, kCgroupTmpfs, kHybridUnified, kSystemd, kMemory, kCpuCpuacct, kPids}));
  EXPECT_EQ(layout.v2_mount, "/sys/fs/cgroup/unified");
  ASSERT_EQ(layout.v1.size(), 3u);
  EXPECT_EQ(layout.v1[0].mount_point, "/sys/fs/cgroup/memory");
  EXPECT_EQ(layout.v1[0].controllers, Controllers{"memory"});
  EXPECT_EQ(layout.v1[1].mount_point, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(layout.v1[1].controllers, (Controllers{"cpu", "cpuacct"}));
  EXPECT_EQ(layout.v1[2].mount_point, "/sys/fs/cgroup/pids");
  EXPECT_EQ(layout.v1[2].controllers, Controllers{"pids"});
  EXPECT_EQ(layout.mode(), "hybrid");
}

TEST(ParseCgroupMounts, NamedHierarchyIsNotAController) {
  // name=systemd carries no controller: with only that, a v2 host is still pure v2.
  CgroupLayout layout = parse_cgroup_mounts(join({kV2, kSystemd}));
  EXPECT_TRUE(layout.v1.empty());
  EXPECT_EQ(layout.mode(), "v2");
}

TEST(ParseCgroupMounts, MountFlagsAreNotControllers) {
  CgroupLayout layout = parse_cgroup_mounts(
      "40 25 0:35 / /sys/fs/cgroup/cpuset ro,relatime - cgroup cgroup "
      "ro,cpuset,noprefix,clone_children,xattr,release_agent=/sbin/agent\n");
  ASSERT_EQ(layout.v1.size(), 1u);
  EXPECT_EQ(layout.v1[0].controllers, Controllers{"cpuset"});
}

TEST(ParseCgroupMounts, KernelFlagsAreNotControllers) {
  // cgroup1_show_options prints these after the controllers (Linux 4.13 and 6.0).
  CgroupLayout layout = parse_cgroup_mounts(
      "40 25 0:35 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset,cpuset_v2_mode\n"
      "41 25 0:36 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory,favordynmods\n");
  ASSERT_EQ(layout.v1.size(), 2u);
  EXPECT_EQ(layout.v1[0].controllers, Controllers{"cpuset"});
  EXPECT_EQ(layout.v1[1].controllers, Controllers{"memory"});
}

TEST(ParseCgroupMounts, UnescapesMountPoints) {
  // mountinfo(5) writes space, tab, newline and backslash in paths as octal escapes.
  CgroupLayout layout = parse_cgroup_mounts(
      "30 22 0:26 / /run/my\\040cgroup\\134v2 rw - cgroup2 cgroup2 rw\n"
      "35 25 0:30 / /sys/fs/cgroup/tab\\011here rw - cgroup cgroup rw,memory\n");
  EXPECT_EQ(layout.v2_mount, "/run/my cgroup\\v2");
  ASSERT_EQ(layout.v1.size(), 1u);
  EXPECT_EQ(layout.v1[0].mount_point, "/sys/fs/cgroup/tab\there");
}

TEST(ParseCgroupMounts, V1OnlyHost) {
  CgroupLayout layout =
      parse_cgroup_mounts(join({kRootfs, kCgroupTmpfs, kSystemd, kMemory, kCpuCpuacct}));
  EXPECT_TRUE(layout.v2_mount.empty());
  EXPECT_EQ(layout.v1.size(), 2u);
  EXPECT_EQ(layout.mode(), "v1");
}

TEST(ParseCgroupMounts, NoCgroupsAtAll) {
  CgroupLayout layout = parse_cgroup_mounts(join({kRootfs, kCgroupTmpfs}));
  EXPECT_TRUE(layout.v2_mount.empty());
  EXPECT_TRUE(layout.v1.empty());
  EXPECT_EQ(layout.mode(), "none");
  EXPECT_EQ(parse_cgroup_mounts("").mode(), "none");
}

TEST(ParseCgroupMounts, OptionalFieldsDoNotShiftTheFields) {
  // Zero or several optional fields before the " - " separator.
  CgroupLayout layout = parse_cgroup_mounts(
      "30 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
      "35 25 0:30 / /sys/fs/cgroup/memory rw shared:15 master:3 propagate_from:2 - cgroup "
      "cgroup rw,memory\n");
  EXPECT_EQ(layout.v2_mount, "/sys/fs/cgroup");
  ASSERT_EQ(layout.v1.size(), 1u);
  EXPECT_EQ(layout.v1[0].mount_point, "/sys/fs/cgroup/memory");
}

TEST(ParseCgroupMounts, FirstCgroup2MountWins) {
  CgroupLayout layout = parse_cgroup_mounts(
      join({kV2, "90 30 0:26 /sandbox /srv/nested rw shared:4 - cgroup2 cgroup2 rw\n"}));
  EXPECT_EQ(layout.v2_mount, "/sys/fs/cgroup");
}

TEST(ParseCgroupMounts, IgnoresMalformedAndOtherLines) {
  CgroupLayout layout = parse_cgroup_mounts(
      "garbage without separator\n"
      "\n"
      "50 22 0:40 / /mnt/fake rw - tmpfs cgroup2 rw\n"  // source named cgroup2, type tmpfs
      "51 22 0:41 / /mnt/cgroup2 rw - ext4 /dev/sdb1 rw\n");
  EXPECT_EQ(layout.mode(), "none");
}

TEST(ParseProcCgroup, ReadsV1AndV2Lines) {
  auto memberships = parse_proc_cgroup(
      "12:memory:/box/1\n"
      "5:cpu,cpuacct:/box/1\n"
      "1:name=systemd:/user.slice\n"
      "0::/user.slice/session-1.scope\n");
  ASSERT_EQ(memberships.size(), 4u);
  EXPECT_EQ(memberships[0].controllers, Controllers{"memory"});
  EXPECT_FALSE(memberships[0].v2);
  EXPECT_EQ(memberships[0].path, "/box/1");
  EXPECT_EQ(memberships[1].controllers, (Controllers{"cpu", "cpuacct"}));
  EXPECT_TRUE(memberships[2].controllers.empty()) << "name=systemd is not a controller";
  EXPECT_TRUE(memberships[3].v2);
  EXPECT_TRUE(memberships[3].controllers.empty());
  EXPECT_EQ(memberships[3].path, "/user.slice/session-1.scope");
}

TEST(ParseProcCgroup, PathMayContainColonsAndBadLinesAreSkipped) {
  auto memberships = parse_proc_cgroup("garbage\n4:pids:/a:b\n");
  ASSERT_EQ(memberships.size(), 1u);
  EXPECT_EQ(memberships[0].path, "/a:b");
}

TEST(CgroupPathIn, FindsTheHierarchyByItsControllerSet) {
  auto memberships = parse_proc_cgroup(
      "5:cpu,cpuacct:/cpu/path\n1:name=systemd:/named\n3:memory:/mem/path\n0::/v2/path\n");
  EXPECT_EQ(cgroup_path_in(memberships, false, {"memory"}), "/mem/path");
  EXPECT_EQ(cgroup_path_in(memberships, false, {"cpuacct", "cpu"}), "/cpu/path");
  EXPECT_EQ(cgroup_path_in(memberships, true, {}), "/v2/path");
  EXPECT_EQ(cgroup_path_in(memberships, false, {"pids"}), "");
  EXPECT_EQ(cgroup_path_in(memberships, false, {}), "") << "a named hierarchy is no match";
}

TEST(CgroupPathIn, NoV2LineMeansNoV2Path) {
  EXPECT_EQ(cgroup_path_in(parse_proc_cgroup("3:memory:/m\n"), true, {}), "");
}

TEST(CgroupLayoutMode, NamesEveryCombination) {
  CgroupLayout layout;
  EXPECT_EQ(layout.mode(), "none");
  layout.v1.push_back({"/sys/fs/cgroup/memory", {"memory"}});
  EXPECT_EQ(layout.mode(), "v1");
  layout.v2_mount = "/sys/fs/cgroup/unified";
  EXPECT_EQ(layout.mode(), "hybrid");
  layout.v1.clear();
  EXPECT_EQ(layout.mode(), "v2");
}

}  // namespace
}  // namespace hutch
