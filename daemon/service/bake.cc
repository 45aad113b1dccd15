#include "daemon/service/bake.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "runtime/base/unique_fd.h"

extern char** environ;

namespace hutch::daemon::service {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// A result is a digest or an error message: anything longer is not one.
constexpr size_t kMaxResult = 64 * 1024;

template <class T>
Result<T> field(const json& doc, const char* name) {
  auto it = doc.find(name);
  if (it == doc.end()) return plain_error("bake wire", std::string("no field ") + name);
  if constexpr (std::is_same_v<T, std::string>) {
    if (!it->is_string()) return plain_error("bake wire", std::string(name) + " is not a string");
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return plain_error("bake wire", std::string(name) + " is not a bool");
  } else {
    if (!it->is_array()) return plain_error("bake wire", std::string(name) + " is not an array");
    for (const json& item : *it) {
      if (!item.is_string()) return plain_error("bake wire", std::string(name) + ": not strings");
    }
  }
  return it->get<T>();
}

Result<json> parse_object(std::string_view text) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return plain_error("bake wire", "not a JSON object");
  return doc;
}

Result<void> send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t sent = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0) return sys_error("send", "bake request");
    data.remove_prefix(static_cast<size_t>(sent));
  }
  return {};
}

}  // namespace

std::string encode_bake_job(const BakeJob& job) {
  return json{{"state_dir", job.state_dir},
              {"recipe_dir", job.recipe_dir},
              {"name", job.name},
              {"base", job.base},
              {"env", job.env},
              {"net", job.net}}
      .dump();
}

Result<BakeJob> decode_bake_job(std::string_view text) {
  json doc = HUTCH_TRY(parse_object(text));
  BakeJob job;
  job.state_dir = HUTCH_TRY(field<std::string>(doc, "state_dir"));
  job.recipe_dir = HUTCH_TRY(field<std::string>(doc, "recipe_dir"));
  job.name = HUTCH_TRY(field<std::string>(doc, "name"));
  job.base = HUTCH_TRY(field<std::string>(doc, "base"));
  job.env = HUTCH_TRY(field<std::vector<std::string>>(doc, "env"));
  job.net = HUTCH_TRY(field<std::string>(doc, "net"));
  if (job.net != "loopback" && job.net != "none" && job.net != "host_owned")
    return plain_error("bake request", "net must be loopback, none or host_owned");
  return job;
}

std::string encode_bake_result(const BakeResult& result) {
  return json{{"ok", result.ok},
              {"digest", result.digest},
              {"cached", result.cached},
              {"error", result.error}}
      .dump();
}

Result<BakeResult> decode_bake_result(std::string_view text) {
  json doc = HUTCH_TRY(parse_object(text));
  BakeResult result;
  result.ok = HUTCH_TRY(field<bool>(doc, "ok"));
  result.digest = HUTCH_TRY(field<std::string>(doc, "digest"));
  result.cached = HUTCH_TRY(field<bool>(doc, "cached"));
  result.error = HUTCH_TRY(field<std::string>(doc, "error"));
  return result;
}

Result<BakeRun> run_bake_helper(const std::string& helper, const BakeJob& job,
                                std::chrono::seconds timeout, int netns_fd) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return sys_error("pipe2", "bake log");
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  int socket_fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, socket_fds) != 0)
    return sys_error("socketpair", "bake request");
  UniqueFd ours(socket_fds[0]);
  UniqueFd theirs(socket_fds[1]);
  if (theirs.get() <= kBakeNetnsFd) {
    // dup2 onto itself would keep O_CLOEXEC, and the helper would start without its socket; at
    // kBakeNetnsFd the second dup2 would replace it.
    theirs = UniqueFd(::fcntl(theirs.get(), F_DUPFD_CLOEXEC, kBakeNetnsFd + 1));
    if (!theirs) return sys_error("fcntl", "F_DUPFD_CLOEXEC of the bake socket");
  }
  // Above both targets for the same reasons (the caller's fd may be 3 or 4).
  UniqueFd netns;
  if (netns_fd >= 0) {
    netns.reset(::fcntl(netns_fd, F_DUPFD_CLOEXEC, kBakeNetnsFd + 1));
    if (!netns) return sys_error("fcntl", "F_DUPFD_CLOEXEC of the bake's network namespace");
  }

  std::vector<char*> argv = {const_cast<char*>(helper.c_str()), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // dup2 clears O_CLOEXEC on the copies: the originals close at exec.
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&actions, theirs.get(), kBakeSocketFd);
  if (netns) posix_spawn_file_actions_adddup2(&actions, netns.get(), kBakeNetnsFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  // hutchd blocks its stop signals for sigwait: the bake must not inherit that mask.
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, helper.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return sys_error("posix_spawn", helper, rc);
  write_end.reset();
  theirs.reset();
  netns.reset();

  BakeRun run;
  // The helper reads the job at once, so this does not wait on it; a helper that died early
  // makes it fail, and the run below reports how it ended.
  if (send_all(ours.get(), encode_bake_job(job))) ::shutdown(ours.get(), SHUT_WR);
  std::string answer;
  auto deadline = Clock::now() + timeout;
  char buffer[16384];
  bool log_open = true;
  bool answer_open = true;
  while (log_open || answer_open) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 && !run.timed_out) {
      ::kill(pid, SIGKILL);  // its sandbox dies with it (parent-death signal)
      run.timed_out = true;
    }
    pollfd ready[2] = {{log_open ? read_end.get() : -1, POLLIN, 0},
                       {answer_open ? ours.get() : -1, POLLIN, 0}};
    int n = ::poll(ready, 2,
                   run.timed_out ? 1000 : static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    if (ready[0].revents != 0) {
      ssize_t got = ::read(read_end.get(), buffer, sizeof buffer);
      if (got == 0 || (got < 0 && errno != EINTR)) {
        log_open = false;  // EOF: the helper and everything it started closed the pipe
      } else if (got > 0) {
        size_t room = kMaxBakeLog - run.log.size();
        run.log.append(buffer, std::min(room, static_cast<size_t>(got)));
        if (static_cast<size_t>(got) > room) run.truncated = true;
      }
    }
    if (ready[1].revents != 0) {
      ssize_t got = ::read(ours.get(), buffer, sizeof buffer);
      if (got == 0 || (got < 0 && errno != EINTR)) {
        answer_open = false;
      } else if (got > 0) {
        answer.append(buffer, std::min(kMaxResult - answer.size(), static_cast<size_t>(got)));
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (!run.timed_out && !answer.empty()) {
    if (auto result = decode_bake_result(answer)) run.result = std::move(*result);
  }
  return run;
}

}  // namespace hutch::daemon::service
