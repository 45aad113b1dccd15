// Exec through hutchd: buffered, streamed and background commands, timeouts that kill whole
// trees, output caps, and hostile input.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/common/wait.h"
#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

// Counts processes inside the sandbox whose command line contains `marker`, reading /proc from
// inside (no ps needed). The scanning shell itself contains the marker only split in two.
int count_inside(DaemonTest& test, Hutchd& daemon, const std::string& id,
                 const std::string& marker) {
  std::string half = marker.substr(0, marker.size() / 2);
  std::string rest = marker.substr(marker.size() / 2);
  auto reply = daemon.post(
      "/v1/sandboxes/" + id + "/exec",
      {{"command",
        "n=0; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null | grep -q \"" + half +
            "\"\"" + rest + "\" && n=$((n+1)); done; echo $n"}});
  (void)test;
  if (reply.status != 200) return -1;
  return std::stoi(reply.body["stdout"].get<std::string>());
}

TEST_F(DaemonTest, ExecArgvCommandAndExitCodes) {
  std::string id = create();
  auto argv = exec(id, {{"argv", {"echo", "hello", "world"}}});
  EXPECT_EQ(argv["stdout"], "hello world\n");
  EXPECT_EQ(argv["stderr"], "");
  EXPECT_EQ(argv["exit_code"], 0);
  EXPECT_EQ(argv["timed_out"], false);
  EXPECT_EQ(argv["truncated"], false);
  EXPECT_EQ(argv["oom_killed"], false);
  EXPECT_TRUE(argv["duration_ms"].is_number());
  auto command = exec(id, {{"command", "echo out; echo err >&2; exit 7"}});
  EXPECT_EQ(command["stdout"], "out\n");
  EXPECT_EQ(command["stderr"], "err\n");
  EXPECT_EQ(command["exit_code"], 7);
  EXPECT_EQ(exec(id, {{"command", "kill -TERM $$"}})["exit_code"], 128 + 15);
  EXPECT_EQ(exec(id, {{"argv", {"no-such-command-here"}}})["exit_code"], 127);
  auto workdir = exec(id, {{"command", "pwd"}, {"workdir", "/tmp"}});
  EXPECT_EQ(workdir["stdout"], "/tmp\n");
}

// The supervisor ignores SIGPIPE for itself; a command must start with every disposition at its
// default (an ignored SIGPIPE survives execve), or `yes | head -1` would never end with SIGPIPE.
TEST_F(DaemonTest, ExecsStartWithNoSignalIgnored) {
  std::string id = create();
  EXPECT_EQ(exec(id, {{"command", "grep SigIgn /proc/self/status"}})["stdout"],
            "SigIgn:\t0000000000000000\n");
  auto pipeline =
      exec(id, {{"command", "yes | head -1; echo \"${PIPESTATUS:-}\""}, {"timeout_seconds", 10}});
  EXPECT_EQ(pipeline["stdout"], "y\n\n");
  EXPECT_EQ(pipeline["timed_out"], false);
  auto bash = exec(id, {{"argv", {"bash", "-c", "yes | head -1 >/dev/null; echo ${PIPESTATUS[0]}"}},
                        {"timeout_seconds", 10}});
  EXPECT_EQ(bash["stdout"], "141\n") << "yes ended by SIGPIPE (128 + 13)";
}

TEST_F(DaemonTest, ExecStdinAndEnvironmentMerge) {
  std::string id = create({{"env", {{"FOO", "sandbox"}, {"BAR", "sandbox"}}}});
  auto piped = exec(id, {{"argv", {"cat"}}, {"stdin", std::string("line1\nline2\0zero", 17)}});
  EXPECT_EQ(piped["stdout"], std::string("line1\nline2\0zero", 17));
  auto no_stdin = exec(id, {{"argv", {"cat"}}});  // /dev/null: cat ends at once
  EXPECT_EQ(no_stdin["stdout"], "");
  auto env = exec(
      id, {{"command", "echo $FOO $BAR $HOME $LANG; echo $PATH"}, {"env", {{"BAR", "request"}}}});
  EXPECT_EQ(env["stdout"],
            "sandbox request /root C.UTF-8\n/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
            "/sbin:/bin\n");
}

