#include "daemon/exec.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "daemon/json_codec.h"

namespace hutch::daemon {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kChunk = 64 * 1024;
// After a kill, how long to wait for the shim's exit report before giving up on it.
constexpr auto kKillGrace = std::chrono::seconds(5);
// Draining after the exit: what a command's pipes may still hold, plus what a grandchild that
// keeps writing can add; bounded so such a grandchild cannot hold the request.
constexpr size_t kMaxDrainBytes = 64ull << 20;

Result<std::pair<UniqueFd, UniqueFd>> make_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return sys_error("pipe2", "exec stdio");
  return std::make_pair(UniqueFd(fds[0]), UniqueFd(fds[1]));
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Reads what is available now. Returns false at EOF or error (the pipe is done).
bool read_available(UniqueFd& fd, OutputStream stream, const ExecSession::OutputSink& sink,
                    bool& keep_going, size_t budget) {
  char buffer[kChunk];
  size_t total = 0;
  while (total < budget) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    if (n <= 0) {
      fd.reset();
      return false;
    }
    total += static_cast<size_t>(n);
    if (keep_going && !sink(stream, std::string_view(buffer, static_cast<size_t>(n))))
      keep_going = false;
  }
  return true;
}

}  // namespace

std::string_view CappedBuffer::admit(std::string_view data) {
  uint64_t room = kept < cap ? cap - kept : 0;
  if (data.size() > room) {
    truncated = true;
    data = data.substr(0, room);
  }
  kept += data.size();
  return data;
}

Result<ExecSession> ExecSession::start_on_pty(const LiveSandbox& sandbox, const ExecStart& start) {
  if (start.stdin_data) return plain_error("exec", "a pty takes input as writes, not stdin data");
  ExecRequest request;
  request.argv = start.argv;
  request.env = start.env;
  request.workdir = start.workdir;
  request.survive_disconnect = start.survive_disconnect;
  request.pty = start.pty;
  auto process = sandbox.exec(request);
  if (!process) return std::unexpected(process.error());
  UniqueFd master = process->take_pty_master();
  // No master: the pty could not be made; the session only reports the exit (start_error).
  if (!master)
    return ExecSession(std::move(*process), UniqueFd(), UniqueFd(), UniqueFd(), "", UniqueFd());
  // One open file description, three fds: reading, writing and resizing each close on their own.
  UniqueFd out(fcntl(master.get(), F_DUPFD_CLOEXEC, 0));
  if (!out) return sys_error("fcntl", "F_DUPFD_CLOEXEC of a pty master");
  UniqueFd in(fcntl(master.get(), F_DUPFD_CLOEXEC, 0));
  if (!in) return sys_error("fcntl", "F_DUPFD_CLOEXEC of a pty master");
  set_nonblocking(master.get());
  return ExecSession(std::move(*process), std::move(out), UniqueFd(), std::move(in), "",
                     std::move(master));
}

Result<void> ExecSession::resize(PtySize size) {
  if (!pty_master_) return plain_error("resize", "the process has no pty");
  winsize ws{};
  ws.ws_col = size.cols;
  ws.ws_row = size.rows;
  if (ioctl(pty_master_.get(), TIOCSWINSZ, &ws) != 0)
    return sys_error("ioctl", "TIOCSWINSZ " + std::to_string(size.cols) + "x" +
                                  std::to_string(size.rows) + " on the pty of " +
                                  std::to_string(pid()));
  return {};
}

Result<ExecSession> ExecSession::start(const LiveSandbox& sandbox, const ExecStart& start) {
  if (start.pty) return start_on_pty(sandbox, start);
  auto out = make_pipe();
  if (!out) return std::unexpected(out.error());
  auto err = make_pipe();
  if (!err) return std::unexpected(err.error());
  std::optional<std::pair<UniqueFd, UniqueFd>> in;
  if (start.stdin_data || start.keep_stdin_open) {
    auto pipe = make_pipe();
    if (!pipe) return std::unexpected(pipe.error());
    in = std::move(*pipe);
  }
  ExecRequest request;
  request.argv = start.argv;
  request.env = start.env;
  request.workdir = start.workdir;
  request.stdin_fd = in ? in->first.get() : -1;
  request.stdout_fd = out->second.get();
  request.stderr_fd = err->second.get();
  request.survive_disconnect = start.survive_disconnect;
  auto process = sandbox.exec(request);
  if (!process) return std::unexpected(process.error());
  // Our copies of the command's ends are closed here, so EOF on a pipe means every holder is gone.
  UniqueFd stdin_write;
  if (in) {
    stdin_write = std::move(in->second);
    // A command that does not read its stdin must not block the pump: the write end is
    // non-blocking and a full pipe is retried at the next poll.
    set_nonblocking(stdin_write.get());
  }
  set_nonblocking(out->first.get());
  set_nonblocking(err->first.get());
  return ExecSession(std::move(*process), std::move(out->first), std::move(err->first),
                     std::move(stdin_write), start.stdin_data.value_or(""), UniqueFd());
}

