// PTYs through hutchd: a process on a pseudo-terminal of the sandbox's own devpts, its size and
// resize (SIGWINCH), input, output by offset (plain and followed), delete, and hostile input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "tests/common/command.h"
#include "tests/common/wait.h"
#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

class PtyTest : public DaemonTest {
 protected:
  // Starts a pty; fails the test on error. Returns its routes' base path.
  std::string start_pty(const std::string& id, const json& body) {
    auto reply = daemon_->post("/v1/sandboxes/" + id + "/ptys", body);
    EXPECT_EQ(reply.status, 201) << reply.raw;
    if (reply.status != 201) return "";
    pid_ = std::to_string(reply.body["pid"].get<int>());
    return "/v1/sandboxes/" + id + "/ptys/" + pid_;
  }
  // The pty's output so far.
  std::string output(const std::string& base) {
    return daemon_->get(base + "/output?offset=0").body["data"].get<std::string>();
  }
  // Waits until the output contains `text`.
  ::testing::AssertionResult wait_for(const std::string& base, const std::string& text) {
    return wait_until([&] { return output(base).find(text) != std::string::npos; },
                      std::chrono::seconds(5), "\"" + text + "\" on the pty",
                      std::chrono::milliseconds(20));
  }
  json wait_exit(const std::string& id) {
    return daemon_
        ->post("/v1/sandboxes/" + id + "/processes/" + pid_ + "/wait?timeout_seconds=10",
               json::object())
        .body;
  }
  std::string pid_;
};

TEST_F(PtyTest, TtyIsOnTheSandboxDevptsWithTheRequestedSize) {
  std::string id = create();
  std::string base = start_pty(
      id, {{"command", "tty; stty size; echo TERM=$TERM; exit 3"}, {"cols", 100}, {"rows", 30}});
  ASSERT_FALSE(base.empty());
  EXPECT_EQ(wait_exit(id)["exit_code"], 3);
  std::string out = output(base);
  // The terminal's own output processing (onlcr) turns "\n" into "\r\n".
  EXPECT_TRUE(
      std::regex_search(out, std::regex("^/dev/pts/[0-9]+\r\n30 100\r\nTERM=xterm-256color")))
      << out;
  // The slave is in the sandbox's devpts instance: the host's /dev/pts has no say in it, and the
  // sandbox sees its own numbering from 0.
  auto listed = exec(id, {{"command", "ls /dev/pts"}});
  EXPECT_NE(listed["stdout"].get<std::string>().find("ptmx"), std::string::npos);
}

TEST_F(PtyTest, ResizeDeliversSigwinch) {
  std::string id = create();
  std::string base = start_pty(
      id,
      {{"command", "trap 'echo winch; stty size' WINCH; echo ready; while :; do sleep 0.05; done"},
       {"cols", 80},
       {"rows", 24}});
  ASSERT_FALSE(base.empty());
  ASSERT_TRUE(wait_for(base, "ready"));
  auto resized = daemon_->post(base + "/resize", {{"cols", 132}, {"rows", 43}});
  ASSERT_EQ(resized.status, 200) << resized.raw;
  EXPECT_EQ(resized.body["pty"], json({{"cols", 132}, {"rows", 43}}));
  EXPECT_TRUE(wait_for(base, "winch\r\n43 132\r\n"));
  EXPECT_EQ(daemon_->get(base).body["pty"]["cols"], 132);
  EXPECT_EQ(daemon_->del(base).status, 200);
}

