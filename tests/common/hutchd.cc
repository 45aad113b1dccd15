#include "tests/common/hutchd.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "tests/common/command.h"
#include "tests/common/wait.h"

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
  bool exited = false;
  const bool answered = wait_until(
      [&] {
        int status;
        exited = waitpid(pid_, &status, WNOHANG) == pid_;
        return exited || get("/v1/health").status == 200;
      },
      std::chrono::seconds(10), "hutchd to answer /v1/health", std::chrono::milliseconds(20));
  if (exited) pid_ = -1;
  return answered && !exited;
}

int Hutchd::stop(int sig) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, sig);
  int status = 0;
  if (!wait_until([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, std::chrono::seconds(20),
                  "hutchd to exit")) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void Hutchd::delete_sandboxes_and_stop() {
  if (pid_ <= 0) return;
  // The reply is named: a range-for over a temporary's member outlives the temporary.
  Reply listed = get("/v1/sandboxes");
  for (const json& sandbox : listed.body["sandboxes"])
    del("/v1/sandboxes/" + sandbox["id"].get<std::string>() + "?wait=true");
  stop(SIGTERM);
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

}  // namespace hutch::testing
