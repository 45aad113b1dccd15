// SandboxCgroup on the real kernel, as root: limits hold under real processes, checked against
// the kernel's own files. Runs on this hybrid host (limits through v1) and on a pure cgroup2
// kernel (scripts/test-cgroupv2-vm.sh).
#include <fcntl.h>
#include <grp.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "runtime/base/proc_stat.h"
#include "runtime/cgroup/cgroup_fs.h"
#include "runtime/cgroup/stale.h"
#include "tests/cgroup/fixture.h"
#include "tests/cgroup/spawn.h"
#include "tests/common/wait.h"

namespace hutch::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using hutch::testing::wait_until;

constexpr uint64_t kMiB = uint64_t{1} << 20;

bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

// A measured figure, printed for the report and recorded in the test's XML properties.
void report(const std::string& key, const std::string& value) {
  std::printf("[ measured ] %s = %s\n", key.c_str(), value.c_str());
  ::testing::Test::RecordProperty(key, value);
}

std::string find_line_value(const std::string& text, const std::string& key) {
  std::optional<uint64_t> value = find_cgroup_key(text, key);
  return value ? std::to_string(*value) : "?";
}

[[noreturn]] void spin_forever(std::atomic<uint64_t>* counter) {
  for (;;) {
    if (counter != nullptr) counter->fetch_add(1, std::memory_order_relaxed);
  }
}

class SandboxCgroupTest : public CgroupHostTest {};

TEST_F(SandboxCgroupTest, LimitsAreWrittenWhereThePlanSaysAndOwnedByRoot) {
  CgroupLimits limits{64 * kMiB, 32, 0.2, 200};
  Result<CgroupPlan> plan = plan_cgroups(layout_, limits);
  ASSERT_TRUE(plan) << plan.error().message();
  Result<SandboxCgroup> cgroup = create(limits);
  ASSERT_TRUE(cgroup) << cgroup.error().message();
  EXPECT_EQ(cgroup->paths().size(), plan->dirs.size());
  if (!layout_.v2_mount.empty()) {
    EXPECT_GE(cgroup->v2_dir_fd(), 0);
  }
  for (const LimitEnforcement& e : plan->enforcement) {
    report(
        std::string(limit_name(e.limit)) + " enforced by",
        (e.hierarchy.version == CgroupVersion::kV2 ? "cgroup2 " : "v1 ") + e.hierarchy.mount_point);
  }
  const std::string memory = dir_enforcing(*plan, CgroupLimit::kMemory, *cgroup);
  const std::string pids = dir_enforcing(*plan, CgroupLimit::kPids, *cgroup);
  const std::string cpu = dir_enforcing(*plan, CgroupLimit::kCpus, *cgroup);
  auto by_v2 = [&](CgroupLimit limit) {
    for (const LimitEnforcement& e : plan->enforcement) {
      if (e.limit == limit) return e.hierarchy.version == CgroupVersion::kV2;
    }
    return false;
  };
  EXPECT_EQ(read_text(pids + "/pids.max"), "32");
  if (by_v2(CgroupLimit::kMemory)) {
    EXPECT_EQ(read_text(memory + "/memory.max"), std::to_string(64 * kMiB));
    if (exists(memory + "/memory.swap.max")) {
      EXPECT_EQ(read_text(memory + "/memory.swap.max"), "0");
    }
  } else {
    EXPECT_EQ(read_text(memory + "/memory.limit_in_bytes"), std::to_string(64 * kMiB));
    if (exists(memory + "/memory.memsw.limit_in_bytes")) {
      EXPECT_EQ(read_text(memory + "/memory.memsw.limit_in_bytes"), std::to_string(64 * kMiB));
    }
  }
  if (by_v2(CgroupLimit::kCpus)) {
    EXPECT_EQ(read_text(cpu + "/cpu.max"), "20000 100000");
    EXPECT_EQ(read_text(cpu + "/cpu.weight"), "200");
  } else {
    EXPECT_EQ(read_text(cpu + "/cpu.cfs_quota_us"), "20000");
    EXPECT_EQ(read_text(cpu + "/cpu.cfs_period_us"), "100000");
    EXPECT_EQ(read_text(cpu + "/cpu.shares"), std::to_string(cpu_weight_to_shares(200)));
  }
  // Host root owns the dirs and their files; nothing is writable by group or others (the
  // sandbox's mapped uid must not be able to raise its own limits).
  for (const std::string& dir : cgroup->paths()) {
    for (const std::string& path : {dir, dir + "/cgroup.procs"}) {
      struct stat st {};
      ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
      EXPECT_EQ(st.st_uid, 0u) << path;
      EXPECT_EQ(st.st_mode & 0022, 0u) << path;
    }
  }
  // The kernel agrees: an unprivileged uid (what the sandbox's root maps to) cannot open them.
  pid_t probe = fork();
  if (probe == 0) {
    if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
        setresuid(65534, 65534, 65534) != 0) {
      _exit(10);
    }
    for (const std::string& dir : cgroup->paths()) {
      for (const char* file :
           {"/cgroup.procs", "/pids.max", "/memory.max", "/memory.limit_in_bytes"}) {
        int fd = open((dir + file).c_str(), O_WRONLY | O_CLOEXEC);
        if (fd >= 0) _exit(11);
        if (errno != EACCES && errno != ENOENT) _exit(12);
      }
    }
    _exit(0);
  }
  std::optional<int> status = wait_for_exit(probe, 5s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << "exit " << WEXITSTATUS(*status) << " (11: a cgroup file is writable by uid 65534)";
  EXPECT_TRUE(cgroup->destroy());
}

