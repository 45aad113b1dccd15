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
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "daemon/json_codec.h"
#include "daemon/service/sandbox_record.h"

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

ExecSession::Parts ExecSession::release() && {
  return Parts{std::move(process_), std::move(stdout_), std::move(stderr_), std::move(stdin_),
               std::move(pty_master_)};
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

namespace {

constexpr size_t kMaxExitFileBytes = 4096;

int64_t unix_ms(std::chrono::system_clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
}

Result<UniqueFd> create_file(const std::string& path, int flags) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | flags, 0600));
  if (!fd) return sys_error("open", path);
  return fd;
}

// A small file's text ("" when missing or unreadable: an exit not recorded yet).
std::string read_small_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return "";
  std::string text(kMaxExitFileBytes, '\0');
  ssize_t n = ::pread(fd.get(), text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return text;
}

KeptExit killed_exit() {
  KeptExit exit;
  exit.exit_code = 128 + SIGKILL;
  exit.term_signal = SIGKILL;
  exit.ended_unix_ms = unix_ms(std::chrono::system_clock::now());
  return exit;
}

}  // namespace

BackgroundProcess::BackgroundProcess(const LiveSandbox& sandbox, Record record, std::string dir)
    : sandbox_(&sandbox), pid_(record.pid), dir_(std::move(dir)), record_(std::move(record)) {}

std::string BackgroundProcess::path(std::string_view suffix) const {
  return dir_ + "/proc-" + std::to_string(pid_) + std::string(suffix);
}

