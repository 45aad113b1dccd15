// hutch shell: an interactive terminal in a sandbox. A pty is started through hutchd (POST
// .../ptys) at this terminal's size; this terminal goes raw (restored on every exit path), its
// keystrokes are posted as input, SIGWINCH becomes a resize, and the pty's followed output is
// copied to stdout until the process exits, whose status is hutch's.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "cli/client/verbs.h"

namespace hutch::client {
namespace {

// The self-pipe of SIGWINCH and of the output thread's end: the input loop polls it.
int wake_pipe[2] = {-1, -1};

void on_sigwinch(int) {
  int saved = errno;
  (void)!write(wake_pipe[1], "w", 1);
  errno = saved;
}

// This terminal in raw mode for the object's lifetime: bytes reach the pty unchanged (^C
// included: the sandbox's terminal turns it into SIGINT there).
class RawTerminal {
 public:
  RawTerminal() {
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    cfmakeraw(&raw);
    active_ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  termios saved_{};
  bool active_ = false;
};

// This terminal's size, 80x24 when stdin is not one.
nlohmann::json terminal_size() {
  winsize ws{};
  if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0 || ws.ws_row == 0)
    return {{"cols", 80}, {"rows", 24}};
  return {{"cols", ws.ws_col}, {"rows", ws.ws_row}};
}

// The pty's output, followed from offset 0, to stdout. The exit status from the last line, or
// an error.
Result<int> copy_output(const Endpoint& endpoint, const std::string& path) {
  Connection daemon(endpoint);
  LineSplitter lines;
  std::optional<int> status;
  std::optional<Error> bad;
  auto followed = daemon.get_streaming(path, [&](std::string_view data) {
    for (const std::string& line : lines.feed(data)) {
      if (line.empty()) continue;  // keepalive
      nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
      if (!event.is_object()) {
        bad = Error{"hutchd", "sent a stream line that is not a JSON object", 0};
        return false;
      }
      if (auto it = event.find("data"); it != event.end() && it->is_string()) {
        auto bytes = base64_decode(it->get_ref<const std::string&>());
        if (!bytes) {
          bad = Error{"hutchd", "sent output that is not base64", 0};
          return false;
        }
        write_all(stdout, *bytes);
      }
      if (auto it = event.find("exit_code"); it != event.end() && it->is_number_integer())
        status = it->get<int>();
    }
    return true;
  });
  if (bad) return std::unexpected(*bad);
  if (!followed) return std::unexpected(followed.error());
  if (!status) return plain_error("hutchd", "the pty's output ended before its exit status");
  return *status;
}

}  // namespace

int open_shell(const Endpoint& endpoint, const std::string& id,
               const std::vector<std::string>& argv) {
  nlohmann::json body = terminal_size();
  if (!argv.empty()) body["argv"] = argv;
  auto created_path = sandbox_path(id, "/ptys");
  if (!created_path) return fail(created_path.error());
  Connection daemon(endpoint);
  auto created = daemon.call("POST", *created_path, body);
  if (!created) return fail(created.error());
  std::string base = *created_path + "/" + std::to_string(created->value("pid", 0));

  if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    return fail(Error{"pipe2", "the shell's wake pipe", errno});
  struct sigaction winch {};
  winch.sa_handler = on_sigwinch;
  sigaction(SIGWINCH, &winch, nullptr);

  std::atomic<bool> done{false};
  Result<int> outcome = 0;
  std::optional<Error> input_error;
  {
    RawTerminal raw;
    std::thread output([&] {
      outcome = copy_output(endpoint, base + "/output?follow=1&encoding=base64");
      done = true;
      (void)!write(wake_pipe[1], "e", 1);
    });
    bool stdin_open = true;
    while (!done && !input_error) {
      pollfd fds[2] = {{wake_pipe[0], POLLIN, 0}, {stdin_open ? STDIN_FILENO : -1, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) continue;
      if (fds[0].revents & POLLIN) {
        char wakes[64];
        bool resized = false;
        for (ssize_t n; (n = read(wake_pipe[0], wakes, sizeof wakes)) > 0;)
          resized = resized || std::string_view(wakes, static_cast<size_t>(n)).find('w') !=
                                   std::string_view::npos;
        if (resized && !done) {
          // A resize after the exit is a conflict, not this shell's error.
          (void)daemon.call("POST", base + "/resize", terminal_size());
        }
      }
      if (fds[1].revents != 0) {
        char buffer[4096];
        ssize_t n = read(STDIN_FILENO, buffer, sizeof buffer);
        if (n <= 0) {
          // End of this stdin (a pipe): ^D to the pty, whose process then sees its end of input.
          stdin_open = false;
          if (!done) (void)daemon.call("POST", base + "/input", nlohmann::json{{"data", "\x04"}});
          continue;
        }
        auto sent = daemon.call(
            "POST", base + "/input",
            nlohmann::json{
                {"data_base64", base64_encode(std::string_view(buffer, static_cast<size_t>(n)))}});
        // The process may have exited meanwhile: the output thread reports its status.
        if (!sent && sent.error().step != "conflict") input_error = sent.error();
      }
    }
    if (input_error) (void)daemon.call("DELETE", base);  // its exit ends the output thread
    output.join();
  }  // the terminal is restored before any message
  signal(SIGWINCH, SIG_DFL);
  close(wake_pipe[0]);
  close(wake_pipe[1]);
  if (input_error) return fail(*input_error);
  if (!outcome) return fail(outcome.error());
  return *outcome;
}

}  // namespace hutch::client