TEST_F(DaemonTest, TimeoutKillsTheWholeTree) {
  std::string id = create();
  auto started = std::chrono::steady_clock::now();
  auto timed_out = exec(id, {{"command",
                              "(setsid sh -c 'sleep 1001 & sleep 1002' &); sleep 1003 & "
                              "echo started; wait"},
                             {"timeout_seconds", 1}});
  auto elapsed = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(timed_out["exit_code"], 124);
  EXPECT_EQ(timed_out["timed_out"], true);
  EXPECT_EQ(timed_out["stdout"], "started\n");
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  EXPECT_EQ(count_inside(*this, *daemon_, id, "sleep 100"), 0);
  // The host's view of the same pid namespace: not only what the sandbox can see of itself.
  auto sandbox = daemon_->get("/v1/sandboxes/" + id);
  ASSERT_EQ(sandbox.status, 200) << sandbox.raw;
  EXPECT_EQ(count_pid_ns_processes_with(sandbox.body["init_pid"].get<pid_t>(), "sleep 100"), 0);
  // The sandbox default applies when the request gives none (0 means the default too).
  std::string quick = create({{"default_timeout_seconds", 1}});
  auto by_default = exec(quick, {{"command", "sleep 30"}, {"timeout_seconds", 0}});
  EXPECT_EQ(by_default["exit_code"], 124);
}

TEST_F(DaemonTest, GrandchildHoldingThePipeDoesNotHoldTheReply) {
  std::string id = create();
  auto started = std::chrono::steady_clock::now();
  auto reply = exec(id, {{"command", "sleep 30 & echo parent done"}});
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(reply["stdout"], "parent done\n");
  EXPECT_EQ(reply["exit_code"], 0);
}

TEST_F(DaemonTest, OutputIsCappedAndDrained) {
  std::string id = create();
  auto capped = exec(id, {{"command", "head -c 300000 /dev/zero | tr '\\0' x; echo tail >&2"},
                          {"max_output_bytes", 1000}});
  EXPECT_EQ(capped["exit_code"], 0);  // drained past the cap: the writer never blocked
  EXPECT_EQ(capped["stdout"].get<std::string>().size(), 1000u);
  EXPECT_EQ(capped["stderr"], "tail\n");
  EXPECT_EQ(capped["truncated"], true);
  auto whole = exec(id, {{"command", "head -c 300000 /dev/zero | tr '\\0' x"}});
  EXPECT_EQ(whole["stdout"].get<std::string>().size(), 300000u);
  EXPECT_EQ(whole["truncated"], false);
}

TEST_F(DaemonTest, NonUtf8OutputIsReplacedNotFatal) {
  std::string id = create();
  auto reply = exec(id, {{"command", "printf 'a\\377\\376b'"}});
  EXPECT_EQ(reply["exit_code"], 0);
  EXPECT_EQ(reply["stdout"],
            "a\xEF\xBF\xBD\xEF\xBF\xBD"
            "b");
}

TEST_F(DaemonTest, HostileExecInputIs400) {
  std::string id = create();
  std::string path = "/v1/sandboxes/" + id + "/exec";
  const std::vector<json> bad = {
      json::object(),
      {{"argv", json::array()}},
      {{"argv", {""}}},
      {{"argv", "echo"}},
      {{"argv", {"echo", 1}}},
      {{"argv", {std::string("ec\0ho", 5)}}},
      {{"argv", {"echo", std::string("a\0b", 3)}}},
      {{"command", ""}},
      {{"command", std::string("echo \0", 6)}},
      {{"argv", {"true"}}, {"command", "true"}},
      {{"argv", {"true"}}, {"env", {{"1BAD", "x"}}}},
      {{"argv", {"true"}}, {"env", {{"BAD-KEY", "x"}}}},
      {{"argv", {"true"}}, {"env", {{"", "x"}}}},
      {{"argv", {"true"}}, {"env", {{"OK", std::string("a\0b", 3)}}}},
      {{"argv", {"true"}}, {"env", {{"OK", 1}}}},
      {{"argv", {"true"}}, {"timeout_seconds", -1}},
      {{"argv", {"true"}}, {"timeout_seconds", "10"}},
      {{"argv", {"true"}}, {"workdir", "relative"}},
      {{"argv", {"true"}}, {"workdir", std::string("/tmp\0", 5)}},
      {{"argv", {"true"}}, {"max_output_bytes", 0}},
      {{"argv", {"true"}}, {"stream", true}, {"background", true}},
      {{"argv", {"true"}}, {"bogus", 1}},
  };
  for (const json& body : bad) {
    auto reply = daemon_->post(path, body);
    EXPECT_EQ(reply.status, 400) << body.dump() << " -> " << reply.raw;
    EXPECT_EQ(error_code(reply), "bad_request") << body.dump();
  }
  EXPECT_EQ(exec(id, {{"argv", {"true"}}})["exit_code"], 0);
}