Result<void> BackgroundProcess::write_record(const std::string& dir, const Record& record,
                                             bool replace) {
  nlohmann::json j = {{"pid", record.pid},
                      {"argv", record.argv},
                      {"started_unix_ms", unix_ms(record.started_at)},
                      {"cap_bytes", record.cap}};
  if (record.pty) j["pty"] = {{"cols", record.pty->cols}, {"rows", record.pty->rows}};
  const std::string name = "proc-" + std::to_string(record.pid) + ".json";
  const std::string text = j.dump() + "\n";
  if (replace) return write_atomically(dir, name, text);
  // A new process's record, written in place: a hutchd that dies mid-write leaves a record that
  // adopt() skips, as it would find none had the write been atomic; the temporary file and the
  // rename were two of the start's five directory operations.
  auto file = create_file(dir + "/" + name, 0);
  if (!file) return std::unexpected(file.error());
  if (::write(file->get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return sys_error("write", dir + "/" + name);
  return {};
}

std::optional<BackgroundProcess::Record> BackgroundProcess::read_record(const std::string& path) {
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    Record record;
    record.pid = j.at("pid").get<pid_t>();
    record.argv = j.at("argv").get<std::vector<std::string>>();
    record.started_at = std::chrono::system_clock::time_point(
        std::chrono::milliseconds(j.at("started_unix_ms").get<int64_t>()));
    record.cap = j.at("cap_bytes").get<uint64_t>();
    if (j.contains("pty"))
      record.pty =
          PtySize{j["pty"].at("cols").get<uint16_t>(), j["pty"].at("rows").get<uint16_t>()};
    if (record.pid <= 0) return std::nullopt;
    return record;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

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
  ExecSession::Parts parts = std::move(*session).release();
  Record record;
  record.pid = parts.process.pid();
  record.argv = start.argv;
  record.started_at = std::chrono::system_clock::now();
  record.cap = cap_bytes;
  if (parts.pty_master) record.pty = start.pty;
  std::shared_ptr<BackgroundProcess> process(new BackgroundProcess(sandbox, record, dir));
  // Until the keeper has it, a failure here must not leave the command running unseen.
  auto abandon = [&](const Error& error) -> Result<std::shared_ptr<BackgroundProcess>> {
    (void)parts.process.kill_tree();
    for (const char* suffix : {".stdout", ".stderr", ".exit", ".json"})
      ::unlink(process->path(suffix).c_str());
    return std::unexpected(error);
  };
  // The files exist before the keeper writes to them and before any reader looks.
  auto out_file = create_file(process->path(".stdout"), O_APPEND);
  if (!out_file) return abandon(out_file.error());
  auto err_file = create_file(process->path(".stderr"), O_APPEND);
  if (!err_file) return abandon(err_file.error());
  auto exit_file = create_file(process->path(".exit"), 0);
  if (!exit_file) return abandon(exit_file.error());
  if (auto written = write_record(dir, record, false); !written) return abandon(written.error());
  // A pty that could not be made has no output: an empty pipe stands in, so the keeper only
  // waits for the exit that says why.
  UniqueFd output = std::move(parts.out);
  if (!output) {
    auto empty = make_pipe();
    if (!empty) return abandon(empty.error());
    output = std::move(empty->first);
  }
  const bool pty = static_cast<bool>(parts.pty_master);
  KeepRequest keep;
  keep.pid = record.pid;
  keep.pty = pty;
  keep.cap_bytes = cap_bytes;
  keep.connection = parts.process.fd();
  keep.output = output.get();
  keep.error_output = parts.err ? parts.err.get() : -1;
  keep.input = !pty && parts.in ? parts.in.get() : -1;
  keep.stdout_file = out_file->get();
  keep.stderr_file = err_file->get();
  keep.exit_file = exit_file->get();
  // The first start in a sandbox waits for the supervisor's answer, so that an older supervisor
  // (one that keeps no processes) is refused here, as a 409. Once one keep has succeeded, the
  // reply is read on the process's own thread: the start does not wait for the supervisor to be
  // scheduled, and a refusal there still kills the command (lost()).
  UniqueFd doorbell;
  UniqueFd pending;
  if (sandbox.keeper_confirmed()) {
    auto sent = sandbox.send_keep(keep);
    if (!sent) return abandon(sent.error());
    pending = std::move(*sent);
  } else {
    auto kept = sandbox.keep_process(keep);
    if (!kept) return abandon(kept.error());
    doorbell = std::move(*kept);
  }
  process->connection_.emplace(std::move(parts.process));
  process->pty_master_ = std::move(parts.pty_master);
  process->stdin_ = std::move(parts.in);
  process->stdin_is_pipe_ = !pty;
  process->on_exit_ = std::move(on_exit);
  if (start.stdin_data && !start.stdin_data->empty()) {
    auto written = process->write_stdin(*start.stdin_data, false);
    if (!written) return std::unexpected(written.error());
  }
  std::thread([process, bell = std::move(doorbell), pending = std::move(pending)]() mutable {
    if (pending) {
      auto kept = LiveSandbox::await_kept(pending.get());
      if (!kept) return process->lost(kept.error());
      bell = std::move(*kept);
    }
    process->follow(std::move(bell));
  }).detach();
  return process;
}

std::vector<std::shared_ptr<BackgroundProcess>> BackgroundProcess::adopt(
    const LiveSandbox& sandbox, const std::string& dir, const ExitHook& on_exit,
    std::vector<std::string>& warnings) {
  // The supervisor's list first, the exit files after: a process missing from the list has its
  // exit file complete (the keeper writes it before it drops the process).
  std::map<pid_t, KeptHandles> kept;
  if (auto listed = sandbox.kept_processes(); !listed) {
    warnings.push_back("background processes not re-attached: " + listed.error().message());
  } else {
    for (KeptHandles& handles : *listed) kept.emplace(handles.pid, std::move(handles));
  }
  std::vector<std::shared_ptr<BackgroundProcess>> adopted;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ignored)) {
    const std::string name = entry.path().filename();
    if (!name.starts_with("proc-") || !name.ends_with(".json")) continue;
    auto record = read_record(entry.path());
    if (!record) {
      warnings.push_back(name + ": not a process record");
      continue;
    }
    std::shared_ptr<BackgroundProcess> process(new BackgroundProcess(sandbox, *record, dir));
    process->on_exit_ = on_exit;
    process->out_size_ = process->file_size(OutputStream::kStdout);
    process->err_size_ = process->file_size(OutputStream::kStderr);
    auto exit = parse_kept_exit(read_small_file(process->path(".exit")));
    auto handles = kept.find(record->pid);
    if (exit || handles == kept.end()) {
      if (!exit) {
        warnings.push_back(
            "process " + std::to_string(record->pid) +
            ": neither kept by the supervisor nor an exit recorded; reported killed");
        exit = killed_exit();
        if (auto file = create_file(process->path(".exit"), 0)) {
          const std::string text = format_kept_exit(*exit);
          (void)!::write(file->get(), text.data(), text.size());
        }
      }
      process->running_ = false;
      process->exit_ = std::move(exit);
      adopted.push_back(std::move(process));
      continue;
    }
    KeptHandles& live = handles->second;
    process->connection_.emplace(std::move(live.connection), record->pid);
    if (live.pty) {
      if (live.input) {
        process->pty_master_.reset(fcntl(live.input.get(), F_DUPFD_CLOEXEC, 0));
        winsize size{};
        if (ioctl(live.input.get(), TIOCGWINSZ, &size) == 0 && size.ws_col != 0)
          process->record_.pty = PtySize{size.ws_col, size.ws_row};
      }
    } else {
      process->stdin_is_pipe_ = true;
    }
    process->stdin_ = std::move(live.input);
    std::thread([process, bell = std::move(live.doorbell)]() mutable {
      process->follow(std::move(bell));
    }).detach();
    adopted.push_back(std::move(process));
  }
  return adopted;
}