Result<std::optional<ExecExit>> ExecSession::poll_exit() {
  std::lock_guard lock(*process_mutex_);
  return process_.poll_exit();
}

Result<void> ExecSession::signal(int sig) {
  std::lock_guard lock(*process_mutex_);
  return process_.signal(sig);
}

Result<void> ExecSession::kill_tree() {
  std::lock_guard lock(*process_mutex_);
  return process_.kill_tree();
}

ExecOutcome ExecSession::run(std::optional<Clock::time_point> deadline,
                             const OutputSink& on_output) {
  ExecOutcome outcome;
  bool keep_going = true;
  size_t stdin_done = 0;
  // stdin, when there is a pipe, gets stdin_data_ and then EOF ("" means EOF at once).
  const bool feed_stdin = static_cast<bool>(stdin_);
  std::optional<Clock::time_point> kill_deadline;
  std::optional<ExecExit> exit;
  while (!exit) {
    if (stdin_ && feed_stdin && stdin_done == stdin_data_.size()) stdin_.reset();
    std::vector<pollfd> fds;
    fds.push_back({process_.fd(), POLLIN, 0});
    if (stdout_) fds.push_back({stdout_.get(), POLLIN, 0});
    if (stderr_) fds.push_back({stderr_.get(), POLLIN, 0});
    if (stdin_ && feed_stdin) fds.push_back({stdin_.get(), POLLOUT, 0});
    int timeout_ms = -1;
    auto now = Clock::now();
    std::optional<Clock::time_point> wake = kill_deadline ? kill_deadline : deadline;
    if (wake) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
    }
    int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) break;
    now = Clock::now();
    if (kill_deadline && now >= *kill_deadline) break;  // the shim never reported: give up
    if (!kill_deadline && deadline && now >= *deadline) {
      outcome.timed_out = true;
      (void)kill_tree();
      kill_deadline = now + kKillGrace;
      continue;
    }
    if (ready <= 0) continue;
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      if (stdout_ && p.fd == stdout_.get()) {
        read_available(stdout_, OutputStream::kStdout, on_output, keep_going, kChunk * 4);
      } else if (stderr_ && p.fd == stderr_.get()) {
        read_available(stderr_, OutputStream::kStderr, on_output, keep_going, kChunk * 4);
      } else if (stdin_ && p.fd == stdin_.get()) {
        ssize_t n = ::write(stdin_.get(), stdin_data_.data() + stdin_done,
                            std::min<size_t>(stdin_data_.size() - stdin_done, kChunk));
        if (n > 0) {
          stdin_done += static_cast<size_t>(n);
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          stdin_.reset();  // EPIPE: the command closed its stdin
        }
      } else if (p.fd == process_.fd()) {
        auto polled = poll_exit();
        if (!polled) break;
        exit = *polled;
      }
    }
    if (!keep_going && !kill_deadline) {
      outcome.aborted = true;
      (void)kill_tree();
      kill_deadline = Clock::now() + kKillGrace;
    }
  }
  stdin_.reset();
  // Everything the command wrote is in the pipes now; read it without waiting for EOF.
  size_t budget = kMaxDrainBytes;
  for (UniqueFd* fd : {&stdout_, &stderr_}) {
    if (*fd) {
      read_available(*fd, fd == &stdout_ ? OutputStream::kStdout : OutputStream::kStderr, on_output,
                     keep_going, budget);
    }
  }
  outcome.duration = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started_);
  if (exit) {
    outcome.exit_code = exit->exit_code;
    outcome.term_signal = exit->term_signal;
    outcome.start_error = exit->start_error;
  } else {
    outcome.exit_code = 128 + SIGKILL;
    outcome.term_signal = SIGKILL;
  }
  if (outcome.timed_out) outcome.exit_code = 124;
  return outcome;
}

// ---- background processes ----

BackgroundProcess::BackgroundProcess(ExecSession session, std::vector<std::string> argv,
                                     std::string dir, uint64_t cap)
    : session_(std::move(session)),
      pid_(session_.pid()),
      argv_(std::move(argv)),
      dir_(std::move(dir)),
      stdin_(session_.take_stdin()),
      out_cap_(cap),
      err_cap_(cap) {}

Result<std::shared_ptr<BackgroundProcess>> BackgroundProcess::start(const LiveSandbox& sandbox,
                                                                    const ExecStart& start,
                                                                    const std::string& dir,
                                                                    uint64_t cap_bytes,
                                                                    ExitHook on_exit) {
  ExecStart with_stdin = start;
  with_stdin.keep_stdin_open = true;
  with_stdin.stdin_data.reset();
  with_stdin.survive_disconnect = true;
  auto session = ExecSession::start(sandbox, with_stdin);
  if (!session) return std::unexpected(session.error());
  std::shared_ptr<BackgroundProcess> process(
      new BackgroundProcess(std::move(*session), start.argv, dir, cap_bytes));
  process->on_exit_ = std::move(on_exit);
  if (process->has_pty()) process->pty_size_ = start.pty;
  if (start.stdin_data && !start.stdin_data->empty()) {
    auto written = process->write_stdin(*start.stdin_data, false);
    if (!written) return std::unexpected(written.error());
  }
  // Output files are created before the pump starts, so a reader never sees them missing.
  for (OutputStream stream : {OutputStream::kStdout, OutputStream::kStderr}) {
    int fd = ::open(process->output_path(stream).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                    0600);
    if (fd < 0) return sys_error("open", process->output_path(stream));
    ::close(fd);
  }
  std::thread([process] { process->pump(); }).detach();
  return process;
}

