#include "runtime/process_keeper.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "runtime/process/exec_protocol.h"
#include "runtime/process/sync.h"

namespace hutch {
namespace {

constexpr size_t kChunk = 64 * 1024;
// What one wakeup reads of one stream, so that a chatty command does not starve the others or
// the supervisor's requests.
constexpr size_t kPumpBudget = 4 * kChunk;
// Draining after the exit: what a command's pipes may still hold, plus what a grandchild that
// keeps writing can add; bounded so such a grandchild cannot hold the supervisor (as hutchd's
// buffered execs bound theirs, daemon/exec.cc).
constexpr size_t kMaxDrainBytes = 64ull << 20;

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void reply_to(int conn, const KeeperReply& reply, const int* fds = nullptr, int fd_count = 0) {
  (void)send_with_fds(conn, &reply, sizeof reply, fds, fd_count);
}

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a full disk: the output is cut short, the command is not held up
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// A new doorbell: {read end for the client, write end kept}, both non-blocking.
bool make_doorbell(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  return true;
}

}  // namespace

void ProcessKeeper::handle(int conn, const KeeperRequest& request, std::vector<UniqueFd> fds) {
  switch (request.kind) {
    case KeeperRequest::Kind::kKeep:
      return keep(conn, request, std::move(fds));
    case KeeperRequest::Kind::kList:
      return list(conn);
    case KeeperRequest::Kind::kCloseStdin:
      return close_stdin(conn, request.pid);
  }
}

void ProcessKeeper::keep(int conn, const KeeperRequest& request, std::vector<UniqueFd> fds) {
  const size_t expected = 5 + (request.has_stderr != 0) + (request.has_stdin != 0);
  const bool all_valid =
      std::all_of(fds.begin(), fds.end(), [](const UniqueFd& fd) { return !!fd; });
  if (fds.size() != expected || !all_valid) {
    return reply_to(
        conn, keeper_error_reply(Error{"keep", "expected " + std::to_string(expected) +
                                                   " fds, got " + std::to_string(fds.size())}));
  }
  auto kept = std::make_unique<Kept>();
  kept->pid = request.pid;
  kept->pty = request.pty != 0;
  kept->cap = request.cap_bytes;
  kept->conn = std::move(fds[0]);
  kept->out.source = std::move(fds[1]);
  kept->out.file = std::move(fds[2]);
  kept->err.file = std::move(fds[3]);
  kept->exit_file = std::move(fds[4]);
  size_t next = 5;
  if (request.has_stderr != 0) kept->err.source = std::move(fds[next++]);
  if (request.has_stdin != 0) kept->stdin_fd = std::move(fds[next++]);
  UniqueFd doorbell;
  if (!make_doorbell(doorbell, kept->doorbell))
    return reply_to(conn, keeper_error_reply(sys_error("pipe2", "doorbell").error()));
  for (UniqueFd* fd : {&kept->conn, &kept->out.source, &kept->err.source})
    if (*fd) set_nonblocking(fd->get());
  KeeperReply reply;
  reply.ok = 1;
  reply.pid = kept->pid;
  const int passed = doorbell.get();
  reply_to(conn, reply, &passed, 1);
  kept_.push_back(std::move(kept));
}

void ProcessKeeper::list(int conn) {
  for (const auto& kept : kept_) {
    if (kept->done) continue;
    // A new doorbell: the previous client's read end died with it.
    UniqueFd doorbell;
    if (!make_doorbell(doorbell, kept->doorbell)) continue;
    KeeperReply reply;
    reply.ok = 1;
    reply.pid = kept->pid;
    reply.pty = kept->pty ? 1 : 0;
    std::vector<int> fds = {kept->conn.get(), doorbell.get()};
    const UniqueFd& input = kept->pty ? kept->out.source : kept->stdin_fd;
    if (input) {
      reply.has_stdin = 1;
      fds.push_back(input.get());
    }
    reply_to(conn, reply, fds.data(), static_cast<int>(fds.size()));
  }
  KeeperReply end;
  end.ok = 1;
  end.last = 1;
  reply_to(conn, end);
}

void ProcessKeeper::close_stdin(int conn, pid_t pid) {
  for (const auto& kept : kept_) {
    if (kept->pid == pid && !kept->done) kept->stdin_fd.reset();
  }
  KeeperReply reply;
  reply.ok = 1;
  reply.pid = pid;
  reply_to(conn, reply);
}

void ProcessKeeper::add_pollfds(std::vector<pollfd>& fds) const {
  for (const auto& kept : kept_) {
    fds.push_back({kept->conn.get(), POLLIN, 0});
    fds.push_back({kept->out.source ? kept->out.source.get() : -1, POLLIN, 0});
    fds.push_back({kept->err.source ? kept->err.source.get() : -1, POLLIN, 0});
  }
}

void ProcessKeeper::service(const std::vector<pollfd>& fds, size_t first) {
  for (size_t i = 0; i < kept_.size() && first + kPollPerProcess * i + 2 < fds.size(); ++i) {
    Kept& kept = *kept_[i];
    const pollfd* mine = &fds[first + kPollPerProcess * i];
    bool rang = false;
    for (auto [index, stream] : {std::pair{1, &kept.out}, std::pair{2, &kept.err}}) {
      if (mine[index].revents == 0 || !stream->source) continue;
      pump(kept, *stream, kPumpBudget);
      rang = true;
    }
    if (rang) (void)!write(kept.doorbell.get(), "o", 1);
    if (mine[0].revents != 0) read_event(kept);
  }
  std::erase_if(kept_, [](const std::unique_ptr<Kept>& kept) { return kept->done; });
}

bool ProcessKeeper::pump(Kept& kept, Stream& stream, size_t budget) {
  char buffer[kChunk];
  size_t total = 0;
  while (total < budget) {
    ssize_t n = read(stream.source.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    // EOF, or EIO: a pty's master once every slave fd is closed.
    if (n <= 0) {
      stream.source.reset();
      return false;
    }
    total += static_cast<size_t>(n);
    const uint64_t room = stream.kept < kept.cap ? kept.cap - stream.kept : 0;
    size_t keep = static_cast<size_t>(std::min<uint64_t>(room, static_cast<uint64_t>(n)));
    if (keep < static_cast<size_t>(n)) stream.truncated = true;
    write_all(stream.file.get(), buffer, keep);
    stream.kept += keep;
  }
  return true;
}

void ProcessKeeper::read_event(Kept& kept) {
  ExecEvent event{};
  ssize_t n = recv(kept.conn.get(), &event, sizeof event, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  KeptExit exit;
  if (n == sizeof event && event.kind == ExecEvent::Kind::kExited) {
    exit.exit_code = event.exit_code;
    exit.term_signal = event.term_signal;
    event.start_error[sizeof event.start_error - 1] = '\0';
    exit.start_error = event.start_error;
  } else if (n == sizeof event) {
    return;  // not an exit (the shim sends none other after kStarted): wait for the exit
  } else {
    // The shim died without a report: the whole sandbox was killed.
    exit.exit_code = 128 + SIGKILL;
    exit.term_signal = SIGKILL;
  }
  finish(kept, std::move(exit));
}

void ProcessKeeper::finish(Kept& kept, KeptExit exit) {
  // Everything the command wrote is in the pipes now; read it without waiting for EOF, which a
  // grandchild holding the pipe would delay forever.
  for (Stream* stream : {&kept.out, &kept.err}) {
    if (stream->source) pump(kept, *stream, kMaxDrainBytes);
  }
  exit.stdout_truncated = kept.out.truncated;
  exit.stderr_truncated = kept.err.truncated;
  exit.ended_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  const std::string text = format_kept_exit(exit);
  write_all(kept.exit_file.get(), text.data(), text.size());
  kept.done = true;
  for (UniqueFd* fd : {&kept.conn, &kept.out.source, &kept.out.file, &kept.err.source,
                       &kept.err.file, &kept.stdin_fd, &kept.exit_file})
    fd->reset();
  // Last, once the exit file is complete: the doorbell's close is what tells the client.
  kept.doorbell.reset();
}

void ProcessKeeper::finish_all() {
  for (const auto& kept : kept_) {
    if (kept->done) continue;
    read_event(*kept);
    if (kept->done) continue;
    KeptExit killed;
    killed.exit_code = 128 + SIGKILL;
    killed.term_signal = SIGKILL;
    finish(*kept, std::move(killed));
  }
  kept_.clear();
}

}  // namespace hutch