TEST_F(DaemonTest, BashAndPythonAliases) {
  std::string id = create();
  auto bash =
      daemon_->post("/v1/sandboxes/" + id + "/exec/bash",
                    {{"command", "echo \"$0 $1 ${BASH_VERSION:+bash}\""}, {"args", {"one"}}});
  ASSERT_EQ(bash.status, 200) << bash.raw;
  EXPECT_EQ(bash.body["stdout"], "bash one bash\n");
  auto python =
      daemon_->post("/v1/sandboxes/" + id + "/exec/python",
                    {{"script", "import sys; print(sys.argv[1:])"}, {"args", {"a", "b"}}});
  ASSERT_EQ(python.status, 200) << python.raw;
  EXPECT_EQ(python.body["stdout"], "['a', 'b']\n");
  EXPECT_EQ(python.body["exit_code"], 0);
}

// Reads a streamed exec, recording when each line arrived.
struct StreamedLine {
  json value;
  std::chrono::steady_clock::time_point at;
};

std::vector<StreamedLine> stream_exec(Hutchd& daemon, const std::string& id, const json& body,
                                      int stop_after_lines = -1) {
  std::vector<StreamedLine> lines;
  std::string buffer;
  auto client = daemon.client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/sandboxes/" + id + "/exec";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    buffer.append(data, length);
    size_t newline;
    while ((newline = buffer.find('\n')) != std::string::npos) {
      lines.push_back({json::parse(buffer.substr(0, newline)), std::chrono::steady_clock::now()});
      buffer.erase(0, newline + 1);
    }
    return stop_after_lines < 0 || static_cast<int>(lines.size()) < stop_after_lines;
  };
  httplib::Response res;
  httplib::Error error;
  client->send(req, res, error);
  return lines;
}

TEST_F(DaemonTest, StreamingDeliversOutputInOrderAsItHappens) {
  std::string id = create();
  auto lines = stream_exec(
      *daemon_, id,
      {{"command", "echo a; sleep 0.4; echo b >&2; sleep 0.4; echo c"}, {"stream", true}});
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].value, json({{"stdout", "a\n"}}));
  EXPECT_EQ(lines[1].value, json({{"stderr", "b\n"}}));
  EXPECT_EQ(lines[2].value, json({{"stdout", "c\n"}}));
  EXPECT_EQ(lines[3].value["exit_code"], 0);
  EXPECT_EQ(lines[3].value["timed_out"], false);
  // "a" arrived while the command still ran, not with the rest at the end.
  EXPECT_GT(lines[2].at - lines[0].at, std::chrono::milliseconds(600));
}

TEST_F(DaemonTest, StreamingClientDisconnectKillsTheCommand) {
  std::string id = create();
  auto lines = stream_exec(
      *daemon_, id,
      {{"command", "while true; do echo tick-marker-77; sleep 0.1; done"}, {"stream", true}}, 1);
  ASSERT_GE(lines.size(), 1u);
  EXPECT_TRUE(wait_until([&] { return count_inside(*this, *daemon_, id, "tick-marker-77") == 0; },
                         std::chrono::seconds(5), "the streamed command to be killed",
                         std::chrono::milliseconds(100)));
}

