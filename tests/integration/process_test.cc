// The sandbox's processes: exit statuses, signals, timeouts that kill everything, init's
// reaping, no leaked fds, the --json record, and a clean host afterwards.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/common/command.h"
#include "tests/common/must_work.h"
#include "tests/common/processes.h"
#include "tests/common/temp_dir.h"

namespace hutch::testing {
namespace {

namespace fs = std::filesystem;

int count_mounts() {
  std::ifstream in("/proc/self/mountinfo");
  return static_cast<int>(std::count(std::istreambuf_iterator<char>(in), {}, '\n'));
}

TEST(Process, ExitStatusesPropagate) {
  HUTCH_REQUIRE_ROOT();
  EXPECT_EQ(hutch_sh("exit 0").exit_code, 0);
  EXPECT_EQ(hutch_sh("exit 7").exit_code, 7);
  EXPECT_EQ(hutch_sh("kill -TERM $$").exit_code, 128 + SIGTERM);
  EXPECT_EQ(hutch_sh("kill -KILL $$").exit_code, 128 + SIGKILL);
}

TEST(Process, CommandNotFoundAndNotExecutableAreShellLike) {
  HUTCH_REQUIRE_ROOT();
  auto missing = hutch({"run", "--", "no-such-command"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.err.find("execve(no-such-command): No such file or directory"),
            std::string::npos)
      << missing.err;
  EXPECT_EQ(hutch({"run", "--", "/no/such/path"}).exit_code, 127);
  auto not_exec = hutch({"run", "--", "/etc/hostname"});
  EXPECT_EQ(not_exec.exit_code, 126);
  EXPECT_NE(not_exec.err.find("Permission denied"), std::string::npos) << not_exec.err;
}

// The workload's execve failing is the workload's start failure (the sync socket's kExecFailed),
// reported as the shell would (127), never as a runtime failure (125 with an "error" record).
TEST(Process, AMissingBinaryIsAnExecFailureNotARuntimeError) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch({"run", "--json", "--", "/no/such/binary"});
  EXPECT_EQ(r.exit_code, 127) << r.err;
  const auto record = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(record["exit_code"], 127);
  EXPECT_FALSE(record.contains("error")) << r.out;
  EXPECT_EQ(record["start_failure"], "execve(/no/such/binary): No such file or directory");
}

TEST(Process, StdioPassesThrough) {
  HUTCH_REQUIRE_ROOT();
  CommandOptions options;
  options.stdin_data = "line one\nline two\n";
  auto r = hutch({"run", "--", "/bin/sh", "-c", "tr a-z A-Z; echo to-stderr >&2"}, options);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "LINE ONE\nLINE TWO\n");
  EXPECT_EQ(r.err, "to-stderr\n");
}

TEST(Process, TimeoutKillsEveryProcessIncludingDetachedGrandchildren) {
  HUTCH_REQUIRE_ROOT();
  const std::string marker = "hutch-timeout-marker-" + std::to_string(getpid());
  TempDir temp;
  const std::string& dir = temp.path();
  ASSERT_EQ(chown(dir.c_str(), 1000000000, 1000000000), 0);  // the sandbox root's host id
  // A setsid'd, double-forked grandchild that keeps appending to a host file.
  // The workload waits for the grandchild's first tick, so that the timeout (long enough for a
  // slow machine such as the qemu VM to get there) fires while it runs.
  auto r =
      hutch({"run", "--timeout", "2s", "--bind", dir + ":/out:rw", "--", "/bin/sh", "-c",
             "setsid sh -c '(while true; do echo tick >> /out/ticks; sleep 0.05; done) & exec "
             "sleep 1000 " +
                 marker + "' & while [ ! -e /out/ticks ]; do sleep 0.01; done; exec sleep 1000"});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_LT(r.elapsed.count(), 6000);
  ASSERT_TRUE(fs::exists(dir + "/ticks")) << "the grandchild never ran";
  auto size = fs::file_size(dir + "/ticks");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(fs::file_size(dir + "/ticks"), size) << "a process kept running after the timeout";
  EXPECT_EQ(count_host_processes_with(marker), 0);
}

TEST(Process, WorkloadExitEndsTheSandboxAndItsBackgroundProcesses) {
  HUTCH_REQUIRE_ROOT();
  const std::string marker = "hutch-orphan-marker-" + std::to_string(getpid());
  auto r = hutch_sh("(setsid sleep 1000 " + marker + " &) ; exit 3");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(count_host_processes_with(marker), 0);
}

TEST(Process, InitReapsOrphanedZombies) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch({"run", "--bind", probe_bind(), "--", "/probe", "zombies"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(line_value(r.out, "zombies"), "0");
  auto pid1 = hutch_sh("cat /proc/1/comm; echo $$");
  EXPECT_EQ(pid1.out, "hutch\n2\n") << "hutch's init is pid 1, the workload pid 2";
}

TEST(Process, NoFileDescriptorLeaksIntoTheSandbox) {
  HUTCH_REQUIRE_ROOT();
  // An fd the caller leaked to hutch must not reach the workload either.
  int leaked = open("/etc/hostname", O_RDONLY);
  ASSERT_GE(leaked, 0);
  CommandOptions options;
  options.inherit_fds = {leaked};
  auto r = hutch({"run", "--bind", probe_bind(), "--", "/probe", "fds"}, options);
  close(leaked);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "fds=done\n");
}

TEST(Process, SignalsAreForwarded) {
  HUTCH_REQUIRE_ROOT();
  CommandOptions options;
  options.signal_after_ms_signal = SIGTERM;
  options.signal_after_ms = 400;
  auto r = hutch({"run", "--", "/bin/sleep", "100"}, options);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM);
  EXPECT_LT(r.elapsed.count(), 5000);
}