TEST_F(SandboxCgroupTest, ForkBombStopsAtPidsMaxWhileASiblingKeepsWorking) {
  constexpr uint64_t kPids = 32;
  Result<SandboxCgroup> bombed = create(CgroupLimits{64 * kMiB, kPids, std::nullopt, std::nullopt});
  ASSERT_TRUE(bombed) << bombed.error().message();
  Result<pid_t> bomb = spawn_in(*bombed, [] {
    for (;;) {
      if (fork() < 0) usleep(1000);  // at pids.max fork fails with EAGAIN: keep trying
    }
    return 0;
  });
  ASSERT_TRUE(bomb) << bomb.error().message();

  const std::string pids_dir = dir_with("pids", *bombed);
  auto pids_current = [&] { return std::stoull("0" + read_text(pids_dir + "/pids.current")); };
  auto refused_forks = [&] {
    return find_cgroup_key(read_text(pids_dir + "/pids.events"), "max").value_or(0);
  };
  EXPECT_TRUE(
      wait_until([&] { return pids_current() >= kPids; }, 10s, "the bomb to fill pids.max"));
  // The bomb keeps pushing past the limit: the kernel refuses its forks.
  EXPECT_TRUE(wait_until([&] { return refused_forks() > 0; }, 5s, "a fork refused at pids.max"));
  const uint64_t current = pids_current();
  const std::string events = read_text(pids_dir + "/pids.events");
  Result<CgroupStats> stats = bombed->stats();
  ASSERT_TRUE(stats) << stats.error().message();
  report("fork bomb pids.current", std::to_string(current));
  report("fork bomb pids peak", stats->pids_peak ? std::to_string(*stats->pids_peak) : "?");
  report("fork bomb refused forks (pids.events max)", find_line_value(events, "max"));
  EXPECT_EQ(current, kPids);
  EXPECT_LE(stats->pids_peak.value_or(0), kPids);
  EXPECT_GT(find_cgroup_key(events, "max").value_or(0), 0u) << events;

  // A sibling sandbox still forks and answers while the bomb runs.
  Result<SandboxCgroup> sibling = create(CgroupLimits{64 * kMiB, 8, std::nullopt, std::nullopt});
  ASSERT_TRUE(sibling) << sibling.error().message();
  const Clock::time_point asked = Clock::now();
  Result<pid_t> worker = spawn_in(*sibling, [] {
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) _exit(7);
    int status = 0;
    return waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 7 ? 0
                                                                                                : 2;
  });
  ASSERT_TRUE(worker) << worker.error().message();
  std::optional<int> status = wait_for_exit(*worker, 10s);
  ASSERT_TRUE(status) << "the sibling sandbox did not answer while the other was bombed";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  report("sibling fork+wait during bomb (ms)",
         std::to_string(
             std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - asked).count()));

  ASSERT_TRUE(bombed->kill_all());
  for (const std::string& dir : bombed->paths()) EXPECT_TRUE(procs_in(dir).empty()) << dir;
  EXPECT_TRUE(bombed->destroy());
  EXPECT_TRUE(sibling->destroy());
}