uint64_t BackgroundProcess::file_size(OutputStream stream) const {
  struct stat st {};
  if (::stat(path(stream == OutputStream::kStdout ? ".stdout" : ".stderr").c_str(), &st) != 0)
    return 0;
  return static_cast<uint64_t>(st.st_size);
}

void BackgroundProcess::follow(UniqueFd doorbell) {
  for (bool open = true; open;) {
    pollfd ring{doorbell.get(), POLLIN, 0};
    if (::poll(&ring, 1, -1) < 0 && errno != EINTR) break;
    char drained[256];
    ssize_t n;
    while ((n = ::read(doorbell.get(), drained, sizeof drained)) > 0) {
    }
    open = n < 0 && (errno == EAGAIN || errno == EINTR);
    const uint64_t out = file_size(OutputStream::kStdout);
    const uint64_t err = file_size(OutputStream::kStderr);
    {
      std::lock_guard lock(mutex_);
      out_size_ = out;
      err_size_ = err;
    }
    changed_.notify_all();
  }
  // Closed: the exit file is complete, or the supervisor died (the whole sandbox with it).
  auto exit = parse_kept_exit(read_small_file(path(".exit")));
  finished(exit ? std::move(*exit) : killed_exit());
}

void BackgroundProcess::lost(const Error& error) {
  {
    std::lock_guard lock(mutex_);
    if (connection_) (void)connection_->kill_tree();
  }
  KeptExit exit = killed_exit();
  exit.start_error =
      "the supervisor did not keep the process, so it was killed: " + error.message();
  // For a restarted hutchd, which finds the record but no kept process.
  if (auto file = create_file(path(".exit"), 0)) {
    const std::string text = format_kept_exit(exit);
    (void)!::write(file->get(), text.data(), text.size());
  }
  finished(std::move(exit));
}

void BackgroundProcess::finished(KeptExit exit) {
  {
    std::lock_guard lock(stdin_mutex_);
    stdin_.reset();
  }
  {
    std::lock_guard lock(mutex_);
    exit_ = std::move(exit);
    running_ = false;
    pty_master_.reset();
  }
  changed_.notify_all();
  if (on_exit_) on_exit_(status());
}

