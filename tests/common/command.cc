#include "tests/common/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

namespace hutch::testing {

CommandResult run_command(const std::vector<std::string>& argv, const CommandOptions& options) {
  int out[2], err[2], in[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(in, O_CLOEXEC) != 0)
    abort();
  std::vector<std::string> env =
      options.env.empty() ? std::vector<std::string>{"PATH=/usr/bin:/bin"} : options.env;
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (int fd : options.inherit_fds) fcntl(fd, F_SETFD, 0);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (!options.stdin_data.empty()) {
    (void)!write(in[1], options.stdin_data.data(), options.stdin_data.size());
  }
  close(in[1]);

  CommandResult result;
  bool signalled = !options.signal_after_ms_signal.has_value();
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_streams = 2;
  while (open_streams > 0) {
    int timeout = -1;
    if (!signalled) {
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
      timeout = std::max<int>(0, options.signal_after_ms - static_cast<int>(waited));
    }
    int ready = poll(fds, 2, timeout);
    if (ready == 0 && !signalled) {
      kill(pid, *options.signal_after_ms_signal);
      signalled = true;
      continue;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[65536];
      ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_streams;
      } else {
        (i == 0 ? result.out : result.err).append(buffer, n);
      }
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

CommandResult hutch(const std::vector<std::string>& args, const CommandOptions& options) {
  std::vector<std::string> argv = {HUTCH_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, options);
}

CommandResult hutch_sh(const std::string& script, const std::vector<std::string>& options) {
  std::vector<std::string> args = {"run"};
  args.insert(args.end(), options.begin(), options.end());
  args.insert(args.end(), {"--", "/bin/sh", "-c", script});
  return hutch(args);
}

std::string probe_bind() { return std::string(PROBE_BINARY) + ":/probe"; }

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ignored))
    names.push_back(entry.path().filename().string());
  return names;
}

std::string read_file_or_empty(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buffer[8192];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
  close(fd);
  return n < 0 ? "" : text;
}

std::string last_line(const std::string& out) {
  auto start = out.rfind('\n', out.size() < 2 ? 0 : out.size() - 2);
  return start == std::string::npos ? out : out.substr(start + 1);
}

std::string line_value(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
  }
  return "<missing " + key + ">";
}

BackgroundCommand::BackgroundCommand(std::vector<std::string> argv,
                                     const std::string& stderr_path) {
  std::vector<char*> pointers;
  for (std::string& arg : argv) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (posix_spawn(&pid_, pointers[0], &actions, nullptr, pointers.data(), environ) != 0) pid_ = -1;
  posix_spawn_file_actions_destroy(&actions);
}

BackgroundCommand::~BackgroundCommand() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

}  // namespace hutch::testing