TEST_F(DaemonTest, BackgroundProcessOutputStdinSignalWait) {
  std::string id = create();
  std::string base = "/v1/sandboxes/" + id + "/processes/";
  auto started =
      daemon_->post("/v1/sandboxes/" + id + "/exec",
                    {{"command", "read line; echo out:$line; echo err:$line >&2; exec sleep 60"},
                     {"background", true}});
  ASSERT_EQ(started.status, 201) << started.raw;
  EXPECT_EQ(started.body["state"], "running");
  std::string pid = std::to_string(started.body["pid"].get<int>());
  auto list = daemon_->get("/v1/sandboxes/" + id + "/processes");
  ASSERT_EQ(list.body["processes"].size(), 1u);

  auto fed = daemon_->post(base + pid + "/stdin", {{"data", "hello\n"}});
  EXPECT_EQ(fed.status, 200) << fed.raw;
  std::string out;
  EXPECT_TRUE(wait_until(
      [&] {
        auto chunk = daemon_->get(base + pid + "/output?stream=stdout&offset=0");
        out = chunk.body["data"];
        EXPECT_EQ(chunk.body["eof"], false);
        return out.find("out:hello") != std::string::npos;
      },
      std::chrono::seconds(3), "the process's answer on stdout", std::chrono::milliseconds(30)));
  EXPECT_EQ(out, "out:hello\n");
  auto partial = daemon_->get(base + pid + "/output?stream=stdout&offset=4&limit=3");
  EXPECT_EQ(partial.body["data"], "hel");
  EXPECT_EQ(partial.body["next_offset"], 7);

  auto still = daemon_->post(base + pid + "/wait?timeout_seconds=1", json::object());
  EXPECT_EQ(still.body["state"], "running");
  auto signalled = daemon_->post(base + pid + "/signal", {{"signal", "TERM"}});
  EXPECT_EQ(signalled.status, 200) << signalled.raw;
  auto waited = daemon_->post(base + pid + "/wait?timeout_seconds=10", json::object());
  EXPECT_EQ(waited.body["state"], "exited");
  EXPECT_EQ(waited.body["exit_code"], 128 + 15);
  EXPECT_EQ(waited.body["term_signal"], 15);
  auto err = daemon_->get(base + pid + "/output?stream=stderr");
  EXPECT_EQ(err.body["data"], "err:hello\n");
  EXPECT_EQ(err.body["eof"], true);
  EXPECT_EQ(daemon_->get(base + "99999").status, 404);
  EXPECT_EQ(error_code(daemon_->get(base + "99999")), "process_not_found");
  EXPECT_EQ(daemon_->post(base + pid + "/signal", {{"signal", "NOPE"}}).status, 400);
}

TEST_F(DaemonTest, BackgroundKillTreeAndOutputCap) {
  std::string id = create();
  auto started =
      daemon_->post("/v1/sandboxes/" + id + "/exec",
                    {{"command", "head -c 20000000 /dev/zero; (setsid sleep 1004 &); sleep 1005"},
                     {"background", true}});
  ASSERT_EQ(started.status, 201);
  std::string base =
      "/v1/sandboxes/" + id + "/processes/" + std::to_string(started.body["pid"].get<int>());
  EXPECT_TRUE(wait_until(
      [&] { return daemon_->get(base + "/output?offset=0&limit=1").body["truncated"] == true; },
      std::chrono::seconds(5), "the output to reach its cap", std::chrono::milliseconds(50)));
  ASSERT_EQ(daemon_->post(base + "/signal", {{"signal", "KILL_TREE"}}).status, 200);
  auto waited = daemon_->post(base + "/wait?timeout_seconds=10", json::object());
  EXPECT_EQ(waited.body["state"], "exited");
  EXPECT_EQ(count_inside(*this, *daemon_, id, "sleep 100"), 0);
  auto tail = daemon_->get(base + "/output?offset=16777000");
  EXPECT_EQ(tail.body["data"].get<std::string>().size(), 16777216u - 16777000u);
  EXPECT_EQ(tail.body["eof"], true);
}

TEST_F(DaemonTest, ConcurrentExecs) {
  std::string id = create();
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        std::string word = std::to_string(t) + "-" + std::to_string(i);
        auto reply = daemon_->post("/v1/sandboxes/" + id + "/exec", {{"argv", {"echo", word}}});
        if (reply.status == 200 && reply.body["stdout"] == word + "\n") ++good;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), 160);
}

// hutchd reads the OOM count from the cgroup file its supervisor handed over: an exec killed by
// the memory limit says so, and the next exec (the count unchanged since) does not.
TEST_F(DaemonTest, ExecReportsAnOomKillAndOnlyThatOne) {
  std::string id = create({{"limits", {{"memory_bytes", 64 << 20}}}});
  auto hog = exec(id, {{"argv", {"python3", "-c", "b = b'x' * (512 << 20)"}}});
  EXPECT_EQ(hog["exit_code"], 137) << hog.dump();
  EXPECT_EQ(hog["oom_killed"], true);
  auto after = exec(id, {{"argv", {"true"}}});
  EXPECT_EQ(after["exit_code"], 0);
  EXPECT_EQ(after["oom_killed"], false);
}

}  // namespace
}  // namespace hutch::testing
