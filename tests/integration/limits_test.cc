// Limits through `hutch run`: each enforced by the kernel and reported in the result record;
// cgroups out of the sandbox's reach and gone afterwards.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/common/command.h"
#include "tests/common/must_work.h"
#include "tests/common/time_scale.h"
#include "tests/common/wait.h"

namespace hutch::testing {
namespace {

namespace fs = std::filesystem;

TEST(Limits, MemoryHogIsOomKilledAndReported) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch({"run", "--json", "--memory", "64M", "--", "python3", "-c",
                  "chunks = []\nwhile True: chunks.append(bytearray(8 << 20))"});
  EXPECT_EQ(r.exit_code, 137) << r.err;
  auto record = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(record["oom_killed"], true);
  EXPECT_EQ(record["signal"], SIGKILL);
  EXPECT_LE(record["peak_memory_bytes"].get<uint64_t>(), 64ull << 20);
  EXPECT_GE(record["peak_memory_bytes"].get<uint64_t>(), 32ull << 20);
  EXPECT_NE(r.err.find("OOM killer"), std::string::npos) << r.err;
}

// The forks refused at pids.max ("max" of pids.events: it only grows) in the pids cgroup of a
// sandboxed process whose command line contains `marker` (the v1 pids hierarchy on hybrid
// hosts, else cgroup2), 0 while there is none.
uint64_t refused_forks_of(const std::string& marker) {
  std::error_code ignored;
  for (const auto& entry : fs::directory_iterator("/proc", ignored)) {
    const std::string cmdline = read_file_or_empty(entry.path() / "cmdline");
    if (cmdline.find(marker) == std::string::npos || cmdline.find("run") != std::string::npos)
      continue;
    std::istringstream cgroups(read_file_or_empty(entry.path() / "cgroup"));
    for (std::string line; std::getline(cgroups, line);) {
      const auto controllers =
          line.substr(line.find(':') + 1, line.rfind(':') - line.find(':') - 1);
      if (controllers != "pids" && !controllers.empty()) continue;
      const std::string dir = (controllers.empty() ? "/sys/fs/cgroup" : "/sys/fs/cgroup/pids") +
                              line.substr(line.rfind(':') + 1);
      std::istringstream events(read_file_or_empty(dir + "/pids.events"));
      std::string key;
      uint64_t count = 0;
      while (events >> key >> count)
        if (key == "max") return count;
    }
  }
  return 0;
}

TEST(Limits, ForkBombStopsAtPidsAndASiblingKeepsAnswering) {
  HUTCH_REQUIRE_ROOT();
  // The shell's $0: every subshell of the bomb carries it in its command line.
  const std::string marker = "hutch-bomb-marker-" + std::to_string(getpid());
  auto bomb = std::async(std::launch::async, [&] {
    return hutch({"run", "--json", "--pids", "32", "--timeout", "2s", "--", "/bin/sh", "-c",
                  // sleep first, the bomb in a subshell: its failed forks cannot end the main
                  // shell, whose wait outlives the timeout.
                  "sleep 10 & (bomb() { bomb | bomb & }; bomb); wait", marker});
  });
  // The sibling starts once the bomb has hit its limit: the kernel refused one of its forks.
  EXPECT_TRUE(wait_until([&] { return refused_forks_of(marker) > 0; }, std::chrono::seconds(2),
                         "a fork of the bomb refused at pids.max", std::chrono::milliseconds(10)));
  auto sibling = hutch({"run", "--", "/bin/echo", "alive"});
  EXPECT_EQ(sibling.out, "alive\n");
  EXPECT_LT(sibling.elapsed.count(), 1500 * time_scale())
      << "a sibling sandbox must not starve under a fork bomb";
  auto r = bomb.get();
  EXPECT_EQ(r.exit_code, 124) << r.err.substr(0, 300);
  auto record = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(record["peak_pids"], 32);
}

TEST(Limits, CpuQuotaHolds) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch({"run", "--json", "--cpus", "0.2", "--timeout", "2s", "--", "/bin/sh", "-c",
                  "while :; do :; done"});
  EXPECT_EQ(r.exit_code, 124);
  auto record = nlohmann::json::parse(last_line(r.out));
  const double share = record["cpu_ms"].get<double>() / record["duration_ms"].get<double>();
  EXPECT_GT(share, 0.10);
  EXPECT_LT(share, 0.35);
}