TEST_F(PtyTest, InputReachesTheShellAndOutputReconnectsFromAnOffset) {
  std::string id = create();
  std::string base = start_pty(id, {{"argv", {"/bin/sh"}}});
  ASSERT_FALSE(base.empty());
  // Listed among the processes and among the ptys; a background process is not a pty.
  auto processes = daemon_->get("/v1/sandboxes/" + id + "/processes").body["processes"];
  ASSERT_EQ(processes.size(), 1u);
  EXPECT_EQ(processes[0]["pty"]["cols"], 80);
  auto plain = daemon_->post("/v1/sandboxes/" + id + "/exec",
                             {{"argv", {"sleep", "60"}}, {"background", true}});
  ASSERT_EQ(plain.status, 201);
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + id + "/ptys").body["ptys"].size(), 1u);
  EXPECT_EQ(error_code(daemon_->get("/v1/sandboxes/" + id + "/ptys/" +
                                    std::to_string(plain.body["pid"].get<int>()))),
            "pty_not_found");

  ASSERT_EQ(daemon_->post(base + "/input", {{"data", "echo one-$((40+2))\n"}}).status, 200);
  ASSERT_TRUE(wait_for(base, "one-42\r\n"));
  uint64_t mark = output(base).size();
  // Binary input: ^C (0x03) makes the terminal send SIGINT to its foreground process group.
  ASSERT_EQ(daemon_->post(base + "/input", {{"data", "exec cat\n"}}).status, 200);
  // The terminal's echo, then cat's copy: cat reads the terminal now.
  ASSERT_EQ(daemon_->post(base + "/input", {{"data", "meow\n"}}).status, 200);
  ASSERT_TRUE(wait_for(base, "meow\r\nmeow\r\n"));
  ASSERT_EQ(daemon_->post(base + "/input", {{"data_base64", "Aw=="}}).status, 200);
  EXPECT_EQ(wait_exit(id)["term_signal"], 2);
  std::string all = output(base);

  auto rest = daemon_->get(base + "/output?offset=" + std::to_string(mark));
  EXPECT_EQ(rest.body["data"], all.substr(mark));
  EXPECT_EQ(rest.body["eof"], true);
  // Followed from the same offset: the same bytes (base64), then the exit.
  auto followed =
      daemon_->get(base + "/output?follow=1&encoding=base64&offset=" + std::to_string(mark));
  ASSERT_EQ(followed.status, 200);
  auto [data, last] = parse_followed(followed.raw);
  EXPECT_EQ(last["term_signal"], 2);
  EXPECT_EQ(last["next_offset"], all.size());
  auto direct = daemon_->get(base + "/output?encoding=base64&offset=" + std::to_string(mark));
  EXPECT_EQ(data, direct.body["data"]);
  auto late = daemon_->post(base + "/input", {{"data", "late\n"}});
  EXPECT_EQ(error_code(late), "conflict") << late.raw;
}

TEST_F(PtyTest, DeleteKillsTheWholeTree) {
  std::string id = create();
  std::string base = start_pty(id, {{"command", "(sleep 1001 &); echo up; exec sleep 1002"}});
  ASSERT_FALSE(base.empty());
  ASSERT_TRUE(wait_for(base, "up"));
  auto deleted = daemon_->del(base);
  ASSERT_EQ(deleted.status, 200) << deleted.raw;
  EXPECT_EQ(deleted.body["state"], "exited");
  EXPECT_EQ(deleted.body["term_signal"], 9);
  auto left = exec(id, {{"command",
                         "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; "
                         "done 2>/dev/null | grep -c 'sleep 100[12]' || true"}});
  EXPECT_EQ(left["stdout"], "0\n");
}