TEST_F(SandboxCgroupTest, MemoryHogIsOomKilledAtTheLimitAndReported) {
  constexpr uint64_t kLimit = 64 * kMiB;
  Result<SandboxCgroup> cgroup = create(CgroupLimits{kLimit, 64, std::nullopt, std::nullopt});
  ASSERT_TRUE(cgroup) << cgroup.error().message();
  SharedCounters touched(1);  // MiB the hog has written
  Result<pid_t> hog = spawn_in(*cgroup, [&touched] {
    for (int mib = 0; mib < 1024; ++mib) {
      void* chunk = mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (chunk == MAP_FAILED) return 3;
      std::memset(chunk, 0x5a, kMiB);
      touched[0].fetch_add(1);
    }
    return 0;  // 1 GiB written: the limit did not hold
  });
  ASSERT_TRUE(hog) << hog.error().message();
  std::optional<int> status = wait_for_exit(*hog, 60s);
  ASSERT_TRUE(status) << "the memory hog neither finished nor died";
  ASSERT_TRUE(WIFSIGNALED(*status))
      << "exited with " << WEXITSTATUS(*status) << " after " << touched[0].load() << " MiB";
  EXPECT_EQ(WTERMSIG(*status), SIGKILL);
  Result<CgroupStats> stats = cgroup->stats();
  ASSERT_TRUE(stats) << stats.error().message();
  report("OOM kill after MiB written", std::to_string(touched[0].load()));
  report("memory peak (MiB)",
         stats->memory_peak_bytes ? std::to_string(*stats->memory_peak_bytes / double(kMiB)) : "?");
  report("oom_kills", stats->oom_kills ? std::to_string(*stats->oom_kills) : "?");
  EXPECT_GE(stats->oom_kills.value_or(0), 1u);
  EXPECT_LE(touched[0].load(), 64u);
  EXPECT_GE(touched[0].load(), 32u);
  ASSERT_TRUE(stats->memory_peak_bytes);
  EXPECT_LE(*stats->memory_peak_bytes, kLimit);
  EXPECT_GE(*stats->memory_peak_bytes, kLimit / 2);
  EXPECT_TRUE(cgroup->destroy());
}

TEST_F(SandboxCgroupTest, CpuQuotaHoldsASpinnerNearTwentyPercent) {
  Result<SandboxCgroup> cgroup = create(CgroupLimits{64 * kMiB, 8, 0.2, std::nullopt});
  ASSERT_TRUE(cgroup) << cgroup.error().message();
  Result<pid_t> spinner = spawn_in(*cgroup, []() -> int { spin_forever(nullptr); });
  ASSERT_TRUE(spinner) << spinner.error().message();
  std::this_thread::sleep_for(200ms);  // past the first period
  Result<CgroupStats> before = cgroup->stats();
  const Clock::time_point start = Clock::now();
  std::this_thread::sleep_for(2s);
  Result<CgroupStats> after = cgroup->stats();
  const double wall_usec =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
  ASSERT_TRUE(before && after);
  ASSERT_TRUE(before->cpu_usage_usec && after->cpu_usage_usec) << "no cpu usage on this host";
  const double fraction = (*after->cpu_usage_usec - *before->cpu_usage_usec) / wall_usec;
  report("cpu fraction under cpus=0.2 over 2 s", std::to_string(fraction));
  EXPECT_GE(fraction, 0.10);
  EXPECT_LE(fraction, 0.35);
  EXPECT_TRUE(cgroup->destroy());
}

TEST_F(SandboxCgroupTest, FreezeStopsProgressAndThawResumesIt) {
  Result<SandboxCgroup> cgroup = create(CgroupLimits{64 * kMiB, 8, std::nullopt, std::nullopt});
  ASSERT_TRUE(cgroup) << cgroup.error().message();
  SharedCounters counter(1);
  Result<pid_t> spinner = spawn_in(*cgroup, [&counter]() -> int { spin_forever(&counter[0]); });
  ASSERT_TRUE(spinner) << spinner.error().message();
  ASSERT_TRUE(wait_until([&] { return counter[0].load() > 0; }, 5s, "the spinner to count", 1ms));

  ASSERT_TRUE(cgroup->freeze());
  if (!layout_.v2_mount.empty()) {
    EXPECT_NE(read_text(cgroup->paths().front() + "/cgroup.events").find("frozen 1"),
              std::string::npos);
  }
  const uint64_t frozen_at = counter[0].load();
  std::this_thread::sleep_for(300ms);
  const uint64_t frozen_later = counter[0].load();
  ASSERT_TRUE(cgroup->thaw());
  std::this_thread::sleep_for(300ms);
  const uint64_t thawed = counter[0].load();
  report("freeze: counter advance while frozen 300 ms", std::to_string(frozen_later - frozen_at));
  report("freeze: counter advance after thaw 300 ms", std::to_string(thawed - frozen_later));
  EXPECT_EQ(frozen_later, frozen_at);
  EXPECT_GT(thawed, frozen_later);
  EXPECT_TRUE(cgroup->destroy());
}