TEST(Limits, CgroupsAreInvisibleAndUnwritableInside) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch_sh(
      "cat /proc/self/cgroup | cut -d: -f3 | sort -u; test -e /sys && echo sys=present; "
      "mount -t cgroup2 none /tmp 2>/dev/null && echo mounted=yes || echo mounted=no");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "/\nmounted=no\n") << "every hierarchy shows the sandbox at its root";
}

// The host's view: the sandbox's processes sit in `<mount>/<parent>/run-*` cgroups, which vanish
// with it, the parent too when no other sandbox uses it.
void expect_cgroups_created_and_removed(const std::string& parent,
                                        const std::vector<std::string>& options) {
  const std::string marker = "hutch-cgroup-marker-" + std::to_string(getpid()) + parent;
  std::vector<std::string> args = {"run", "--timeout", "1500ms"};
  args.insert(args.end(), options.begin(), options.end());
  args.insert(args.end(), {"--", "/bin/sh", "-c", "sleep 1000", marker});
  auto run = std::async(std::launch::async, [&] { return hutch(args); });
  std::vector<std::string> dirs;
  auto find_dirs = [&] {
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string text = read_file_or_empty(entry.path() / "cmdline");
      if (text.find(marker) == std::string::npos || text.find("run") != std::string::npos) continue;
      std::istringstream cgroups(read_file_or_empty(entry.path() / "cgroup"));
      for (std::string line; std::getline(cgroups, line);) {
        auto path = line.substr(line.rfind(':') + 1);
        if (path.find("/" + parent + "/run-") == std::string::npos) continue;
        auto controllers = line.substr(line.find(':') + 1, line.rfind(':') - line.find(':') - 1);
        std::string mount =
            controllers.empty() ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup/" + controllers;
        if (controllers.empty() && !fs::exists(mount)) mount = "/sys/fs/cgroup";
        dirs.push_back(mount + path);
      }
    }
    return !dirs.empty();
  };
  ASSERT_TRUE(wait_until(find_dirs, std::chrono::seconds(2),
                         "the sandboxed sleep in a " + parent + "/run-* cgroup",
                         std::chrono::milliseconds(20)));
  for (const std::string& dir : dirs) {
    EXPECT_TRUE(fs::exists(dir)) << dir;
    struct stat st;
    ASSERT_EQ(stat((dir + "/cgroup.procs").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u) << "cgroup files stay host root's";
  }
  EXPECT_EQ(run.get().exit_code, 124);
  for (const std::string& dir : dirs) EXPECT_FALSE(fs::exists(dir)) << dir << " left behind";
}

TEST(Limits, CgroupsAreCreatedPerSandboxAndRemoved) {
  HUTCH_REQUIRE_ROOT();
  expect_cgroups_created_and_removed("hutch", {});
}

TEST(Limits, CgroupParentIsConfigurable) {
  HUTCH_REQUIRE_ROOT();
  const std::string parent = "hutch-test-parent-" + std::to_string(getpid());
  expect_cgroups_created_and_removed(parent, {"--cgroup-parent", parent});
  for (const char* hierarchy : {"unified", "memory", "pids"}) {
    EXPECT_FALSE(fs::exists(std::string("/sys/fs/cgroup/") + hierarchy + "/" + parent))
        << "the parent, unused by any other sandbox, must go too";
  }
  for (const char* bad : {"..", "a/b", "", "x y"}) {
    EXPECT_EQ(hutch_sh("true", {"--cgroup-parent", bad}).exit_code, 125) << bad;
  }
}

TEST(Limits, BadLimitsAreRefused) {
  EXPECT_EQ(hutch_sh("true", {"--memory", "lots"}).exit_code, 125);
  EXPECT_EQ(hutch_sh("true", {"--pids", "0"}).exit_code, 125);
  EXPECT_EQ(hutch_sh("true", {"--cpus", "-1"}).exit_code, 125);
  EXPECT_EQ(hutch_sh("true", {"--cpu-weight", "20000"}).exit_code, 125);
  auto both = hutch_sh("true", {"--no-limits", "--memory", "1G"});
  EXPECT_EQ(both.exit_code, 125);
  EXPECT_NE(both.err.find("--no-limits contradicts"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace hutch::testing
