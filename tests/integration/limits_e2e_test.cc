// `hutch run` with limits end to end, needing nothing but hutch and a static busybox: it runs here
// (hybrid cgroups) and, through scripts/test-cgroupv2-vm.sh, on a pure cgroup-v2 kernel, where the
// sandbox is placed by clone3(CLONE_INTO_CGROUP) and every limit is cgroup2's.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/common/command.h"
#include "tests/common/must_work.h"

namespace hutch::testing {
namespace {

namespace fs = std::filesystem;

constexpr uid_t kSandboxRoot = 1000000000;  // hutch's default id base

// A static busybox rootfs owned by the sandbox's root: usable whether or not the filesystem
// supports idmapped mounts (tmpfs on the VM's 6.1 kernel does not).
class BusyboxRootfs : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    HUTCH_REQUIRE(fs::exists("/bin/busybox"), "no /bin/busybox (Debian package busybox-static)");
    char pattern[] = "/tmp/hutch-e2e-XXXXXX";
    root_ = mkdtemp(pattern);
    fs::create_directories(root_ + "/bin");
    for (const char* dir : {"/dev", "/proc", "/tmp", "/etc"}) fs::create_directories(root_ + dir);
    fs::copy_file("/bin/busybox", root_ + "/bin/busybox");
    for (const char* applet : {"sh", "head", "cat", "echo", "sleep", "true"}) {
      fs::create_symlink("busybox", root_ + "/bin/" + applet);
    }
    for (const auto& entry : fs::recursive_directory_iterator(root_)) {
      ASSERT_EQ(lchown(entry.path().c_str(), kSandboxRoot, kSandboxRoot), 0);
    }
    ASSERT_EQ(chown(root_.c_str(), kSandboxRoot, kSandboxRoot), 0);
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  CommandResult run(const std::vector<std::string>& options, const std::string& script) {
    std::vector<std::string> args = {"run", "--json", "--rootfs", root_};
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), {"--", "/bin/sh", "-c", script});
    return hutch(args);
  }

  static nlohmann::json record(const CommandResult& r) {
    return nlohmann::json::parse(last_line(r.out));
  }

  std::string root_;
};

TEST_F(BusyboxRootfs, RunsAndSeesItselfAtTheCgroupRoot) {
  auto r = run({}, "echo hello; cat /proc/self/cgroup");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, 6), "hello\n");
  std::string cgroups = r.out.substr(6, r.out.rfind('\n', r.out.size() - 2) - 5);
  for (size_t start = 0; start < cgroups.size();) {
    size_t end = cgroups.find('\n', start);
    std::string line = cgroups.substr(start, end - start);
    EXPECT_EQ(line.substr(line.rfind(':')), ":/") << line;
    start = end + 1;
  }
}

TEST_F(BusyboxRootfs, MemoryLimitOomKillsAndReports) {
  // tmpfs pages are charged to the writer's memory cgroup and cannot be reclaimed without swap.
  auto r = run({"--memory", "32M"}, "head -c 134217728 /dev/zero > /dev/shm/fill");
  EXPECT_EQ(r.exit_code, 137) << r.err;
  auto result = record(r);
  EXPECT_EQ(result["oom_killed"], true);
  EXPECT_LE(result["peak_memory_bytes"].get<uint64_t>(), 32ull << 20);
  std::printf("[ measured ] --memory 32M: exit %d, peak %llu bytes\n", r.exit_code,
              static_cast<unsigned long long>(result["peak_memory_bytes"].get<uint64_t>()));
}

TEST_F(BusyboxRootfs, PidsLimitStopsAForkBomb) {
  auto r = run({"--pids", "16", "--timeout", "3s"}, "sleep 30 & (b() { b | b & }; b); wait");
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_EQ(record(r)["peak_pids"], 16);
  std::printf("[ measured ] --pids 16 fork bomb: peak_pids %s\n",
              record(r)["peak_pids"].dump().c_str());
}

TEST_F(BusyboxRootfs, CpuQuotaHolds) {
  auto r = run({"--cpus", "0.25", "--timeout", "2s"}, "while :; do :; done");
  EXPECT_EQ(r.exit_code, 124);
  auto result = record(r);
  const double share = result["cpu_ms"].get<double>() / result["duration_ms"].get<double>();
  EXPECT_GT(share, 0.12);
  EXPECT_LT(share, 0.40);
  std::printf("[ measured ] --cpus 0.25 spinner: %.3f of a CPU\n", share);
}

TEST_F(BusyboxRootfs, NothingIsLeftInAnyHierarchy) {
  ASSERT_EQ(run({"--memory", "64M", "--pids", "64", "--cpus", "1"}, "true").exit_code, 0);
  // Other sandboxes may come and go meanwhile (ctest -j): iterate without throwing on a vanished
  // directory, and require of every run-* dir left that its owning hutch is alive.
  std::error_code ignored;
  for (const auto& hierarchy : fs::directory_iterator("/sys/fs/cgroup", ignored)) {
    const fs::path parent = hierarchy.path() / "hutch";
    for (const auto& entry : fs::directory_iterator(parent, ignored)) {
      const std::string id = entry.path().filename();
      if (id.rfind("run-", 0) != 0) continue;
      // run-<pid ns>-<owner pid>-<start time>-<n>
      const size_t pid_start = id.find('-', 4) + 1;
      const std::string owner = id.substr(pid_start, id.find('-', pid_start) - pid_start);
      EXPECT_TRUE(fs::exists("/proc/" + owner, ignored) || !fs::exists(entry.path(), ignored))
          << entry.path() << " outlived its hutch";
    }
  }
}

// VmOnly: needs a filesystem that cannot be idmapped, as the VM's tmpfs (Linux 6.1); the host's
// ctest leaves it out by name (tests/integration/CMakeLists.txt), the VM runs it.
TEST_F(BusyboxRootfs, VmOnlyRootfsOwnedByAnotherIdOnANonIdmappableFsIsRefused) {
  ASSERT_EQ(chown(root_.c_str(), 0, 0), 0);
  auto r = run({}, "true");
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.err.find("cannot be idmapped"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hutch::testing