TEST(Process, JsonResultRecord) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch({"run", "--json", "--", "/bin/sh", "-c", "echo out; exit 5"});
  EXPECT_EQ(r.exit_code, 5);
  auto newline = r.out.find('\n');
  ASSERT_EQ(r.out.substr(0, newline), "out");
  auto record = nlohmann::json::parse(r.out.substr(newline + 1));
  EXPECT_EQ(record["exit_code"], 5);
  EXPECT_EQ(record["timed_out"], false);
  EXPECT_EQ(record["oom_killed"], false);
  EXPECT_TRUE(record["signal"].is_null());
  EXPECT_GT(record["duration_ms"].get<double>(), 0);
  EXPECT_GT(record["peak_memory_bytes"].get<uint64_t>(), 0u);
  EXPECT_TRUE(record.contains("cpu_user_ms"));

  auto timeout = hutch({"run", "--json", "--timeout", "200ms", "--", "/bin/sleep", "10"});
  EXPECT_EQ(timeout.exit_code, 124);
  auto timed = nlohmann::json::parse(timeout.out);
  EXPECT_EQ(timed["timed_out"], true);
  EXPECT_EQ(timed["exit_code"], 124);

  auto failure = hutch({"run", "--json", "--rootfs", "/nonexistent", "--", "true"});
  EXPECT_EQ(failure.exit_code, 125);
  EXPECT_EQ(nlohmann::json::parse(failure.out)["error"]["step"], "realpath");
}

TEST(Process, HostIsCleanAfterwards) {
  HUTCH_REQUIRE_ROOT();
  const int mounts_before = count_mounts();
  for (int i = 0; i < 5; ++i) ASSERT_EQ(hutch_sh("mount >/dev/null; echo x > /tmp/x").exit_code, 0);
  ASSERT_EQ(hutch({"run", "--timeout", "100ms", "--", "/bin/sleep", "5"}).exit_code, 124);
  EXPECT_EQ(count_mounts(), mounts_before);
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string text((std::istreambuf_iterator<char>(mountinfo)), {});
  EXPECT_EQ(text.find("lowerdir=/lower0"), std::string::npos);
}

TEST(Process, HostileOptionsAreRefusedWithTheirCause) {
  struct Case {
    std::vector<std::string> options;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"--env", "1BAD=x"}, "is not KEY=VALUE"},
           {{"--env", "NOEQUALS"}, "is not KEY=VALUE"},
           {{"--hostname", "bad host"}, "hostname"},
           {{"--hostname", std::string(65, 'a')}, "hostname"},
           {{"--workdir", "relative"}, "workdir"},
           {{"--workdir", "/a/../b"}, "workdir"},
           {{"--timeout", "-1s"}, "duration"},
           {{"--timeout", "soon"}, "duration"},
           {{"--disk", "0"}, "size"},
           {{"--uid", "70000"}, "outside the mapped range"},
           {{"--id-count", "0"}, "count"},
           {{"--net", "host"}, "--net: host not in {none,loopback,filtered,open}"},
           {{"--allow", "pypi.org"}, "--allow needs --net filtered or open"},
       }) {
    auto r = hutch_sh("true", c.options);
    EXPECT_EQ(r.exit_code, 125) << c.options[0] << " " << c.options[1];
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.options[0] << ": " << r.err;
  }
  auto empty = hutch({"run", "--"});
  EXPECT_EQ(empty.exit_code, 125);
}

TEST(Process, WorkdirIsCreatedAndUsed) {
  HUTCH_REQUIRE_ROOT();
  auto r = hutch_sh("pwd; stat -c %u .", {"--workdir", "/work/deep/dir", "--uid", "1000"});
  EXPECT_EQ(r.out, "/work/deep/dir\n1000\n") << r.err;
}

TEST(Process, InfoReportsEveryFeature) {
  auto r = hutch({"info", "--json"});
  auto info = nlohmann::json::parse(r.out);
  std::vector<std::string> names;
  for (const auto& feature : info["features"]) names.push_back(feature["name"]);
  for (const char* wanted : {"kernel", "user namespaces", "overlayfs (trusted xattrs on tmpfs)",
                             "idmapped mounts", "openat2", "clone3", "pidfd", "cgroup layout"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), wanted), names.end()) << wanted;
  }
  for (const auto& feature : info["features"])
    EXPECT_FALSE(feature["needed_for"].get<std::string>().empty()) << feature.dump();
  EXPECT_NE(info["features"][0]["detail"].get<std::string>().find("minimum 6.1"),
            std::string::npos);
  if (geteuid() == 0) {
    EXPECT_EQ(r.exit_code, 0) << r.out;
    for (const auto& feature : info["features"])
      EXPECT_TRUE(feature["available"].get<bool>()) << feature.dump();
  }
}

}  // namespace
}  // namespace hutch::testing
