// Background processes, PTYs and shell sessions across a hutchd restart, by SIGKILL and by a clean
// SIGTERM: the sandbox's supervisor keeps each process (runtime/process_keeper.h), so it runs on,
// its output written while no hutchd was there is readable by offset, an exit that happened
// meanwhile is reported with its real status, and stdin, signals, pty input and resize work on
// the next hutchd; sessions keep their cwd and environment. A delete after the restart still
// leaves nothing behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/common/command.h"
#include "tests/common/wait.h"
#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

using namespace std::chrono_literals;

// Alive and not a zombie (a supervisor's parent after a restart is the host's init).
bool process_running(int pid) {
  std::string stat = read_file_or_empty("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

class ReattachTest : public ::testing::TestWithParam<int> {
 protected:
  // A clean stop waits this long for a request in flight (a session's command).
  const std::vector<std::string> kArgs = {"--shutdown-grace", "1"};
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    daemon_ = std::make_unique<Hutchd>(temp_.path(), kArgs);
    ASSERT_TRUE(daemon_->start()) << daemon_->log();
    auto created = daemon_->post("/v1/sandboxes", json::object());
    ASSERT_EQ(created.status, 201) << created.raw;
    id_ = created.body["id"];
    base_ = "/v1/sandboxes/" + id_;
  }
  void TearDown() override {
    if (HasFailure() && daemon_)
      std::fprintf(stderr, "--- hutchd log ---\n%s\n", daemon_->log().c_str());
    if (daemon_ && daemon_->pid() > 0) {
      if (!id_.empty()) daemon_->del(base_ + "?wait=true");
      daemon_->stop(SIGTERM);
    }
  }
  // Stops hutchd with the test's signal and starts the next one on the same state dir.
  void restart() {
    const std::string log = daemon_->log();
    daemon_->stop(GetParam());
    daemon_ = std::make_unique<Hutchd>(temp_.path(), kArgs);
    ASSERT_TRUE(daemon_->start()) << log << "\n--- next ---\n" << daemon_->log();
    EXPECT_EQ(daemon_->get("/v1/health").body["recovered"]["adopted"], 1);
  }
  int background(const json& body) {
    json request = body;
    request["background"] = true;
    auto started = daemon_->post(base_ + "/exec", request);
    EXPECT_EQ(started.status, 201) << started.raw;
    return started.body.value("pid", 0);
  }
  std::string process(int pid) { return base_ + "/processes/" + std::to_string(pid); }
  json wait(int pid) {
    return daemon_->post(process(pid) + "/wait?timeout_seconds=20", json::object()).body;
  }
  // A stream's output from `offset` to its end, read `limit` bytes at a time, as a client that
  // follows by offset does.
  std::string read_from(const std::string& output_route, uint64_t offset, uint64_t limit) {
    std::string all;
    for (int reads = 0; reads < 1000; ++reads) {
      auto chunk =
          daemon_->get(output_route + (output_route.find('?') == std::string::npos ? "?" : "&") +
                       "offset=" + std::to_string(offset) + "&limit=" + std::to_string(limit));
      EXPECT_EQ(chunk.status, 200) << chunk.raw;
      if (chunk.status != 200) break;
      all += chunk.body["data"].get<std::string>();
      EXPECT_EQ(chunk.body["offset"], offset);
      offset = chunk.body["next_offset"];
      if (chunk.body["eof"].get<bool>()) break;
      if (chunk.body["data"].get<std::string>().empty()) std::this_thread::sleep_for(20ms);
    }
    return all;
  }

  TempDir temp_;
  std::unique_ptr<Hutchd> daemon_;
  std::string id_;
  std::string base_;
};

std::string one_to(int n) {
  std::string lines;
  for (int i = 1; i <= n; ++i) lines += std::to_string(i) + "\n";
  return lines;
}

TEST_P(ReattachTest, OutputWrittenWhileNoHutchdWasThereIsReadableByOffset) {
  const int pid = background({{"command", "for i in $(seq 1 50); do echo $i; sleep 0.05; done"}});
  ASSERT_GT(pid, 0);
  // Mid-way: some lines read before the restart, the rest after it from where they stopped.
  const std::string output = process(pid) + "/output";
  ASSERT_TRUE(wait_until(
      [&] { return daemon_->get(output + "?offset=0").body["next_offset"].get<uint64_t>() >= 6; },
      5s, "the first lines"));
  auto before = daemon_->get(output + "?offset=0");
  const std::string first = before.body["data"];
  const uint64_t next = before.body["next_offset"];
  EXPECT_FALSE(before.body["eof"].get<bool>());
  restart();
  std::this_thread::sleep_for(500ms);  // more output while this hutchd is up but nobody reads
  auto listed = daemon_->get(base_ + "/processes");
  ASSERT_EQ(listed.body["processes"].size(), 1u) << listed.raw;
  EXPECT_EQ(listed.body["processes"][0]["pid"], pid);
  const json status = wait(pid);
  EXPECT_EQ(status["state"], "exited") << status;
  EXPECT_EQ(status["exit_code"], 0) << status;
  EXPECT_EQ(first + read_from(output, next, 7), one_to(50));
  EXPECT_EQ(read_from(output, 0, 1 << 20), one_to(50));
  auto err = daemon_->get(output + "?stream=stderr&offset=0");
  EXPECT_EQ(err.body["data"], "");
  EXPECT_TRUE(err.body["eof"].get<bool>());
}

TEST_P(ReattachTest, AnExitWhileHutchdWasDownIsReportedWithItsCode) {
  const int pid = background({{"command", "sleep 0.5; echo done; echo oops >&2; exit 7"}});
  ASSERT_GT(pid, 0);
  daemon_->stop(GetParam());
  std::this_thread::sleep_for(1500ms);  // the command ends while no hutchd is there
  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  auto status = daemon_->get(process(pid));
  ASSERT_EQ(status.status, 200) << status.raw;
  EXPECT_EQ(status.body["state"], "exited");
  EXPECT_EQ(status.body["exit_code"], 7);
  EXPECT_TRUE(status.body["term_signal"].is_null());
  EXPECT_GE(status.body["duration_ms"].get<int>(), 400);
  EXPECT_EQ(read_from(process(pid) + "/output", 0, 1024), "done\n");
  EXPECT_EQ(read_from(process(pid) + "/output?stream=stderr", 0, 1024), "oops\n");
  // Signals to it are refused plainly; a kill of its tree has nothing to do.
  EXPECT_EQ(daemon_->post(process(pid) + "/signal", {{"signal", "TERM"}}).status, 409);
}

TEST_P(ReattachTest, StdinAndSignalsWorkAfterTheRestart) {
  const int reader = background({{"argv", {"cat"}}});
  const int sleeper = background({{"command", "trap 'exit 3' TERM; while :; do sleep 0.05; done"}});
  ASSERT_GT(reader, 0);
  ASSERT_GT(sleeper, 0);
  auto early = daemon_->post(process(reader) + "/stdin", {{"data", "before\n"}});
  EXPECT_EQ(early.status, 200) << early.raw;
  restart();
  auto written = daemon_->post(process(reader) + "/stdin", {{"data", "after\n"}, {"eof", true}});
  EXPECT_EQ(written.status, 200) << written.raw;
  // EOF reaches cat although the supervisor held the pipe open across the restart.
  const json read_status = wait(reader);
  EXPECT_EQ(read_status["exit_code"], 0) << read_status;
  EXPECT_EQ(read_from(process(reader) + "/output", 0, 1024), "before\nafter\n");

  auto signaled = daemon_->post(process(sleeper) + "/signal", {{"signal", "TERM"}});
  EXPECT_EQ(signaled.status, 200) << signaled.raw;
  EXPECT_EQ(wait(sleeper)["exit_code"], 3);
  // KILL_TREE on a re-attached process.
  const int another = background({{"argv", {"sleep", "100"}}});
  restart();
  EXPECT_EQ(daemon_->post(process(another) + "/signal", {{"signal", "KILL_TREE"}}).status, 200);
  const json killed = wait(another);
  EXPECT_EQ(killed["exit_code"], 137) << killed;
  EXPECT_EQ(killed["term_signal"], 9);
}

TEST_P(ReattachTest, APtyRunningCatSurvives) {
  auto created = daemon_->post(base_ + "/ptys", {{"argv", {"cat"}}, {"cols", 80}, {"rows", 24}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string pty = base_ + "/ptys/" + std::to_string(created.body["pid"].get<int>());
  auto output = [&] {
    return daemon_->get(pty + "/output?offset=0").body["data"].get<std::string>();
  };
  EXPECT_EQ(daemon_->post(pty + "/input", {{"data", "one\n"}}).status, 200);
  ASSERT_TRUE(wait_until([&] { return output().find("one\r\none\r\n") != std::string::npos; }, 5s,
                         "the echo before the restart", 20ms));
  restart();
  auto listed = daemon_->get(base_ + "/ptys");
  ASSERT_EQ(listed.body["ptys"].size(), 1u) << listed.raw;
  EXPECT_EQ(listed.body["ptys"][0]["state"], "running");
  EXPECT_EQ(listed.body["ptys"][0]["pty"]["cols"], 80);
  auto typed = daemon_->post(pty + "/input", {{"data", "two\n"}});
  EXPECT_EQ(typed.status, 200) << typed.raw;
  // The terminal's echo and cat's copy, after the first line's.
  ASSERT_TRUE(
      wait_until([&] { return output().find("one\r\none\r\ntwo\r\ntwo\r\n") != std::string::npos; },
                 5s, "the echo after the restart", 20ms))
      << output();
  auto resized = daemon_->post(pty + "/resize", {{"cols", 100}, {"rows", 40}});
  EXPECT_EQ(resized.status, 200) << resized.raw;
  EXPECT_EQ(resized.body["pty"]["cols"], 100);
  // The kernel's view: the sandbox's first pty has the new size.
  auto size = daemon_->post(base_ + "/exec", {{"command", "stty -F /dev/pts/0 size"}});
  EXPECT_EQ(size.body["stdout"], "40 100\n") << size.raw;
  // A follower of the re-attached pty gets the output as it comes and the exit at its end.
  std::thread closer([&] {
    std::this_thread::sleep_for(300ms);
    auto closed = daemon_->del(pty);
    EXPECT_EQ(closed.status, 200) << closed.raw;
    EXPECT_EQ(closed.body["state"], "exited");
  });
  auto followed = daemon_->get(pty + "/output?follow=1&offset=0");
  closer.join();
  ASSERT_EQ(followed.status, 200);
  auto [data, last] = parse_followed(followed.raw);
  EXPECT_EQ(data, output());
  EXPECT_NE(data.find("two\r\ntwo\r\n"), std::string::npos) << data;
  EXPECT_EQ(last["exit_code"], 137) << followed.raw;
}

TEST_P(ReattachTest, ASessionKeepsItsCwdAndEnvironment) {
  auto session = daemon_->post(base_ + "/sessions", {{"name", "work"}});
  ASSERT_EQ(session.status, 201) << session.raw;
  auto setup = daemon_->post(base_ + "/sessions/work/exec",
                             {{"command", "mkdir -p /tmp/x && cd /tmp/x && export A=1"}});
  ASSERT_EQ(setup.status, 200) << setup.raw;
  ASSERT_EQ(setup.body["exit_code"], 0) << setup.raw;
  restart();
  auto listed = daemon_->get(base_ + "/sessions");
  EXPECT_EQ(listed.body["sessions"], json::array({{{"name", "work"}}})) << listed.raw;
  auto after = daemon_->post(base_ + "/sessions/work/exec", {{"command", "pwd; echo A=$A"}});
  EXPECT_EQ(after.body["stdout"], "/tmp/x\nA=1\n") << after.raw;
  // A generated name does not repeat one made before the restart.
  auto generated = daemon_->post(base_ + "/sessions", json::object());
  EXPECT_EQ(generated.status, 201);
  auto again = daemon_->post(base_ + "/sessions", json::object());
  EXPECT_NE(generated.body["name"], again.body["name"]);
  EXPECT_EQ(daemon_->del(base_ + "/sessions/work").status, 200);
  restart();
  EXPECT_EQ(daemon_->get(base_ + "/sessions").body["sessions"].size(), 2u);
}

// A session command is the request's, not kept: when hutchd goes (killed, or at the end of a clean
// stop's grace), the shim sees its connection close and kills the command's tree; the session is
// free again and keeps the state from before that command.
TEST_P(ReattachTest, ASessionCommandRunningWhenHutchdGoesEndsAndTheSessionGoesOn) {
  ASSERT_EQ(daemon_->post(base_ + "/sessions", {{"name", "s"}}).status, 201);
  ASSERT_EQ(daemon_->post(base_ + "/sessions/s/exec", {{"command", "cd /tmp"}}).status, 200);
  std::thread running([this] {
    daemon_->post(base_ + "/sessions/s/exec",
                  {{"command", "cd / && export B=2 && exec sleep 60 # reattach-marker"}});
  });
  ASSERT_TRUE(wait_until(
      [&] {
        auto ps =
            daemon_->post(base_ + "/exec", {{"command", "ps -eo args | grep -c '^sleep 60'"}});
        return ps.body.value("stdout", "") == "1\n";
      },
      5s, "the session's command to run"));
  const std::string log = daemon_->log();
  daemon_->stop(GetParam());
  running.join();
  daemon_ = std::make_unique<Hutchd>(temp_.path(), kArgs);
  ASSERT_TRUE(daemon_->start()) << log << "\n--- next ---\n" << daemon_->log();
  auto after = daemon_->post(base_ + "/sessions/s/exec", {{"command", "pwd; echo B=$B"}});
  EXPECT_EQ(after.status, 200) << after.raw;
  EXPECT_EQ(after.body["stdout"], "/tmp\nB=\n") << after.raw;
  auto ps = daemon_->post(base_ + "/exec", {{"command", "ps -eo args | grep -c '^sleep 60'"}});
  EXPECT_EQ(ps.body["stdout"], "0\n") << "the session's command outlived hutchd";
}

TEST_P(ReattachTest, ADeleteAfterTheRestartLeavesNothing) {
  const int pid = background({{"argv", {"sleep", "100"}}});
  ASSERT_GT(pid, 0);
  auto pty = daemon_->post(base_ + "/ptys", {{"argv", {"cat"}}});
  ASSERT_EQ(pty.status, 201) << pty.raw;
  const std::string dir = daemon_->state_dir() + "/sandboxes/" + id_;
  std::ifstream in(dir + "/sandbox.json");
  const json ref = json::parse(in)["ref"];
  const int supervisor = ref["supervisor_pid"];
  const int init = ref["init_pid"];
  struct stat ns {};
  ASSERT_EQ(::stat(("/proc/" + std::to_string(init) + "/ns/mnt").c_str(), &ns), 0);
  restart();
  EXPECT_EQ(daemon_->get(base_ + "/processes").body["processes"].size(), 2u);
  EXPECT_EQ(daemon_->del(base_ + "?wait=true").status, 204);
  id_.clear();
  EXPECT_TRUE(wait_until([&] { return !process_running(supervisor) && !process_running(init); },
                         10s, "the supervisor and init to end"));
  EXPECT_EQ(processes_in_mount_namespace(ns.st_ino), 0);
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// With no hutchd, a kept process that runs holds the supervisor's idle TTL off, as it holds
// hutchd's reaper off; the TTL counts from its end, and then the sandbox ends with nothing left.
TEST(ReattachIdle, ARunningProcessHoldsTheIdleTtlOffWithoutHutchd) {
  HUTCH_REQUIRE_ROOT();
  TempDir temp;
  auto daemon = std::make_unique<Hutchd>(temp.path());
  ASSERT_TRUE(daemon->start()) << daemon->log();
  auto created = daemon->post("/v1/sandboxes", {{"idle_ttl_seconds", 1}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  const std::string dir = daemon->state_dir() + "/sandboxes/" + id;
  std::ifstream in(dir + "/sandbox.json");
  const int supervisor = json::parse(in)["ref"]["supervisor_pid"];
  const auto before_start = std::chrono::steady_clock::now();
  auto started = daemon->post("/v1/sandboxes/" + id + "/exec",
                              {{"argv", {"sleep", "3"}}, {"background", true}});
  ASSERT_EQ(started.status, 201) << started.raw;
  daemon->stop(SIGKILL);
  std::this_thread::sleep_for(2s);
  EXPECT_TRUE(process_running(supervisor)) << "ended at the idle TTL while a process ran";
  EXPECT_TRUE(wait_until([&] { return !process_running(supervisor); }, 10s,
                         "the sandbox to end after its process", 50ms));
  EXPECT_GE(std::chrono::steady_clock::now() - before_start, 3s + 1s) << "ended before the TTL";
  EXPECT_TRUE(wait_until([&] { return !std::filesystem::exists(dir); }, 5s, "its dir to go"));
}

std::string signal_name(const ::testing::TestParamInfo<int>& info) {
  return info.param == SIGKILL ? "Sigkill" : "Sigterm";
}

INSTANTIATE_TEST_SUITE_P(HutchdStops, ReattachTest, ::testing::Values(SIGKILL, SIGTERM),
                         signal_name);

}  // namespace
}  // namespace hutch::testing
