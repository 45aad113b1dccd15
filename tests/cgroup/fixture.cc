#include "tests/cgroup/fixture.h"

#include <dirent.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/cgroup/stale.h"
#include "tests/common/must_work.h"
#include "tests/common/wait.h"

namespace hutch::test {
namespace {

std::vector<std::string> all_mounts(const CgroupLayout& layout) {
  std::vector<std::string> mounts;
  if (!layout.v2_mount.empty()) mounts.push_back(layout.v2_mount);
  for (const CgroupV1Hierarchy& h : layout.v1) mounts.push_back(h.mount_point);
  return mounts;
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> subdirs(const std::string& path) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(path.c_str())) {
    while (dirent* entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (entry->d_type == DT_DIR && name != "." && name != "..") names.push_back(name);
    }
    closedir(dir);
  }
  return names;
}

// Removes the `<mount>/hutch` parents this test process created, if they are empty by the end
// (rmdir fails, harmlessly, when another run has a sandbox in one).
class HutchParents : public ::testing::Environment {
 public:
  void SetUp() override {
    if (geteuid() != 0) return;
    Result<CgroupLayout> layout = read_cgroup_layout();
    if (!layout) return;
    for (const std::string& mount : all_mounts(*layout)) {
      if (!is_dir(mount + "/hutch")) created_by_us_.push_back(mount + "/hutch");
    }
  }
  void TearDown() override {
    for (const std::string& parent : created_by_us_) rmdir(parent.c_str());
  }

 private:
  std::vector<std::string> created_by_us_;  // candidates: absent at the start
};

[[maybe_unused]] ::testing::Environment* const kHutchParents =
    ::testing::AddGlobalTestEnvironment(new HutchParents);

}  // namespace

void reap_children(std::chrono::milliseconds patience) {
  // Running out of patience with children left is the caller's to notice (cgroup.procs).
  (void)hutch::testing::wait_until(
      [] {
        pid_t pid;
        while ((pid = waitpid(-1, nullptr, WNOHANG)) > 0) {
        }
        return pid < 0;  // ECHILD: none left
      },
      patience, "every child to be reaped", std::chrono::milliseconds(2));
}

void CgroupHostTest::SetUp() {
  HUTCH_REQUIRE(geteuid() == 0, "not root: creating cgroups needs root");
  Result<CgroupLayout> layout = read_cgroup_layout();
  HUTCH_REQUIRE(layout.has_value(), "cannot read the cgroup layout: " +
                                        (layout ? std::string() : layout.error().message()));
  layout_ = *layout;
  HUTCH_REQUIRE(layout_.mode() != "none", "no cgroup hierarchy is mounted");
  CgroupLimits every_limit{uint64_t{64} << 20, 32, 0.5, 100};
  Result<CgroupPlan> plan = plan_cgroups(layout_, every_limit);
  HUTCH_REQUIRE(plan.has_value(), "this host cannot enforce every limit (" + layout_.mode() +
                                      "): " + (plan ? std::string() : plan.error().message()));
  // Orphans of the tests' double forks come back to us to be reaped.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  Result<std::string> id = make_sandbox_cgroup_id(0);
  ASSERT_TRUE(id) << id.error().message();
  id_prefix_ = id->substr(0, id->size() - 1);
}

void CgroupHostTest::TearDown() {
  reap_children(std::chrono::milliseconds(2000));
  if (id_prefix_.empty()) return;  // skipped in SetUp
  for (const std::string& mount : mounts()) {
    for (const std::string& name : subdirs(mount + "/hutch")) {
      EXPECT_FALSE(name.starts_with(id_prefix_)) << "left behind: " << mount << "/hutch/" << name;
    }
  }
}

Result<SandboxCgroup> CgroupHostTest::create(const CgroupLimits& limits) {
  static uint64_t sequence = 1;
  Result<CgroupPlan> plan = plan_cgroups(layout_, limits);
  if (!plan) return std::unexpected(plan.error());
  Result<std::string> id = make_sandbox_cgroup_id(sequence++);
  if (!id) return std::unexpected(id.error());
  return SandboxCgroup::create(*plan, *id);
}

std::vector<std::string> CgroupHostTest::mounts() const { return all_mounts(layout_); }

std::string CgroupHostTest::dir_enforcing(const CgroupPlan& plan, CgroupLimit limit,
                                          const SandboxCgroup& cgroup) const {
  for (const LimitEnforcement& e : plan.enforcement) {
    if (e.limit == limit) return e.hierarchy.mount_point + "/hutch/" + cgroup.id();
  }
  return "";
}

std::string CgroupHostTest::dir_with(std::string_view controller,
                                     const SandboxCgroup& cgroup) const {
  std::optional<CgroupHierarchy> hierarchy = locate_controller(layout_, controller);
  return hierarchy ? hierarchy->mount_point + "/hutch/" + cgroup.id() : "";
}

}  // namespace hutch::test
