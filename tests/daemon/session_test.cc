// Persistent shell sessions through hutchd: cwd and exported environment persist between
// commands, a timeout kills the command's tree and the session goes on, heredocs and `read`
// cannot hang it, one command at a time, hostile names and state files.
#include <gtest/gtest.h>

#include <sstream>
#include <thread>

#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

class SessionTest : public DaemonTest {
 protected:
  std::string session_path(const std::string& id, const std::string& name) {
    return "/v1/sandboxes/" + id + "/sessions/" + name;
  }
  std::string open_session(const std::string& id, const json& body = json::object()) {
    auto reply = daemon_->post("/v1/sandboxes/" + id + "/sessions", body);
    EXPECT_EQ(reply.status, 201) << reply.raw;
    return reply.body.value("name", "");
  }
  json run(const std::string& id, const std::string& name, const json& body) {
    auto reply = daemon_->post(session_path(id, name) + "/exec", body);
    EXPECT_EQ(reply.status, 200) << body.dump() << " -> " << reply.raw;
    return reply.body;
  }
};

TEST_F(SessionTest, CwdAndExportedEnvironmentPersist) {
  std::string id = create({{"env", {{"FROM_SANDBOX", "yes"}}}});
  std::string name = open_session(id);
  EXPECT_EQ(name, "s1");
  auto first = run(id, name, {{"command", "cd /tmp; export A=1; B=local; echo set"}});
  EXPECT_EQ(first["stdout"], "set\n");  // the epilogue writes nothing to the command's output
  EXPECT_EQ(first["stderr"], "");
  auto second = run(id, name, {{"command", "pwd; echo \"$A-$B-$FROM_SANDBOX\""}});
  EXPECT_EQ(second["stdout"], "/tmp\n1--yes\n");
  // unset persists too, also for a variable of the sandbox's environment.
  run(id, name, {{"command", "unset A FROM_SANDBOX; mkdir -p /tmp/d && cd /tmp/d"}});
  EXPECT_EQ(run(id, name, {{"command", "pwd; echo \"${A-none} ${FROM_SANDBOX-none}\""}})["stdout"],
            "/tmp/d\nnone none\n");
  // The command's own exit status is kept, `exit` included; its cwd change still counts.
  EXPECT_EQ(run(id, name, {{"command", "cd /; exit 7"}})["exit_code"], 7);
  EXPECT_EQ(run(id, name, {{"command", "false"}})["exit_code"], 1);
  EXPECT_EQ(run(id, name, {{"command", "pwd"}})["stdout"], "/\n");
  // argv is quoted into one command; a vanished cwd falls back to /.
  run(id, name, {{"command", "mkdir /tmp/gone && cd /tmp/gone && rmdir /tmp/gone"}});
  EXPECT_EQ(run(id, name, {{"argv", {"sh", "-c", "pwd; echo \"$0\"", "it's"}}})["stdout"],
            "/\nit's\n");
  // Two sessions of a sandbox are independent; a plain /exec sees neither.
  std::string other =
      open_session(id, {{"name", "other"}, {"workdir", "/etc"}, {"env", {{"C", "3"}}}});
  EXPECT_EQ(run(id, other, {{"command", "pwd; echo \"$C${A-}\""}})["stdout"], "/etc\n3\n");
  EXPECT_EQ(exec(id, {{"command", "echo \"${C-unset}\""}})["stdout"], "unset\n");
}

TEST_F(SessionTest, TimeoutKillsTheTreeAndTheSessionGoesOn) {
  std::string id = create();
  std::string name = open_session(id);
  run(id, name, {{"command", "cd /tmp; export KEPT=1"}});
  auto started = std::chrono::steady_clock::now();
  auto timed_out = run(id, name,
                       {{"command",
                         "cd /; export KEPT=2; (setsid sh -c 'sleep 2001 &' &); "
                         "sleep 2002 & echo started; wait"},
                        {"timeout_seconds", 1}});
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(timed_out["exit_code"], 124);
  EXPECT_EQ(timed_out["timed_out"], true);
  EXPECT_EQ(timed_out["stdout"], "started\n");
  auto sandbox = daemon_->get("/v1/sandboxes/" + id);
  ASSERT_EQ(sandbox.status, 200) << sandbox.raw;
  EXPECT_EQ(count_pid_ns_processes_with(sandbox.body["init_pid"].get<pid_t>(), "sleep 200"), 0);
  // The killed command wrote no state: the session is as it was before it.
  EXPECT_EQ(run(id, name, {{"command", "pwd; echo $KEPT"}})["stdout"], "/tmp\n1\n");
}

TEST_F(SessionTest, HeredocAndReadDoNotHang) {
  std::string id = create();
  std::string name = open_session(id);
  auto started = std::chrono::steady_clock::now();
  auto heredoc = run(id, name, {{"command", "cat <<'EOF'\nline one\n$HOME\nEOF\necho after"}});
  EXPECT_EQ(heredoc["stdout"], "line one\n$HOME\nafter\n");
  auto read = run(id, name, {{"command", "read x; echo \"rc=$? x=$x\""}});  // stdin: /dev/null
  EXPECT_EQ(read["stdout"], "rc=1 x=\n");
  auto given = run(id, name, {{"command", "read x; echo \"x=$x\""}, {"stdin", "typed\n"}});
  EXPECT_EQ(given["stdout"], "x=typed\n");
  // An unterminated heredoc ends with the command's text; an open quote is its syntax error.
  EXPECT_EQ(run(id, name, {{"command", "cat <<EOF\nno end"}})["stdout"], "no end");
  EXPECT_NE(run(id, name, {{"command", "echo 'open"}})["exit_code"], 0);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
  EXPECT_EQ(run(id, name, {{"command", "echo alive"}})["stdout"], "alive\n");
}