std::string BackgroundProcess::output_path(OutputStream stream) const {
  return dir_ + "/proc-" + std::to_string(pid_) +
         (stream == OutputStream::kStdout ? ".stdout" : ".stderr");
}

void BackgroundProcess::pump() {
  UniqueFd out(::open(output_path(OutputStream::kStdout).c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  UniqueFd err(::open(output_path(OutputStream::kStderr).c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  auto sink = [&](OutputStream stream, std::string_view data) {
    std::string_view kept;
    {
      std::lock_guard lock(mutex_);
      kept = (stream == OutputStream::kStdout ? out_cap_ : err_cap_).admit(data);
    }
    int fd = stream == OutputStream::kStdout ? out.get() : err.get();
    while (!kept.empty() && fd >= 0) {
      ssize_t n = ::write(fd, kept.data(), kept.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      kept.remove_prefix(static_cast<size_t>(n));
    }
    changed_.notify_all();  // followers (wait_output)
    return true;
  };
  ExecOutcome outcome = session_.run(std::nullopt, sink);
  {
    std::lock_guard lock(mutex_);
    outcome_ = outcome;
    running_ = false;
    pumped_ = true;
  }
  changed_.notify_all();
  if (on_exit_) on_exit_(status());
}

ProcessStatus BackgroundProcess::status() const {
  std::lock_guard lock(mutex_);
  ProcessStatus status;
  status.pid = pid_;
  status.argv = argv_;
  status.started_at = iso8601(started_at_);
  status.running = running_;
  status.pty = pty_size_;
  if (!running_) {
    status.exit_code = outcome_.exit_code;
    status.term_signal = outcome_.term_signal;
    status.start_error = outcome_.start_error;
    status.duration_ms = outcome_.duration.count() / 1000;
  } else {
    status.duration_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now() - started_at_)
                             .count();
  }
  return status;
}

bool BackgroundProcess::running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

void BackgroundProcess::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !running_; });
}

bool BackgroundProcess::wait_pumped(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return pumped_; });
}

Result<OutputChunk> BackgroundProcess::read_output(OutputStream stream, uint64_t offset,
                                                   uint64_t limit) const {
  OutputChunk chunk;
  uint64_t size;
  bool pumped;
  {
    std::lock_guard lock(mutex_);
    const CappedBuffer& cap = stream == OutputStream::kStdout ? out_cap_ : err_cap_;
    size = cap.kept;
    chunk.truncated = cap.truncated;
    pumped = pumped_;
  }
  chunk.offset = offset;
  if (offset < size) {
    uint64_t want = std::min(limit, size - offset);
    UniqueFd fd(::open(output_path(stream).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return sys_error("open", output_path(stream));
    chunk.data.resize(want);
    ssize_t n = ::pread(fd.get(), chunk.data.data(), want, static_cast<off_t>(offset));
    if (n < 0) return sys_error("pread", output_path(stream));
    chunk.data.resize(static_cast<size_t>(n));
  }
  chunk.next_offset = offset + chunk.data.size();
  chunk.eof = pumped && chunk.next_offset >= size;
  return chunk;
}

void BackgroundProcess::wait_output(OutputStream stream, uint64_t offset,
                                    std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  const CappedBuffer& cap = stream == OutputStream::kStdout ? out_cap_ : err_cap_;
  changed_.wait_for(lock, timeout, [&] { return pumped_ || cap.kept > offset; });
}

Result<void> BackgroundProcess::resize(PtySize size) {
  HUTCH_TRY(session_.resize(size));
  std::lock_guard lock(mutex_);
  pty_size_ = size;
  return {};
}

Result<bool> BackgroundProcess::write_stdin(std::string_view data, bool eof) {
  std::lock_guard lock(stdin_mutex_);
  if (!stdin_) return false;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!data.empty()) {
    ssize_t n = ::write(stdin_.get(), data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return plain_error("stdin", "the process does not read its stdin");
      pollfd p{stdin_.get(), POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
      continue;
    }
    stdin_.reset();  // EPIPE: the process closed its stdin or exited
    return false;
  }
  if (eof) stdin_.reset();
  return true;
}

Result<void> BackgroundProcess::signal(int sig) { return session_.signal(sig); }

Result<void> BackgroundProcess::kill_tree() { return session_.kill_tree(); }

}  // namespace hutch::daemon