ProcessStatus BackgroundProcess::status() const {
  std::lock_guard lock(mutex_);
  ProcessStatus status;
  status.pid = pid_;
  status.argv = record_.argv;
  status.started_at = iso8601(record_.started_at);
  status.running = running_;
  status.pty = record_.pty;
  const int64_t started = unix_ms(record_.started_at);
  if (!running_ && exit_) {
    status.exit_code = exit_->exit_code;
    status.term_signal = exit_->term_signal;
    if (!exit_->start_error.empty()) status.start_error = exit_->start_error;
    status.duration_ms = std::max<int64_t>(0, exit_->ended_unix_ms - started);
  } else {
    status.duration_ms = unix_ms(std::chrono::system_clock::now()) - started;
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
  return changed_.wait_for(lock, timeout, [&] { return !running_; });
}

Result<OutputChunk> BackgroundProcess::read_output(OutputStream stream, uint64_t offset,
                                                   uint64_t limit) const {
  bool complete;
  std::optional<bool> truncated;
  uint64_t cap;
  {
    std::lock_guard lock(mutex_);
    complete = !running_;
    cap = record_.cap;
    if (exit_)
      truncated =
          stream == OutputStream::kStdout ? exit_->stdout_truncated : exit_->stderr_truncated;
  }
  const std::string file = path(stream == OutputStream::kStdout ? ".stdout" : ".stderr");
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_error("open", file);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return sys_error("fstat", file);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  OutputChunk chunk;
  chunk.offset = offset;
  // While it runs, a stream at its cap has lost (or will lose) what follows; the exit says.
  chunk.truncated = truncated.value_or(size > 0 && size >= cap);
  if (offset < size) {
    uint64_t want = std::min(limit, size - offset);
    chunk.data.resize(want);
    ssize_t n = ::pread(fd.get(), chunk.data.data(), want, static_cast<off_t>(offset));
    if (n < 0) return sys_error("pread", file);
    chunk.data.resize(static_cast<size_t>(n));
  }
  chunk.next_offset = offset + chunk.data.size();
  chunk.eof = complete && chunk.next_offset >= size;
  return chunk;
}

void BackgroundProcess::wait_output(OutputStream stream, uint64_t offset,
                                    std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  const uint64_t& size = stream == OutputStream::kStdout ? out_size_ : err_size_;
  changed_.wait_for(lock, timeout, [&] { return !running_ || size > offset; });
}

Result<void> BackgroundProcess::resize(PtySize size) {
  std::lock_guard lock(mutex_);
  if (!pty_master_) return plain_error("resize", "the process has no pty (or it has exited)");
  winsize ws{};
  ws.ws_col = size.cols;
  ws.ws_row = size.rows;
  if (ioctl(pty_master_.get(), TIOCSWINSZ, &ws) != 0)
    return sys_error("ioctl", "TIOCSWINSZ " + std::to_string(size.cols) + "x" +
                                  std::to_string(size.rows) + " on the pty of " +
                                  std::to_string(pid_));
  record_.pty = size;
  // The record keeps the size for a restarted hutchd's status of an exited process (a running
  // one's is read back from the pty): a failure to write it is not the resize's.
  (void)write_record(dir_, record_, true);
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
  if (eof) {
    stdin_.reset();
    // The supervisor holds the pipe open too (so that it survives a restart): its copy goes
    // with ours, or the command never sees EOF.
    if (stdin_is_pipe_) HUTCH_TRY(sandbox_->close_kept_stdin(pid_));
  }
  return true;
}

Result<void> BackgroundProcess::signal(int sig) {
  std::lock_guard lock(mutex_);
  if (!connection_)
    return kind_error(ErrorKind::kConflict, "signal",
                      "process " + std::to_string(pid_) + " had exited before hutchd restarted");
  return connection_->signal(sig);
}

Result<void> BackgroundProcess::kill_tree() {
  std::lock_guard lock(mutex_);
  if (!connection_) return {};  // exited before a restart: nothing left to kill
  return connection_->kill_tree();
}

}  // namespace hutch::daemon
