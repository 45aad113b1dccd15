#include "tests/daemon/daemon_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "tests/common/command.h"

extern char** environ;

namespace hutch::testing {

Hutchd::Hutchd(std::string dir, std::vector<std::string> extra_args)
    : dir_(std::move(dir)),
      socket_(dir_ + "/d.sock"),
      state_dir_(dir_ + "/state"),
      log_path_(dir_ + "/hutchd.log"),
      extra_args_(std::move(extra_args)) {
  // A request the daemon refuses before reading its body closes the connection under the
  // client's feet: that must be an error reply, not SIGPIPE killing the test binary.
  ::signal(SIGPIPE, SIG_IGN);
}

Hutchd::~Hutchd() {
  if (pid_ > 0) stop(SIGTERM);
}

bool Hutchd::start() {
  std::vector<std::string> args = {HUTCHD_BINARY, "--socket",    socket_, "--state-dir",
                                   state_dir_,    "--log-level", "debug"};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_path_.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  int rc = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    pid_ = -1;
    return false;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    if (get("/v1/health").status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

int Hutchd::stop(int sig) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Hutchd::log() const { return read_file_or_empty(log_path_); }

std::unique_ptr<httplib::Client> Hutchd::client(int read_timeout_seconds) const {
  auto client = std::make_unique<httplib::Client>(socket_);
  client->set_address_family(AF_UNIX);
  client->set_read_timeout(read_timeout_seconds, 0);
  client->set_write_timeout(60, 0);
  return client;
}

namespace {

Hutchd::Reply to_reply(const httplib::Result& result) {
  Hutchd::Reply reply;
  if (!result) return reply;
  reply.status = result->status;
  reply.raw = result->body;
  reply.body = json::parse(result->body, nullptr, false);
  if (reply.body.is_discarded()) reply.body = nullptr;
  return reply;
}

}  // namespace

Hutchd::Reply Hutchd::get(const std::string& path) const { return to_reply(client()->Get(path)); }

Hutchd::Reply Hutchd::post(const std::string& path, const json& body) const {
  return to_reply(client()->Post(path, body.dump(), "application/json"));
}

Hutchd::Reply Hutchd::post_raw(const std::string& path, const std::string& body) const {
  return to_reply(client()->Post(path, body, "application/json"));
}

Hutchd::Reply Hutchd::del(const std::string& path) const {
  return to_reply(client()->Delete(path));
}

Hutchd::Reply Hutchd::put(const std::string& path, const std::string& body) const {
  return to_reply(client()->Put(path, body, "application/octet-stream"));
}

void DaemonTest::SetUp() {
  HUTCH_REQUIRE_ROOT();
  ASSERT_FALSE(temp_.path().empty());
  daemon_ = std::make_unique<Hutchd>(temp_.path(), std::vector<std::string>{"--destroy-on-exit"});
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
}

void DaemonTest::TearDown() {
  if (!daemon_) return;
  if (daemon_->pid() > 0) {
    auto list = daemon_->get("/v1/sandboxes");
    if (list.status == 200) {
      for (const json& sandbox : list.body["sandboxes"])
        EXPECT_EQ(daemon_->del("/v1/sandboxes/" + sandbox["id"].get<std::string>()).status, 204);
    }
    EXPECT_EQ(daemon_->stop(SIGTERM), 0) << daemon_->log();
  }
  if (HasFailure()) std::fprintf(stderr, "--- hutchd log ---\n%s\n", daemon_->log().c_str());
  daemon_.reset();
}

std::string DaemonTest::create(const json& body) {
  auto reply = daemon_->post("/v1/sandboxes", body);
  EXPECT_EQ(reply.status, 201) << reply.raw;
  if (reply.status != 201) return "";
  return reply.body["id"].get<std::string>();
}

json DaemonTest::exec(const std::string& id, const json& body) {
  auto reply = daemon_->post("/v1/sandboxes/" + id + "/exec", body);
  EXPECT_EQ(reply.status, 200) << reply.raw;
  return reply.body;
}

std::string error_code(const Hutchd::Reply& reply) {
  if (!reply.body.is_object() || !reply.body.contains("error")) return "";
  return reply.body["error"].value("code", "");
}

int count_host_processes_with(const std::string& marker) {
  int count = 0;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ignored)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_file_or_empty(entry.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) != std::string::npos) ++count;
  }
  return count;
}

}  // namespace hutch::testing