TEST_F(SessionTest, ConcurrentCommandsAreRefusedWhileOneRuns) {
  std::string id = create();
  std::string name = open_session(id);
  std::thread slow([&] { run(id, name, {{"command", "sleep 2; export DONE=1"}}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  auto busy = daemon_->post(session_path(id, name) + "/exec", {{"command", "echo no"}});
  EXPECT_EQ(busy.status, 409) << busy.raw;
  EXPECT_EQ(error_code(busy), "session_busy");
  // Another session of the same sandbox is not held up.
  std::string other = open_session(id);
  EXPECT_EQ(run(id, other, {{"command", "echo free"}})["stdout"], "free\n");
  slow.join();
  EXPECT_EQ(run(id, name, {{"command", "echo $DONE"}})["stdout"], "1\n");
}

TEST_F(SessionTest, StreamedCommandPersistsState) {
  std::string id = create();
  std::string name = open_session(id);
  auto reply =
      daemon_->post(session_path(id, name) + "/exec",
                    {{"command", "cd /tmp; export S=2; echo out; echo err >&2"}, {"stream", true}});
  ASSERT_EQ(reply.status, 200) << reply.raw;
  std::istringstream lines(reply.raw);
  std::vector<json> parsed;
  for (std::string line; std::getline(lines, line);) parsed.push_back(json::parse(line));
  ASSERT_EQ(parsed.size(), 3u) << reply.raw;
  EXPECT_EQ(parsed[0], json({{"stdout", "out\n"}}));
  EXPECT_EQ(parsed[1], json({{"stderr", "err\n"}}));
  EXPECT_EQ(parsed[2]["exit_code"], 0);
  EXPECT_EQ(run(id, name, {{"command", "pwd; echo $S"}})["stdout"], "/tmp\n2\n");
}

TEST_F(SessionTest, ListDeleteLimitsAndHostileInput) {
  std::string id = create();
  std::string base = "/v1/sandboxes/" + id + "/sessions";
  for (const json& body : {json({{"name", "../x"}}), json({{"name", ""}}),
                           json({{"name", std::string(65, 'a')}}), json({{"name", ".hidden"}}),
                           json({{"name", std::string("a\0b", 3)}}), json({{"name", "a b"}})}) {
    auto reply = daemon_->post(base, body);
    EXPECT_EQ(reply.status, 400) << body.dump() << " -> " << reply.raw;
  }
  for (const json& body : {json({{"workdir", "relative"}}), json({{"env", {{"1A", "x"}}}}),
                           json({{"bogus", 1}}), json::array()}) {
    auto reply = daemon_->post(base, body);
    EXPECT_EQ(reply.status, 400) << body.dump() << " -> " << reply.raw;
    EXPECT_EQ(error_code(reply), "bad_request") << body.dump();
  }
  EXPECT_EQ(open_session(id, {{"name", "a.b-c_1"}}), "a.b-c_1");
  auto taken = daemon_->post(base, {{"name", "a.b-c_1"}});
  EXPECT_EQ(taken.status, 409);
  EXPECT_EQ(error_code(taken), "session_exists");
  for (int i = 1; i < 16; ++i) open_session(id);
  auto full = daemon_->post(base, json::object());
  EXPECT_EQ(full.status, 409) << full.raw;
  EXPECT_EQ(error_code(full), "too_many_sessions");
  auto list = daemon_->get(base);
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.body["sessions"].size(), 16u);
  EXPECT_EQ(daemon_->del(base + "/a.b-c_1").status, 200);
  EXPECT_EQ(error_code(daemon_->del(base + "/a.b-c_1")), "session_not_found");
  EXPECT_EQ(error_code(daemon_->post(base + "/a.b-c_1/exec", {{"command", "true"}})),
            "session_not_found");
  EXPECT_EQ(
      error_code(daemon_->post(base + "/s1/exec", {{"command", "true"}, {"background", true}})),
      "bad_request");
  EXPECT_EQ(daemon_->post("/v1/sandboxes/nope/sessions", json::object()).status, 404);
  // A hostile state file: the command overwrites its own trap's output with garbage, a huge
  // file, or a symlink out of the sandbox; the session keeps its previous state.
  run(id, "s1", {{"command", "cd /tmp; export GOOD=1"}});
  run(id, "s1", {{"command", "trap 'printf \"relative\\0PATH\" > /.hutch-sessions/s1' EXIT"}});
  run(id, "s1", {{"command", "trap 'head -c 1000000 /dev/zero > /.hutch-sessions/s1' EXIT"}});
  run(id, "s1", {{"command", "trap 'ln -sf /etc/shadow /.hutch-sessions/s1' EXIT"}});
  EXPECT_EQ(run(id, "s1", {{"command", "pwd; echo $GOOD"}})["stdout"], "/tmp\n1\n");
  // Deleting the sandbox deletes its sessions.
  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + id).status, 204);
  EXPECT_EQ(daemon_->get(base).status, 404);
}

}  // namespace
}  // namespace hutch::testing