TEST_F(SandboxCgroupTest, KillAllLeavesNoProcessNotEvenASetsidGrandchildOrAStoppedOne) {
  Result<SandboxCgroup> cgroup = create(CgroupLimits{64 * kMiB, 16, std::nullopt, std::nullopt});
  ASSERT_TRUE(cgroup) << cgroup.error().message();
  SharedCounters shared(2);  // [0] the grandchild's pid, [1] the stopped child's pid
  // Placed by fork + attach here: attach() alone must also reach cgroup2, where kill acts.
  Result<pid_t> top = spawn_in(
      *cgroup,
      [&shared] {
        pid_t middle = fork();
        if (middle == 0) {
          setsid();
          pid_t grandchild = fork();
          if (grandchild == 0) {
            shared[0].store(static_cast<uint64_t>(getpid()));
            for (;;) pause();
          }
          _exit(0);  // the grandchild is orphaned: reparented to the test (a subreaper)
        }
        pid_t stopped = fork();
        if (stopped == 0) {
          shared[1].store(static_cast<uint64_t>(getpid()));
          raise(SIGSTOP);
          for (;;) pause();
        }
        for (;;) pause();
        return 0;
      },
      Placement::kForkThenAttach);
  ASSERT_TRUE(top) << top.error().message();
  ASSERT_TRUE(wait_until([&] { return shared[0].load() != 0 && shared[1].load() != 0; }, 5s,
                         "the grandchild and the stopped child to start", 1ms));
  const auto grandchild = static_cast<pid_t>(shared[0].load());
  const auto stopped = static_cast<pid_t>(shared[1].load());
  // The middle child has exited once the grandchild is ours (we are its subreaper), and the
  // stop has taken effect once the kernel shows the child stopped.
  ASSERT_TRUE(wait_until(
      [&] {
        Result<ProcState> orphan = read_proc_state(grandchild);
        Result<ProcState> halted = read_proc_state(stopped);
        return orphan && orphan->parent == getpid() && halted && halted->state == 'T';
      },
      5s, "the grandchild to be orphaned and the child to stop", 1ms));
  EXPECT_GE(procs_in(cgroup->paths().front()).size(), 3u);

  ASSERT_TRUE(cgroup->kill_all());
  for (const std::string& dir : cgroup->paths()) EXPECT_TRUE(procs_in(dir).empty()) << dir;
  // The orphaned grandchild came back to us: it died of SIGKILL.
  std::optional<int> status = wait_for_exit(grandchild, 5s);
  ASSERT_TRUE(status) << "grandchild " << grandchild << " still runs";
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
  EXPECT_TRUE(cgroup->destroy());
}

TEST_F(SandboxCgroupTest, DestroyRemovesEveryDirItMadeSubCgroupsIncluded) {
  Result<SandboxCgroup> cgroup = create(CgroupLimits{64 * kMiB, 16, 1.0, std::nullopt});
  ASSERT_TRUE(cgroup) << cgroup.error().message();
  Result<pid_t> sleeper = spawn_in(*cgroup, [] {
    for (;;) pause();
    return 0;
  });
  ASSERT_TRUE(sleeper) << sleeper.error().message();
  // A sub-cgroup with a process in it, as the runtime's per-exec cgroups will be.
  const std::string sub = cgroup->paths().front() + "/exec-1";
  ASSERT_EQ(mkdir(sub.c_str(), 0755), 0) << strerror(errno);
  pid_t in_sub = fork();
  if (in_sub == 0) {
    for (;;) pause();
  }
  ASSERT_TRUE(cgroup->attach(in_sub));
  {
    FILE* procs = fopen((sub + "/cgroup.procs").c_str(), "w");
    ASSERT_NE(procs, nullptr);
    fprintf(procs, "%d", in_sub);
    ASSERT_EQ(fclose(procs), 0) << strerror(errno);
  }
  const std::vector<std::string> paths = cgroup->paths();
  Result<void> destroyed = cgroup->destroy();
  ASSERT_TRUE(destroyed) << destroyed.error().message();
  for (const std::string& path : paths) EXPECT_FALSE(exists(path)) << path;
  EXPECT_TRUE(cgroup->paths().empty());
  EXPECT_TRUE(cgroup->destroy()) << "destroy is idempotent";
  std::optional<int> status = wait_for_exit(in_sub, 5s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL);
}