TEST_F(PtyTest, HostileInputIsRefused) {
  std::string id = create();
  std::string ptys = "/v1/sandboxes/" + id + "/ptys";
  for (const json& body : std::vector<json>{
           {{"cols", 0}},
           {{"cols", 1001}},
           {{"rows", -1}},
           {{"rows", "24"}},
           {{"cols", 1e300}},
           {{"argv", json::array()}},
           {{"argv", {""}}},
           {{"argv", {"sh"}}, {"command", "sh"}},
           {{"command", std::string("a\0b", 3)}},
           {{"env", {{"A=B", "x"}}}},
           {{"workdir", "relative"}},
           {{"stdin", "x"}},
           {{"background", true}},
           json::array(),
       }) {
    auto reply = daemon_->post(ptys, body);
    EXPECT_EQ(reply.status, 400) << body.dump() << " " << reply.raw;
  }
  EXPECT_EQ(daemon_->post_raw(ptys, "{not json").status, 400);
  EXPECT_EQ(error_code(daemon_->get(ptys + "/99999")), "pty_not_found");
  EXPECT_GE(daemon_->get(ptys + "/abc").status, 404);
  EXPECT_EQ(error_code(daemon_->post("/v1/sandboxes/nope/ptys", json::object())),
            "sandbox_not_found");
  // A command that does not exist: the pty starts, the process reports why it did not run.
  std::string missing = start_pty(id, {{"argv", {"/no/such/binary"}}});
  EXPECT_EQ(wait_exit(id)["exit_code"], 127);

  std::string base = start_pty(id, {{"command", "exec sleep 600"}, {"cols", 1}, {"rows", 1000}});
  ASSERT_FALSE(base.empty());
  for (const json& body : std::vector<json>{{{"cols", 0}, {"rows", 10}},
                                            {{"cols", 10}},
                                            {{"cols", 10}, {"rows", 70000}},
                                            {{"cols", 10}, {"rows", 10}, {"x", 1}}})
    EXPECT_EQ(daemon_->post(base + "/resize", body).status, 400) << body.dump();
  EXPECT_EQ(daemon_->post(base + "/input", {{"data_base64", "!!!"}}).status, 400);
  EXPECT_EQ(daemon_->post(base + "/input", {{"data", 5}}).status, 400);
  EXPECT_EQ(daemon_->post(base + "/input", {{"data", std::string((1 << 20) + 1, 'a')}}).status,
            400);
  EXPECT_EQ(daemon_->post(base + "/signal", {{"signal", "NOPE"}}).status, 400);
  EXPECT_EQ(daemon_->post(base + "/signal", json::object()).status, 400);
  EXPECT_EQ(daemon_->get(base + "/output?offset=-1").status, 400);
  EXPECT_EQ(daemon_->get(base + "/output?offset=99999999999999999999").status, 400);
  EXPECT_EQ(daemon_->get(base + "/output?limit=0").status, 400);
  // Past the end: nothing, not an error.
  auto beyond = daemon_->get(base + "/output?offset=123456");
  EXPECT_EQ(beyond.status, 200);
  EXPECT_EQ(beyond.body["data"], "");
  // NUL bytes and escape sequences are data, nothing more.
  EXPECT_EQ(daemon_->post(base + "/input", {{"data_base64", "ABs="}, {"data", "\x1b[6n"}}).status,
            200);
  auto signalled = daemon_->post(base + "/signal", {{"signal", "TERM"}});
  EXPECT_EQ(signalled.status, 200) << signalled.raw;
  EXPECT_EQ(wait_exit(id)["term_signal"], 15);
  EXPECT_EQ(daemon_->del(base).status, 200);
}

// `hutch shell` in a real terminal: tmux (its own server on a private socket) runs it, types into
// it and reads its screen.
TEST_F(PtyTest, HutchShellInTmux) {
  HUTCH_REQUIRE(access("/usr/bin/tmux", X_OK) == 0, "needs tmux (scripts/setup.sh installs it)");
  std::string id = create();
  std::string tmux_socket = temp_.path() + "/tmux.sock";
  std::string status_file = temp_.path() + "/shell.status";
  CommandOptions env;
  env.env = {"PATH=/usr/bin:/bin", "TERM=xterm-256color"};
  auto tmux = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/tmux", "-S", tmux_socket});
    return run_command(args, env);
  };
  auto screen = [&] { return tmux({"capture-pane", "-p", "-t", "t"}).out; };
  auto shows = [&](const std::string& text) {
    return wait_until([&] { return screen().find(text) != std::string::npos; },
                      std::chrono::seconds(10), "\"" + text + "\" on the tmux screen",
                      std::chrono::milliseconds(50));
  };
  std::string shell = std::string(HUTCH_BINARY) + " shell --socket " + daemon_->socket() + " " +
                      id + "; echo $? > " + status_file + "; sleep 30";
  ASSERT_EQ(tmux({"new-session", "-d", "-s", "t", "-x", "100", "-y", "30", shell}).exit_code, 0);
  EXPECT_TRUE(shows("#"));  // the prompt (capture-pane drops its trailing space)
  tmux({"send-keys", "-t", "t", "echo hi-$((6*7))", "Enter"});
  EXPECT_TRUE(shows("\nhi-42\n"));
  tmux({"send-keys", "-t", "t", "stty size", "Enter"});
  EXPECT_TRUE(shows("\n30 100\n"));
  ASSERT_EQ(tmux({"resize-window", "-t", "t", "-x", "120", "-y", "40"}).exit_code, 0);
  tmux({"send-keys", "-t", "t", "clear; stty size", "Enter"});
  EXPECT_TRUE(shows("40 120\n"));
  tmux({"send-keys", "-t", "t", "exit 3", "Enter"});
  EXPECT_TRUE(wait_until(
      [&] {
        std::ifstream in(status_file);
        std::string status;
        return static_cast<bool>(std::getline(in, status)) && status == "3";
      },
      std::chrono::seconds(10), "hutch shell to exit 3", std::chrono::milliseconds(50)));
  tmux({"kill-server"});
}

}  // namespace
}  // namespace hutch::testing
