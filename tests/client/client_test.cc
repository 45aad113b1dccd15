// The client verbs end to end: a real hutchd on a temporary socket and state dir, driven through
// build/hutch (which forwards the verbs to build/hutch-client), as root. hutchd is the daemon
// tests' fixture (tests/common/hutchd.h).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/command.h"
#include "tests/common/hutchd.h"
#include "tests/common/must_work.h"
#include "tests/common/socket_io.h"
#include "tests/common/temp_dir.h"

namespace hutch::testing {
namespace {

std::string read_whole(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

void write_whole(const std::string& path, const std::string& data) {
  std::ofstream file(path, std::ios::binary);
  file << data;
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_FALSE(temp_.path().empty());
    start_daemon({});
  }

  void TearDown() override { stop_daemon(); }

  void start_daemon(std::vector<std::string> extra) {
    extra.insert(extra.begin(), "--destroy-on-exit");
    daemon_ = std::make_unique<Hutchd>(temp_.path(), std::move(extra));
    socket_ = daemon_->socket();
    ASSERT_TRUE(daemon_->start()) << daemon_->log();
  }

  // SIGTERM: hutchd destroys its sandboxes (--destroy-on-exit) and exits.
  void stop_daemon() {
    if (!daemon_ || daemon_->pid() <= 0) return;
    EXPECT_EQ(daemon_->stop(SIGTERM), 0) << daemon_->log();
  }

  // build/hutch VERB --socket <ours> ARGS...
  CommandResult client(const std::string& verb, std::vector<std::string> args,
                       const CommandOptions& options = {}) {
    args.insert(args.begin(), {verb, "--socket", socket_});
    return hutch(args, options);
  }

  std::string create(std::vector<std::string> args = {}) {
    CommandResult created = client("create", args);
    EXPECT_EQ(created.exit_code, 0) << created.err;
    std::string id = created.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    EXPECT_FALSE(id.empty());
    EXPECT_EQ(id.find('\n'), std::string::npos) << id;
    return id;
  }

  TempDir temp_;
  std::string socket_;
  std::unique_ptr<Hutchd> daemon_;
};

TEST_F(ClientTest, CreateInspectLsFilterAndIdempotentRm) {
  std::string ml = create({"--label", "team=ml", "--label", "tier=gpu", "--memory", "256M"});
  std::string web = create({"--label", "team=web"});

  CommandResult inspected = client("inspect", {ml});
  ASSERT_EQ(inspected.exit_code, 0) << inspected.err;
  json sandbox = json::parse(inspected.out);
  EXPECT_EQ(sandbox["id"], ml);
  EXPECT_EQ(sandbox["labels"], json({{"team", "ml"}, {"tier", "gpu"}}));
  EXPECT_EQ(sandbox["limits"]["memory_bytes"], 256u << 20);

  CommandResult all = client("ls", {});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_TRUE(all.out.starts_with("ID ")) << all.out;
  EXPECT_NE(all.out.find(ml), std::string::npos) << all.out;
  EXPECT_NE(all.out.find(web), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("team=ml,tier=gpu"), std::string::npos) << all.out;

  CommandResult filtered = client("ls", {"--label", "team=ml", "--json"});
  ASSERT_EQ(filtered.exit_code, 0) << filtered.err;
  json listed = json::parse(filtered.out);
  ASSERT_EQ(listed.size(), 1u) << filtered.out;
  EXPECT_EQ(listed[0]["id"], ml);
  CommandResult none = client("ls", {"--label", "team=nobody"});
  EXPECT_EQ(none.out.find('\n'), none.out.size() - 1) << "only the header: " << none.out;

  CommandResult removed = client("rm", {ml, web});
  EXPECT_EQ(removed.exit_code, 0) << removed.err;
  CommandResult again = client("rm", {ml});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  CommandResult gone = client("inspect", {ml});
  EXPECT_EQ(gone.exit_code, 125);
  EXPECT_TRUE(gone.err.starts_with("hutch: sandbox_not_found: ")) << gone.err;
}

TEST_F(ClientTest, VolumeCreateMountListAndRemove) {
  CommandResult made = client("volume", {"create", "ws", "32M"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(made.out, "ws\n");
  std::string id = create({"--volume", "ws:/workspace"});
  CommandResult wrote = client("exec", {id, "--", "sh", "-c", "echo hi > /workspace/f"});
  EXPECT_EQ(wrote.exit_code, 0) << wrote.err;
  CommandResult listed = client("volume", {"ls"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_TRUE(listed.out.starts_with("NAME\tSIZE\tUSED\tATTACHED\n")) << listed.out;
  EXPECT_NE(listed.out.find("ws\t33554432\t"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find(id + ":/workspace"), std::string::npos) << listed.out;
  CommandResult busy = client("volume", {"rm", "ws"});
  EXPECT_EQ(busy.exit_code, 125);
  EXPECT_TRUE(busy.err.starts_with("hutch: volume_busy: ")) << busy.err;
  ASSERT_EQ(client("rm", {id}).exit_code, 0);
  std::string reader = create({"--volume", "ws:/w:ro"});
  CommandResult read = client("exec", {reader, "--", "cat", "/w/f"});
  EXPECT_EQ(read.out, "hi\n") << read.err;
  ASSERT_EQ(client("rm", {reader}).exit_code, 0);
  // The teardown of `rm` without wait may still hold it for a moment.
  for (int i = 0; i < 100 && client("volume", {"rm", "ws"}).exit_code != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CommandResult none = client("volume", {"ls", "--json"});
  EXPECT_EQ(json::parse(none.out), json::array()) << none.out;
}

TEST_F(ClientTest, ExecStreamsBothStreamsAndPropagatesTheExitCode) {
  std::string id = create({"--env", "FROM_CREATE=c"});
  CommandResult ran =
      client("exec", {"--env", "FROM_EXEC=e", id, "--", "sh", "-c",
                      "echo out $FROM_CREATE $FROM_EXEC; echo err >&2; pwd; exit 7"});
  EXPECT_EQ(ran.exit_code, 7) << ran.err;
  EXPECT_EQ(ran.out, "out c e\n/\n");
  EXPECT_EQ(ran.err, "err\n");

  CommandResult workdir = client("exec", {"--workdir", "/tmp", id, "--", "pwd"});
  EXPECT_EQ(workdir.exit_code, 0) << workdir.err;
  EXPECT_EQ(workdir.out, "/tmp\n");

  CommandOptions input;
  input.stdin_data = "hello\nworld\n";
  CommandResult piped = client("exec", {"-i", id, "--", "tr", "a-z", "A-Z"}, input);
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.out, "HELLO\nWORLD\n");

  CommandResult buffered = client("exec", {"--json", id, "--", "sh", "-c", "echo a; exit 3"});
  EXPECT_EQ(buffered.exit_code, 3) << buffered.err;
  json result = json::parse(buffered.out);
  EXPECT_EQ(result["stdout"], "a\n");
  EXPECT_EQ(result["exit_code"], 3);
  EXPECT_EQ(result["timed_out"], false);

  CommandResult slow = client("exec", {"--timeout", "500ms", id, "--", "sleep", "30"});
  EXPECT_EQ(slow.exit_code, 124) << slow.err;
  EXPECT_LT(slow.elapsed, std::chrono::seconds(10));

  CommandResult missing = client("exec", {"nosuchsandbox", "--", "true"});
  EXPECT_EQ(missing.exit_code, 125);
  EXPECT_TRUE(missing.err.starts_with("hutch: sandbox_not_found: ")) << missing.err;
  EXPECT_EQ(client("rm", {id}).exit_code, 0);
}

TEST_F(ClientTest, StreamedOutputArrivesBeforeTheCommandEnds) {
  std::string id = create();
  std::string command = std::string(HUTCH_BINARY) + " exec --socket " + socket_ + " " + id +
                        " -- sh -c 'echo first; sleep 3; echo second'";
  auto start = std::chrono::steady_clock::now();
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char line[64] = {};
  ASSERT_NE(std::fgets(line, sizeof line, pipe), nullptr);
  auto first = std::chrono::steady_clock::now() - start;
  EXPECT_STREQ(line, "first\n");
  EXPECT_LT(first, std::chrono::milliseconds(2500))
      << "the first line waited for the command's end";
  ASSERT_NE(std::fgets(line, sizeof line, pipe), nullptr);
  EXPECT_STREQ(line, "second\n");
  int status = ::pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(client("rm", {id}).exit_code, 0);
}

TEST_F(ClientTest, CopyRoundTripsABinaryFileByteForByteAndKeepsItsMode) {
  std::string id = create();
  std::string data;
  std::mt19937 random(42);
  for (int i = 0; i < 3 * 1024 * 1024 + 17; ++i) data += static_cast<char>(random() & 0xFF);
  for (int i = 0; i < 256; ++i) data += static_cast<char>(i);
  std::string source = temp_.path() + "/blob.bin";
  write_whole(source, data);
  ASSERT_EQ(::chmod(source.c_str(), 0751), 0);

  CommandResult up = client("cp", {source, id + ":/work/dir/"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  CommandResult stat = client("exec", {id, "--", "stat", "-c", "%a %s", "/work/dir/blob.bin"});
  EXPECT_EQ(stat.out, "751 " + std::to_string(data.size()) + "\n") << stat.err;

  std::string back = temp_.path() + "/back.bin";
  CommandResult down = client("cp", {id + ":/work/dir/blob.bin", back});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_TRUE(read_whole(back) == data) << "the downloaded file differs";
  // Into a directory: the sandbox file's name; no temp file left beside it.
  std::string dir = temp_.path() + "/into";
  std::filesystem::create_directory(dir);
  ASSERT_EQ(client("cp", {id + ":/work/dir/blob.bin", dir}).exit_code, 0);
  EXPECT_TRUE(read_whole(dir + "/blob.bin") == data);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);

  // stdin and stdout as the host side.
  std::string text = std::string("line\n\0binary\xff", 13);
  CommandOptions input;
  input.stdin_data = text;
  CommandResult in = client("cp", {"-", id + ":/tmp/piped"}, input);
  ASSERT_EQ(in.exit_code, 0) << in.err;
  CommandResult out = client("cp", {id + ":/tmp/piped", "-"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(out.out, text);

  CommandResult missing = client("cp", {id + ":/no/such/file", temp_.path() + "/x"});
  EXPECT_EQ(missing.exit_code, 125);
  EXPECT_TRUE(missing.err.starts_with("hutch: ")) << missing.err;
  EXPECT_FALSE(std::filesystem::exists(temp_.path() + "/x"));
  for (const auto& entry : std::filesystem::directory_iterator(temp_.path()))
    EXPECT_FALSE(entry.path().filename().string().starts_with(".")) << "left behind: " << entry;
  CommandResult neither = client("cp", {source, back});
  EXPECT_EQ(neither.exit_code, 125);
  EXPECT_NE(neither.err.find("ID:/path"), std::string::npos) << neither.err;
  EXPECT_EQ(client("rm", {id}).exit_code, 0);
}

TEST_F(ClientTest, BackgroundExecAndItsOutputFollowedToTheEnd) {
  std::string id = create();
  CommandResult started =
      client("exec", {"-d", id, "--", "sh", "-c", "echo one; echo oops >&2; sleep 0.5; echo two"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  std::string pid = started.out.substr(0, started.out.find('\n'));
  ASSERT_FALSE(pid.empty());
  ASSERT_EQ(pid.find_first_not_of("0123456789"), std::string::npos) << pid;

  CommandResult followed = client("logs", {id, pid, "-f"});
  EXPECT_EQ(followed.exit_code, 0) << followed.err;
  EXPECT_EQ(followed.out, "one\ntwo\n");
  CommandResult errors = client("logs", {id, pid, "--stream", "stderr"});
  EXPECT_EQ(errors.exit_code, 0);
  EXPECT_EQ(errors.err, "oops\n");

  CommandResult events = client("logs", {id});
  EXPECT_EQ(events.exit_code, 0) << events.err;
  EXPECT_NE(events.out.find("process_started"), std::string::npos) << events.out;

  CommandResult no_process = client("logs", {id, "999999"});
  EXPECT_EQ(no_process.exit_code, 125);
  EXPECT_TRUE(no_process.err.starts_with("hutch: process_not_found: ")) << no_process.err;
  EXPECT_EQ(client("rm", {id}).exit_code, 0);
}

TEST_F(ClientTest, PauseAndResume) {
  std::string id = create();
  CommandResult paused = client("pause", {id});
  ASSERT_EQ(paused.exit_code, 0) << paused.err;
  CommandResult listed = client("ls", {});
  EXPECT_NE(listed.out.find("paused"), std::string::npos) << listed.out;
  CommandResult refused = client("exec", {id, "--", "true"});
  EXPECT_EQ(refused.exit_code, 125);
  EXPECT_TRUE(refused.err.starts_with("hutch: sandbox_paused: ")) << refused.err;
  ASSERT_EQ(client("resume", {id}).exit_code, 0);
  EXPECT_EQ(client("exec", {id, "--", "true"}).exit_code, 0);
  EXPECT_EQ(client("rm", {id}).exit_code, 0);
}

TEST_F(ClientTest, SocketFromTheEnvironment) {
  CommandOptions options;
  options.env = {"PATH=/usr/bin:/bin", "HUTCH_SOCKET=" + socket_};
  CommandResult listed = hutch({"ls"}, options);
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_TRUE(listed.out.starts_with("ID ")) << listed.out;
}

TEST_F(ClientTest, TcpWithABearerToken) {
  stop_daemon();
  std::string token = temp_.path() + "/token";
  write_whole(token, "0123456789abcdef0123456789abcdef\n");
  int port = free_tcp_port();
  start_daemon({"--listen", "127.0.0.1:" + std::to_string(port), "--token-file", token});
  std::string url = "http://127.0.0.1:" + std::to_string(port);

  CommandResult listed = hutch({"ls", "--url", url, "--token-file", token});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  CommandResult anonymous = hutch({"ls", "--url", url});
  EXPECT_EQ(anonymous.exit_code, 125);
  EXPECT_TRUE(anonymous.err.starts_with("hutch: ")) << anonymous.err;
  EXPECT_EQ(anonymous.err.find("cannot reach"), std::string::npos) << anonymous.err;
}

TEST_F(ClientTest, UnreachableDaemonNamesTheSocketAndTheReason) {
  std::string nowhere = temp_.path() + "/nowhere.sock";
  CommandResult listed = hutch({"ls", "--socket", nowhere});
  EXPECT_EQ(listed.exit_code, 125);
  EXPECT_EQ(listed.err,
            "hutch: cannot reach hutchd at " + nowhere + ": No such file or directory\n");

  stop_daemon();  // a stale socket file stays behind: nobody listens on it
  if (std::filesystem::exists(socket_)) {
    CommandResult refused = client("ls", {});
    EXPECT_EQ(refused.exit_code, 125);
    EXPECT_EQ(refused.err, "hutch: cannot reach hutchd at " + socket_ + ": Connection refused\n");
  }
}

// No daemon needed below: the forwarding itself and the help text.
TEST(ClientForwarding, HelpMentionsTheClientVerbs) {
  CommandResult help = hutch({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* verb : {"create", "ls", "inspect", "exec", "cp", "rm", "logs", "hutchd"})
    EXPECT_NE(help.out.find(verb), std::string::npos) << verb << " in\n" << help.out;
  CommandResult verb_help = hutch({"exec", "--help"});
  EXPECT_EQ(verb_help.exit_code, 0);
  EXPECT_NE(verb_help.out.find("--background"), std::string::npos) << verb_help.out;
  EXPECT_NE(verb_help.out.find("125"), std::string::npos) << verb_help.out;
}

TEST(ClientForwarding, MissingCompanionIsNamed) {
  TempDir temp;
  std::string lone = temp.path() + "/hutch";
  std::filesystem::copy_file(HUTCH_BINARY, lone);
  ::chmod(lone.c_str(), 0755);
  CommandResult result = run_command({lone, "ls"});
  EXPECT_EQ(result.exit_code, 125);
  EXPECT_NE(result.err.find(temp.path() + "/hutch-client"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("No such file or directory"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace hutch::testing
