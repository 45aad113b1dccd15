#include "runtime/live_sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "runtime/base/proc_stat.h"
#include "runtime/cgroup/sandbox_cgroup.h"
#include "runtime/process/exec_protocol.h"
#include "runtime/process/pidfd.h"
#include "runtime/process/sync.h"
#include "runtime/supervisor_protocol.h"

namespace hutch {
namespace {

using Kind = SupervisorRequest::Kind;

constexpr int kSupervisorRequestTimeoutMs = 30'000;
constexpr int kExecStartTimeoutMs = 10'000;
// What one message fits in without raising the socket's send buffer (the default is ~208 KiB).
constexpr size_t kDefaultSendBufferBytes = 64 * 1024;

Result<UniqueFd> connect_unix(const std::string& path) {
  const sockaddr_un address = HUTCH_TRY(unix_address(path));
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return sys_error("socket", "AF_UNIX SOCK_SEQPACKET");
  while (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    if (errno != EINTR) return sys_error("connect", path);
  }
  return fd;
}

bool process_running(int pidfd) {
  pollfd fd{pidfd, POLLIN, 0};
  return poll(&fd, 1, 0) == 0;
}

// The request's name in errors, as the word protocol before it spelled them.
const char* request_name(Kind kind) {
  switch (kind) {
    case Kind::kFreeze:
      return "freeze";
    case Kind::kThaw:
      return "thaw";
    case Kind::kStats:
      return "stats";
    case Kind::kSnapshot:
      return "snapshot";
    case Kind::kAttach:
      return "attach";
    case Kind::kDestroy:
      return "destroy";
    case Kind::kDeadlines:
      return "deadlines";
  }
  return "supervisor request";
}

SupervisorRequest request_of(Kind kind) {
  SupervisorRequest request;
  request.kind = kind;
  return request;
}

// One request on a connection to the supervisor at `socket` (with `fd`, -1: none): its reply
// when ok; an fd that comes with the reply goes to *received_fd (closed when null).
Result<SupervisorReply> exchange(int conn, const std::string& socket,
                                 const SupervisorRequest& request, int fd,
                                 UniqueFd* received_fd = nullptr) {
  const char* name = request_name(request.kind);
  if (int err = send_with_fds(conn, &request, sizeof request, &fd, fd >= 0 ? 1 : 0))
    return sys_error("send", std::string(name) + " to " + socket, err);
  pollfd readable{conn, POLLIN, 0};
  int ready;
  while ((ready = poll(&readable, 1, kSupervisorRequestTimeoutMs)) < 0 && errno == EINTR) {
  }
  if (ready == 0) return plain_error(name, "no answer from the supervisor in time");
  // One byte more than a reply: a longer message arrives truncated to a size decode refuses.
  std::vector<char> buffer(sizeof(SupervisorReply) + 1);
  int passed = -1;
  int fd_count = received_fd != nullptr ? 1 : 0;
  long n = recv_with_fds(conn, buffer.data(), buffer.size(), &passed, &fd_count);
  if (fd_count == 1) received_fd->reset(passed);
  if (n <= 0) return plain_error(name, "the supervisor closed the connection");
  auto reply = decode_reply(buffer.data(), n);
  if (!reply) return plain_error(name, reply.error().message());
  if (reply->ok == 0) return plain_error(name, from_wire(reply->error).message());
  return reply;
}

// `theirs`: the version the sandbox's exec server speaks, 0 when it is known only to be older
// than v3.
std::unexpected<Error> outdated_exec_server(uint32_t theirs) {
  const std::string version = theirs == 0 ? "v1 or v2" : "v" + std::to_string(theirs);
  return kind_error(ErrorKind::kConflict, kOutdatedExecStep,
                    std::string("this sandbox was started by ") +
                        (theirs < kExecProtocolVersion ? "an older" : "a newer") +
                        " hutchd (exec protocol " + version + ", this hutchd speaks v" +
                        std::to_string(kExecProtocolVersion) + "): recreate it");
}

}  // namespace

Result<LiveSandboxRef> read_serve_ready(int ready_fd, std::chrono::milliseconds timeout,
                                        const std::string& exec_socket,
                                        const std::string& supervisor_socket,
                                        pid_t* stuck_supervisor) {
  pid_t announced = 0;
  auto answered = [&](Result<LiveSandboxRef> result) {
    if (stuck_supervisor != nullptr) *stuck_supervisor = 0;
    return result;
  };
  auto unanswered = [&](std::string why) -> Result<LiveSandboxRef> {
    if (stuck_supervisor != nullptr) *stuck_supervisor = announced;
    return plain_error("sandbox start", std::move(why));
  };
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  alignas(ServeReady) char buffer[sizeof(ServeReady)];
  size_t have = 0;
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return unanswered("no answer from the supervisor in time");
    pollfd fd{ready_fd, POLLIN, 0};
    int ready = poll(&fd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return unanswered(sys_error("poll", "supervisor ready pipe").error().message());
    if (ready == 0) continue;
    // Each message is one atomic write (supervisor_protocol.h), so a read that is not whole is
    // a broken writer, finished by reading on.
    ssize_t n = read(ready_fd, buffer + have, sizeof buffer - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return unanswered(sys_error("read", "supervisor ready pipe").error().message());
    // EOF: every write end is closed, so the supervisor has exited (auto-reaped by the zygote:
    // its pid may name another process already) and is not for the caller to kill.
    if (n == 0) {
      if (have != 0) {
        return answered(plain_error(
            "sandbox start", decode_ready(buffer, static_cast<long>(have)).error().message()));
      }
      return answered(
          plain_error("sandbox start", "the supervisor exited before its sandbox was ready"));
    }
    have += static_cast<size_t>(n);
    if (have < sizeof buffer) continue;
    have = 0;
    auto message = decode_ready(buffer, sizeof buffer);
    if (!message) return unanswered(message.error().message());
    switch (message->kind) {
      case ServeReady::Kind::kSupervisor:
        announced = message->supervisor_pid;
        continue;
      case ServeReady::Kind::kFailed:
        return answered(plain_error("sandbox start", from_wire(message->error).message()));
      case ServeReady::Kind::kServing:
        break;
    }
    LiveSandboxRef ref;
    ref.supervisor_pid = message->supervisor_pid;
    ref.supervisor_start_time = message->supervisor_start_time;
    ref.init_pid = message->init_pid;
    ref.exec_socket = exec_socket;
    ref.supervisor_socket = supervisor_socket;
    // The zygote that forked this supervisor is of this hutchd's build, and so is its exec server.
    ref.exec_protocol = kExecProtocolVersion;
    return answered(ref);
  }
}

Result<LiveSandbox> LiveSandbox::connect(const LiveSandboxRef& ref) {
  LiveSandbox sandbox;
  sandbox.ref_ = ref;
  sandbox.supervisor_pidfd_.reset(pidfd_open_fd(ref.supervisor_pid));
  if (!sandbox.supervisor_pidfd_)
    return sys_error("pidfd_open", "supervisor " + std::to_string(ref.supervisor_pid));
  // With the pid pinned by the pidfd: is it still the process that was recorded?
  auto supervisor = read_proc_state(ref.supervisor_pid);
  if (!supervisor || supervisor->start_time != ref.supervisor_start_time ||
      supervisor->state == 'Z' || !process_running(sandbox.supervisor_pidfd_.get())) {
    return plain_error("connect", "supervisor " + std::to_string(ref.supervisor_pid) +
                                      " is gone (its pid is free or reused)");
  }
  sandbox.init_pidfd_.reset(pidfd_open_fd(ref.init_pid));
  if (!sandbox.init_pidfd_) return sys_error("pidfd_open", "init " + std::to_string(ref.init_pid));
  auto init = read_proc_state(ref.init_pid);
  if (!init || init->parent != ref.supervisor_pid || !process_running(sandbox.init_pidfd_.get())) {
    return plain_error("connect", "init " + std::to_string(ref.init_pid) +
                                      " is not the supervisor's child any more");
  }
  UniqueFd attachment = HUTCH_TRY(connect_unix(ref.supervisor_socket));
  HUTCH_TRY(exchange(attachment.get(), ref.supervisor_socket, request_of(Kind::kAttach), -1,
                     &sandbox.oom_counter_));
  sandbox.attachment_ = std::move(attachment);
  return sandbox;
}

bool LiveSandbox::alive() const { return process_running(init_pidfd_.get()); }

Result<UniqueFd> LiveSandbox::open_root() const {
  const std::string path = "/proc/" + std::to_string(ref_.init_pid) + "/root";
  UniqueFd root(open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return sys_error("open", path);
  // Opened after the pidfd: if init is still running, the pid was not reused meanwhile.
  if (!alive()) return plain_error("open root", "the sandbox's init has exited");
  return root;
}

Result<UniqueFd> LiveSandbox::open_netns() const {
  const std::string path = "/proc/" + std::to_string(ref_.init_pid) + "/ns/net";
  UniqueFd netns(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!netns) return sys_error("open", path);
  if (!alive()) return plain_error("open netns", "the sandbox's init has exited");
  return netns;
}

Result<ExecProcess> LiveSandbox::exec(const ExecRequest& request) const {
  if (request.argv.empty() || request.argv[0].empty()) return plain_error("exec", "empty argv");
  std::string message(sizeof(ExecRequestHeader), '\0');
  ExecRequestHeader header;
  header.argc = static_cast<uint32_t>(request.argv.size());
  header.envc = static_cast<uint32_t>(request.env.size());
  header.survive_disconnect = request.survive_disconnect ? 1 : 0;
  if (request.pty) {
    if (request.pty->cols == 0 || request.pty->rows == 0)
      return plain_error("exec", "a pty needs at least one column and one row");
    header.pty_cols = request.pty->cols;
    header.pty_rows = request.pty->rows;
  }
  std::memcpy(message.data(), &header, sizeof header);
  auto add = [&](const std::string& text) -> bool {
    if (text.find('\0') != std::string::npos) return false;
    message.append(text);
    message.push_back('\0');
    return true;
  };
  for (const std::string& arg : request.argv) {
    if (!add(arg)) return plain_error("exec", "NUL byte in argv");
  }
  for (const std::string& kv : request.env) {
    if (!add(kv)) return plain_error("exec", "NUL byte in env");
  }
  if (!add(request.workdir)) return plain_error("exec", "NUL byte in workdir");
  if (message.size() > kMaxExecRequestBytes)
    return plain_error(
        "exec", "argv, env and workdir exceed " + std::to_string(kMaxExecRequestBytes) + " bytes");

  UniqueFd null_in, null_out;
  int stdio[3] = {request.stdin_fd, request.stdout_fd, request.stderr_fd};
  for (int i = 0; i < 3; ++i) {
    if (stdio[i] >= 0) continue;
    UniqueFd& null = i == 0 ? null_in : null_out;
    if (!null) null.reset(open("/dev/null", (i == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC));
    if (!null) return sys_error("open", "/dev/null");
    stdio[i] = null.get();
  }

  auto conn = connect_unix(ref_.exec_socket);
  if (!conn) return std::unexpected(conn.error());
  // Past the default socket buffer (~208 KiB) so a 1 MiB request fits in one message; root only.
  if (message.size() > kDefaultSendBufferBytes) {
    int buffer_size = static_cast<int>(kMaxExecRequestBytes) + 4096;
    setsockopt(conn->get(), SOL_SOCKET, SO_SNDBUFFORCE, &buffer_size, sizeof buffer_size);
  }
  if (int err = send_with_fds(conn->get(), message.data(), message.size(), stdio, 3))
    return sys_error("sendmsg", "exec request to " + ref_.exec_socket, err);

  pollfd started{conn->get(), POLLIN, 0};
  int ready;
  while ((ready = poll(&started, 1, kExecStartTimeoutMs)) < 0 && errno == EINTR) {
  }
  if (ready == 0) return plain_error("exec", "the sandbox did not start the command in time");
  ExecEvent event{};
  int master = -1;
  int fd_count = request.pty ? 1 : 0;
  long n = recv_with_fds(conn->get(), &event, sizeof event, &master, &fd_count);
  UniqueFd pty_master(fd_count == 1 ? master : -1);
  const bool whole = n == static_cast<long>(sizeof event);
  if (whole && event.kind == ExecEvent::Kind::kStarted)
    return ExecProcess(std::move(*conn), event.pid, std::move(pty_master));
  event.start_error[sizeof event.start_error - 1] = '\0';
  if (whole && event.kind == ExecEvent::Kind::kRefused)
    return outdated_exec_server(event.protocol_version);
  if (whole && event.kind == ExecEvent::Kind::kNotStarted)
    return plain_error(
        "exec", std::string("the sandbox could not start the command: ") + event.start_error);
  if (!alive()) return plain_error("exec", "the sandbox is gone");
  // A server of v3 or later answers every request it reads; only an older one closes silently.
  if (n == 0 && ref_.exec_protocol < 3) return outdated_exec_server(0);
  return plain_error("exec",
                     "the sandbox's exec server closed the connection without starting the "
                     "command (its shim died: the sandbox's memory limit?)");
}

Result<std::optional<ExecExit>> ExecProcess::poll_exit() {
  if (exit_) return exit_;
  ExecEvent event{};
  ssize_t n = recv(connection_.get(), &event, sizeof event, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return std::optional<ExecExit>{};
  if (n == sizeof event && event.kind == ExecEvent::Kind::kExited) {
    ExecExit exit;
    exit.exit_code = event.exit_code;
    exit.term_signal = event.term_signal;
    event.start_error[sizeof event.start_error - 1] = '\0';
    if (event.start_error[0] != '\0') exit.start_error = event.start_error;
    exit_ = exit;
  } else if (n == 0 || n < 0) {
    // The shim died without a report: the whole sandbox was killed.
    exit_ = ExecExit{128 + SIGKILL, SIGKILL, std::nullopt};
  } else {
    return plain_error("exec", "malformed event from the sandbox");
  }
  return exit_;
}

Result<void> ExecProcess::signal(int sig) {
  ExecControl control{ExecControl::Kind::kSignal, sig};
  if (send(connection_.get(), &control, sizeof control, MSG_NOSIGNAL) < 0)
    return sys_error("send", "signal " + std::to_string(sig) + " to exec " + std::to_string(pid_));
  return {};
}

Result<void> ExecProcess::kill_tree() {
  ExecControl control{ExecControl::Kind::kKillTree, SIGKILL};
  if (send(connection_.get(), &control, sizeof control, MSG_NOSIGNAL) < 0 && errno != EPIPE &&
      errno != ECONNRESET)
    return sys_error("send", "kill tree of exec " + std::to_string(pid_));
  return {};
}

Result<SupervisorReply> LiveSandbox::supervisor_request(const SupervisorRequest& request,
                                                        int fd) const {
  UniqueFd conn = HUTCH_TRY(connect_unix(ref_.supervisor_socket));
  return exchange(conn.get(), ref_.supervisor_socket, request, fd);
}

Result<void> LiveSandbox::set_deadlines(const SandboxDeadlines& deadlines) const {
  const SupervisorRequest request = HUTCH_TRY(deadlines_request(deadlines));
  if (send(attachment_.get(), &request, sizeof request, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
    return sys_error("send", "deadlines to " + ref_.supervisor_socket);
  return {};
}

Result<void> LiveSandbox::freeze() const {
  HUTCH_TRY(supervisor_request(request_of(Kind::kFreeze)));
  return {};
}

Result<void> LiveSandbox::thaw() const {
  HUTCH_TRY(supervisor_request(request_of(Kind::kThaw)));
  return {};
}

Result<SnapshotStats> LiveSandbox::snapshot(const std::string& dest_dir) const {
  const std::filesystem::path path(dest_dir);
  SupervisorRequest request = request_of(Kind::kSnapshot);
  const std::string name = path.filename();
  if (!path.is_absolute() || name.empty() || name.size() >= sizeof request.snapshot_name)
    return plain_error("snapshot", "bad snapshot path " + dest_dir);
  std::memcpy(request.snapshot_name, name.c_str(), name.size() + 1);
  UniqueFd parent(open(path.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!parent)
    return plain_error("snapshot", sys_error("open", path.parent_path()).error().message());
  const SupervisorReply reply = HUTCH_TRY(supervisor_request(request, parent.get()));
  SnapshotStats stats;
  stats.files = reply.snapshot_files;
  stats.bytes = reply.snapshot_bytes;
  stats.frozen = std::chrono::microseconds(reply.snapshot_frozen_us);
  return stats;
}

Result<std::optional<uint64_t>> LiveSandbox::oom_kills() const {
  if (!oom_counter_) return std::optional<uint64_t>{};
  return read_oom_counter(oom_counter_.get());
}

Result<CgroupStats> LiveSandbox::stats() const {
  const SupervisorReply reply = HUTCH_TRY(supervisor_request(request_of(Kind::kStats)));
  return stats_of(reply);
}

Result<void> LiveSandbox::destroy() const {
  if (!process_running(supervisor_pidfd_.get())) return {};
  auto r = supervisor_request(request_of(Kind::kDestroy));
  // The supervisor may exit before its answer leaves: its exit is what counts.
  pollfd gone{supervisor_pidfd_.get(), POLLIN, 0};
  int ready;
  while ((ready = poll(&gone, 1, kSupervisorRequestTimeoutMs)) < 0 && errno == EINTR) {
  }
  if (ready == 0) {
    pidfd_signal(supervisor_pidfd_.get(), SIGKILL);
    return plain_error("destroy", "the supervisor did not finish in time; killed it");
  }
  if (!r && process_running(supervisor_pidfd_.get())) return std::unexpected(r.error());
  return {};
}

Result<UniqueFd> LiveSandbox::send_keeper_request(const KeeperRequest& request,
                                                  const std::vector<int>& fds) const {
  UniqueFd conn = HUTCH_TRY(connect_unix(ref_.supervisor_socket));
  if (int err = send_with_fds(conn.get(), &request, sizeof request, fds.data(),
                              static_cast<int>(fds.size())))
    return sys_error("send", "keeper request to " + ref_.supervisor_socket, err);
  return conn;
}

Result<void> LiveSandbox::read_keeper_replies(
    int conn, const std::function<bool(const KeeperReply&, std::vector<UniqueFd>)>& on_reply) {
  // A reply of an older supervisor is a SupervisorReply: room for the larger of the two, and one
  // byte more so that a longer message arrives truncated to a size decode refuses.
  std::vector<char> buffer(std::max(sizeof(KeeperReply), sizeof(SupervisorReply)) + 1);
  for (;;) {
    pollfd readable{conn, POLLIN, 0};
    int ready;
    while ((ready = poll(&readable, 1, kSupervisorRequestTimeoutMs)) < 0 && errno == EINTR) {
    }
    if (ready == 0) return plain_error("keeper", "no answer from the supervisor in time");
    int passed[kMaxPassedFds];
    int fd_count = kMaxPassedFds;
    long n = recv_with_fds(conn, buffer.data(), buffer.size(), passed, &fd_count);
    std::vector<UniqueFd> received;
    for (int i = 0; i < fd_count; ++i) received.emplace_back(passed[i]);
    if (n <= 0) return plain_error("keeper", "the supervisor closed the connection");
    auto reply = HUTCH_TRY(decode_keeper_reply(buffer.data(), n));
    if (reply.ok == 0) return plain_error("keeper", from_wire(reply.error).message());
    if (!on_reply(reply, std::move(received))) return {};
  }
}

Result<void> LiveSandbox::keeper_request(
    const KeeperRequest& request, const std::vector<int>& fds,
    const std::function<bool(const KeeperReply&, std::vector<UniqueFd>)>& on_reply) const {
  UniqueFd conn = HUTCH_TRY(send_keeper_request(request, fds));
  return read_keeper_replies(conn.get(), on_reply);
}

Result<UniqueFd> LiveSandbox::send_keep(const KeepRequest& request) const {
  KeeperRequest message;
  message.kind = KeeperRequest::Kind::kKeep;
  message.pid = request.pid;
  message.pty = request.pty ? 1 : 0;
  message.cap_bytes = request.cap_bytes;
  std::vector<int> fds = {request.connection, request.output, request.stdout_file,
                          request.stderr_file, request.exit_file};
  if (request.error_output >= 0) {
    message.has_stderr = 1;
    fds.push_back(request.error_output);
  }
  if (request.input >= 0) {
    message.has_stdin = 1;
    fds.push_back(request.input);
  }
  return send_keeper_request(message, fds);
}

Result<UniqueFd> LiveSandbox::await_kept(int conn) {
  UniqueFd doorbell;
  HUTCH_TRY(read_keeper_replies(conn, [&](const KeeperReply&, std::vector<UniqueFd> got) {
    if (got.size() == 1) doorbell = std::move(got[0]);
    return false;
  }));
  if (!doorbell) return plain_error("keeper", "the supervisor sent no doorbell");
  return doorbell;
}

Result<UniqueFd> LiveSandbox::keep_process(const KeepRequest& request) const {
  UniqueFd conn = HUTCH_TRY(send_keep(request));
  auto doorbell = await_kept(conn.get());
  if (doorbell) keeper_confirmed_->store(true);
  return doorbell;
}

bool LiveSandbox::keeper_confirmed() const { return keeper_confirmed_->load(); }

Result<std::vector<KeptHandles>> LiveSandbox::kept_processes() const {
  KeeperRequest message;
  message.kind = KeeperRequest::Kind::kList;
  std::vector<KeptHandles> kept;
  HUTCH_TRY(keeper_request(message, {}, [&](const KeeperReply& reply, std::vector<UniqueFd> got) {
    if (reply.last != 0) return false;
    const size_t expected = reply.has_stdin != 0 ? 3 : 2;
    if (got.size() != expected) return true;  // fds lost (the fd limit): not re-attachable
    KeptHandles handles;
    handles.pid = reply.pid;
    handles.pty = reply.pty != 0;
    handles.connection = std::move(got[0]);
    handles.doorbell = std::move(got[1]);
    if (expected == 3) handles.input = std::move(got[2]);
    kept.push_back(std::move(handles));
    return true;
  }));
  return kept;
}

Result<void> LiveSandbox::close_kept_stdin(pid_t pid) const {
  KeeperRequest message;
  message.kind = KeeperRequest::Kind::kCloseStdin;
  message.pid = pid;
  return keeper_request(message, {},
                        [](const KeeperReply&, std::vector<UniqueFd>) { return false; });
}

}  // namespace hutch