TEST_F(SandboxCgroupTest, AttachKeepsAChildClonedIntoACgroup2SubCgroupThere) {
  if (layout_.v2_mount.empty()) GTEST_SKIP() << "no cgroup2: not applicable";
  Result<SandboxCgroup> cgroup = create(CgroupLimits{64 * kMiB, 16, std::nullopt, std::nullopt});
  ASSERT_TRUE(cgroup) << cgroup.error().message();
  const std::string sub = cgroup->paths().front() + "/exec-1";
  ASSERT_EQ(mkdir(sub.c_str(), 0755), 0) << strerror(errno);
  const int sub_fd = open(sub.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(sub_fd, 0);
  clone_args args{};
  args.flags = CLONE_INTO_CGROUP;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(sub_fd);
  const auto child = static_cast<pid_t>(syscall(SYS_clone3, &args, sizeof args));
  if (child == 0) {
    for (;;) pause();
  }
  close(sub_fd);
  ASSERT_GT(child, 0) << strerror(errno);
  Result<void> attached = cgroup->attach(child);
  ASSERT_TRUE(attached) << attached.error().message();
  const std::string own = read_text("/proc/" + std::to_string(child) + "/cgroup");
  EXPECT_NE(own.find("0::/hutch/" + cgroup->id() + "/exec-1"), std::string::npos) << own;
  for (size_t i = 1; i < cgroup->paths().size(); ++i) {
    const std::vector<pid_t> pids = procs_in(cgroup->paths()[i]);
    EXPECT_NE(std::find(pids.begin(), pids.end(), child), pids.end()) << cgroup->paths()[i];
  }
  EXPECT_TRUE(cgroup->destroy());
}

TEST_F(SandboxCgroupTest, TheDestructorCleansUpWhatAFailedCreateMade) {
  Result<CgroupPlan> plan =
      plan_cgroups(layout_, CgroupLimits{64 * kMiB, 16, std::nullopt, std::nullopt});
  ASSERT_TRUE(plan) << plan.error().message();
  // A plan whose last hierarchy does not exist: creation fails after making the first dirs.
  plan->dirs.push_back({CgroupHierarchy{CgroupVersion::kV1, "/proc/no-such-hierarchy"}, {"pids"}});
  Result<std::string> id = make_sandbox_cgroup_id(999);
  ASSERT_TRUE(id);
  Result<SandboxCgroup> cgroup = SandboxCgroup::create(*plan, *id);
  ASSERT_FALSE(cgroup);
  EXPECT_EQ(cgroup.error().err, ENOENT) << cgroup.error().message();
  for (const CgroupDirPlan& dir : plan->dirs) {
    EXPECT_FALSE(exists(dir.hierarchy.mount_point + "/hutch/" + *id)) << dir.hierarchy.mount_point;
  }
}

TEST_F(SandboxCgroupTest, AnExistingIdIsRefusedAndLeftAlone) {
  Result<CgroupPlan> plan =
      plan_cgroups(layout_, CgroupLimits{64 * kMiB, 16, std::nullopt, std::nullopt});
  ASSERT_TRUE(plan);
  Result<std::string> id = make_sandbox_cgroup_id(998);
  ASSERT_TRUE(id);
  Result<SandboxCgroup> first = SandboxCgroup::create(*plan, *id);
  ASSERT_TRUE(first) << first.error().message();
  Result<SandboxCgroup> second = SandboxCgroup::create(*plan, *id);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().err, EEXIST);
  for (const std::string& path : first->paths()) EXPECT_TRUE(exists(path)) << path;
  EXPECT_FALSE(SandboxCgroup::create(*plan, "../escape"));
  EXPECT_TRUE(first->destroy());
}

}  // namespace
}  // namespace hutch::test
